"""The AgentSpec of tau^2 mode, `toolorchestra-tau2`: a row naming a tau^2 task -> graph input, the episode."""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import InputError
from ...spec import AgentSpec, RolloutInput, register
from . import bench
from .graph import Tau2Options, build_graph
from .reward import reward

__all__ = ["SPEC", "answer", "make_input", "summarize"]


def make_input(row: RolloutInput, options: Tau2Options) -> dict[str, Any]:
    """The graph input for a row naming a tau^2 task (the domain and the task id are checked here)."""
    metadata = row["metadata"] or {}
    domain = metadata.get("domain")
    if domain not in bench.DOMAINS:
        raise InputError("metadata.domain", f"expected one of {list(bench.DOMAINS)}, got {domain!r}",
                         "put the tau^2 domain under metadata['domain']")
    task_id = metadata.get("task_id")
    if task_id is None:
        task_id = row["prompt"]
    if not isinstance(task_id, (str, int)) or isinstance(task_id, bool) or not str(task_id).strip():
        raise InputError("metadata.task_id", f"expected a tau^2 task id, got {task_id!r:.80}",
                         "put the task id under metadata['task_id'] (or as the input)")
    tasks = bench.load_domain(domain).tasks
    if str(task_id) not in tasks:
        raise InputError("metadata.task_id", f"domain {domain!r} has no task {str(task_id)[:80]!r}",
                         f"use one of its {len(tasks)} task ids, e.g. {list(tasks)[:3]}")
    task = tasks[str(task_id)]
    if task.initial_state is not None and task.initial_state.message_history:
        raise InputError("metadata.task_id", f"task {task.id!r} starts from a message history",
                         "tasks with an initial message history are not supported; pick another task")
    return {"domain": domain, "task_id": str(task_id), "turns": []}


def answer(state: Mapping[str, Any]) -> str:
    """The finished episode as JSON: what tau^2 scores (domain, task, termination, messages)."""
    record = state.get("record")
    return bench.record_json(record) if record else ""


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """Episode facts: how it ended, steps, tool calls, expert calls, format-invalid turns, errors."""
    return {
        "domain": state.get("domain"),
        "task_id": state.get("task_id"),
        "termination": state.get("termination"),
        "steps": int(state.get("steps", 0)),
        "tool_calls": int(state.get("tool_calls", 0)),
        "expert_calls": int(state.get("expert_calls", 0)),
        "invalid_turns": int(state.get("invalid_turns", 0)),
        "errors": int(state.get("errors", 0)),
        "messages": len(state.get("messages") or []),
    }


SPEC = AgentSpec(
    name="toolorchestra-tau2",
    build_graph=build_graph,
    make_input=make_input,
    answer=answer,
    reward=reward,
    dict_reward=True,
    reward_key="reward",
    requires_label=False,
    summarize=summarize,
    layout="per_turn",
    reward_split="broadcast",
    options=Tau2Options,
    description="ToolOrchestra on tau^2-bench: the orchestrator is the agent (domain tools + call_expert), "
                "a helper engine simulates the user, tau^2 scores the conversation",
)
register(SPEC)  # `load_spec("toolorchestra-tau2")`, langgraph.json

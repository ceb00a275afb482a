"""AgentFlow's AgentSpec: slime row -> graph input, reward (judge or math-verify), Flow-GRPO layout.

Flow-GRPO: only plan_next_step turns are trained; `per_turn` makes each its own sequence (its prompt
masked, its response trained) and `broadcast` gives each the trajectory's reward, so a GRPO group holds
all planner turns of all n rollouts of one question (rl_bridge.convert normalises per prompt group).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..context import AgentContext
from ..errors import InputError
from ..spec import AgentSpec, RewardInput, RolloutInput
from .graph import AgentFlowOptions, build_graph
from .reward import judge_reward, math_verify_reward


def question_of(prompt: Any) -> str:
    """The question from a slime prompt: a string, or chat messages (the last user message)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for msg in reversed(prompt):
            if isinstance(msg, Mapping) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
                return msg["content"]
    raise InputError("prompt", f"expected a question string or chat messages, got {type(prompt).__name__}",
                     "put the question under --input-key (default 'input') as a string")


def answers_of(label: Any) -> list[str]:
    """Ground truths from a label: a string or number, a list of them, or {"ground_truth": ...}."""
    if isinstance(label, Mapping):
        label = label.get("ground_truth", label.get("answer"))
    if isinstance(label, (str, int, float)) and not isinstance(label, bool):
        return [str(label)]
    if isinstance(label, (list, tuple)) and label and all(isinstance(x, (str, int, float)) for x in label):
        return [str(x) for x in label]
    raise InputError("label", f"expected an answer (string or number) or a list of answers, got {label!r:.80}",
                     "put the ground truth under --label-key (default 'label')")


def make_input(row: RolloutInput, options: AgentFlowOptions) -> dict[str, Any]:
    question = question_of(row["prompt"]).strip()
    if not question:
        raise InputError("prompt", "the question is empty", "give a non-empty question under --input-key")
    if row["label"] is not None:
        answers_of(row["label"])  # a malformed label is a bad row, reported before any generation
    return {"question": question, "turns": []}


def answer(state: Mapping[str, Any]) -> str:
    return str(state.get("answer", ""))


async def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """The judge's 1.0/0.0 when the context has the `judge_engine` engine, else math-verify's."""
    golds = answers_of(rin["label"])
    judge = rin["options"].get("judge_engine", "judge")
    if ctx is not None and judge in ctx.engines:
        question = str((rin["metadata"] or {}).get("question", "")) or "(not given; compare with the ground truth)"
        for gold in golds:
            if await judge_reward(ctx, judge, question, rin["answer"], gold) == 1.0:
                return 1.0
        return 0.0
    return math_verify_reward(rin["answer"], golds)


def metrics(rin: RewardInput) -> dict[str, float]:
    """Accuracy by math-verify (the AIME table's metric); never the judge (no engines here)."""
    if rin["label"] is None:
        return {}
    try:
        return {"math_verify": math_verify_reward(rin["answer"], answers_of(rin["label"]))}
    except Exception:
        return {}


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """Steps taken, why the loop stopped, and the tools used (per step)."""
    memory = state.get("memory") or []
    return {"steps": int(state.get("step", 0)), "stop_reason": state.get("stop_reason", ""),
            "tools_used": [m.get("tool_name", "") for m in memory]}


SPEC = AgentSpec(
    name="agentflow",
    build_graph=build_graph,
    make_input=make_input,
    answer=answer,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    layout="per_turn",
    reward_split="broadcast",
    options=AgentFlowOptions,
    description="AgentFlow: planner -> executor -> verifier with tools (python_coder in a sandbox); Flow-GRPO",
)

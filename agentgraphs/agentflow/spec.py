"""AgentFlow's AgentSpec: slime row -> graph input, reward (judge or math-verify), Flow-GRPO layout.

Flow-GRPO: only plan_next_step turns are trained; `per_turn` makes each its own sequence (its prompt
masked, its response trained) and `broadcast` gives each the trajectory's reward, so a GRPO group holds
all planner turns of all n rollouts of one question (rl_bridge.convert normalises per prompt group).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..context import AgentContext
from ..rows import answers_of, question_input, question_of  # noqa: F401 (question_of re-exported)
from ..spec import AgentSpec, RewardInput, RolloutInput
from .graph import AgentFlowOptions, build_graph
from .reward import judge_reward, math_verify_reward


def make_input(row: RolloutInput, options: AgentFlowOptions) -> dict[str, Any]:
    return {"question": question_input(row), "turns": []}


def answer(state: Mapping[str, Any]) -> str:
    return str(state.get("answer", ""))


async def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """The judge's 1.0/0.0 when the context has the `judge_engine` engine, else math-verify's."""
    golds = answers_of(rin["label"])
    judge = rin["options"].get("judge_engine", "judge")
    if ctx is not None and judge in ctx.engines:
        question = question_of(rin["prompt"])
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

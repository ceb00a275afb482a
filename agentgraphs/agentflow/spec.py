"""AgentFlow's AgentSpec: slime row -> graph input, reward (rule, judge), Flow-GRPO layout.

Flow-GRPO: the planner's turns are trained; `per_turn` makes each its own sequence (its prompt masked, its
response trained). `reward_split` (an option; the variant sets it) gives each sequence the trajectory's
normalised advantage (`broadcast`, the original) or that advantage divided by the trajectory's number of
trained sequences (`divide`, the seed); rl_bridge.convert normalises per prompt group, then divides.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ..context import AgentContext
from ..math_equivalence import amath_verify_check
from ..row_fields import answers_of, question_input, question_of  # noqa: F401 (question_of re-exported)
from ..spec import AgentSpec, RewardInput, RolloutInput, judge_engine, register
from .graph import AgentFlowOptions, build_graph
from .reward import boxed_exact_check, judge_reward

logger = logging.getLogger(__name__)


def make_input(row: RolloutInput, options: AgentFlowOptions) -> dict[str, Any]:
    return {"question": question_input(row), "turns": []}


def answer(state: Mapping[str, Any]) -> str:
    return str(state.get("answer", ""))


def _options(rin: RewardInput) -> AgentFlowOptions:
    return AgentFlowOptions.model_validate(rin["options"] or {})


async def _judged(rin: RewardInput, ctx: AgentContext | None, opts: AgentFlowOptions, golds: list[str]) -> float | None:
    """The judge's 1.0 / 0.0 over the golds, or None when there is no judge (`judge_engine`: the option
    names none, or the context has no engine of that name)."""
    judge = judge_engine(ctx, opts.judge)
    if ctx is None or judge is None:
        return None
    question = question_of(rin["prompt"])
    for gold in golds:
        if await judge_reward(ctx, judge, question, rin["answer"], gold) == 1.0:
            return 1.0
    return 0.0


async def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """By `answer_check`: boxed_exact (seed) scores 1.0 on an exact boxed match, else asks the judge (0.0
    without one); math_verify (original) asks the judge when the context has one, else math-verify, whose
    timeouts and errors score 0.0 with the reason logged."""
    golds = answers_of(rin["label"])
    opts = _options(rin)
    if opts.answer_check == "boxed_exact":
        if boxed_exact_check(rin["answer"], golds)["score"] == 1.0:
            return 1.0
        judged = await _judged(rin, ctx, opts, golds)
        return 0.0 if judged is None else judged
    judged = await _judged(rin, ctx, opts, golds)
    if judged is not None:
        return judged
    check = await amath_verify_check(rin["answer"], golds, timeout_s=opts.reward_timeout_s)
    if check["reason"].startswith(("timeout", "error")):
        logger.warning("AgentFlow reward 0.0: math-verify %s (answer %r)", check["reason"], rin["answer"][:200])
    return check["score"]


async def metrics(rin: RewardInput) -> dict[str, float]:
    """The rule's own verdict, judge or not: {"boxed_exact": ...} or {"math_verify": ...} by `answer_check`."""
    if rin["label"] is None:
        return {}
    try:
        golds = answers_of(rin["label"])
        opts = _options(rin)
        if opts.answer_check == "boxed_exact":
            return {"boxed_exact": boxed_exact_check(rin["answer"], golds)["score"]}
        check = await amath_verify_check(rin["answer"], golds, timeout_s=opts.reward_timeout_s)
        return {"math_verify": check["score"]}
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
register(SPEC)  # `load_spec("agentflow")`, langgraph.json

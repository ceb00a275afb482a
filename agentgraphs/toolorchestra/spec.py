"""ToolOrchestra's AgentSpec: slime row -> graph input, correctness reward, cost features, shaping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..answers import em, normalize_answer
from ..context import AgentContext
from ..node import call_llm
from ..rows import answers_of, question_input, question_of
from ..spec import AgentSpec, RewardInput, RolloutInput
from .graph import TOOLS, ToolOrchestraOptions, build_graph
from .prompts import JUDGE


problem_of = question_of  # the problem text, as every method reads a question


def make_input(row: RolloutInput, options: ToolOrchestraOptions) -> dict[str, Any]:
    return {"problem": question_input(row), "turns": [], "notes": [], "steps": []}


def answer(state: Mapping[str, Any]) -> str:
    return str(state.get("answer", ""))


async def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """1.0 when the answer matches a gold exactly (SQuAD normalisation), else the judge's yes/no when the
    `judge` option names an engine, else 0.0. No answer (turns used up) is 0.0."""
    golds = answers_of(rin["label"])
    if not rin["answer"].strip():
        return 0.0
    if em(rin["answer"], golds):
        return 1.0
    judge = (rin.get("options") or {}).get("judge")
    if not judge or ctx is None:
        return 0.0
    return 1.0 if await _judge(ctx, str(judge), rin, golds) else 0.0


async def _judge(ctx: AgentContext, name: str, rin: RewardInput, golds: list[str]) -> bool:
    problem = question_of(rin["prompt"])
    prompt = JUDGE.format(problem=problem, reference=" / ".join(golds), answer=rin["answer"])
    out = await call_llm({}, ctx, node="judge", engine=name, trainable=False,
                         messages=[{"role": "user", "content": prompt}], temperature=0.0, max_new_tokens=8)
    return normalize_answer(out.text).startswith("yes")


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """The rollout's features for the cost-aware reward and for reading a run."""
    steps = state.get("steps") or []
    tokens: dict[str, int] = {}
    for s in steps:
        if s.get("model"):
            tokens[s["model"]] = tokens.get(s["model"], 0) + int(s.get("expert_tokens", 0))
    return {
        "orchestrator_turns": len(steps),
        "format_invalid_turns": sum(1 for s in steps if not s["ok"] and not s.get("model")),
        "failed_tools": sum(1 for s in steps if not s["ok"] and s.get("model")),
        "tool_calls": {t: sum(1 for s in steps if s["tool"] == t and s.get("model")) for t in TOOLS},
        "expert_tokens": tokens,
        "latency_s": round(sum(float(s.get("latency_s", 0.0)) for s in steps), 4),
        "answered": bool(state.get("done")),
    }


def features(options: ToolOrchestraOptions, summary: Mapping[str, Any]) -> dict[str, float]:
    """cost (USD from the experts' tokens and `prices`), latency (tool seconds), tool:NAME counts.

    >>> features(ToolOrchestraOptions(prices={"big": 10.0}),
    ...          {"expert_tokens": {"big": 1000, "small": 1000}, "latency_s": 2.0, "tool_calls": {"search": 1}})
    {'cost': 0.011, 'latency': 2.0, 'tool:search': 1.0}
    """
    cost = sum(n * float(options.prices.get(m, 1.0)) / 1e6 for m, n in (summary.get("expert_tokens") or {}).items())
    out = {"cost": round(cost, 9), "latency": float(summary.get("latency_s", 0.0))}
    out.update({f"tool:{t}": float(n) for t, n in (summary.get("tool_calls") or {}).items()})
    return out


def reward_shaping(options: ToolOrchestraOptions, summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The converter's group shaping for this rollout (agentgraphs.shaping), unless turned off."""
    if options.reward_shaping == "none":
        return None
    return {"name": options.reward_shaping, "weights": dict(options.preference),
            "features": features(options, summary)}


def metrics(rin: RewardInput) -> dict[str, float]:
    if rin["label"] is None:
        return {}
    return {"em": em(rin["answer"], answers_of(rin["label"])) if rin["answer"].strip() else 0.0}


SPEC = AgentSpec(
    name="toolorchestra",
    build_graph=build_graph,
    make_input=make_input,
    answer=answer,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    reward_shaping=reward_shaping,
    layout="per_turn",
    reward_split="broadcast",
    options=ToolOrchestraOptions,
    description="ToolOrchestra (QA): an orchestrator routes search / code / answer to expert models",
)

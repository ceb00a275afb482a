"""ToolOrchestra's AgentSpec: slime row -> graph input, correctness reward, cost features, shaping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..answers import em, normalize_answer
from ..context import AgentContext
from ..errors import InputError
from ..node import call_llm
from ..spec import AgentSpec, RewardInput, RolloutInput
from .graph import TOOLS, ToolOrchestraOptions, build_graph
from .prompts import JUDGE


def problem_of(prompt: Any) -> str:
    """The problem text: a string, or chat messages (the last user message)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for msg in reversed(prompt):
            if isinstance(msg, Mapping) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
                return msg["content"]
    raise InputError("prompt", f"expected a problem string or chat messages, got {type(prompt).__name__}",
                     "put the question under --input-key (default 'input') as a string")


def answers_of(label: Any) -> list[str]:
    """Gold answers: a string, a list of strings, or {"ground_truth"/"answers": ...}.

    >>> answers_of({"ground_truth": ["Paris", "paris, france"]})
    ['Paris', 'paris, france']
    """
    if isinstance(label, Mapping):
        label = label.get("ground_truth", label.get("answers"))
    if isinstance(label, (str, int, float)) and not isinstance(label, bool):
        return [str(label)]
    if isinstance(label, (list, tuple)) and label and all(isinstance(x, (str, int, float)) for x in label):
        return [str(x) for x in label]
    raise InputError("label", f"expected an answer string or a list of answers, got {label!r:.80}",
                     "put the gold answer(s) under --label-key (default 'label')")


def make_input(row: RolloutInput, options: ToolOrchestraOptions) -> dict[str, Any]:
    problem = problem_of(row["prompt"]).strip()
    if not problem:
        raise InputError("prompt", "the problem is empty", "give a non-empty question under --input-key")
    if row["label"] is not None:
        answers_of(row["label"])  # a malformed label is a bad row, reported before any generation
    return {"problem": problem, "turns": [], "notes": [], "steps": []}


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
    meta = rin["metadata"] or {}
    problem = str(meta.get("question") or meta.get("problem") or "(see the reference answer)")
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

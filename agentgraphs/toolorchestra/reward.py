"""ToolOrchestra's reward: correctness of the answer, and the cost features of the group shaping.

Correctness (the `correctness` option), then the `judge` engine (when the option names one) when the rule says wrong
(its reply after any reasoning begins with yes or no, else RewardError: an unreadable verdict is not a 0):
    exact     (original) SQuAD exact match against any gold (`agentgraphs.answers.em`);
    contains  (seed)     both texts normalised (Unicode NFKD, lower-cased, stripped, every character that
                         is neither a word character nor whitespace replaced by a space, whitespace runs
                         collapsed to one space: no strip after that, so "Paris." normalises to "paris ");
                         correct when they are equal, or when the gold's text occurs inside the answer's,
                         unless the gold has at most 3 words and the answer more than 10 times as many.
The cost-aware shaping (`agentgraphs.shaping`) gets, per rollout, the features `cost` (USD: the experts'
tokens x `prices`, plus the orchestrator's own tokens x `orchestrator_price` when `cost_counts_orchestrator`;
a seed-format row's: the seed's number from the row's own prices, `seed_rows.seed_cost`),
`latency` (tool seconds), `tool:NAME` (calls per tool) and `expert:NAME` (calls per expert engine), and the
group rules of the variant (std, the 0.1 boundary, whether an unanswered rollout trains).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..answers import em, normalize_answer
from ..context import AgentContext
from ..errors import RewardError
from ..node import ask_judge
from ..row_fields import answers_of, question_of
from ..spec import RewardInput, judge_engine, reward_options
from ..toolcalls import split_reasoning
from .options import TOOLS, Price, ToolOrchestraOptions, expert_names
from .prompts import JUDGE
from .seed_rows import seed_cost

__all__ = ["contains_match", "correct", "features", "metrics", "reward", "reward_shaping", "scored_text",
           "seed_normalise"]

_NOT_WORD = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")
DEFAULT_PRICE = 1.0  # USD per million tokens of an expert without a price
JUDGE_MAX_NEW_TOKENS = 1024  # room for a reasoning judge to think before its yes / no


def seed_normalise(text: str) -> str:
    """The `contains` rule's normal form.

    >>> seed_normalise("  It was Ilse Marrow. "), seed_normalise("Café-au-lait")
    ('it was ilse marrow ', 'cafe au lait')
    """
    text = unicodedata.normalize("NFKD", text).lower().strip()
    return _SPACES.sub(" ", _NOT_WORD.sub(" ", text))


def contains_match(answer: str, gold: str) -> bool:
    """The `contains` rule for one gold (see the module docstring).

    >>> contains_match("It was Ilse Marrow.", "Ilse Marrow"), contains_match("Paris", "Paris.")
    (True, False)
    >>> contains_match("a b c d e f g h i j k", "k"), contains_match("a b c d e f g h i j", "j")
    (False, True)
    """
    if not answer or not gold:
        return False
    a, g = seed_normalise(answer), seed_normalise(gold)
    if a == g:
        return True
    if g not in a:
        return False
    return not (len(g.split()) <= 3 and len(a.split()) > 10 * len(g.split()))


def correct(answer: str, golds: list[str], rule: str) -> bool:
    """Whether `answer` matches any gold by `rule` ("contains" or "exact").

    >>> said = "It was Ilse Marrow."
    >>> correct(said, ["Ilse Marrow"], "contains"), correct(said, ["Ilse Marrow"], "exact")
    (True, False)
    """
    if rule == "exact":
        return bool(em(answer, golds))
    return any(contains_match(answer, g) for g in golds)


async def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """1.0 when the answer matches a gold by the `correctness` rule, else the judge's yes/no when the `judge`
    option names an engine (ConfigError when the context has none of that name), else 0.0. No answer (turns
    used up, a format-invalid call) is 0.0, unless `unanswered_reward: transcript` (the seed) scores the
    rollout's transcript in its place (`scored_text`)."""
    golds = answers_of(rin["label"])
    options = resolved_options(rin)
    said = scored_text(rin, options)
    if not said.strip():
        return 0.0
    if correct(said, golds, options.correctness):
        return 1.0
    judge = judge_engine(ctx, options.judge)
    if ctx is None or judge is None:
        return 0.0
    return 1.0 if await _judge(ctx, judge, rin, golds, said) else 0.0


def scored_text(rin: RewardInput, options: ToolOrchestraOptions) -> str:
    """What the correctness rule reads: the answer; an empty one under `unanswered_reward: transcript` (the
    seed, reward.py:386) is the rollout's transcript, which its summary carries as `seed_transcript`.

    >>> rin = {"answer": "", "trace_summary": {"seed_transcript": "=== Turn 0 ..."}}
    >>> scored_text(rin, ToolOrchestraOptions()), scored_text(rin, ToolOrchestraOptions(variant="original"))
    ('=== Turn 0 ...', '')
    """
    if rin["answer"] == "" and options.unanswered_reward == "transcript":
        return str((rin.get("trace_summary") or {}).get("seed_transcript") or "")
    return rin["answer"]


def resolved_options(rin: RewardInput) -> ToolOrchestraOptions:
    """The options the RewardInput carries, resolved as the run resolved them (defaults, variant presets);
    ConfigError names a bad one. An empty dict is the defaults, never another rule.

    >>> [resolved_options({"options": o}).correctness for o in ({}, {"variant": "original"})]
    ['contains', 'exact']
    """
    return reward_options(rin, ToolOrchestraOptions, "toolorchestra")


async def _judge(ctx: AgentContext, name: str, rin: RewardInput, golds: list[str], said: str) -> bool:
    problem = question_of(rin["prompt"])
    prompt = JUDGE.format(problem=problem, reference=" / ".join(golds), answer=said)
    out = await ask_judge(ctx, name, prompt, max_new_tokens=JUDGE_MAX_NEW_TOKENS)
    verdict = judge_verdict(out.text)
    if verdict is None:
        raise RewardError(f"toolorchestra judge {name!r} answered neither yes nor no (finish "
                          f"{out.completion.finish_reason!r}): {out.text[-200:]!r}. Fix: give the `judge` option an "
                          "engine that replies 'yes' or 'no' (a reasoning model after its </think>, within "
                          f"{JUDGE_MAX_NEW_TOKENS} tokens), or set judge: null")
    return verdict


def judge_verdict(text: str) -> bool | None:
    """The judge's yes (True) or no (False): the first word of its reply after any reasoning; None when it is
    neither (or the reasoning never closed), never a guess.

    >>> judge_verdict("Yes."), judge_verdict("<think>hm</think>\\n\\nno"), judge_verdict("yesterday")
    (True, False, None)
    """
    reply = split_reasoning(text)[1]
    words = normalize_answer(reply or "").split()
    first = words[0] if words else ""
    return True if first == "yes" else False if first == "no" else None


def _pair(price: Price) -> tuple[float, float]:
    return (float(price[0]), float(price[1])) if isinstance(price, list) else (float(price), float(price))


def orchestrator_price(options: ToolOrchestraOptions) -> tuple[float, float]:
    """(input, output) USD per million orchestrator tokens: the option, else the cheapest expert's price.

    >>> orchestrator_price(ToolOrchestraOptions(prices={"search-expert": [0.3, 0.6], "code-expert": 0.8}))
    (0.3, 0.6)
    """
    if options.orchestrator_price is not None:
        return _pair(options.orchestrator_price)
    prices = [_pair(options.prices.get(m, DEFAULT_PRICE)) for m in expert_names(options.experts)]
    return min(prices, key=sum)


def features(options: ToolOrchestraOptions, summary: Mapping[str, Any]) -> dict[str, float]:
    """cost (USD), latency (tool seconds), tool:NAME and expert:NAME call counts. A seed-format row's rollout
    (its summary's `seed_pricing`) costs what the seed's reward computes (`seed_rows.seed_cost`: tokens times
    the row's prices as given, missing ones 0) and counts the calls of each expert name its model_mapping has.

    >>> opts = ToolOrchestraOptions(variant="original", prices={"big": 10.0},
    ...                             experts={"answer": ["big", "small"]})
    >>> f = features(opts, {"expert_tokens": {"big": 1000, "small": 1000}, "latency_s": 2.0,
    ...                     "tool_calls": {"answer": 2}, "expert_calls": {"big": 1, "small": 1}})
    >>> {k: v for k, v in f.items() if v}
    {'cost': 0.011, 'latency': 2.0, 'tool:answer': 2.0, 'expert:big': 1.0, 'expert:small': 1.0}
    >>> seed = ToolOrchestraOptions(prices={"big": [2.0, 4.0], "small": 1.0}, experts={"answer": ["big", "small"]})
    >>> features(seed, {"expert_io_tokens": {"big": [100, 10]}, "orchestrator_tokens": [1000, 50],
    ...                 "latency_s": 1.0})["cost"] * 1e6  # (100*2 + 10*4) + (1000*1 + 50*1), 1.0: cheapest
    1290.0
    """
    seed = summary.get("seed_pricing")
    if seed is not None:  # a seed-format row: the seed's cost, and its mapped expert names
        cost = seed_cost(seed, summary.get("orchestrator_tokens") or (0, 0), summary.get("expert_io_tokens") or {},
                         orchestrator=options.cost_counts_orchestrator)
        names = list(seed["model_mapping"])
    else:
        cost, names = _cost(options, summary), expert_names(options.experts)
    out = {"cost": cost, "latency": float(summary.get("latency_s", 0.0))}
    tools = summary.get("tool_calls") or {}
    out.update({f"tool:{t}": float(tools.get(t, 0)) for t in TOOLS})
    calls = summary.get("expert_calls") or {}
    out.update({f"expert:{m}": float(calls.get(m, 0)) for m in names})
    return out


def _cost(options: ToolOrchestraOptions, summary: Mapping[str, Any]) -> float:
    if not options.cost_counts_orchestrator and all(isinstance(p, float) for p in options.prices.values()):
        # experts only, one price per expert: tokens x price, rounded to nano-dollars
        cost = sum(n * float(options.prices.get(m, DEFAULT_PRICE)) / 1e6
                   for m, n in (summary.get("expert_tokens") or {}).items())
        return round(cost, 9)
    # per expert (sorted, so equal token counts give bit-equal costs), input and output at their prices
    total = 0.0
    for m, (n_in, n_out) in sorted((summary.get("expert_io_tokens") or {}).items()):
        p_in, p_out = _pair(options.prices.get(m, DEFAULT_PRICE))
        total += n_in * p_in + n_out * p_out
    if options.cost_counts_orchestrator:
        n_in, n_out = summary.get("orchestrator_tokens") or (0, 0)
        p_in, p_out = orchestrator_price(options)
        total += n_in * p_in + n_out * p_out
    return total / 1e6


def reward_shaping(options: ToolOrchestraOptions, summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The converter's group shaping for this rollout (agentgraphs.shaping), unless turned off: the weights
    (the row's own, a seed row's pref_vec, else the `preference` option), the features, the variant's group
    rules (`std`, `drop_at_min_std`) and whether this rollout trains.

    >>> shaping = reward_shaping(ToolOrchestraOptions(), {"answered": False, "latency_s": 0.0})
    >>> shaping["std"], shaping["drop_at_min_std"], shaping["train"]
    ('population', True, False)
    >>> reward_shaping(ToolOrchestraOptions(variant="original"), {"answered": False})["train"]
    True
    """
    if options.reward_shaping == "none":
        return None
    weights = summary["preference"] if summary.get("preference") is not None else options.preference
    return {"name": options.reward_shaping, "weights": dict(weights),
            "features": features(options, summary), "std": options.group_std,
            "drop_at_min_std": options.drop_group_at_min_std,
            "train": bool(summary.get("answered")) or options.train_unanswered}


def metrics(rin: RewardInput) -> dict[str, float]:
    """em (SQuAD exact match) and contains (the seed's rule) of the answer, whatever the reward used."""
    if rin["label"] is None:
        return {}
    golds = answers_of(rin["label"])
    answered = bool(rin["answer"].strip())
    return {"em": em(rin["answer"], golds) if answered else 0.0,
            "contains": float(answered and correct(rin["answer"], golds, "contains"))}

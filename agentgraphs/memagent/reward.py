"""MemAgent's training reward and its RULER-HQA evaluation protocol (the seed's, quirks included);
`reward(RewardInput, ctx)` and `metrics(RewardInput)` are the spec's.

The reward is the rule MemAgent's own code and the seed's share (BytedTsinghua-SIA/MemAgent
verl/utils/reward_score/hotpotqa.py; Takenzz/AgentFlow@4b5aa84 agentic/memagent/rollout.py:197-297): the box
of ``seed_box`` in the last 300 lower-cased characters, normalised by ``boxed_normalize`` (MATH's
``strip_string`` cut short: no units, fractions or ``x =`` rules), equal to a lower-cased ground truth.
The generic answer tools live in ``agentgraphs.answers`` (re-exported here). Every function accepts
arbitrary text and never raises: a response the parsers cannot read scores 0 (or, for ``sub_em``, see
``ruler_metrics``).
"""

from __future__ import annotations

from typing import Any, Mapping, TypedDict

from ..answers import (
    Golds,
    _as_list,
    _braced_content,
    em,
    f1,
    last_boxed,
    math_equal,
    normalize_answer,
    normalize_math,
    sub_em,
    token_f1,
)
from ..context import AgentContext
from ..errors import InputError
from ..row_fields import answers_of
from ..spec import RewardInput

__all__ = [
    "RulerMetrics",
    "EvalMetrics",
    "last_boxed",
    "normalize_math",
    "math_equal",
    "memagent_reward",
    "seed_box",
    "boxed_normalize",
    "normalize_answer",
    "em",
    "sub_em",
    "f1",
    "ruler_answer",
    "ruler_metrics",
    "eval_metrics",
    "metrics",
    "reward",
    "reward_golds",
    "REWARD_TAIL_CHARS",
]

# MemAgent reads only the end of the final answer (reward and evaluation): an earlier \boxed{} is ignored.
REWARD_TAIL_CHARS = 300


def memagent_reward(response: str, ground_truths: Golds) -> float:
    """MemAgent's training reward: 1.0 when the boxed answer matches any ground truth, else 0.0.

    Only the LAST 300 characters of the response count, lower-cased; their box is ``seed_box``'s (no box,
    or one that does not close inside them: 0.0). It matches a ground truth when both, the ground truth
    lower-cased, are equal after ``boxed_normalize``.

    >>> memagent_reward("The answer is \\\\boxed{Paris}.", ["paris"])
    1.0
    >>> memagent_reward("\\\\boxed{Paris}" + " filler" * 60, "Paris")  # box outside the last 300 chars
    0.0
    >>> memagent_reward("\\\\boxed{ 1/2 }", ["1/2"]), memagent_reward("\\\\boxed{1/2}", ["0.5"])  # no MATH rules
    (1.0, 0.0)
    """
    answer = seed_box(response[-REWARD_TAIL_CHARS:].lower())
    if answer is None:
        return 0.0
    normalized = boxed_normalize(answer)
    return 1.0 if any(normalized == boxed_normalize(g.lower()) for g in _as_list(ground_truths)) else 0.0


def seed_box(text: str) -> str | None:
    """The boxed answer as MemAgent's code and the seed's read it from ``text`` (already cut and lower-cased).

    When ``\\boxed `` (with a space) occurs anywhere, the answer is what follows its LAST occurrence up to
    the next ``$``, even when a ``\\boxed{...}`` comes later. Otherwise the last ``\\boxed`` must open a
    brace group that closes: its content. Anything else is None: no box, a box that never closes, a bare
    ``\\boxed``, ``\\fbox{...}`` (their parser finds it but cannot unwrap it).

    >>> seed_box("\\\\boxed{5} then \\\\boxed{\\\\frac{1}{2}}"), seed_box("$\\\\boxed 4$ or \\\\boxed{5}")
    ('\\\\frac{1}{2}', '4')
    >>> seed_box("\\\\boxed{5} and \\\\boxed{6"), seed_box("\\\\fbox{5}"), seed_box("no box")
    (None, None, None)
    """
    if "\\boxed " in text:
        return text.rsplit("\\boxed ", 1)[1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0 or not text.startswith("\\boxed{", start):
        return None
    return _braced_content(text, start + len("\\boxed"))


# (old, new) in order: MATH's strip_string up to its units, fractions and "x =" rules, as MemAgent keeps it
_BOXED_REPLACEMENTS = (
    ("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""),
    ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", ""), ("\\%", ""), (" .", " 0."),
    ("{.", "{0."), (" ", ""),
)


def boxed_normalize(text: str) -> str:
    """The normalisation of MemAgent's reward: newlines, ``\\!``, ``\\left``/``\\right``, degrees, ``\\$``,
    ``\\%`` and then every space removed, ``\\\\`` -> ``\\``, ``tfrac``/``dfrac`` -> ``frac``, ``" ."`` ->
    ``" 0."`` and ``"{."`` -> ``"{0."`` (in that order). Nothing else: ``1/2`` stays ``1/2``, ``.5`` stays ``.5``.

    >>> boxed_normalize("\\\\dfrac{1}{2}"), boxed_normalize(" the  eiffel tower "), boxed_normalize("90^\\\\circ")
    ('\\\\frac{1}{2}', 'theeiffeltower', '90')
    """
    for old, new in _BOXED_REPLACEMENTS:
        text = text.replace(old, new)
    return text


# ---------------------------------------------------------------------------------------------------------
# RULER-HQA, scored exactly as the seed's eval_ruler_hqa.py scores it
# ---------------------------------------------------------------------------------------------------------


class RulerMetrics(TypedDict):
    """One response's RULER-HQA scores (each 0.0 or 1.0, ``f1`` in [0, 1]); a run reports their means."""

    em: float
    sub_em: float  # the seed's figure: an empty answer counts as a hit
    f1: float
    sub_em_strict: float  # sub_em where an empty answer never counts
    answered: float  # 1.0 when the extracted answer is non-empty after normalisation


EvalMetrics = RulerMetrics  # the name MemAgent's metrics had before the seed protocol


def ruler_answer(response: str) -> str:
    """The answer the seed scores: the last box in the last 300 characters of the lower-cased response.

    The response is stripped of surrounding whitespace, cut to its last 300 characters and lower-cased.
    Then, in the seed's order: if ``\\boxed `` (with a space) occurs anywhere in that window, the answer is
    what follows its last occurrence up to the next ``$``, even when a ``\\boxed{...}`` comes later;
    otherwise the last ``\\boxed`` must open a brace group (``\\boxed{...}``) that closes inside the
    window. Anything else (no box, a box that never closes, a bare ``\\boxed``, ``\\fbox{}``) gives ``""``:
    there is no fallback to the whole response or to an earlier box. The answer is stripped.

    >>> ruler_answer("So it is \\\\boxed{The Eiffel Tower}.")
    'the eiffel tower'
    >>> ruler_answer("\\\\boxed{paris} but then \\\\boxed{lyo"), ruler_answer("no box"), ruler_answer("$\\\\boxed 42$")
    ('', '', '42')
    """
    content = seed_box(response.strip()[-REWARD_TAIL_CHARS:].lower())
    return "" if content is None else content.strip()


def ruler_metrics(response: str, golds: Golds) -> RulerMetrics:
    """RULER-HQA scores of one response, exactly as the seed computes them, plus two honest companions.

    The answer is ``ruler_answer(response)``; it is compared with the FIRST gold only (the seed scores
    ``answers[0]``), both after SQuAD ``normalize_answer``. ``em``: equal. ``sub_em``: gold in answer or
    answer in gold, so an empty answer is a hit (the seed's quirk, present in its published numbers).
    ``f1``: token F1, 0 when either side is empty (no yes/no rule). ``sub_em_strict``: ``sub_em`` where an
    empty side never matches. ``answered``: the normalised answer is non-empty. A run's figure is the
    mean ``sub_em`` in percent.

    >>> ruler_metrics("It is \\\\boxed{The Cat}", ["cat"])
    {'em': 1.0, 'sub_em': 1.0, 'f1': 1.0, 'sub_em_strict': 1.0, 'answered': 1.0}
    >>> ruler_metrics("I could not find it.", ["cat"])  # no box: empty answer, a sub_em hit all the same
    {'em': 0.0, 'sub_em': 1.0, 'f1': 0.0, 'sub_em_strict': 0.0, 'answered': 0.0}
    """
    golds_list = _as_list(golds)
    gold_raw = golds_list[0] if golds_list else ""
    answer = ruler_answer(response)
    pred, gold = normalize_answer(answer), normalize_answer(gold_raw)
    return RulerMetrics(
        em=float(pred == gold),
        sub_em=float(gold in pred or pred in gold),
        f1=token_f1(answer, gold_raw),
        sub_em_strict=sub_em(answer, gold_raw),
        answered=float(bool(pred)),
    )


# MemAgent's eval metrics (what `agentgraphs run` and examples/memagent/evaluate.py report).
eval_metrics = ruler_metrics


def reward_golds(label: Any, metadata: Mapping[str, Any] | None) -> list[str]:
    """The answers the training reward accepts: the row's ``metadata["ground_truth"]`` when it holds any, else
    the label. The seed's rows keep every acceptable answer there and only the first as the label, and its
    reward reads them from there (Takenzz/AgentFlow@4b5aa84 agentic/memagent/rollout.py:275-278,
    prepare_data.py:94-105); rows written by ``to_slime_row`` carry them all in the label.

    >>> reward_golds("Alice Smith", {"ground_truth": ["Alice Smith", "Alice"]}), reward_golds(["A"], {})
    (['Alice Smith', 'Alice'], ['A'])
    """
    extra = (metadata or {}).get("ground_truth")
    if extra is None or (isinstance(extra, (str, list, tuple)) and not extra):  # the seed: `if not ground_truth`
        return answers_of(label)
    try:
        return answers_of(extra)
    except InputError as exc:
        raise InputError("metadata.ground_truth", exc.problem, "store the row's acceptable answers under "
                         "metadata['ground_truth'] as a non-empty list of strings, or drop the key to score "
                         "against the label") from None


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    return memagent_reward(rin["answer"], reward_golds(rin["label"], rin["metadata"]))


def metrics(rin: RewardInput) -> dict[str, float]:
    golds = answers_of(rin["label"]) if rin["label"] is not None else []
    if not golds:
        return {}
    return dict(eval_metrics(rin["answer"], golds))  # the reward itself is Rollout.reward (computed once)

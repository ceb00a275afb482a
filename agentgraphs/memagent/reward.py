"""MemAgent's training reward; the generic answer tools live in agentgraphs.answers (re-exported here).

Every function accepts arbitrary text and never raises: a response the parsers cannot read scores 0.
"""

from __future__ import annotations

from ..answers import (
    EvalMetrics,
    Golds,
    _as_list,
    em,
    eval_metrics,
    f1,
    last_boxed,
    math_equal,
    normalize_answer,
    normalize_math,
    sub_em,
)

__all__ = [
    "EvalMetrics",
    "last_boxed",
    "normalize_math",
    "math_equal",
    "memagent_reward",
    "normalize_answer",
    "em",
    "sub_em",
    "f1",
    "eval_metrics",
    "REWARD_TAIL_CHARS",
]

# MemAgent scores only the end of the final answer: a \boxed{} earlier than this is ignored.
REWARD_TAIL_CHARS = 300


def memagent_reward(response: str, ground_truths: Golds) -> float:
    """MemAgent's training reward: 1.0 when the boxed answer matches any ground truth, else 0.0.

    Only the LAST 300 characters of the response count; they are lower-cased, the last ``\\boxed{}`` is
    taken, MATH-normalised and compared for equality with each ground truth (lower-cased and normalised).

    >>> memagent_reward("The answer is \\\\boxed{Paris}.", ["paris"])
    1.0
    >>> memagent_reward("\\\\boxed{Paris}" + " filler" * 60, "Paris")  # box outside the last 300 chars
    0.0
    """
    answer = last_boxed(response[-REWARD_TAIL_CHARS:].lower())
    if answer is None:
        return 0.0
    normalized = normalize_math(answer)
    return 1.0 if any(normalized == normalize_math(g.lower()) for g in _as_list(ground_truths)) else 0.0

"""Math-answer equivalence by math-verify, run where a deadline can stop it.

`math_verify_check(answer, golds, timeout_s=...)` is a pure function of its arguments that always returns
within its deadline: math-verify runs in a worker process of `agentgraphs.deadline` (its own timeouts
are SIGALRM-based: off the main thread they do nothing, and a power tower such as `9^{9^{9^{9}}}` never
finishes). A call past the deadline scores 0.0 with a reason that says so. `pip install
'agentgraphs[math]'` provides math-verify.

Bare answers (no `$`, no `\\boxed`) are parsed as LaTeX first when they hold LaTeX markup or a comma
(`\\ ^ _ { } ,`), so `2^{10}` is 1024 (a plain-expression parse stops at `2`) and `1,16` is the set
{1, 16}, as `\\boxed{1,16}` reads (a plain parse gives 1.16); other bare text is parsed as a plain
expression first (`1/2`, `2**10`).

>>> math_verify_check("2^{10}", ["1024"], timeout_s=60)
{'score': 1.0, 'reason': 'equivalent to gold 0'}
>>> math_verify_check("", ["1024"], timeout_s=60)
{'score': 0.0, 'reason': 'no answer'}
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, TypedDict

from .deadline import CallResult, DeadlinePool
from .errors import ConfigError

__all__ = ["AnswerCheck", "MAX_ANSWER_CHARS", "math_verify_check", "amath_verify_check", "math_verify_equal",
           "math_verify_pool"]

MAX_ANSWER_CHARS = 2000  # only the end of an answer is parsed: math-verify's parser is not linear
_LATEX_MARKS = ("\\", "^", "_", "{", "}", ",")
_TARGET = "agentgraphs.math_equivalence:math_verify_equal"


class AnswerCheck(TypedDict):
    """A rule reward's verdict: `score` 1.0 or 0.0, and why (``timeout: ...`` when a deadline passed)."""

    score: float
    reason: str


def math_verify_equal(answer: str, golds: Sequence[str]) -> int:
    """The index of the first gold math-verify finds equivalent to `answer`, else -1.

    No timeout of its own: call it through `math_verify_check` (a worker process with a deadline)."""
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" on every call
    target = _parse(answer[-MAX_ANSWER_CHARS:])
    if not target:
        return -1
    for i, gold in enumerate(golds):
        parsed = _parse(str(gold))
        if parsed and verify(parsed, target, timeout_seconds=None):
            return i
    return -1


def _parse(text: str) -> list[Any]:
    from math_verify import parse

    if "$" in text or "\\boxed" in text:
        attempts = [text]
    elif any(mark in text for mark in _LATEX_MARKS):
        attempts = [f"${text}$", text]
    else:
        attempts = [text, f"${text}$"]
    for attempt in attempts:
        found = parse(attempt, parsing_timeout=None)
        if found:
            return found
    return []


def warm() -> None:
    """A worker's start (outside every deadline): import math-verify and sympy, parse and verify once."""
    math_verify_equal("1", ["1"])


_POOL: DeadlinePool | None = None
_POOL_LOCK = threading.Lock()


def math_verify_pool() -> DeadlinePool:
    """The process's math-verify workers: min(4, CPUs) processes, each warmed up before its first call."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = DeadlinePool(size=min(4, os.cpu_count() or 1), preload=("agentgraphs.math_equivalence:warm",))
        return _POOL


# Recent verdicts: a rollout's reward and its metric ask the same question; a power tower then waits for
# its deadline once. A worker that died is not remembered (the next call may well succeed).
_RECENT: OrderedDict[tuple[Any, ...], AnswerCheck] = OrderedDict()
_RECENT_MAX = 4096
_RECENT_LOCK = threading.Lock()


def _request(answer: Any, golds: Sequence[Any], timeout_s: float) -> tuple[AnswerCheck | None, list[Any]]:
    if importlib.util.find_spec("math_verify") is None:
        raise ConfigError("the math-verify reward needs math-verify: pip install 'agentgraphs[math]' "
                          "(or configure a judge engine)")
    if not isinstance(answer, str) or not answer.strip():
        return AnswerCheck(score=0.0, reason="no answer"), []
    args = [answer[-MAX_ANSWER_CHARS:], [str(g) for g in golds]]
    with _RECENT_LOCK:
        known = _RECENT.get(_key(args, timeout_s))
    return (None if known is None else AnswerCheck(**known)), args


def _key(args: list[Any], timeout_s: float) -> tuple[Any, ...]:
    return args[0], tuple(args[1]), timeout_s


def _verdict(result: CallResult, args: list[Any], timeout_s: float) -> AnswerCheck:
    if not result["ok"]:
        check = AnswerCheck(score=0.0, reason=result["reason"])
    elif result["value"] < 0:
        check = AnswerCheck(score=0.0, reason="not equivalent to any gold")
    else:
        check = AnswerCheck(score=1.0, reason=f"equivalent to gold {result['value']}")
    if result["ok"] or result["reason"].startswith("timeout"):
        with _RECENT_LOCK:
            _RECENT[_key(args, timeout_s)] = check
            while len(_RECENT) > _RECENT_MAX:
                _RECENT.popitem(last=False)
    return AnswerCheck(**check)


def math_verify_check(answer: str, golds: Sequence[str], *, timeout_s: float = 10.0,
                      pool: DeadlinePool | None = None) -> AnswerCheck:
    """1.0 when math-verify finds `answer` equivalent to any of `golds`, else 0.0, with the reason; the
    answer's last MAX_ANSWER_CHARS characters are parsed. Returns within `timeout_s` (plus a worker's
    start-up on first use); ConfigError without math-verify installed."""
    early, args = _request(answer, golds, timeout_s)
    if early is not None:
        return early
    return _verdict((pool or math_verify_pool()).call(_TARGET, args, timeout_s=timeout_s), args, timeout_s)


async def amath_verify_check(answer: str, golds: Sequence[str], *, timeout_s: float = 10.0,
                             pool: DeadlinePool | None = None) -> AnswerCheck:
    """`math_verify_check` for async code: the event loop keeps running while the worker verifies."""
    early, args = _request(answer, golds, timeout_s)
    if early is not None:
        return early
    result = await (pool or math_verify_pool()).acall(_TARGET, args, timeout_s=timeout_s)
    return _verdict(result, args, timeout_s)

"""AgentFlow's reward: an LLM judge when the context has the judge engine, else math-verify.

- Judge (the original's): the judge model reads the question, the model's final output and the ground
  truth and answers {"analysis": ..., "true_false": ...}; 1.0 if true, else 0.0. Its verdict is parsed
  from JSON, else from the last "true_false" / "True" / "False" it writes (anything else: 0.0).
- Rule-based: math-verify (the maintained library, `pip install 'agentgraphs[math]'`) compares the
  extracted answer (the last <answer>...</answer>, else the output) with the ground truth, so
  `\\frac{1}{2}` equals `0.5` and `\\boxed{42}` equals `42`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

from ..engines import SamplingParams
from ..errors import ConfigError
from .prompts import JUDGE_TEMPLATE

__all__ = ["math_verify_reward", "judge_reward", "parse_judge_verdict"]

_MAX_ANSWER_CHARS = 2000  # math-verify's parser is not linear on hostile input: long answers are cut


def _parse_math(text: str) -> list[Any]:
    """math-verify's parse; bare LaTeX (no $ or \\boxed) is read as one math expression first."""
    from math_verify import parse

    timeout = 5 if threading.current_thread() is threading.main_thread() else None  # signal-based
    bare = "$" not in text and "\\boxed" not in text
    attempts = [f"${text}$", text] if bare and "\\" in text else [text, f"${text}$"] if bare else [text]
    for attempt in attempts:
        found = parse(attempt, parsing_timeout=timeout)
        if found:
            return found
    return []


def math_verify_reward(answer: str, golds: Sequence[str]) -> float:
    """1.0 when math-verify finds the answer equivalent to any ground truth, else 0.0; never raises
    for what a model writes (ConfigError without the `math` extra).

    >>> math_verify_reward("\\\\frac{1}{2}", ["0.5"])
    1.0
    >>> math_verify_reward("The answer is \\\\boxed{42}.", ["42"])
    1.0
    >>> math_verify_reward("41", ["42"])
    0.0
    """
    try:
        from math_verify import verify
    except ImportError:
        raise ConfigError("AgentFlow's rule-based reward needs math-verify: pip install 'agentgraphs[math]' "
                          "(or configure a judge engine)") from None
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    if not isinstance(answer, str) or not answer.strip():
        return 0.0
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        target = _parse_math(answer[-_MAX_ANSWER_CHARS:])
        if not target:
            return 0.0
        for gold in golds:
            parsed = _parse_math(str(gold))
            if parsed and verify(parsed, target, timeout_seconds=timeout):
                return 1.0
    except Exception:  # math-verify's own failures (sympy on odd input, timeouts): not equivalent
        return 0.0
    return 0.0


_VERDICT_KEY = re.compile(r'"?true_false"?\s*[:=]\s*"?(true|false)', re.IGNORECASE)
_VERDICT_WORD = re.compile(r"\b(true|false)\b", re.IGNORECASE)


def parse_judge_verdict(text: str) -> bool:
    """The judge's verdict: JSON {"true_false": bool}, else its last true_false / True / False; else False.

    >>> parse_judge_verdict('{"analysis": "same value", "true_false": true}')
    True
    >>> parse_judge_verdict("The answers differ. Verdict: False")
    False
    >>> parse_judge_verdict("no idea")
    False
    """
    if not isinstance(text, str):
        return False
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        try:
            obj = json.loads(body[start:end + 1])
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            value = obj.get("true_false")
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
    keyed = _VERDICT_KEY.findall(text)
    if keyed:
        return keyed[-1].lower() == "true"
    words = _VERDICT_WORD.findall(text)
    return bool(words) and words[-1].lower() == "true"


async def judge_reward(ctx: Any, engine_name: str, question: str, response: str, gold: str,
                       max_new_tokens: int = 1024) -> float:
    """1.0 / 0.0 from the judge engine `engine_name` of the context (a token or a chat engine)."""
    prompt = JUDGE_TEMPLATE.format(question=question, response=response, ground_truth=gold)
    messages = [{"role": "user", "content": prompt}]
    engine = ctx.engine(engine_name)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    if hasattr(engine, "generate"):
        ids = ctx.template(engine_name).render(messages)
        completion = await engine.generate(ids, params)
    else:
        completion = await engine.chat(messages, params)
    return 1.0 if parse_judge_verdict(completion.text) else 0.0

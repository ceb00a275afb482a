"""What every method reads from an input row: the question text and the gold answers.

Rows arrive as slime names them (`prompt` under --input-key, `label` under --label-key); a method's
`make_input` and reward call these instead of parsing rows their own way.

>>> question_of([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])
'2+2?'
>>> answers_of({"ground_truth": ["Paris", "paris, france"]}), answers_of(42), answers_of([42.0, 0.5])
(['Paris', 'paris, france'], ['42'], ['42', '0.5'])
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .errors import InputError

_LABEL_KEYS = ("ground_truth", "answers", "answer")


def question_of(prompt: Any) -> str:
    """The question from a slime prompt: a string, or chat messages (the last user message's text)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        for msg in reversed(prompt):
            if isinstance(msg, Mapping) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
                return msg["content"]
    raise InputError("prompt", f"expected a question string or chat messages with a user message, got "
                     f"{type(prompt).__name__}", "put the question under --input-key (default 'input') as a string")


def answers_of(label: Any) -> list[str]:
    """Gold answers from a label: a string or number, a non-empty list of them, or a mapping holding one
    of those under `ground_truth`, `answers` or `answer` (HotpotQA/verl rows keep `reward_model.ground_truth`).

    A whole-number float is its integer's text (a JSON or pandas column of numbers reads 42 as 42.0, and
    "42.0" would never match a model's \\boxed{42}); a blank answer or a nan/inf is refused: a blank gold
    would match a blank prediction and score it right.

    >>> answers_of(1e20), answers_of(-0.0)
    (['100000000000000000000'], ['0'])
    >>> answers_of(["Paris", " "])
    Traceback (most recent call last):
    ...
    agentgraphs.errors.InputError: input field 'label': answer #2 of 2 is blank. Fix: give every gold answer \
a non-empty text under --label-key (default 'label'), or drop the row
    """
    if isinstance(label, Mapping):
        label = next((label[k] for k in _LABEL_KEYS if k in label), None)
    if _is_answer(label):
        return [_answer_text(label, "the answer")]
    if isinstance(label, (list, tuple)) and label and all(_is_answer(x) for x in label):
        return [_answer_text(x, f"answer #{i + 1} of {len(label)}") for i, x in enumerate(label)]
    raise InputError("label", f"expected an answer (string or number), a list of answers, or "
                     f"{{'ground_truth': ...}}, got {label!r:.80}",
                     "put the gold answer(s) under --label-key (default 'label')")


def _is_answer(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _answer_text(value: str | float, which: str) -> str:  # float: int too (PEP 484)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError("label", f"{which} is {value}, not a number an answer can equal",
                             "give the gold answer as a finite number or a string under --label-key "
                             "(default 'label')")
        if value.is_integer():
            return str(int(value))
    text = str(value)
    if not text.strip():
        raise InputError("label", f"{which} is blank", "give every gold answer a non-empty text under "
                         "--label-key (default 'label'), or drop the row")
    return text


def question_input(row: Mapping[str, Any], *, strip: bool = True) -> str:
    """The row's question, stripped of surrounding whitespace unless `strip` is false (a method whose
    reference formats the question into its prompts as given); a blank question and a bad label are
    reported now, before any generation."""
    question = question_of(row["prompt"])
    if not question.strip():
        raise InputError("prompt", "the question is empty", "give a non-empty question under --input-key")
    if row.get("label") is not None:
        answers_of(row["label"])
    return question.strip() if strip else question

"""What every method reads from an input row: the question text and the gold answers.

Rows arrive as slime names them (`prompt` under --input-key, `label` under --label-key); a method's
`make_input` and reward call these instead of parsing rows their own way.

>>> question_of([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])
'2+2?'
>>> answers_of({"ground_truth": ["Paris", "paris, france"]}), answers_of(42)
(['Paris', 'paris, france'], ['42'])
"""

from __future__ import annotations

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
    of those under `ground_truth`, `answers` or `answer` (HotpotQA/verl rows keep `reward_model.ground_truth`)."""
    if isinstance(label, Mapping):
        label = next((label[k] for k in _LABEL_KEYS if k in label), None)
    if isinstance(label, (str, int, float)) and not isinstance(label, bool):
        return [str(label)]
    if isinstance(label, (list, tuple)) and label and all(
            isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in label):
        return [str(x) for x in label]
    raise InputError("label", f"expected an answer (string or number), a list of answers, or "
                     f"{{'ground_truth': ...}}, got {label!r:.80}",
                     "put the gold answer(s) under --label-key (default 'label')")


def question_input(row: Mapping[str, Any]) -> str:
    """The row's question, stripped; a bad label is reported now, before any generation."""
    question = question_of(row["prompt"]).strip()
    if not question:
        raise InputError("prompt", "the question is empty", "give a non-empty question under --input-key")
    if row.get("label") is not None:
        answers_of(row["label"])
    return question

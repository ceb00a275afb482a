"""AgentFlow's data: math problems from any source as slime rows (keys input / label / metadata).

A row's question is the first of `problem`, `Problem`, `question`, `prompt` (a string or chat messages: the
last user message), with DAPO's answer-format wrapper ("Solve the following math problem step by step ...
Answer: $Answer ...") removed, because AgentFlow asks for <answer> tags itself. Its answer is the first of
`reward_model.ground_truth`, `answer`, `Answer`, `ground_truth`, `label`, `solution`. Output rows are
`{"input": question, "label": answer, "metadata": {"question": question, "id": ..., "source": ...}}` (the
judge reads the question from the row's prompt, `RewardInput["prompt"]`); `agentgraph: agentflow` reads
them with the default keys. Sources are read by `agentgraphs.dataset_io` (files, dataset directories, Hub
ids); `examples/agentflow/prepare_data.py` writes the rows with `agentgraphs.dataset_io.write_jsonl`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..dataset_io import load_located_rows
from ..errors import InputError

__all__ = ["ANSWER_KEYS", "QUESTION_KEYS", "slime_rows", "strip_dapo_wrapper", "to_row"]

QUESTION_KEYS = ("problem", "Problem", "question", "prompt")
ANSWER_KEYS = ("answer", "Answer", "ground_truth", "label", "solution")
_DAPO_HEAD = "Solve the following math problem step by step."
_DAPO_TAIL = 'Remember to put your answer on its own line after "Answer:".'


def strip_dapo_wrapper(text: str) -> str:
    """The bare problem of a DAPO-Math-17K prompt (its answer-format head and tail removed).

    >>> strip_dapo_wrapper('Solve the following math problem step by step. The last line of your response '
    ...     'should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the '
    ...     'problem.\\n\\nWhat is 1+1?\\n\\nRemember to put your answer on its own line after "Answer:".')
    'What is 1+1?'
    >>> strip_dapo_wrapper("What is 2+2?")
    'What is 2+2?'
    """
    body = text.strip()
    if body.startswith(_DAPO_HEAD):
        parts = body.split("\n\n", 1)
        body = parts[1] if len(parts) == 2 else body
    if body.endswith(_DAPO_TAIL):
        body = body[: -len(_DAPO_TAIL)]
    return body.strip()


def _question(obj: Mapping[str, Any]) -> str | None:
    for key in QUESTION_KEYS:
        value = obj.get(key)
        if isinstance(value, list):  # chat messages
            users = [m.get("content") for m in value if isinstance(m, Mapping) and m.get("role") == "user"]
            value = users[-1] if users else None
        if isinstance(value, str) and value.strip():
            return strip_dapo_wrapper(value)
    return None


def _answer(obj: Mapping[str, Any]) -> str | None:
    reward_model = obj.get("reward_model")
    if isinstance(reward_model, Mapping) and reward_model.get("ground_truth") not in (None, ""):
        return str(reward_model["ground_truth"]).strip()
    for key in ANSWER_KEYS:
        value = obj.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def to_row(obj: Any, where: str, source: str) -> dict[str, Any]:
    """One slime row; InputError naming the row and the missing field otherwise.

    >>> to_row({"problem": "What is 6*7?", "answer": 42, "id": 3}, "f.jsonl:1", "f")["label"]
    '42'
    """
    if not isinstance(obj, Mapping):
        raise InputError(where, f"expected a JSON object, got {type(obj).__name__}", "fix or drop this row")
    question = _question(obj)
    if question is None:
        raise InputError(f"{where}: question", f"none of {list(QUESTION_KEYS)} holds a non-empty question",
                         "rename the question's field or drop the row")
    answer = _answer(obj)
    if answer is None:
        raise InputError(f"{where}: answer", f"none of {['reward_model.ground_truth', *ANSWER_KEYS]} holds an answer",
                         "rename the answer's field or drop the row")
    ident = obj.get("id", obj.get("ID", obj.get("extra_info", {}).get("index") if isinstance(obj.get("extra_info"),
                                                                                               Mapping) else None))
    return {"input": question, "label": answer,
            "metadata": {"question": question, "id": ident if ident is not None else where, "source": source}}


def slime_rows(source: str, *, dedup: bool = False, limit: int | None = None,
               **selection: Any) -> Iterator[dict[str, Any]]:
    """The slime rows of a source (a file, a dataset directory or a Hub id; `selection`: the split, revision,
    config and data_files of `agentgraphs.dataset_io.load_rows`), at most `limit`; `dedup` drops repeated
    questions (DAPO-Math-17K repeats each one).

    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "aime.jsonl")
    >>> _ = open(path, "w").write(json.dumps({"problem": "What is 6*7?", "answer": 42}) + "\\n")
    >>> [row["label"] for row in slime_rows(path)]
    ['42']
    """
    seen: set[str] = set()
    count = 0
    for obj, where in load_located_rows(source, **selection):
        row = to_row(obj, where, source)
        if dedup:
            if row["input"] in seen:
                continue
            seen.add(row["input"])
        yield row
        count += 1
        if limit is not None and count >= limit:
            return

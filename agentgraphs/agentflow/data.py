"""AgentFlow's data: math problems from any source as slime rows (keys input / label / metadata).

A row's question is the first of `problem`, `Problem`, `question`, `prompt` (a string or chat messages: the
last user message), with DAPO's answer-format wrapper ("Solve the following math problem step by step ...
Answer: $Answer ...") removed, because AgentFlow asks for <answer> tags itself. Its answer is the first of
`reward_model.ground_truth`, `answer`, `Answer`, `ground_truth`, `label`, `solution`, read by the rule every
reward reads labels by (`agentgraphs.row_fields.answers_of`: 42.0 is "42", a list stays a list). The first
field a row holds decides: a value there that is no question or no answer (blank, NaN, a bool, an object)
raises InputError naming that field, never falls through to a later one. Output rows are
`{"input": question, "label": answer, "metadata": {"question": question, "id": ..., "source": ...}}` (the
judge reads the question from the row's prompt, `RewardInput["prompt"]`); `agentgraph: agentflow` reads
them with the default keys. Sources are read by `agentgraphs.dataset_io` (files, dataset directories, Hub
ids); `examples/agentflow/prepare_data.py` writes the rows with `agentgraphs.dataset_io.write_jsonl`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..dataset_io import load_located_rows
from ..errors import ConfigError, InputError
from ..row_fields import answers_of

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


def _first_present(obj: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    """The first of `keys` the row holds a value under (None counts as absent). That field decides: a value
    it holds that cannot be used is refused, never passed over for a later field (an empty `answer` must
    not make the worked `solution` the gold)."""
    for key in keys:
        if obj.get(key) is not None:
            return key, obj[key]
    return None


def _question(obj: Mapping[str, Any], where: str) -> str | None:
    found = _first_present(obj, QUESTION_KEYS)
    if found is None:
        return None
    key, value = found
    if isinstance(value, list):  # chat messages
        users = [m.get("content") for m in value if isinstance(m, Mapping) and m.get("role") == "user"]
        value = users[-1] if users else None
    question = strip_dapo_wrapper(value) if isinstance(value, str) else ""
    if not question:
        raise InputError(key, f"{where}: the question is {_shown(found[1])}, not a non-empty text (or chat "
                         "messages ending in a user message)", f"store the question under {key!r} as a string, "
                         "or drop the row")
    return question


def _answer(obj: Mapping[str, Any], where: str) -> str | list[str] | None:
    reward_model = obj.get("reward_model")
    if isinstance(reward_model, Mapping) and reward_model.get("ground_truth") is not None:
        key, value = "reward_model.ground_truth", reward_model["ground_truth"]
    else:
        found = _first_present(obj, ANSWER_KEYS)
        if found is None:
            return None
        key, value = found
    try:  # the one rule every reward reads gold answers by (whole-number floats, blanks, nan)
        answers = [a.strip() for a in answers_of(value if not isinstance(value, Mapping) else [value])]
    except InputError as exc:
        raise InputError(key, f"{where}: the answer {_shown(value)} cannot be a gold answer ({exc.problem})",
                         f"store the answer under {key!r} as a string, a number or a list of them, "
                         "or drop the row") from None
    return answers[0] if len(answers) == 1 else answers


def _shown(value: Any) -> str:
    return f"{value!r:.60}" if isinstance(value, (str, int, float)) else f"a {type(value).__name__} {value!r:.60}"


def to_row(obj: Any, where: str, source: str) -> dict[str, Any]:
    """One slime row; InputError naming the row and the missing field otherwise.

    >>> to_row({"problem": "What is 6*7?", "answer": 42, "id": 3}, "f.jsonl:1", "f")["label"]
    '42'
    """
    if not isinstance(obj, Mapping):
        raise InputError(where, f"expected a JSON object, got {type(obj).__name__}", "fix or drop this row")
    question = _question(obj, where)
    if question is None:
        raise InputError(f"{where}: question", f"none of {list(QUESTION_KEYS)} holds a non-empty question",
                         "rename the question's field or drop the row")
    answer = _answer(obj, where)
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
    if limit is not None and limit < 1:  # the count was checked after the first row: 0 wrote one row
        raise ConfigError(f"--limit {limit}: must be at least 1 (the number of rows to write); drop it to write "
                          "them all")
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

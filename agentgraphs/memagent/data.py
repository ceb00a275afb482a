"""MemAgent datasets: RULER-HQA evaluation rows and HotpotQA training rows, normalised to ``MemAgentRow``,
and slime rows from them (``to_slime_row``; written with ``agentgraphs.dataset_io.write_jsonl``).

Two public formats are read:

- RULER-HQA (evaluation): ``{"context": str, "input": str, "answers": str | list[str], "length"?: int,
  "_id" | "index" | "id"?: ...}``, one JSON object per line, or one JSON list of them.
- HotpotQA (training, BytedTsinghua-SIA/hotpotqa): ``{"prompt": str | [{"role", "content"}, ...],
  "context": str, "reward_model": {"ground_truth": str | list[str]}, "extra_info"?: {"index": ...}}``.

JSONL files are read line by line (evaluation files reach gigabytes). A bad row raises
``InputError(field, problem, fix)`` naming the field and where it is (``file:line``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from os import PathLike
from typing import Any, Literal, TypedDict

from ..dataset_io import load_located_rows
from ..errors import InputError

__all__ = [
    "MemAgentRow",
    "SlimeRow",
    "row_from_ruler",
    "row_from_hotpotqa",
    "read_ruler_hqa",
    "read_hotpotqa",
    "read_memagent_rows",
    "to_slime_row",
]

StrPath = str | PathLike[str]
Format = Literal["auto", "ruler", "hotpotqa"]


class MemAgentRow(TypedDict):
    question: str
    document: str
    answers: list[str]
    length: int | None  # the RULER length bucket (tokens), when the data states it
    id: str


class SlimeRow(TypedDict):
    input: str
    label: list[str]
    metadata: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------
# one row
# ---------------------------------------------------------------------------------------------------------


def _text_field(obj: Mapping[str, Any], key: str, where: str, what: str) -> str:
    if key not in obj or obj[key] is None:
        raise InputError(key, f"{where}: the {what} is missing", f"give every row a non-empty string {key!r}")
    value = obj[key]
    if not isinstance(value, str):
        problem = f"{where}: the {what} is a {type(value).__name__}, not a string"
        raise InputError(key, problem, f"store {key!r} as a string")
    if not value.strip():
        raise InputError(key, f"{where}: the {what} is empty", f"give every row a non-empty {key!r}")
    return value


def _answers(value: Any, field: str, where: str) -> list[str]:
    fix = f"store {field!r} as a string or a non-empty list of strings"
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        if not value:
            raise InputError(field, f"{where}: the answer list is empty", fix)
        bad = [a for a in value if not isinstance(a, str)]
        if bad:
            raise InputError(field, f"{where}: answer {bad[0]!r} is a {type(bad[0]).__name__}, not a string", fix)
        blank = [i for i, a in enumerate(value) if not a.strip()]
        if blank:  # a blank gold matches a blank prediction; the rollout would refuse the row later anyway
            raise InputError(field, f"{where}: answer #{blank[0] + 1} of {len(value)} is blank",
                             f"give every gold answer a non-empty text under {field!r}, or drop the row")
        return list(value)
    if value is None:
        raise InputError(field, f"{where}: the answers are missing", fix)
    raise InputError(field, f"{where}: the answers are a {type(value).__name__}", fix)


def _row_id(obj: Mapping[str, Any], default: str) -> str:
    for key in ("_id", "id", "index"):
        if obj.get(key) is not None:
            return str(obj[key])
    extra = obj.get("extra_info")
    if isinstance(extra, Mapping) and extra.get("index") is not None:
        return str(extra["index"])
    return default


def _length(obj: Mapping[str, Any], where: str) -> int | None:
    """The RULER length bucket, or None when the row states none; a whole-number float (a parquet or pandas
    column reads 7000 as 7000.0) is its integer. Any other value is refused: dropping it to None would
    silently move the row out of its length bucket (the dataset's name and the per-length report)."""
    value = obj.get("length")
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError("length", f"{where}: the length {value!r:.40} is not a positive whole number of tokens",
                         "store 'length' as an integer (e.g. 7000), or leave it out")
    return value


def _require_object(obj: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        problem = f"{where}: the row is a {type(obj).__name__}, not a JSON object"
        raise InputError("row", problem, "write one JSON object per row")
    return obj


def row_from_ruler(obj: Any, where: str = "row") -> MemAgentRow:
    """Normalise one RULER-HQA row ``{context, input, answers}``.

    >>> row_from_ruler({"context": "Doc.", "input": "Q?", "answers": ["A"], "length": 7000, "_id": 3})
    {'question': 'Q?', 'document': 'Doc.', 'answers': ['A'], 'length': 7000, 'id': '3'}
    """
    obj = _require_object(obj, where)
    question = _text_field(obj, "input", where, "question")
    document = _text_field(obj, "context", where, "context document")
    answers = _answers(obj.get("answers"), "answers", where)
    return MemAgentRow(
        question=question, document=document, answers=answers, length=_length(obj, where), id=_row_id(obj, where)
    )


def _question_from_prompt(prompt: Any, where: str) -> str:
    if isinstance(prompt, str):
        return _text_field({"prompt": prompt}, "prompt", where, "question")
    fix = "store 'prompt' as a string or a list of {'role', 'content'} messages with a user message"
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if users and isinstance(users[-1].get("content"), str) and users[-1]["content"].strip():
            return users[-1]["content"]
        raise InputError("prompt", f"{where}: the chat prompt has no user message with text content", fix)
    if prompt is None:
        raise InputError("prompt", f"{where}: the question is missing", fix)
    raise InputError("prompt", f"{where}: the prompt is a {type(prompt).__name__}", fix)


def row_from_hotpotqa(obj: Any, where: str = "row") -> MemAgentRow:
    """Normalise one HotpotQA training row ``{prompt, context, reward_model: {ground_truth}}``.

    The question is the prompt string, or the content of the last user message of a chat prompt.

    >>> row = row_from_hotpotqa({"prompt": [{"role": "user", "content": "Q?"}], "context": "Doc.",
    ...                          "reward_model": {"ground_truth": "A"}, "extra_info": {"index": 7}})
    >>> row["question"], row["answers"], row["id"]
    ('Q?', ['A'], '7')
    """
    obj = _require_object(obj, where)
    question = _question_from_prompt(obj.get("prompt"), where)
    document = _text_field(obj, "context", where, "context document")
    reward_model = obj.get("reward_model")
    if not isinstance(reward_model, Mapping):
        raise InputError(
            "reward_model.ground_truth",
            f"{where}: 'reward_model' is missing or not an object",
            "give every row reward_model: {ground_truth: <answer or list of answers>}",
        )
    answers = _answers(reward_model.get("ground_truth"), "reward_model.ground_truth", where)
    return MemAgentRow(
        question=question, document=document, answers=answers, length=_length(obj, where), id=_row_id(obj, where)
    )


def _iter_objects(path: StrPath, **selection: Any) -> Iterator[tuple[Any, str]]:
    """(object, location) pairs from a JSONL file, a JSON list, a parquet file, a dataset directory or a Hub
    id: read by the shared loader, `agentgraphs.dataset_io` (`selection`: its split, revision, config and
    data_files)."""
    yield from load_located_rows(path, **selection)


def read_ruler_hqa(path: StrPath, **selection: Any) -> Iterator[MemAgentRow]:
    """Rows of a RULER-HQA file (JSONL, or a JSON list as in MemAgent's ``eval_{length}.json``), or of a
    dataset directory or Hub id (`selection`: `agentgraphs.dataset_io.load_rows`' split, revision, ...).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "eval.jsonl")
    >>> _ = open(p, "w").write('{"context": "D", "input": "Q", "answers": ["A"]}\\n')
    >>> [r["answers"] for r in read_ruler_hqa(p)]
    [['A']]
    """
    for obj, where in _iter_objects(path, **selection):
        yield row_from_ruler(obj, where)


def read_hotpotqa(path: StrPath, **selection: Any) -> Iterator[MemAgentRow]:
    """Rows of a HotpotQA training file in MemAgent's format (JSONL or a JSON list), or of a dataset
    directory or Hub id (`selection` as for `read_ruler_hqa`).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "train.jsonl")
    >>> _ = open(p, "w").write('{"prompt": "Q", "context": "D", "reward_model": {"ground_truth": "A"}}\\n')
    >>> [r["question"] for r in read_hotpotqa(p)]
    ['Q']
    """
    for obj, where in _iter_objects(path, **selection):
        yield row_from_hotpotqa(obj, where)


def read_memagent_rows(path: StrPath, fmt: Format = "auto") -> Iterator[MemAgentRow]:
    """Rows of either format; ``auto`` decides per row (a ``reward_model`` key means HotpotQA).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "mixed.jsonl")
    >>> _ = open(p, "w").write('{"context": "D", "input": "Q", "answers": "A"}\\n'
    ...                        '{"prompt": "Q2", "context": "D", "reward_model": {"ground_truth": ["B"]}}\\n')
    >>> [r["answers"] for r in read_memagent_rows(p)]
    [['A'], ['B']]
    """
    if fmt not in ("auto", "ruler", "hotpotqa"):
        raise ValueError(f"fmt must be 'auto', 'ruler' or 'hotpotqa', not {fmt!r}")
    for obj, where in _iter_objects(path):
        is_hotpot = fmt == "hotpotqa" or (fmt == "auto" and isinstance(obj, Mapping) and "reward_model" in obj)
        if fmt == "auto" and not is_hotpot:
            _refuse_neither_format(obj, where)
        yield row_from_hotpotqa(obj, where) if is_hotpot else row_from_ruler(obj, where)


def _refuse_neither_format(obj: Any, where: str) -> None:
    """Under ``auto``, a row with neither RULER's question key (``input``) nor HotpotQA's ``reward_model`` (a
    misspelled key, another dataset): say which keys each format wants, not only that ``input`` is missing."""
    if isinstance(obj, Mapping) and "input" not in obj:
        keys = ", ".join(sorted(map(str, obj))[:12]) or "none"
        raise InputError("input / reward_model", f"{where}: the row is neither format: a RULER-HQA row has "
                         f"'input', 'context' and 'answers', a HotpotQA row 'prompt', 'context' and 'reward_model'; "
                         f"its keys: {keys}", "rename its keys to one of the two formats, or name the format "
                         "(fmt='ruler' / 'hotpotqa') to see every field it lacks")


def to_slime_row(row: MemAgentRow) -> SlimeRow:
    """The row under slime's default keys (``--input-key input --label-key label --metadata-key metadata``).

    >>> to_slime_row({"question": "Q", "document": "D", "answers": ["A"], "length": None, "id": "0"})
    {'input': 'Q', 'label': ['A'], 'metadata': {'context': 'D', 'length': None, 'id': '0'}}
    """
    return SlimeRow(
        input=row["question"],
        label=list(row["answers"]),
        metadata={"context": row["document"], "length": row["length"], "id": row["id"]},
    )

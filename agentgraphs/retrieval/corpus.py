"""The retrieval corpus: JSONL passages as the seed's wiki corpora write them.

One JSON object per line: `{"id": ..., "contents": ...}` (Search-R1 / ToolOrchestra's wiki-18 layout), or
`"text"` instead of `"contents"`, with an optional `"title"`. A bad line is an `InputError` naming the line
and the field; nothing is skipped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from typing_extensions import NotRequired, TypedDict

from ..dataset_io import write_jsonl
from ..errors import InputError

__all__ = ["Passage", "parse_passage", "read_corpus", "write_passages", "passage_text"]


class Passage(TypedDict):
    """One retrievable passage: a unique id, its text, optionally a title."""

    id: str
    contents: str
    title: NotRequired[str]


def parse_passage(obj: object, where: str = "passage") -> Passage:
    """Validate one corpus record; `where` prefixes the field in error messages (e.g. 'corpus.jsonl:3').

    >>> parse_passage({"id": 7, "text": "Paris is the capital of France.", "title": "Paris"})
    {'id': '7', 'contents': 'Paris is the capital of France.', 'title': 'Paris'}
    """
    if not isinstance(obj, dict):
        raise InputError(where, f"expected a JSON object, got {type(obj).__name__}",
                         'write one object per line: {"id": "...", "contents": "..."}')
    if "id" not in obj or obj["id"] is None or isinstance(obj["id"], (dict, list)):
        raise InputError(f"{where}.id", "missing or not a string/number", "give every passage a unique id")
    text = obj.get("contents", obj.get("text"))
    if not isinstance(text, str):
        raise InputError(f"{where}.contents", "missing (neither 'contents' nor 'text' is a string)",
                         "put the passage text under 'contents' (or 'text')")
    passage = Passage(id=str(obj["id"]), contents=text)
    title = obj.get("title")
    if title is not None:
        if not isinstance(title, str):
            raise InputError(f"{where}.title", f"expected a string, got {type(title).__name__}",
                             "drop the title or make it a string")
        passage["title"] = title
    return passage


def read_corpus(path: str | Path) -> list[Passage]:
    """All passages of a JSONL corpus, in file order; ids must be unique.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "c.jsonl")
    >>> _ = open(p, "w").write('{"id": "a", "contents": "x"}\\n\\n{"id": "b", "text": "y"}\\n')
    >>> [q["id"] for q in read_corpus(p)]
    ['a', 'b']
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "no such file", "pass the path of a JSONL corpus")
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for lineno, obj in _records(path):
        where = f"{path.name}:{lineno}"
        passage = parse_passage(obj, where)
        if passage["id"] in seen:
            raise InputError(f"{where}.id", f"duplicate id {passage['id']!r} (first on line {seen[passage['id']]})",
                             "make passage ids unique")
        seen[passage["id"]] = lineno
        passages.append(passage)
    if not passages:
        raise InputError(str(path), "the corpus has no passages", "write at least one JSON line")
    return passages


def _records(path: Path) -> Iterator[tuple[int, object]]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path.name}:{lineno}", f"not JSON ({exc.msg})",
                                 "write one JSON object per line") from None


def write_passages(passages: Iterable[Passage], path: str | Path) -> None:
    """Write passages as JSONL (the index keeps its own copy of the corpus), all or nothing."""
    write_jsonl(passages, path)


def passage_text(p: Passage) -> str:
    """What is indexed: the title (when given and not already the first line) then the contents.

    >>> passage_text({"id": "1", "contents": "Capital of France.", "title": "Paris"})
    'Paris\\nCapital of France.'
    """
    title = p.get("title")
    if title and not p["contents"].lstrip('"').startswith(title):
        return f"{title}\n{p['contents']}"
    return p["contents"]

"""Per-example document filters: the seed's `example_id_file` (Takenzz/AgentFlow@4b5aa84,
agentic/ToolOrchestra/retrieval_general_thought.py:197-198, 213-255, 317-355).

The file is one JSON object, {eid: [document id, ...]}. A /retrieve request carrying an eid that the file
lists is answered from the `CANDIDATES` best hits of the whole index, keeping only the documents whose
integer id is in that eid's list, best first, up to the request's topk; an eid the file does not list keeps
every hit (the seed's `example_ids.get(eid)` is None). The seed compares `int(doc["id"])` with the list, so
the corpus's ids must be integers (read as strings, as `read_corpus` keeps them) and the list's entries
JSON integers: a file or corpus the seed could only answer wrongly (a list of strings matches nothing) or
crash on (a non-integer passage id) is refused when the service starts, with a ConfigError naming the
flag and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .corpus import Passage
from .index import Hit

__all__ = ["CANDIDATES", "ExampleIds", "allowed_ids", "filter_hits", "load_example_ids"]

# the seed searches this many hits for every request before it filters (retrieval_general_thought.py: num=1000)
CANDIDATES = 1000
FLAG = "--example-ids"

ExampleIds = dict[str, frozenset[int]]


def _refuse(path: Path, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{FLAG} {path}: {problem}; {fix}")


def load_example_ids(path: str | Path, passages: Sequence[Passage] | None = None) -> ExampleIds:
    """{eid: allowed document ids} from the seed's example-id file; with `passages` (the index's), every
    passage id must be an integer as well. ConfigError names the flag, what is wrong and the fix.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "ids.json")
    >>> _ = open(p, "w").write('{"stem____17": [3, 1], "qa____2": []}')
    >>> sorted(load_example_ids(p)["stem____17"])
    [1, 3]
    >>> _ = open(p, "w").write('{"stem____17": ["3"]}')
    >>> try:
    ...     load_example_ids(p)
    ... except ConfigError as exc:
    ...     print(str(exc).split(": ", 1)[1])
    eid 'stem____17': entry 0 is '3', not an integer; write each eid's document ids as JSON integers (the seed compares int(doc["id"]) with them): {"eid": [12, 40]}
    """
    path = Path(path)
    fix = 'write one JSON object mapping each eid to a list of integer document ids: {"eid": [12, 40]}'
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})",
                      "pass the path of the example-id file (the seed's example_id_file)") from None
    except (ValueError, RecursionError) as exc:
        raise _refuse(path, f"is not JSON ({str(exc)[:120]})", fix) from None
    if not isinstance(raw, Mapping):
        raise _refuse(path, f"is a JSON {type(raw).__name__}, not an object", fix)
    out: ExampleIds = {}
    for eid, ids in raw.items():
        if not isinstance(ids, list):
            raise _refuse(path, f"eid {eid!r:.80} maps to {type(ids).__name__}, not a list", fix)
        bad = next((i for i, d in enumerate(ids) if isinstance(d, bool) or not isinstance(d, int)), None)
        if bad is not None:
            raise _refuse(path, f"eid {eid!r:.80}: entry {bad} is {ids[bad]!r:.40}, not an integer",
                          "write each eid's document ids as JSON integers (the seed compares int(doc[\"id\"]) "
                          'with them): {"eid": [12, 40]}')
        out[eid] = frozenset(ids)
    if passages is not None:
        for p in passages:
            try:
                int(p["id"])
            except ValueError:
                raise _refuse(path, f"the index's passage {p['id']!r:.80} has no integer id, which the seed's "
                              "filter needs (it reads int(doc[\"id\"]))",
                              "index a corpus whose ids are integers (the seed's train.jsonl), or serve without "
                              f"{FLAG}") from None
    return out


def filter_hits(hits: list[Hit], allowed: frozenset[int] | None, topk: int) -> list[Hit]:
    """The first `topk` of `hits` (best first) whose document id is allowed; every hit when `allowed` is None.

    >>> hits = [{"document": {"id": str(i), "contents": ""}, "score": 9.0 - i} for i in range(5)]
    >>> [h["document"]["id"] for h in filter_hits(hits, frozenset({4, 1, 3}), 2)]
    ['1', '3']
    """
    kept = hits if allowed is None else [h for h in hits if int(h["document"]["id"]) in allowed]
    return kept[:topk]


def allowed_ids(example_ids: Mapping[str, frozenset[int]], eid: str | None) -> frozenset[int] | None:
    """The documents `eid` may see; None (no filter) for no eid or an eid the file does not list.

    >>> allowed_ids({"a": frozenset({1})}, "a"), allowed_ids({"a": frozenset({1})}, "b")
    (frozenset({1}), None)
    """
    return None if eid is None else example_ids.get(eid)

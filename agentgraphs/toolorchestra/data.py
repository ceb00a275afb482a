"""ToolOrchestra's data (QA mode): slime rows from FlashRAG-style QA records, and a synthetic smoke set.

QA records are `{"question": ..., "golden_answers": [...]}` (NQ, HotpotQA, ... as FlashRAG / Search-R1 ship
them; the question may be under `query`, `problem` or `input`, the answers under `answers`, `answer`,
`label` or `ground_truth`), read from a file, a dataset directory or a Hub id by `agentgraphs.dataset_io`.
Output rows are `{"input": question, "label": [answers], "metadata": {"question", "source", "id"?}}`;
`examples/toolorchestra/prepare_data.py` writes them with `agentgraphs.dataset_io.write_jsonl`. The
retrieval corpus (wiki-18: `{"id", "contents"}` per line) needs no conversion.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..dataset_io import load_located_rows
from ..errors import InputError
from ..retrieval.synthetic import synthetic_corpus

__all__ = ["qa_row", "read_qa", "synthetic_set"]

_QUESTION_KEYS = ("question", "query", "problem", "input")
_ANSWER_KEYS = ("golden_answers", "answers", "answer", "label", "ground_truth")


def qa_row(obj: Any, where: str, source: str) -> dict[str, Any]:
    """One slime row from a QA record; InputError names the line and the field.

    >>> qa_row({"id": "1", "question": "Capital of France?", "golden_answers": ["Paris"]}, "x:1", "nq")
    {'input': 'Capital of France?', 'label': ['Paris'], 'metadata': {'question': 'Capital of France?', 'source': 'nq', 'id': '1'}}
    """
    if not isinstance(obj, dict):
        raise InputError(where, "not a JSON object", 'write {"question": ..., "golden_answers": [...]} per line')
    question = next((obj[k] for k in _QUESTION_KEYS if isinstance(obj.get(k), str) and obj[k].strip()), None)
    if question is None:
        raise InputError(f"{where}.question", "missing", f"give the question under one of {list(_QUESTION_KEYS)}")
    answers = next((obj[k] for k in _ANSWER_KEYS if obj.get(k) not in (None, "", [])), None)
    if isinstance(answers, (str, int, float)):
        answers = [answers]
    if not isinstance(answers, list) or not all(isinstance(a, (str, int, float)) for a in answers):
        raise InputError(f"{where}.golden_answers", f"missing or not a list of answers: {answers!r:.60}",
                         f"give the gold answers under one of {list(_ANSWER_KEYS)}")
    meta: dict[str, Any] = {"question": question.strip(), "source": source}
    if "id" in obj:
        meta["id"] = str(obj["id"])
    return {"input": question.strip(), "label": [str(a) for a in answers], "metadata": meta}


def read_qa(source: str, split: str = "train") -> Iterator[dict[str, Any]]:
    """Rows of a QA source (file, dataset directory or Hugging Face id) through `agentgraphs.dataset_io`.

    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "nq.jsonl")
    >>> _ = open(path, "w").write(json.dumps({"question": "Capital of France?", "golden_answers": ["Paris"]}) + "\\n")
    >>> [(row["label"], row["metadata"]["source"]) for row in read_qa(path)]
    [(['Paris'], 'nq')]
    """
    name = Path(source).stem if Path(source).suffix else source.rstrip("/").rsplit("/", 1)[-1]
    for obj, where in load_located_rows(source, split=split):
        yield qa_row(obj, where, name)


def synthetic_set(n: int, seed: int = 0, filler: int = 2000) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(passages, rows): `n` facts "The access code of vault K is NNNN." among filler, one question each.

    >>> passages, rows = synthetic_set(2, filler=10)
    >>> len(passages), rows[0]["input"], rows[0]["metadata"]["source"]
    (12, 'What is the access code of vault V0000?', 'synthetic')
    """
    rng = random.Random(seed)
    passages: list[dict[str, Any]] = list(synthetic_corpus(filler, seed=seed, words_per_passage=40))
    rows = []
    for k in range(n):
        code = str(rng.randrange(1000, 9999))
        name = f"vault V{k:04d}"  # a name BM25 keeps as one token (it drops 1-character words)
        passages.append({"id": f"fact-{k}", "title": name.title(),
                         "contents": f"The access code of {name} is {code}. It was set in {rng.randrange(1950, 2025)}."})
        question = f"What is the access code of {name}?"
        rows.append({"input": question, "label": [code], "metadata": {"question": question, "source": "synthetic"}})
    rng.shuffle(passages)
    return passages, rows

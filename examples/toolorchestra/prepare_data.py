"""Data for ToolOrchestra (QA mode): slime rows from FlashRAG-style QA files, or a synthetic smoke set.

    # QA rows: {"question": ..., "golden_answers": [...]} (NQ, HotpotQA, ... as FlashRAG / Search-R1 ship
    # them; a file, a dataset directory or a Hub id) -> {"input", "label", "metadata"} rows for slime
    python examples/toolorchestra/prepare_data.py --qa nq_train.jsonl hotpotqa_train.jsonl --out train.jsonl

    # a self-contained smoke set: a corpus with planted facts + questions about them
    python examples/toolorchestra/prepare_data.py --synthetic 200 --out-dir /tmp/to_smoke
    agentgraphs retrieval index /tmp/to_smoke/corpus.jsonl --out /tmp/to_smoke/index

The retrieval corpus itself (wiki-18: {"id", "contents"} per line) needs no conversion:
`agentgraphs retrieval index wiki-18.jsonl --out INDEX [--dense]`.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentgraphs.dataset_io import load_located_rows
from agentgraphs.errors import InputError
from agentgraphs.retrieval.corpus import write_passages
from agentgraphs.retrieval.synthetic import synthetic_corpus

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
    """Rows of a QA source (file, dataset directory or Hugging Face id) through `agentgraphs.dataset_io`."""
    name = Path(source).stem if Path(source).suffix else source.rstrip("/").rsplit("/", 1)[-1]
    for obj, where in load_located_rows(source, split=split):
        yield qa_row(obj, where, name)


def synthetic_set(n: int, seed: int = 0, filler: int = 2000) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(passages, rows): `n` facts "The access code of vault K is NNNN." among filler, one question each."""
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


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qa", nargs="*", default=[], help="FlashRAG-style QA sources: JSONL/JSON/parquet files, "
                   "dataset directories or Hugging Face ids (agentgraphs.dataset_io.load_rows)")
    p.add_argument("--split", default="train", help="split of a dataset directory or Hub id")
    p.add_argument("--out", type=Path, help="slime rows (JSONL) from --qa")
    p.add_argument("--limit", type=int, default=None, help="at most this many rows")
    p.add_argument("--synthetic", type=int, default=0, help="N planted-fact questions + corpus into --out-dir")
    p.add_argument("--out-dir", type=Path, help="where --synthetic writes corpus.jsonl and questions.jsonl")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.synthetic:
        if args.out_dir is None:
            p.error("--synthetic needs --out-dir")
        passages, rows = synthetic_set(args.synthetic, args.seed)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        write_passages(passages, args.out_dir / "corpus.jsonl")  # type: ignore[arg-type]
        write_rows(rows, args.out_dir / "questions.jsonl")
        print(f"{len(passages)} passages -> {args.out_dir / 'corpus.jsonl'}; {len(rows)} questions -> "
              f"{args.out_dir / 'questions.jsonl'}")
    if args.qa:
        if args.out is None:
            p.error("--qa needs --out")
        rows = [row for source in args.qa for row in read_qa(source, args.split)][: args.limit]
        write_rows(rows, args.out)
        print(f"{len(rows)} rows -> {args.out}")
    if not args.synthetic and not args.qa:
        p.error("nothing to do: give --qa FILES --out OUT and/or --synthetic N --out-dir DIR")


if __name__ == "__main__":
    main()

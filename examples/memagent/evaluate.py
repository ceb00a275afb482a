"""Evaluate MemAgent on RULER-HQA by length: the seed README's table (sub_em, em, f1 in %) and two honest rows.

    # against a running SGLang server (the trained checkpoint), tokenizer from the HF directory
    python examples/memagent/evaluate.py data/memagent/ruler/ruler_hqa_*.jsonl \
        --engine sglang:http://127.0.0.1:30000 --tokenizer /root/MemAgent-7B --out out/ruler

    # in-process with transformers (small models, debugging)
    python examples/memagent/evaluate.py data/memagent/synthetic/*.jsonl --engine hf:/path/to/model

Each file is one length bucket (its name after the last "_" is the column: ruler_hqa_7K.jsonl -> 7K).
Every file runs through `agentgraphs.batch.run_file("memagent", ..., evaluation=True)`: nothing is
trainable and the chunk cap is off (MemAgent reads the whole document at evaluation). Per file,
OUT/<name>/ holds samples.jsonl, traces.jsonl and summary.json; OUT/ruler_table.md holds the table.
Sampling follows MemAgent's RULER script: temperature 0.7, top_p 0.95.

Scores follow the seed's eval_ruler_hqa.py exactly (`agentgraphs.memagent.reward.ruler_metrics`): the
answer is the last box in the last 300 characters of the lower-cased response, and an EMPTY answer (no box,
a truncated box) counts as a sub_em hit, as in the seed's published numbers; so sub_em compares with the
seed line by line. `sub_em_strict` (an empty answer never counts) and `answered` (the share of responses
with a non-empty answer) are printed beside it: sub_em = sub_em_strict + (100 - answered) whenever
the gold answer is not empty after normalisation.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

METRICS: tuple[str, ...] = ("sub_em", "em", "f1", "sub_em_strict", "answered")


def length_of(path: Path) -> str:
    """The column name of a file: the part of its stem after the last underscore.

    >>> length_of(Path("data/ruler_hqa_448K.jsonl")), length_of(Path("eval.jsonl"))
    ('448K', 'eval')
    """
    return path.stem.rsplit("_", 1)[-1]


def length_order(path: Path) -> tuple[float, str]:
    """Sort key: files by their length in tokens (7K before 14K), unparseable names last.

    >>> sorted(["r_14K.jsonl", "r_7K.jsonl", "r_1M.jsonl", "x.jsonl"], key=lambda p: length_order(Path(p)))
    ['r_7K.jsonl', 'r_14K.jsonl', 'r_1M.jsonl', 'x.jsonl']
    """
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", length_of(path))
    if not m:
        return (float("inf"), path.name)
    scale = {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()]
    return (float(m.group(1)) * scale, path.name)


def ruler_table(summaries: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]],
                *, model: str = "MemAgent", metrics: Sequence[str] = METRICS) -> str:
    """A Markdown table, one column per length, one row per metric, values in % with two decimals.

    `summaries` maps a length label to a `run_file` summary (its "metrics" hold the means over
    the file's rollouts, failed ones counting 0). A metric a summary lacks prints as "-".

    >>> m = {"sub_em": 0.78125, "em": 0.75, "f1": 0.8, "sub_em_strict": 0.75, "answered": 0.96875}
    >>> print(ruler_table({"7K": {"metrics": m, "results": 128, "by_status": {}}}))
    | MemAgent | 7K |
    |---|---|
    | sub_em | 78.12 |
    | em | 75.00 |
    | f1 | 80.00 |
    | sub_em_strict | 75.00 |
    | answered | 96.88 |
    | n | 128 |
    """
    items = list(summaries.items()) if isinstance(summaries, Mapping) else list(summaries)
    header = "| " + " | ".join([model, *(label for label, _ in items)]) + " |"
    lines = [header, "|" + "---|" * (len(items) + 1)]
    for metric in metrics:
        cells = []
        for _, summary in items:
            value = (summary.get("metrics") or {}).get(metric)
            cells.append("-" if value is None else f"{100.0 * float(value):.2f}")
        lines.append("| " + " | ".join([metric, *cells]) + " |")
    counts = [_count(summary) for _, summary in items]
    lines.append("| " + " | ".join(["n", *counts]) + " |")
    return "\n".join(lines)


def _count(summary: Mapping[str, Any]) -> str:
    n = summary.get("results", 0)
    failed = (summary.get("by_status") or {}).get("failed", 0)
    return f"{n} ({failed} failed)" if failed else str(n)


def evaluate(files: Sequence[Path], engine: str, out: Path, *, tokenizer: str | None = None,
             options: dict[str, Any] | None = None, concurrency: int = 64, temperature: float = 0.7,
             top_p: float = 0.95, limit: int | None = None) -> dict[str, dict[str, Any]]:
    """Run MemAgent in evaluation mode over each file; returns {length label: summary}."""
    from agentgraphs.batch import run_file

    summaries: dict[str, dict[str, Any]] = {}
    for path in files:
        label = length_of(path)
        if label in summaries:  # two files of one length (say ruler_hqa_7K and synthetic_7K)
            label = path.stem
        summaries[label] = run_file(
            "memagent", path, engine, out / path.stem, tokenizer=tokenizer, options=options,
            concurrency=concurrency, temperature=temperature, top_p=top_p, evaluation=True, limit=limit,
        )
        print(f"{path.name}: {json.dumps(summaries[label]['metrics'])}", file=sys.stderr)
    return summaries


def main(argv: Sequence[str] | None = None) -> int:
    from agentgraphs.cli import parse_options
    from agentgraphs.errors import AgentGraphsError

    p = argparse.ArgumentParser(description="MemAgent on RULER-HQA, one file per length")
    p.add_argument("files", type=Path, nargs="+", help="slime JSONL files from prepare_data.py (one per length)")
    p.add_argument("--engine", required=True, help="sglang:http://HOST:PORT or hf:MODEL_DIR")
    p.add_argument("--tokenizer", help="HF tokenizer dir (required with sglang:)")
    p.add_argument("--out", type=Path, default=Path("out/memagent_eval"))
    p.add_argument("--option", "-o", action="append", default=[], help="memagent option KEY=VALUE")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--limit", type=int, default=None, help="only the first N questions of each file")
    p.add_argument("--model-name", default="MemAgent", help="the table's first header cell")
    args = p.parse_args(argv)
    files = sorted(args.files, key=length_order)  # a shell glob sorts 112K before 7K
    try:
        summaries = evaluate(files, args.engine, args.out, tokenizer=args.tokenizer,
                             options=parse_options(args.option), concurrency=args.concurrency,
                             temperature=args.temperature, top_p=args.top_p, limit=args.limit)
    except AgentGraphsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = ruler_table(summaries, model=args.model_name)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ruler_table.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

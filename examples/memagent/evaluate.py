"""Evaluate MemAgent on RULER-HQA by length: the seed README's table (sub_em, em, f1 in %) and two honest rows.

    # against a running SGLang server (the trained checkpoint), tokenizer from the HF directory
    python examples/memagent/evaluate.py data/memagent/ruler/ruler_hqa_*.jsonl \
        --engine sglang:http://127.0.0.1:30000 --tokenizer /root/MemAgent-7B --out out/ruler

    # in-process with transformers (small models, debugging), one run per length
    python examples/memagent/evaluate.py data/memagent/synthetic/*.jsonl --engine hf:/path/to/model --runs 1

Each file is one length bucket (its name after the last "_" is the column: ruler_hqa_7K.jsonl -> 7K).
Every file runs through `agentgraphs.batch.run_file("memagent", ..., evaluation=True)`: nothing is
trainable and the chunk cap is off (MemAgent reads the whole document at evaluation).
Sampling follows MemAgent's RULER script and the seed's: temperature 0.7, top_p 0.95.

Runs: the seed's protocol (Takenzz/AgentFlow@4b5aa84, agentic/memagent/eval_all_checkpoints.sh) runs every
length RUNS=5 times (:27, the loop at :149; temperature and top-p at :34-35, :164-165), reads each run's final
sub_em (:126-128) and reports the max and the average over the runs (:180-185); its README's RULER-HQA row is
the max (iter_0000299 in its results/checkpoint_sweep/summary.tsv: 78.12 at 7K, whose average is 75.31).
So `--runs` defaults to 5 and each file runs that many times, each run with its own sampling seeds (unseeded,
as the seed's; with `--seed S`, run k of file F samples from derive_seed(S, F, k)). With more than one run the
table prints, for every metric, "best of N runs" (the max of the N run figures: the seed's aggregate, which
it takes of sub_em; each metric's max is taken on its own, so two rows' best may come from different runs)
beside "mean of N runs" (the honest figure; the mean of the unrounded run figures, where the seed averages
figures rounded to 2 decimals: they can differ by 0.01). A run whose figure is missing counts 0, as in the
seed (:171-174). `--runs 1` prints the one-run table (one row per metric).

Files: one run writes OUT/<name>/ (samples.jsonl, traces.jsonl, summary.json); N runs write
OUT/<name>/run1/ ... OUT/<name>/runN/ (the seed's <checkpoint>_run<k> files), so no run overwrites another.
OUT/ruler_table.md holds the table, OUT/ruler_summary.json every run's figures, the best and the mean.

Scores follow the seed's eval_ruler_hqa.py exactly (`agentgraphs.memagent.reward.ruler_metrics`): the
answer is the last box in the last 300 characters of the lower-cased response, and an EMPTY answer (no box,
a truncated box) counts as a sub_em hit, as in the seed's published numbers; so the sub_em best-of-5 row
compares with the seed's published row. `sub_em_strict` (an empty answer never counts) and `answered` (the
share of responses with a non-empty answer) are printed beside it: sub_em = sub_em_strict + (100 - answered)
whenever the gold answer is not empty after normalisation (run by run, not between best rows).
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
# runs per length: the seed's RUNS (Takenzz/AgentFlow@4b5aa84 agentic/memagent/eval_all_checkpoints.sh:27)
SEED_RUNS = 5


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


def _runs_of(value: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [value] if isinstance(value, Mapping) else list(value)


def run_figures(runs: Sequence[Mapping[str, Any]], metric: str) -> list[float] | None:
    """One figure per run (its mean over the file, a fraction): None when no run has the metric; a run
    without it (say, every rollout failed) counts 0, as the seed counts a run whose sub_em it cannot read."""
    values = [(summary.get("metrics") or {}).get(metric) for summary in runs]
    if all(v is None for v in values):
        return None
    return [0.0 if v is None else float(v) for v in values]


def aggregate(runs: Sequence[Mapping[str, Any]], metrics: Sequence[str] = METRICS) -> dict[str, dict[str, float]]:
    """The seed's aggregate of a length's runs (the best run: max) and the mean, per metric (fractions).

    >>> aggregate([{"metrics": {"sub_em": 0.75}}, {"metrics": {"sub_em": 0.5}}, {"metrics": {}}], ["sub_em", "em"])
    {'best': {'sub_em': 0.75}, 'mean': {'sub_em': 0.4166666666666667}}
    """
    best: dict[str, float] = {}
    avg: dict[str, float] = {}
    for metric in metrics:
        values = run_figures(runs, metric)
        if values is not None:
            best[metric], avg[metric] = max(values), sum(values) / len(values)
    return {"best": best, "mean": avg}


def ruler_table(summaries: Mapping[str, Any] | Iterable[tuple[str, Any]],
                *, model: str = "MemAgent", metrics: Sequence[str] = METRICS) -> str:
    """A Markdown table, one column per length, values in % with two decimals.

    `summaries` maps a length label to a `run_file` summary (its "metrics" hold the means over the file's
    rollouts, failed ones counting 0) or to the list of its runs' summaries. One run per length: one row per
    metric. N runs: two rows per metric, the best run (max over the N runs, the seed's aggregate) and the mean
    over the runs. A metric no run has prints as "-".

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
    >>> runs = [{"metrics": {"sub_em": v}, "results": 128, "by_status": {}} for v in (0.75, 0.78125)]
    >>> print(ruler_table({"7K": runs}, metrics=["sub_em"]))
    | MemAgent | 7K |
    |---|---|
    | sub_em (best of 2 runs) | 78.12 |
    | sub_em (mean of 2 runs) | 76.56 |
    | n | 128 x 2 runs |
    """
    items = [(label, _runs_of(value)) for label, value in
             (summaries.items() if isinstance(summaries, Mapping) else summaries)]
    header = "| " + " | ".join([model, *(label for label, _ in items)]) + " |"
    lines = [header, "|" + "---|" * (len(items) + 1)]
    counts = {len(runs) for _, runs in items}
    if counts <= {1}:
        rows = [(metric, metric, lambda v: v[0]) for metric in metrics]
    else:
        n = f"{counts.pop()} runs" if len(counts) == 1 else "runs"
        rows = [row for metric in metrics for row in (
            (f"{metric} (best of {n})", metric, max),
            (f"{metric} (mean of {n})", metric, lambda v: sum(v) / len(v)))]
    for name, metric, reduce in rows:
        cells = []
        for _, runs in items:
            values = run_figures(runs, metric)
            cells.append("-" if values is None else f"{100.0 * reduce(values):.2f}")
        lines.append("| " + " | ".join([name, *cells]) + " |")
    lines.append("| " + " | ".join(["n", *(_count(runs) for _, runs in items)]) + " |")
    return "\n".join(lines)


def _count(runs: Sequence[Mapping[str, Any]]) -> str:
    sizes = [str(summary.get("results", 0)) for summary in runs]
    failed = sum((summary.get("by_status") or {}).get("failed", 0) for summary in runs)
    n = sizes[0] if len(runs) == 1 else (
        f"{sizes[0]} x {len(runs)} runs" if len(set(sizes)) == 1 else f"{'/'.join(sizes)} in {len(runs)} runs")
    return f"{n} ({failed} failed)" if failed else n


def evaluate(files: Sequence[Path], engine: str, out: Path, *, runs: int = 1, seed: int | None = None,
             tokenizer: str | None = None, options: dict[str, Any] | None = None, concurrency: int = 64,
             temperature: float = 0.7, top_p: float = 0.95,
             limit: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run MemAgent in evaluation mode `runs` times over each file; returns {length label: [summary per run]}.

    One run writes OUT/<file stem>/, N runs OUT/<file stem>/run1/ ... runN/; each summary gets "out" (that
    folder) and "file". `seed`: None, every run unseeded (the engine draws; the seed's evaluation sends no
    seed); else run k of file F samples from `derive_seed(seed, F's stem, k)`.
    """
    from agentgraphs.batch import run_file
    from agentgraphs.context import derive_seed

    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    results: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        label = length_of(path)
        if label in results:  # two files of one length (say ruler_hqa_7K and synthetic_7K)
            label = path.stem
        results[label] = []
        for k in range(1, runs + 1):
            run_out = out / path.stem if runs == 1 else out / path.stem / f"run{k}"
            summary = run_file(
                "memagent", path, engine, run_out, tokenizer=tokenizer, options=options,
                concurrency=concurrency, temperature=temperature, top_p=top_p, evaluation=True, limit=limit,
                seed=None if seed is None else derive_seed(seed, path.stem, k),
            )
            summary = {**summary, "out": str(run_out), "file": str(path)}
            results[label].append(summary)
            name = path.name if runs == 1 else f"{path.name} run {k}/{runs}"
            print(f"{name}: {json.dumps(summary['metrics'])}", file=sys.stderr)
        if runs > 1:
            sub_em = run_figures(results[label], "sub_em") or []
            agg = aggregate(results[label], ["sub_em"])
            print(f"{path.name}: sub_em runs {[round(100 * v, 2) for v in sub_em]}, best "
                  f"{100 * agg['best'].get('sub_em', 0.0):.2f}, mean {100 * agg['mean'].get('sub_em', 0.0):.2f}",
                  file=sys.stderr)
    return results


def summary_record(results: Mapping[str, Sequence[Mapping[str, Any]]], *, runs: int, seed: int | None,
                   temperature: float, top_p: float) -> dict[str, Any]:
    """OUT/ruler_summary.json: every run's figures per length, their best (the seed's aggregate) and mean."""
    lengths = {}
    for label, summaries in results.items():
        lengths[label] = {
            "file": summaries[0].get("file") if summaries else None,
            "runs": [{key: summary.get(key) for key in ("out", "seed", "results", "by_status", "metrics")}
                     for summary in summaries],
            **aggregate(summaries),
        }
    return {"runs": runs, "aggregate": "best = max over the runs (the seed's), mean = mean over the runs",
            "seed": seed, "temperature": temperature, "top_p": top_p, "lengths": lengths}


def main(argv: Sequence[str] | None = None) -> int:
    from agentgraphs.cli import parse_options
    from agentgraphs.errors import AgentGraphsError

    p = argparse.ArgumentParser(description="MemAgent on RULER-HQA, one file per length")
    p.add_argument("files", type=Path, nargs="+", help="slime JSONL files from prepare_data.py (one per length)")
    p.add_argument("--engine", required=True, help="sglang:http://HOST:PORT or hf:MODEL_DIR")
    p.add_argument("--tokenizer", help="HF tokenizer dir (required with sglang:)")
    p.add_argument("--out", type=Path, default=Path("out/memagent_eval"))
    p.add_argument("--option", "-o", action="append", default=[], help="memagent option KEY=VALUE")
    p.add_argument("--runs", type=int, default=SEED_RUNS,
                   help=f"runs per length file (default {SEED_RUNS}, the seed's); the table shows the best and "
                        "the mean")
    p.add_argument("--seed", type=int, default=None,
                   help="base of every run's sampling seeds (default: unseeded runs, as the seed's)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--limit", type=int, default=None, help="only the first N questions of each file")
    p.add_argument("--model-name", default="MemAgent", help="the table's first header cell")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    files = sorted(args.files, key=length_order)  # a shell glob sorts 112K before 7K
    try:
        results = evaluate(files, args.engine, args.out, runs=args.runs, seed=args.seed, tokenizer=args.tokenizer,
                           options=parse_options(args.option), concurrency=args.concurrency,
                           temperature=args.temperature, top_p=args.top_p, limit=args.limit)
    except AgentGraphsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = ruler_table(results, model=args.model_name)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ruler_table.md").write_text(table + "\n", encoding="utf-8")
    record = summary_record(results, runs=args.runs, seed=args.seed, temperature=args.temperature,
                            top_p=args.top_p)
    (args.out / "ruler_summary.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

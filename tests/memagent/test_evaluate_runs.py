"""examples/memagent/evaluate.py follows the seed's RULER-HQA protocol: every length file runs several times.

The seed (Takenzz/AgentFlow@4b5aa84, agentic/memagent/eval_all_checkpoints.sh) runs eval_ruler_hqa.py RUNS=5
times per checkpoint and length (:27, loop :149) at temperature 0.7, top-p 0.95 (:34-35, passed :164-165),
takes each run's final `sub_em` (:126-128) and reports max and avg over the runs (:180-185); its README's
RULER-HQA row (78.12 76.56 ... 69.53) is iter_0000299's max row in results/checkpoint_sweep/summary.tsv (its
avg there: 75.31 73.75 ...). These tests run evaluate.py's main() from the outside and recompute every
figure from the per-sample metrics the runs wrote, never with evaluate.py's own helpers.
"""

from __future__ import annotations

import importlib
import itertools
import json
import sys
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the examples are imported from the repository root, as slime does
    sys.path.insert(0, str(ROOT))

evaluate = importlib.import_module("examples.memagent.evaluate")

METRICS = ("sub_em", "em", "f1", "sub_em_strict", "answered")
GOLD = "1234567"
# final answers handed out in turn (5 answers, 4 questions per run: no two runs get the same ones): right, wrong,
# no box (the seed's sub_em hit, not answered), a longer answer holding the gold (sub_em, part of f1)
FINALS = (f"\\boxed{{{GOLD}}}", "\\boxed{7654321}", "I cannot tell.", f"\\boxed{{{GOLD} or 7}}", "\\boxed{0}")


def _write_lengths(directory: Path, rows: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for label in ("7K", "14K"):
        path = directory / f"ruler_hqa_{label}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for i in range(rows):
                row = {"input": "What is the code?", "label": [GOLD],
                       "metadata": {"context": f"Document {i}: the code is {GOLD}.", "length": 7000, "id": i}}
                fh.write(json.dumps(row) + "\n")
        files.append(path)
    return files


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _run_means(samples: list[dict[str, Any]]) -> dict[str, float]:
    """One run's figure per metric: the mean over its samples, a sample without metrics (failed) counting 0."""
    return {m: sum(float((s["metadata"].get("metrics") or {}).get(m, 0.0)) for s in samples) / len(samples)
            for m in METRICS}


def _table_rows(table: str) -> dict[str, list[str]]:
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.fixture()
def scripted_server(tiny_engine: Any):
    """The SGLang-contract server on 127.0.0.1 over a scripted policy: memory updates copy the document, final
    answers come from FINALS in turn, so runs of one file answer differently."""
    from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
    from agentgraphs.testing.server import SGLangTestServer

    finals = itertools.cycle(FINALS)

    def script(call: ScriptCall) -> str:
        if "put the answer in \\boxed{}" in call.prompt_text:
            return next(finals)
        return f"The code is {GOLD}."

    with SGLangTestServer(ScriptedPolicy(tiny_engine, script)) as srv:
        yield srv


def test_runs_each_length_n_times_and_tables_the_best_and_the_mean(
        tmp_path: Path, tiny_model_dir: Path, scripted_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    files = _write_lengths(tmp_path / "data", rows=4)
    out = tmp_path / "out"
    argv = [*map(str, files), "--engine", f"sglang:{scripted_server.url}", "--tokenizer", str(tiny_model_dir),
            "--out", str(out), "--runs", "3", "--seed", "11", "--concurrency", "1"]
    assert evaluate.main(argv) == 0
    printed = capsys.readouterr().out

    per_run: dict[str, list[dict[str, float]]] = {}
    seeds = set()
    for path in files:
        label = path.stem.rsplit("_", 1)[-1]
        assert not (out / path.stem / "samples.jsonl").exists()  # nothing at the top to be overwritten
        per_run[label] = []
        for k in (1, 2, 3):
            run_dir = out / path.stem / f"run{k}"
            samples = _read_jsonl(run_dir / "samples.jsonl")
            assert len(samples) == 4 and (run_dir / "traces.jsonl").exists()
            per_run[label].append(_run_means(samples))
            seeds.add(json.loads((run_dir / "summary.json").read_text())["seed"])
    assert len(seeds) == 6  # every run of every file samples with its own seeds
    # the runs differ (else best and mean could not be told apart)
    assert all(len({r["sub_em"] for r in runs}) > 1 for runs in per_run.values()), per_run

    table = (out / "ruler_table.md").read_text(encoding="utf-8")
    assert table.strip() in printed
    assert table.splitlines()[0] == "| MemAgent | 7K | 14K |"
    rows = _table_rows(table)
    for metric in METRICS:
        best = [f"{100 * max(r[metric] for r in per_run[label]):.2f}" for label in ("7K", "14K")]
        avg = [f"{100 * mean(r[metric] for r in per_run[label]):.2f}" for label in ("7K", "14K")]
        assert rows[f"{metric} (best of 3 runs)"] == best, metric
        assert rows[f"{metric} (mean of 3 runs)"] == avg, metric
    assert rows["n"] == ["4 x 3 runs", "4 x 3 runs"]

    summary = json.loads((out / "ruler_summary.json").read_text(encoding="utf-8"))
    assert summary["runs"] == 3
    for label, runs in per_run.items():
        recorded = summary["lengths"][label]["runs"]
        assert [r["out"] for r in recorded] == [str(out / f"ruler_hqa_{label}" / f"run{k}") for k in (1, 2, 3)]
        for mine, theirs in zip(runs, recorded):
            assert mine == pytest.approx({m: theirs["metrics"][m] for m in METRICS})


def test_default_is_the_seeds_five_runs_and_one_run_prints_the_old_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The default is the seed's RUNS=5 (eval_all_checkpoints.sh:27) at temperature 0.7 / top-p 0.95 (:34-35);
    `--runs 1` writes OUT/<name>/ and prints the one-run table evaluate.py printed before."""
    calls: list[tuple[Path, dict[str, Any]]] = []
    values = iter([0.5, 0.75, 0.25, 1.0, 0.5] * 4)

    def fake_run_file(agent: str, data: Path, engine: str, out: Path, **kw: Any) -> dict[str, Any]:
        assert agent == "memagent" and kw["evaluation"] is True
        calls.append((out, kw))
        v = next(values)
        return {"results": 8, "by_status": {"completed": 8}, "metrics": {m: v for m in METRICS}}

    monkeypatch.setattr("agentgraphs.batch.run_file", fake_run_file)
    files = _write_lengths(tmp_path / "data", rows=1)
    out = tmp_path / "out"
    assert evaluate.main([*map(str, files), "--engine", "sglang:http://127.0.0.1:9", "--out", str(out)]) == 0
    assert len(calls) == 10  # 2 lengths x 5 runs
    assert {(kw["temperature"], kw["top_p"]) for _, kw in calls} == {(0.7, 0.95)}
    assert [o for o, _ in calls[:5]] == [out / "ruler_hqa_7K" / f"run{k}" for k in range(1, 6)]
    rows = _table_rows((out / "ruler_table.md").read_text())
    assert rows["sub_em (best of 5 runs)"][0] == "100.00" and rows["sub_em (mean of 5 runs)"][0] == "60.00"
    capsys.readouterr()

    calls.clear()
    values = iter([0.75, 0.25])
    one = tmp_path / "one"
    assert evaluate.main([*map(str, files), "--engine", "sglang:http://127.0.0.1:9", "--out", str(one),
                          "--runs", "1"]) == 0
    assert [o for o, _ in calls] == [one / "ruler_hqa_7K", one / "ruler_hqa_14K"]
    first, second = 100 * 0.75, 100 * 0.25
    expected = "\n".join([
        "| MemAgent | 7K | 14K |",
        "|---|---|---|",
        *(f"| {m} | {first:.2f} | {second:.2f} |" for m in METRICS),
        "| n | 8 | 8 |",
    ])
    assert capsys.readouterr().out == expected + "\n"
    assert (one / "ruler_table.md").read_text() == expected + "\n"

"""`agentgraphs run --seed N` and `agentgraphs demo --seed N` on the embedded engine are reproducible bit for
bit: samples.jsonl holds no wall-clock value, and every engine call samples with a seed derived from the run's
seed, the row and the call (not from the order concurrent calls happen to be answered in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentgraphs.batch import run_file
from agentgraphs.cli import app
from agentgraphs.dataset_io import write_jsonl
from agentgraphs.memagent.data import to_slime_row
from agentgraphs.memagent.synthetic import make_needle_example

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--max-new-tokens", "8", "-o", "chunk_tokens=300", "-o", "final_max_new_tokens=8",
         "-o", "memory_max_new_tokens=8", "--n-samples-per-prompt", "2"]


@pytest.fixture(scope="module")
def rows_file(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seed") / "rows.jsonl"
    write_jsonl([to_slime_row(make_needle_example(tiny_engine.tokenizer, 900, seed=i)) for i in range(2)], path)
    return path


def _cli_run(rows: Path, out: Path, cache: Path, *flags: str) -> None:
    env = {**os.environ, "AGENTGRAPHS_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "agentgraphs.cli", "run", "memagent", "--data", str(rows),
                           "--engine", "hf:tiny", "--out", str(out), *SMALL, *flags],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow  # two CLI processes, each loading torch and the tiny model
def test_run_seed_writes_byte_identical_samples(rows_file: Path, tmp_path: Path, agentgraphs_cache: Path,
                                                tiny_engine: Any) -> None:
    _cli_run(rows_file, tmp_path / "a", agentgraphs_cache, "--seed", "3", "--concurrency", "1")
    _cli_run(rows_file, tmp_path / "b", agentgraphs_cache, "--seed", "3", "--concurrency", "3")
    first = (tmp_path / "a" / "samples.jsonl").read_bytes()
    assert first == (tmp_path / "b" / "samples.jsonl").read_bytes()  # whatever the concurrency
    samples = [json.loads(line) for line in first.decode().splitlines()]
    assert len(samples) == 4 and all(s["status"] in ("completed", "truncated") for s in samples)
    assert "rollout_time_s" not in samples[0]["metadata"]  # no wall-clock value in a sample, by design
    # the two rollouts of one row (a GRPO group) are sampled differently; so is another seed
    assert samples[0]["tokens"] != samples[1]["tokens"] and samples[2]["tokens"] != samples[3]["tokens"]
    assert len({s["metadata"]["trajectory_id"] for s in samples}) == 4
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["seed"] == 3
    run_file("memagent", rows_file, tiny_engine, tmp_path / "c", seed=4, max_new_tokens=8, n_samples=2,
             options={"chunk_tokens": 300, "final_max_new_tokens": 8, "memory_max_new_tokens": 8})
    other = [json.loads(line) for line in (tmp_path / "c" / "samples.jsonl").read_text().splitlines()]
    assert [s["tokens"] for s in other] != [s["tokens"] for s in samples]


def test_seeded_runs_in_process_repeat(rows_file: Path, tmp_path: Path, tiny_engine: Any) -> None:
    options = {"chunk_tokens": 300, "final_max_new_tokens": 8, "memory_max_new_tokens": 8}
    for name, concurrency in (("x", 4), ("y", 1)):
        run_file("memagent", rows_file, tiny_engine, tmp_path / name, seed=11, max_new_tokens=8, n_samples=2,
                 options=options, concurrency=concurrency)
    assert (tmp_path / "x" / "samples.jsonl").read_bytes() == (tmp_path / "y" / "samples.jsonl").read_bytes()


def test_seed_flag_is_checked(rows_file: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", "hf:tiny",
                                 "--out", str(tmp_path / "o"), "--seed", "-1"])
    assert r.exit_code == 2 and "--seed" in r.output


@pytest.mark.slow  # the demo twice (8 MemAgent rollouts each)
def test_demo_is_reproducible_and_leads_with_the_strict_metric(tmp_path: Path) -> None:
    from agentgraphs.demo import run_demo

    r = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "a"), "--seed", "2"])
    assert r.exit_code == 0, r.output
    run_demo(tmp_path / "b", seed=2)
    assert (tmp_path / "a" / "samples.jsonl").read_bytes() == (tmp_path / "b" / "samples.jsonl").read_bytes()
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    # a random model: the seed's sub_em counts its empty answers as hits; the headline does not
    assert summary["headline"] == {"metric": "sub_em_strict", "mean": summary["metrics"]["sub_em_strict"]}
    assert list(summary["metrics"])[0] == "sub_em_strict" and summary["headline"]["mean"] == 0.0
    assert summary["metrics"]["answered"] == 0.0 and summary["metrics"]["sub_em"] == 1.0  # the "sub_em 1.0"
    assert "empty answer counts as a hit" in summary["metric_notes"]["sub_em"]
    said = " ".join(r.output.split())
    assert "sub_em_strict 0.000 (headline metric" in said and "sub_em 1.000: the seed's published figure" in said

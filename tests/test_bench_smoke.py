"""Every benchmark runs (`--quick`) and prints its result line. Figures are not checked here: machines
are noisy and the benchmarks' targets are for bench/README.md, not for the test suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
NAMES = ["overhead", "long_document", "checkpoints", "conversion", "retrieval", "chat_model", "sandbox", "agentflow",
         "viewer", "learning", "engine_batching", "scale"]


@pytest.mark.parametrize("name", NAMES)
def test_bench_runs_quick(name: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    # tiny_model_dir: the model is built once for the session; the subprocess finds it in the same cache
    out = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--quick", "--results-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=BENCH.parent,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"RESULT {name}: " in out.stdout, out.stdout[-3000:]
    assert (tmp_path / f"{name}.json").exists()


def test_engine_batching_profile_accounts_for_the_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    # --quick: 6 requests x 4 new tokens; a 1024-token prefill budget makes them join in several waves
    # (prompts of 535, 423, 304, 592, 451, 127 tokens), so rows merge into and drop out of a live batch
    out = subprocess.run(
        [sys.executable, str(BENCH / "engine_batching.py"), "--quick", "--profile", "torch", "--more", "8",
         "--max-prefill-tokens", "1024", "--results-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=180, cwd=BENCH.parent,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    profile = json.loads((tmp_path / "engine_batching.json").read_text())["latest"]["profile"]
    assert [run["requests"] for run in profile["runs"]] == [6, 8]
    for run in profile["runs"]:
        phases = run["phases"]
        assert list(phases) == ["admit", "merge", "sample", "bookkeeping", "drop", "decode", "rest"]
        assert all(p["s"] >= 0 for p in phases.values()), phases  # nested phases are not counted twice
        assert sum(p["s"] for p in phases.values()) == pytest.approx(run["wall_s"], abs=1e-3)
        assert sum(p["share"] for p in phases.values()) == pytest.approx(1.0, abs=1e-3)
        assert phases["sample"]["s"] > 0 and phases["decode"]["s"] > 0 and phases["admit"]["s"] > 0
        # every request samples its 4 tokens once each, is fed back all but its last, and leaves once
        assert run["sampled_rows"] == run["requests"] * 4
        assert run["decode_rows"] == run["requests"] * 3
        assert run["dropped_rows"] == run["requests"]
        assert run["steps"] >= 4 and run["decode_forwards"] >= 3
        assert run["drops"] >= 2 and run["merges"] >= 1 and run["joins"] > run["merges"]
        assert f"profile, {run['requests']} requests: wall" in out.stdout
    assert profile["torch"]["requests"] == "8" and "aten::" in profile["torch"]["by_self_cpu_time"]
    assert "torch.profiler, 8 requests, top 15 ops by self cpu time" in out.stdout

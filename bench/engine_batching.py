"""Batched vs one-at-a-time HFEngine: tokens/s for the same concurrent requests, measured in the same run.

One freshly initialised Qwen2 (real Qwen2.5 vocabulary) is shared by two HFEngines: `batching=False`
(each request's step runs alone behind the engine lock) and `batching=True` (continuous batching:
`agentgraphs.engines.batching`). Both serve the same N concurrent requests (`asyncio.gather`): prompts of
mixed lengths (a MemAgent-like 100..600 tokens), M new tokens each (ignore_eos, so both do the same work),
temperature 1.0. tokens/s = generated tokens / wall time (prefill included). The batched run also reports
its mean rows per decode forward, larger concurrencies, and the exactness of what it recorded: every
token's log-prob against a teacher-forced re-score of the request's own output.

    python bench/engine_batching.py --quick                     # CPU, seconds
    python bench/engine_batching.py --device cuda --hidden-size 512 --layers 8 --requests 32 --new-tokens 32 \\
        --more 128,256

`--profile` adds, after each batched run (the main one and every `--more` concurrency), one more run of the
same requests whose driver steps are timed phase by phase (`PhaseClock`: the batcher's methods are wrapped for
that run only; the library is untouched): admit (queue + prefill forward), merge (joining rows' caches
concatenated onto the batch), sample (`sample_rows`), bookkeeping (the rest of a step: per-row appends, finish
checks, settles), drop (cache surgery when rows leave), decode (the decode forward) and rest (outside the
steps: driver loop, event loop, thread start), each as seconds, ms per step and share of that run's wall
time, with the counts of steps, decode forwards, drops and merges. On CUDA every phase is bracketed by
`torch.cuda.synchronize()` so its GPU work lands in it; that perturbs the totals (no CPU/GPU overlap), so the
profiled run's tokens/s is reported apart and the main figures come from the unprofiled runs.
`--profile torch` also prints torch.profiler's top-15 ops of one more (unsynchronised) run at the largest
concurrency: by self CPU time and, on CUDA, by self device time.

    python bench/engine_batching.py --quick --profile --max-prefill-tokens 1024   # CPU; joins in waves

`--sampler multinomial,inverse_cdf` measures both of HFEngine's samplers (how a sampled token is drawn from
its request's seeded generator: `agentgraphs.engines.sampling`) in the same run, one after the other on the
same model and requests (each with its own pair of engines); the first sampler gives the main figures, every
sampler's figures (and `--profile` phases) are reported under `samplers`.

Target: on CUDA the batched engine serves >= 5x the tokens/s of the one-at-a-time engine at the bench's
concurrency (on CPU, reported; >= 1x).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common  # noqa: E402


def requests(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    # ids from the ordinary-word range of the vocabulary, each prompt opening like a chat turn
    return [[151644, 872, 198] + [rng.randrange(1000, 30000) for _ in range(rng.randrange(100, 600))]
            for _ in range(n)]


async def serve(engine: Any, prompts: list[list[int]], new_tokens: int, seed: int) -> tuple[float, list[Any]]:
    from agentgraphs.engines import SamplingParams

    started = time.perf_counter()
    outs = await asyncio.gather(*(engine.generate(p, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True,
                                                                    temperature=1.0, sampling_seed=seed + i))
                                  for i, p in enumerate(prompts)))
    if engine.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - started, outs


# the phases of the batched engine's run that --profile reports, in the order of a step
PHASES = ("admit", "merge", "sample", "bookkeeping", "drop", "decode", "rest")


class PhaseClock:
    """Wall time per phase of a DecodeBatcher's steps over one run (see the module docstring).

    Installed as a context manager: the batcher's `_step`, `_admit`, `_merge`, `_drop`, `_decode` and the
    `sample_rows` the batching module calls are wrapped for the duration (nothing changes when it is not
    installed). Inclusive times are measured; nested phases are subtracted (`_merge` runs inside `_admit`,
    everything inside `_step`), so each phase is exclusive and, with `rest` (the run's wall time outside
    `_step`), the phases sum to the run's wall time. `sync` runs before and after each phase (CUDA:
    `torch.cuda.synchronize`, so that a phase's GPU work is counted in it).
    """

    WRAPPED = ("_step", "_admit", "_merge", "_drop", "_decode")

    def __init__(self, batcher: Any, sync: Any) -> None:
        self.batcher = batcher
        self.sync = sync
        self.inclusive = {name: 0.0 for name in ("step", "admit", "merge", "sample", "drop", "decode")}
        self.counts = {"steps": 0, "decode_forwards": 0, "decode_rows": 0, "sampled_rows": 0, "drops": 0,
                       "dropped_rows": 0, "joins": 0, "merges": 0}
        self._sample_rows: Any = None

    def _timed(self, name: str, fn: Any, count: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            count(*args)
            self.sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.inclusive[name] += time.perf_counter() - start

        return timed

    def _count(self, key: str, amount: int = 1) -> None:
        self.counts[key] += amount

    def _counted_drop(self, rows: list[int]) -> None:
        if rows:  # every step first drops its cancelled rows, usually none
            self._count("drops")
            self._count("dropped_rows", len(rows))

    def _counted_decode(self, tokens: Any) -> None:
        self._count("decode_forwards")
        self._count("decode_rows", len(tokens))

    def _counted_merge(self, *_: Any) -> None:
        self._count("joins")  # rows joining; a merge when the batch already has rows (else an assignment)
        if self.batcher._rows:
            self._count("merges")

    def __enter__(self) -> PhaseClock:
        from agentgraphs.engines import batching

        b = self.batcher
        b._step = self._timed("step", b._step, lambda: self._count("steps"))
        b._admit = self._timed("admit", b._admit, lambda: None)
        b._merge = self._timed("merge", b._merge, self._counted_merge)
        b._drop = self._timed("drop", b._drop, self._counted_drop)
        b._decode = self._timed("decode", b._decode, self._counted_decode)
        self._sample_rows = batching.sample_rows
        batching.sample_rows = self._timed("sample", batching.sample_rows,
                                           lambda logits, params, generators: self._count("sampled_rows", len(params)))
        return self

    def __exit__(self, *exc: object) -> None:
        from agentgraphs.engines import batching

        for name in self.WRAPPED:
            delattr(self.batcher, name)  # the class's method shows through again
        batching.sample_rows = self._sample_rows

    def report(self, wall_s: float) -> dict[str, Any]:
        """Exclusive seconds, ms per step and share of `wall_s` for each of PHASES, and the counts."""
        t = self.inclusive
        seconds = {"admit": t["admit"] - t["merge"], "merge": t["merge"], "sample": t["sample"],
                   "bookkeeping": t["step"] - t["admit"] - t["sample"] - t["drop"] - t["decode"],
                   "drop": t["drop"], "decode": t["decode"], "rest": wall_s - t["step"]}
        steps = max(self.counts["steps"], 1)
        return {**self.counts,
                "phases": {name: {"s": round(seconds[name], 6), "ms_per_step": round(1000 * seconds[name] / steps, 4),
                                  "share": round(seconds[name] / wall_s, 4)} for name in PHASES}}


def idle(batcher: Any) -> None:
    """Wait for the batcher's driver thread to end: its last step finishes after the last result is delivered."""
    driver = batcher._thread
    if driver is not None:
        driver.join()


def served_until_idle(engine: Any, prompts: list[list[int]], new_tokens: int, seed: int) -> tuple[float, list[Any]]:
    """`serve` from an idle driver until the driver is idle again: the wall time covers every step of the run."""
    idle(engine.batcher)
    started = time.perf_counter()
    _, outs = asyncio.run(serve(engine, prompts, new_tokens, seed))
    idle(engine.batcher)
    return time.perf_counter() - started, outs


def profiled(engine: Any, prompts: list[list[int]], new_tokens: int, seed: int) -> dict[str, Any]:
    """One more batched run of `prompts` under a PhaseClock: its wall time, tokens/s and phases."""
    import torch

    cuda = engine.device.type == "cuda"
    idle(engine.batcher)  # no step of an earlier run may run into the clock's wrappers
    with PhaseClock(engine.batcher, torch.cuda.synchronize if cuda else (lambda: None)) as clock:
        wall, outs = served_until_idle(engine, prompts, new_tokens, seed)
    tokens = sum(len(o.token_ids) for o in outs)
    return {"requests": len(prompts), "synchronised": cuda, "wall_s": round(wall, 4),
            "tokens_per_s": round(tokens / wall, 1), **clock.report(wall)}


def phase_table(profile: dict[str, Any]) -> str:
    """The human-readable form of one `profiled` result."""
    synced = " (synchronised around every phase)" if profile["synchronised"] else ""
    head = (f"profile, {profile['requests']} requests{synced}: "
            f"wall {profile['wall_s']:.3f} s ({profile['tokens_per_s']:.0f} tok/s, not the bench's figure), "
            f"{profile['steps']} steps, {profile['decode_forwards']} decode forwards, "
            f"{profile['sampled_rows'] / max(profile['steps'], 1):.1f} rows sampled per step, "
            f"{profile['merges']} merges ({profile['joins']} joins), "
            f"{profile['drops']} drops ({profile['dropped_rows']} rows)")
    lines = [head, f"  {'phase':<12}{'s':>10}{'ms/step':>10}{'share':>8}"]
    for name, p in profile["phases"].items():
        lines.append(f"  {name:<12}{p['s']:>10.4f}{p['ms_per_step']:>10.3f}{100 * p['share']:>7.1f}%")
    return "\n".join(lines)


def torch_tables(engine: Any, prompts: list[list[int]], new_tokens: int, seed: int) -> dict[str, str]:
    """torch.profiler's top-15 ops of one more batched run: by self CPU time and (CUDA) by self device time.

    The ops run on the batcher's driver thread, which the profiler records only when told to profile all
    threads (torch >= 2.7)."""
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile

    cuda = engine.device.type == "cuda"
    try:
        every_thread = _ExperimentalConfig(profile_all_threads=True)
    except TypeError as exc:
        raise SystemExit(f"--profile torch needs torch >= 2.7 (profile_all_threads); use --profile: {exc}") from exc
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, experimental_config=every_thread) as prof:
        served_until_idle(engine, prompts, new_tokens, seed)
    events = prof.key_averages()
    tables = {"by_self_cpu_time": events.table(sort_by="self_cpu_time_total", row_limit=15)}
    if cuda:
        tables["by_self_device_time"] = events.table(sort_by="self_device_time_total", row_limit=15)
    return tables


def measure(serial: Any, batched: Any, args: Any) -> dict[str, Any]:
    """One sampler's figures: both engines on the same requests, exactness, `--more`, `--profile`."""
    prompts = requests(args.requests, args.seed)
    # warm-up (kernels, allocator): the one-at-a-time engine on two requests (it runs one at a time anyway),
    # the batched one on all of them, so that its first full-size batch (prefill and decode shapes) is not timed
    asyncio.run(serve(serial, prompts[:2], 4, 0))
    asyncio.run(serve(batched, prompts, 4, 0))
    serial_s, serial_outs = asyncio.run(serve(serial, prompts, args.new_tokens, 1))
    before = (batched.batcher.stats.steps, batched.batcher.stats.decode_rows)
    batched_s, batched_outs = asyncio.run(serve(batched, prompts, args.new_tokens, 1))
    steps = batched.batcher.stats.steps - before[0]
    rows = batched.batcher.stats.decode_rows - before[1]
    tokens = sum(len(o.token_ids) for o in batched_outs)
    assert tokens == sum(len(o.token_ids) for o in serial_outs) == args.requests * args.new_tokens
    worst = 0.0
    for prompt, out in zip(prompts, batched_outs):
        forced = batched.score(prompt, out.token_ids, 1.0)
        worst = max(worst, max(abs(a - b) for a, b in zip(forced, out.logprobs)))
    profiles = [profiled(batched, prompts, args.new_tokens, 1)] if args.profile else []
    more = []
    for n in args.more:
        ps = requests(n, args.seed + n)
        wall, outs = asyncio.run(serve(batched, ps, args.new_tokens, 2))
        more.append({"requests": n, "tokens_per_s": round(n * args.new_tokens / wall, 1), "wall_s": round(wall, 3)})
        if args.profile:
            profiles.append(profiled(batched, ps, args.new_tokens, 2))
    tables = {}
    if args.profile == "torch":  # at the largest concurrency: where the batch saturates
        n = max([args.requests, *args.more])
        ps, seed = (prompts, 1) if n == args.requests else (requests(n, args.seed + n), 2)
        tables = {"requests": str(n), **torch_tables(batched, ps, args.new_tokens, seed)}
    serial_tps, batched_tps = tokens / serial_s, tokens / batched_s
    return {"generated_tokens": tokens, "rows_per_forward": rows / max(steps, 1), "worst": worst,
            "serial": {"wall_s": round(serial_s, 3), "tokens_per_s": round(serial_tps, 1)},
            "batched": {"wall_s": round(batched_s, 3), "tokens_per_s": round(batched_tps, 1), "decode_forwards": steps,
                        "mean_rows_per_forward": round(rows / max(steps, 1), 1)},
            "speedup": round(batched_tps / serial_tps, 2), "more": more, "profiles": profiles, "tables": tables}


def run(args: Any) -> dict[str, Any]:
    import torch

    from agentgraphs.context import shared_tokenizer
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.testing.tiny_model import ensure_tiny_model, new_model

    model = new_model(hidden_size=args.hidden_size, num_layers=args.layers, num_heads=args.heads,
                      intermediate_size=args.intermediate_size, seed=args.seed)
    tokenizer = shared_tokenizer(str(ensure_tiny_model()))
    model = model.to(dtype=getattr(torch, args.dtype))
    figures: dict[str, dict[str, Any]] = {}
    for sampler in args.sampler:  # one model, a pair of engines per sampler, measured one after the other
        serial = HFEngine(model, tokenizer, device=args.device, batching=False, sampler=sampler)
        batched = HFEngine(serial.model, tokenizer, device=args.device, batching=True, max_batch=args.max_batch,
                           max_prefill_tokens=args.max_prefill_tokens, sampler=sampler)
        figures[sampler] = measure(serial, batched, args)
    first = figures[args.sampler[0]]
    ratio = first["speedup"]
    target = 5.0 if batched.device.type == "cuda" else 1.0
    result = {
        "device": str(batched.device),
        "gpu": torch.cuda.get_device_name(0) if batched.device.type == "cuda" else None,
        "model": {"hidden_size": args.hidden_size, "layers": args.layers, "heads": args.heads,
                  "intermediate_size": args.intermediate_size, "dtype": args.dtype},
        "sampler": args.sampler[0],
        "requests": args.requests, "new_tokens": args.new_tokens, "generated_tokens": first["generated_tokens"],
        "serial": first["serial"], "batched": first["batched"],
        "speedup": ratio, "target_speedup": target,
        "batched_max_abs_logprob_vs_teacher_forcing": first["worst"],
        "more": first["more"],
    }
    if args.profile:
        result["profile"] = {
            "note": ("one extra batched run per concurrency, its driver's phases timed" +
                     (" with torch.cuda.synchronize() around each phase: that perturbs the totals, so its tokens/s "
                      "is not the bench's figure" if batched.device.type == "cuda" else "")),
            "runs": first["profiles"], **({"torch": first["tables"]} if first["tables"] else {})}
    if len(args.sampler) > 1:  # every sampler's figures, from the same run
        result["samplers"] = {
            name: {"serial": f["serial"], "batched": f["batched"], "speedup": f["speedup"], "more": f["more"],
                   "batched_max_abs_logprob_vs_teacher_forcing": f["worst"],
                   **({"profile": {"runs": f["profiles"], **({"torch": f["tables"]} if f["tables"] else {})}}
                      if args.profile else {})}
            for name, f in figures.items()}
    result["summary"] = (f"{args.requests} requests x {args.new_tokens} tokens on {result['device']}"
                         + (f" ({args.sampler[0]})" if len(args.sampler) > 1 else "") + ": one at a time "
                         f"{first['serial']['tokens_per_s']:.0f} tok/s, batched {first['batched']['tokens_per_s']:.0f} "
                         f"tok/s = {ratio:.1f}x (target >= {target:g}x); "
                         f"{first['rows_per_forward']:.1f} rows per decode forward; max |logprob - teacher forcing| "
                         f"{first['worst']:.1e}" + "".join(f"; {m['requests']} requests {m['tokens_per_s']:.0f} tok/s"
                                                          for m in first["more"]))
    for name in args.sampler[1:]:
        f = figures[name]
        result["summary"] += (f"; {name}: one at a time {f['serial']['tokens_per_s']:.0f} tok/s, batched "
                              f"{f['batched']['tokens_per_s']:.0f} tok/s = {f['speedup']:.1f}x, max |logprob - teacher "
                              f"forcing| {f['worst']:.1e}" +
                              "".join(f", {m['requests']} requests {m['tokens_per_s']:.0f} tok/s" for m in f["more"]))
    result["passed"] = ratio >= target
    return result


def samplers(text: str) -> list[str]:
    """`--sampler`'s comma-separated names, each one HFEngine accepts."""
    import argparse

    from agentgraphs.engines.sampling import SAMPLERS

    names = [name for name in text.split(",") if name]
    if not names or any(name not in SAMPLERS for name in names):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated names out of {', '.join(SAMPLERS)}")
    return names


def main() -> None:
    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate-size", type=int, default=128)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--max-prefill-tokens", type=int, default=16384,
                   help="padded prompt tokens per prefill forward: fewer make requests join in more waves")
    p.add_argument("--more", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                   help="also run the batched engine at these concurrencies (comma-separated)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sampler", type=samplers, default=["multinomial"],
                   help="HFEngine's sampler(s), comma-separated (multinomial, inverse_cdf): each measured in turn in "
                        "the same run on the same model; the first gives the main figures")
    p.add_argument("--profile", nargs="?", const="phases", choices=["phases", "torch"], default=None,
                   help="also time the batched driver's phases in an extra run per concurrency (synchronised on "
                        "CUDA, so its tok/s is reported apart); 'torch' adds torch.profiler's top-15 ops")
    args = p.parse_args()
    if args.quick:
        args.hidden_size, args.layers, args.requests, args.new_tokens = 32, 1, 6, 4
    result = run(args)
    if "profile" in result:
        print(result["profile"]["note"])
        for sampler, profile in result.get("samplers", {args.sampler[0]: result}).items():
            if len(args.sampler) > 1:
                print(f"sampler {sampler}:")
            for run_ in profile["profile"]["runs"]:
                print(phase_table(run_))
            tables = dict(profile["profile"].get("torch", {}))
            n = tables.pop("requests", None)
            for name, table in tables.items():
                print(f"torch.profiler, {n} requests, top 15 ops {name.replace('_', ' ')}:\n{table}")
    print(result["summary"])
    _common.finish(args.results_dir, "engine_batching", result, result["passed"], result["summary"])


if __name__ == "__main__":
    main()

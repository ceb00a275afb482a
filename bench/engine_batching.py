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


def run(args: Any) -> dict[str, Any]:
    import torch

    from agentgraphs.context import shared_tokenizer
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.testing.tiny_model import ensure_tiny_model, new_model

    model = new_model(hidden_size=args.hidden_size, num_layers=args.layers, num_heads=args.heads,
                      intermediate_size=args.intermediate_size, seed=args.seed)
    tokenizer = shared_tokenizer(str(ensure_tiny_model()))
    dtype = getattr(torch, args.dtype)
    serial = HFEngine(model, tokenizer, device=args.device, dtype=dtype, batching=False)
    batched = HFEngine(serial.model, tokenizer, device=args.device, batching=True, max_batch=args.max_batch)
    prompts = requests(args.requests, args.seed)
    for engine in (serial, batched):  # warm-up: kernels, allocator
        asyncio.run(serve(engine, prompts[:2], 4, 0))
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
    more = []
    for n in args.more:
        ps = requests(n, args.seed + n)
        wall, outs = asyncio.run(serve(batched, ps, args.new_tokens, 2))
        more.append({"requests": n, "tokens_per_s": round(n * args.new_tokens / wall, 1), "wall_s": round(wall, 3)})
    serial_tps, batched_tps = tokens / serial_s, tokens / batched_s
    ratio = batched_tps / serial_tps
    target = 5.0 if batched.device.type == "cuda" else 1.0
    result = {
        "device": str(batched.device),
        "gpu": torch.cuda.get_device_name(0) if batched.device.type == "cuda" else None,
        "model": {"hidden_size": args.hidden_size, "layers": args.layers, "heads": args.heads,
                  "intermediate_size": args.intermediate_size, "dtype": args.dtype},
        "requests": args.requests, "new_tokens": args.new_tokens, "generated_tokens": tokens,
        "serial": {"wall_s": round(serial_s, 3), "tokens_per_s": round(serial_tps, 1)},
        "batched": {"wall_s": round(batched_s, 3), "tokens_per_s": round(batched_tps, 1), "decode_forwards": steps,
                    "mean_rows_per_forward": round(rows / max(steps, 1), 1)},
        "speedup": round(ratio, 2), "target_speedup": target,
        "batched_max_abs_logprob_vs_teacher_forcing": worst,
        "more": more,
    }
    result["summary"] = (f"{args.requests} requests x {args.new_tokens} tokens on {result['device']}: one at a time "
                         f"{serial_tps:.0f} tok/s, batched {batched_tps:.0f} tok/s = {ratio:.1f}x (target >= {target:g}x); "
                         f"{rows / max(steps, 1):.1f} rows per decode forward; max |logprob - teacher forcing| "
                         f"{worst:.1e}" + "".join(f"; {m['requests']} requests {m['tokens_per_s']:.0f} tok/s" for m in more))
    result["passed"] = ratio >= target
    return result


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
    p.add_argument("--more", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                   help="also run the batched engine at these concurrencies (comma-separated)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.quick:
        args.hidden_size, args.layers, args.requests, args.new_tokens = 32, 1, 6, 4
    result = run(args)
    print(result["summary"])
    _common.finish(args.results_dir, "engine_batching", result, result["passed"], result["summary"])


if __name__ == "__main__":
    main()

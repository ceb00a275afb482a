"""Learning check benchmark: does a GRPO trainer given our samples learn what the reward asks?

One run = a freshly initialised Qwen2 (real Qwen2.5 vocabulary) served by an HFEngine, trained by
`agentgraphs.testing.grpo.GRPOTrainer` on a check task of `agentgraphs.testing.learning`. It prints the
reward per step, the training-inference log-prob mismatch at step 0 (max and mean |rollout log-prob -
trainer log-prob| over trained tokens, and the importance ratio's range and spread), a verdict, and
writes the run to `--json` (or appends it to bench/results/learning.json).

    python bench/learning.py --quick                                   # CPU, seconds
    python bench/learning.py --device cuda --dtype bfloat16 --hidden-size 256 --layers 4 \\
        --prompts 8 --samples 8 --max-new-tokens 16 --steps 40 --json out/bf16.json
    python bench/learning.py --plot bench/results/learning_gpu.png out/fp32.json out/bf16.json
    python bench/learning.py --task memagent --chunks 2 --chunk-tokens 64 --memory-tokens 16 --final-tokens 8

`--task memagent` trains MemAgent's own graph (per_turn: one training sequence per memory update and one for
the answer) on the share reward over all its turns, broadcast to every sequence (`memagent_learning_spec`).

Target: the mean reward over the last 3 steps beats the first 3 by >= 0.1 (the verdict line); with a
`--fault`, the same run must NOT learn (a negative control).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common  # noqa: E402


def run(args: Any) -> dict[str, Any]:
    import torch

    from agentgraphs.testing.grpo import FAULTS, GRPOConfig, GRPOTrainer, verdict
    from agentgraphs.testing.learning import (
        build_check_engine, learning_rows, learning_spec, memagent_learning_spec, memagent_rows, target_ids,
    )

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    engine = build_check_engine(hidden_size=args.hidden_size, num_layers=args.layers, init_scale=args.init_scale,
                                seed=args.seed, device=args.device, dtype=dtype)
    targets = target_ids(engine.model, seed=args.seed)
    if args.task == "memagent":
        spec = memagent_learning_spec(targets)
        rows = memagent_rows(args.prompts, engine.tokenizer, chunks=args.chunks, chunk_tokens=args.chunk_tokens)
        options = {"variant": "original", "chunk_tokens": args.chunk_tokens,  # broadcast, as --task memagent
                   "memory_max_new_tokens": args.memory_tokens, "final_max_new_tokens": args.final_tokens}
    else:
        spec, rows = learning_spec(targets, args.task), learning_rows(args.prompts)
        options = {"max_new_tokens": args.max_new_tokens}
    config = GRPOConfig(steps=args.steps, n_samples_per_prompt=args.samples, lr=args.lr,
                        temperature=args.temperature, micro_batch_size=args.micro_batch_size)
    trainer = GRPOTrainer(spec, engine, rows, config, options=options,
                          corrupt=FAULTS[args.fault] if args.fault else None)
    started = time.perf_counter()

    def show(s: dict[str, Any]) -> None:
        print(f"step {s['step']:3d}  reward {s['reward_mean']:.3f} (sd {s['reward_std']:.3f})  "
              f"entropy {s['entropy']:.2f}  |dlogp| max {s['logp_diff_max']:.2e} mean {s['logp_diff_mean']:.2e}  "
              f"ratio [{s['ratio_min']:.4f}, {s['ratio_max']:.4f}]  clip {s['clipfrac']:.3f}  "
              f"seqs {s['sequences']}  rollout {s['rollout_s']:.1f}s train {s['train_s']:.1f}s", flush=True)
        if args.json:  # a run cut short by a time limit still leaves its curve so far
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"name": args.name, "partial": True, "history": trainer.history}) + "\n")

    history = trainer.train(on_step=show)
    window = min(3, len(history) // 2)
    v = verdict(history, window=window, min_gain=args.min_gain)
    step0 = history[0]
    result = {
        "name": args.name or f"{args.task}-{args.dtype}-h{args.hidden_size}l{args.layers}" + (f"-{args.fault}" if args.fault else ""),
        "config": {k: (str(v_) if isinstance(v_, Path) else v_) for k, v_ in vars(args).items() if k not in ("plot", "json", "inputs")},
        "device": str(engine.device), "gpu": torch.cuda.get_device_name(0) if engine.device.type == "cuda" else None,
        "rewards": [round(h["reward_mean"], 4) for h in history],
        "entropy": [round(h["entropy"], 4) for h in history],
        "step0_mismatch": {k: step0[k] for k in ("logp_diff_max", "logp_diff_mean", "ratio_min", "ratio_max",
                                                  "ratio_std", "trained_tokens")},
        "mismatch_max_over_steps": max(h["logp_diff_max"] for h in history),
        "verdict": dict(v),
        "history": history,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    expect = "not learn" if args.fault else "learn"
    ok = (not v["passed"]) if args.fault else v["passed"]
    result["passed"] = ok
    result["summary"] = (f"{result['name']}: reward {v['first']:.3f} -> {v['last']:.3f} (gain {v['gain']:+.3f}, "
                         f"need {'<' if args.fault else '>='} {v['min_gain']}, expected to {expect}); step-0 |dlogp| "
                         f"max {step0['logp_diff_max']:.2e} mean {step0['logp_diff_mean']:.2e}")
    return result


def plot(out: Path, inputs: list[Path]) -> None:
    """A small PNG of the reward curves in `inputs` (JSON files written by --json). Needs matplotlib."""
    try:
        import matplotlib
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'agentgraphs[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for path in inputs:
        data = json.loads(path.read_text())
        for r in data.get("runs", [data]):
            rewards = r.get("rewards") or [h["reward_mean"] for h in r.get("history", [])]
            ax.plot(range(len(rewards)), rewards, label=r["name"], linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    print(f"plot written to {out}")


def main() -> None:
    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--init-scale", type=float, default=0.02)
    p.add_argument("--task", default="share", choices=["share", "first_token", "memagent"])
    p.add_argument("--fault", default="", help="a negative control: one of agentgraphs.testing.grpo.FAULTS")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--chunks", type=int, default=2, help="memagent: chunks per document")
    p.add_argument("--chunk-tokens", type=int, default=64, help="memagent: document tokens per chunk")
    p.add_argument("--memory-tokens", type=int, default=16, help="memagent: cap of each memory update")
    p.add_argument("--final-tokens", type=int, default=8, help="memagent: cap of the final answer")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--temperature", type=float, default=0.9)
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--min-gain", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="")
    p.add_argument("--json", type=Path, default=None, help="write this run here instead of bench/results")
    p.add_argument("--plot", type=Path, default=None, help="plot the runs in the given JSON files to this PNG")
    p.add_argument("inputs", nargs="*", type=Path)
    args = p.parse_args()
    if args.plot:
        plot(args.plot, args.inputs)
        return
    if args.quick:
        args.hidden_size, args.layers, args.prompts, args.samples, args.max_new_tokens, args.steps = 32, 1, 2, 2, 2, 2
    result = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        _common.result_line("learning", result["passed"], result["summary"])
    else:
        _common.finish(args.results_dir, "learning", result, result["passed"], result["summary"])


if __name__ == "__main__":
    main()

"""The testing kit's commands: `tiny-model`, `test-server` and `learn-check` (does GRPO on our samples learn?)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import AgentGraphsError
from .common import console, fail, parse_options

app = typer.Typer()


@app.command("tiny-model")
def tiny_model(
    out_dir: Path = typer.Argument(..., help="directory to write the HF model into"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
    template: str = typer.Option("qwen2.5", help="chat template: qwen2.5 or qwen3"),
    hidden_size: int = typer.Option(64, help="model width (a multiple of --heads, with an even head size)"),
    layers: int = typer.Option(2, help="number of transformer layers"),
    heads: int = typer.Option(4, help="attention heads"),
    kv_heads: Optional[int] = typer.Option(None, help="key/value heads (default: half of --heads if even)"),
    intermediate_size: int = typer.Option(128, help="MLP width"),
    init_scale: float = typer.Option(0.02, help="std of the normal weight init (larger: sharper outputs)"),
) -> None:
    """Write a tiny randomly initialised Qwen2 model with the real Qwen2.5 vocabulary (offline).

    The size options make a model big enough for a learning check, e.g. --hidden-size 256 --layers 4.
    """
    from ..testing.tiny_model import build_tiny_model

    try:
        path = build_tiny_model(out_dir, seed=seed, template=template,  # type: ignore[arg-type]
                                hidden_size=hidden_size, num_layers=layers, num_heads=heads,
                                num_kv_heads=kv_heads, intermediate_size=intermediate_size, init_std=init_scale)
    except (ValueError, OSError) as exc:  # a bad size, a file or another model at OUT_DIR, no permission
        raise fail(exc) from None
    console.print(f"tiny model written to {path}")


@app.command("learn-check")
def learn_check(
    agent: Optional[str] = typer.Argument(None, help="agent to train (package.module:attr); default: the "
                                          "built-in draft/revise check task on a fresh tiny model"),
    steps: int = typer.Option(12, "--steps", min=2, help="GRPO steps"),
    engine: Optional[str] = typer.Option(None, "--engine", help="hf:MODEL_DIR to train (your agent); default: "
                                         "a freshly initialised tiny Qwen2"),
    data: Optional[Path] = typer.Option(None, "--data", help="JSONL rows {input, label, metadata} (your agent)"),
    task: str = typer.Option("share", help="built-in task: share (any position), first_token, or memagent (MemAgent's graph, share reward over all its turns)"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    prompts: int = typer.Option(4, min=1, help="rows per step (built-in task; else the first N of --data)"),
    n_samples: int = typer.Option(4, "--n-samples-per-prompt", min=2, help="rollouts per row (a GRPO group)"),
    lr: float = typer.Option(2e-2, help="AdamW learning rate"),
    temperature: float = typer.Option(0.9, min=0.01),
    max_new_tokens: int = typer.Option(4, min=1, help="tokens per LLM call (your agent: a ceiling)"),
    hidden_size: int = typer.Option(64, help="built-in model: hidden size"),
    layers: int = typer.Option(2, help="built-in model: layers"),
    init_scale: float = typer.Option(0.2, help="built-in model: weight init std (0.2 makes the reward learnable fast)"),
    fault: Optional[str] = typer.Option(None, help="inject a fault (a negative control that must NOT learn): "
                                        "negate_advantages, permute_within_groups, wrong_rollout, shift_mask"),
    min_gain: float = typer.Option(0.1, help="PASS when the last steps' mean reward beats the first by this"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when available)"),
    seed: int = typer.Option(0),
) -> None:
    """Train a model with GRPO on our samples for a few steps and say whether the reward rises."""
    from ..testing.learning_check import LearnCheckSettings, learn_check_run

    try:
        settings = LearnCheckSettings.from_flags(
            agent=agent, engine=engine, data=str(data) if data else None, task=task, options=parse_options(option),
            steps=steps, prompts=prompts, n_samples=n_samples, lr=lr, temperature=temperature,
            max_new_tokens=max_new_tokens,
            hidden_size=hidden_size, layers=layers, init_scale=init_scale, fault=fault, min_gain=min_gain,
            device=device, seed=seed)
        result = learn_check_run(settings, on_step=lambda s: print(
            f"step {s['step']:3d}  reward {s['reward_mean']:.3f}  entropy {s['entropy']:.2f}  "
            f"|dlogp| max {s['logp_diff_max']:.1e}  clipfrac {s['clipfrac']:.3f}", flush=True))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise fail(exc) from None
    print(result["line"])
    if not result["ok"]:
        raise typer.Exit(1)


@app.command("test-server")
def test_server(
    model: Path = typer.Option(..., help="HF model dir served by HFEngine"),
    port: int = typer.Option(30000),
    latency_ms: float = typer.Option(0.0, help="fixed extra latency per call"),
) -> None:
    """Serve a model on 127.0.0.1 behind SGLang's /generate contract (for local debugging)."""
    import time

    from ..engines.hf import HFEngine
    from ..testing.server import SGLangTestServer

    server = SGLangTestServer(HFEngine.from_dir(model), port=port)
    if latency_ms:
        server.faults.latency_s = latency_ms / 1000.0
    with server as srv:
        console.print(f"SGLang-contract server at {srv.url} (Ctrl-C to stop)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass

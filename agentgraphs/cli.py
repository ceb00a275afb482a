"""`agentgraphs` command line: a thin face over library functions (tests call those directly)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .engines import Engine, SamplingParams
from .errors import AgentGraphsError, ConfigError
from .retrieval.cli import app as retrieval_app

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Agentic-RL graphs with token-exact traces (LangGraph + SGLang + slime).")
console = Console(stderr=True)
app.add_typer(retrieval_app, name="retrieval")


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values parsed as JSON when they parse (numbers, true/false, null), else strings.

    >>> parse_options(["max_chunks=4", "train_final_answer=false", "name=x"])
    {'max_chunks': 4, 'train_final_answer': False, 'name': 'x'}
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {pair!r}: expected KEY=VALUE, e.g. --option max_chunks=8")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console)


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
    from .testing.tiny_model import build_tiny_model

    try:
        path = build_tiny_model(out_dir, seed=seed, template=template,  # type: ignore[arg-type]
                                hidden_size=hidden_size, num_layers=layers, num_heads=heads,
                                num_kv_heads=kv_heads, intermediate_size=intermediate_size, init_std=init_scale)
    except ValueError as exc:
        console.print(f"error: {escape(str(exc))}")
        raise typer.Exit(2) from None
    console.print(f"tiny model written to {path}")


@app.command()
def run(
    agent: str = typer.Argument(..., help="registered agent (memagent) or package.module:attr"),
    data: Path = typer.Option(..., "--data", help="JSONL with slime-style rows (input, label, metadata)"),
    engine: str = typer.Option(..., "--engine", help="hf:MODEL_DIR or sglang:http://HOST:PORT"),
    out: Path = typer.Option(..., "--out", help="output dir: samples.jsonl, traces.jsonl, summary.json"),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer dir (required for sglang:)"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    concurrency: int = typer.Option(8, min=1, help="rollouts in flight"),
    n_samples: int = typer.Option(1, "--n-samples-per-prompt", min=1, help="rollouts per row (a GRPO group)"),
    temperature: float = typer.Option(1.0, min=0.0),
    top_p: float = typer.Option(1.0),
    max_new_tokens: int = typer.Option(1024, min=1),
    evaluation: bool = typer.Option(False, "--eval", help="evaluation mode: nothing trainable, no chunk caps"),
    limit: Optional[int] = typer.Option(None, help="only the first N rows"),
    input_key: str = typer.Option("input"),
    label_key: str = typer.Option("label"),
    metadata_key: str = typer.Option("metadata"),
    helper: list[str] = typer.Option([], "--helper", help="helper engine NAME=SPEC, e.g. "
                                     "helper=sglang:http://127.0.0.1:30001 or judge=openai:URL#MODEL (repeatable)"),
    checkpoints: Optional[Path] = typer.Option(
        None, "--checkpoints", help="keep checkpoints in this compact SQLite file: one thread per sample, named "
        "in samples.jsonl (metadata.checkpoint_thread); replay one with `agentgraphs replay`"),
    seed: Optional[int] = typer.Option(
        None, "--seed", min=0, help="sample reproducibly: every engine call gets a seed derived from this one, the "
        "row and the call (hf: engines give byte-identical samples.jsonl run after run, at any concurrency)"),
) -> None:
    """Run an agent over a dataset and write slime samples and traces."""
    try:
        summary = run_command(agent, data, engine, out, tokenizer=tokenizer, options=parse_options(option),
                              engines=parse_helpers(helper),
                              concurrency=concurrency, n_samples=n_samples, temperature=temperature,
                              top_p=top_p, max_new_tokens=max_new_tokens, evaluation=evaluation, limit=limit,
                              keys=(input_key, label_key, metadata_key), progress=True,
                              checkpoints=checkpoints, seed=seed)
    except (AgentGraphsError, ValueError, OSError) as exc:  # a bad flag, file or directory: no traceback
        console.print("[red]error:[/red]", escape(str(exc)))
        raise typer.Exit(2) from None
    console.print_json(json.dumps(summary))
    print_headline(summary)
    if summary["results"] and _usable_results(summary) == 0:
        # outputs are written (the reasons are in them), but a run that produced nothing usable fails
        n = summary["results"]
        console.print("[red]error:[/red]", escape(f"every row failed ({n} of {n}); first reason: {_first_reason(out)}"))
        raise typer.Exit(1)


def print_headline(summary: dict[str, Any]) -> None:
    """The headline metric last, where a reader looks, with the notes of the metrics beside it."""
    head = summary.get("headline")
    if not head:
        return
    console.print(f"[bold]{escape(head['metric'])} {head['mean']:.3f}[/bold] (headline metric, mean over "
                  f"{summary['results']} results)")
    for name, note in (summary.get("metric_notes") or {}).items():
        if name != head["metric"]:
            console.print(f"  {escape(name)} {summary['metrics'][name]:.3f}: {escape(note)}")


def parse_helpers(pairs: list[str]) -> dict[str, str]:
    """`--helper NAME=SPEC` flags as {name: engine spec}.

    >>> parse_helpers(["helper=sglang:http://127.0.0.1:30001"])
    {'helper': 'sglang:http://127.0.0.1:30001'}
    """
    helpers: dict[str, str] = {}
    for pair in pairs:
        name, sep, spec = pair.partition("=")
        if not sep or not name.strip() or not spec.strip() or name.strip() == "policy":
            raise ConfigError(f"--helper {pair!r}: expected NAME=SPEC with a name other than 'policy', e.g. "
                              "helper=sglang:http://127.0.0.1:30001")
        helpers[name.strip()] = spec.strip()
    return helpers


def _usable_results(summary: dict[str, Any]) -> int:
    by_status = summary["by_status"]
    return int(by_status.get("completed", 0)) + int(by_status.get("truncated", 0))


def _first_reason(out: Path) -> str:
    try:
        with open(out / "samples.jsonl", encoding="utf-8") as fh:
            reason = str(json.loads(fh.readline())["metadata"]["status_reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"see {out / 'samples.jsonl'}"
    return reason if len(reason) <= 300 else reason[:300] + "..."


def run_command(agent: str, data: Path, engine: "str | Engine", out: Path, *, tokenizer: str | None = None,
                options: dict[str, Any] | None = None, concurrency: int = 8, n_samples: int = 1,
                temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 1024,
                evaluation: bool = False, limit: int | None = None,
                keys: tuple[str, str, str] = ("input", "label", "metadata"), progress: bool = False,
                engines: dict[str, "str | Engine"] | None = None, checkpoints: Path | None = None,
                seed: int | None = None) -> dict[str, Any]:
    """What `agentgraphs run` does; returns the summary (also OUT/summary.json).

    `engine` is an engine string (`hf:DIR`, `sglang:URL`) or an Engine object to reuse across calls;
    `engines` are helper engines by name (AgentContext.engines: a judge, AgentFlow's "helper"...).
    `checkpoints`: a compact SQLite file keeping every rollout's checkpoints (see agentgraphs.checkpoints.replay).
    `seed`: reproducible sampling (`agentgraphs.batch.run_rows`); samples.jsonl holds no wall-clock value,
    so a seeded run on an in-process engine writes it byte for byte the same (timings are in traces.jsonl
    and summary.json; with `checkpoints`, samples name their checkpoint thread, new per run).
    """
    from .batch import JsonlWriter, RowKeys, lead_with_headline, read_rollout_inputs, run_rows
    from .engines import make_engine
    from .node import AgentContext
    from .spec import load_spec

    spec = load_spec(agent)
    opts = spec.resolve_options(options)
    if not data.is_file():
        raise ConfigError(f"--data {data}: no such file")
    sampling = _sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    if isinstance(engine, str):
        try:
            eng = make_engine(engine)
        except (ValueError, OSError) as exc:  # ConfigError is a ValueError; transformers raises OSError
            raise ConfigError(f"--engine: {exc}") from exc
    else:
        eng = engine
    tok = _tokenizer(eng, tokenizer)
    helpers: dict[str, Any] = {}
    for name, helper in (engines or {}).items():
        try:
            helpers[name] = make_engine(helper) if isinstance(helper, str) else helper
        except (ValueError, OSError) as exc:
            raise ConfigError(f"--helper {name}={helper}: {exc}") from exc
    row_keys = RowKeys(*keys)
    with open(data, "rb") as fh:
        total = sum(1 for line in fh if line.strip())
    total = min(total, limit) if limit is not None else total

    def make_context() -> AgentContext:
        return AgentContext(policy=eng, tokenizer=tok, sampling=sampling, evaluation=evaluation, engines=dict(helpers))

    with JsonlWriter(out) as writer, _maybe_progress(progress) as bar:
        task = bar.add_task(spec.name, total=total * n_samples, status="") if bar else None

        def sink(sample: dict[str, Any], trace: dict[str, Any]) -> None:
            writer(sample, trace)
            if bar is not None and task is not None:
                bar.update(task, advance=1, status=sample["status"])

        rows = read_rollout_inputs(data, row_keys, n_samples=n_samples, limit=limit)

        async def go() -> Any:
            if checkpoints is None:
                return await run_rows(spec, rows, make_context, options=opts, concurrency=concurrency,
                                      on_result=sink, seed=seed)
            from .checkpoints.replay import RunCheckpoints, new_thread_id, open_checkpoints

            async with open_checkpoints(checkpoints) as saver:
                store = RunCheckpoints(saver, agent, sampling, engine, run_id=new_thread_id(spec.name),
                                       engines=dict(engines or {}), evaluation=evaluation)
                return await run_rows(spec, rows, make_context, options=opts, concurrency=concurrency,
                                      on_result=sink, checkpoints=store, seed=seed)

        summary = asyncio.run(go())
    result = {"agent": spec.name, "engine": eng.name, **({"seed": seed} if seed is not None else {}),
              "options": opts.model_dump(), **lead_with_headline(spec, summary.as_dict())}
    if checkpoints is not None:
        result["checkpoints"] = str(checkpoints)
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


class _NoProgress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _maybe_progress(enabled: bool) -> Any:
    return _progress() if enabled else _NoProgress()


def _sampling(**flags: Any) -> SamplingParams:
    """SamplingParams from the flags; a bad value is reported under its flag's name."""
    for name, value in flags.items():
        try:
            SamplingParams(**{name: value})
        except ValueError as exc:
            raise ConfigError(f"--{name.replace('_', '-')} {value}: {exc}") from None
    return SamplingParams(**flags)


def _tokenizer(engine: Any, path: str | None) -> Any:
    if path:
        from .context import shared_tokenizer

        try:
            return shared_tokenizer(path)
        except ConfigError as exc:  # already says what is wrong with the path and what to do
            raise ConfigError(f"--tokenizer: {exc}") from exc
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--tokenizer {path}: cannot load a tokenizer from it: {exc}") from exc
    tok = getattr(engine, "tokenizer", None)
    if tok is None:
        raise ConfigError("an sglang: engine needs --tokenizer DIR (the model's HF directory)")
    return tok


@app.command()
def demo(
    out: Path = typer.Option(Path("out/demo"), "--out", help="output directory"),
    seed: int = typer.Option(0, min=0, help="data and sampling seed: the same seed writes the same samples.jsonl"),
) -> None:
    """The main job on the embedded default: MemAgent on the tiny model, no server needed."""
    from .demo import run_demo

    with _progress() as bar:
        task = bar.add_task("memagent demo", total=8, status="")
        summary = run_demo(out, seed=seed,
                           on_result=lambda s, t: bar.update(task, advance=1, status=s["status"]))
    console.print_json(json.dumps(summary))
    print_headline(summary)
    console.print(f"samples: {out / 'samples.jsonl'}  traces: {out / 'traces.jsonl'}")


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
    from .testing.learning_check import LearnCheckSettings, learn_check_run

    try:
        settings = LearnCheckSettings(
            agent=agent, engine=engine, data=str(data) if data else None, task=task, options=parse_options(option),
            steps=steps, prompts=prompts, n_samples=n_samples, lr=lr, temperature=temperature,
            max_new_tokens=max_new_tokens,
            hidden_size=hidden_size, layers=layers, init_scale=init_scale, fault=fault, min_gain=min_gain,
            device=device, seed=seed)
        result = learn_check_run(settings, on_step=lambda s: print(
            f"step {s['step']:3d}  reward {s['reward_mean']:.3f}  entropy {s['entropy']:.2f}  "
            f"|dlogp| max {s['logp_diff_max']:.1e}  clipfrac {s['clipfrac']:.3f}", flush=True))
    except (AgentGraphsError, ValueError, OSError) as exc:
        console.print("[red]error:[/red]", escape(str(exc)))
        raise typer.Exit(2) from None
    print(result["line"])
    if not result["ok"]:
        raise typer.Exit(1)


def _fail(exc: BaseException) -> typer.Exit:
    console.print("[red]error:[/red]", escape(str(exc)))
    return typer.Exit(2)


@app.command("test-server")
def test_server(
    model: Path = typer.Option(..., help="HF model dir served by HFEngine"),
    port: int = typer.Option(30000),
    latency_ms: float = typer.Option(0.0, help="fixed extra latency per call"),
) -> None:
    """Serve a model on 127.0.0.1 behind SGLang's /generate contract (for local debugging)."""
    import time

    from .engines.hf import HFEngine
    from .testing.server import SGLangTestServer

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


from . import cli_debug  # noqa: E402,F401  (registers view, check, draw, debug, replay, fork, history)


def main() -> None:
    from .testing.tiny_model import register_tiny_alias

    register_tiny_alias()  # `hf:tiny` in every --engine flag, as in contexts and Studio
    app()


if __name__ == "__main__":
    # `python -m agentgraphs.cli` runs this file as __main__; the commands of cli_debug are registered on the
    # app of the module `agentgraphs.cli`, so run that one
    from agentgraphs.cli import main as _main

    _main()

"""The debugging commands of the `agentgraphs` CLI: view, check, draw, debug, replay, fork, history.

A thin face over `agentgraphs.viewer`, `agentgraphs.draw`, `agentgraphs.checkpoints.debugger` and `agentgraphs.checkpoints.replay`,
registered on the one Typer app of `agentgraphs.cli` (which imports this module).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .cli import _fail, _sampling, _tokenizer, app, console, parse_helpers, parse_options
from .errors import AgentGraphsError, ConfigError


@app.command()
def draw(
    agent: str = typer.Argument(..., help="registered agent (memagent) or package.module:attr"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="FILE.mmd, .dot, .svg or .png (svg/png: Graphviz "
                                       "`dot`, offline); default: Mermaid on stdout"),
) -> None:
    """Draw an agent's graph: Mermaid text, or SVG/PNG rendered offline with Graphviz."""
    from .draw import draw as draw_graph

    try:
        data = draw_graph(agent, out, options=parse_options(option))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise _fail(exc) from None
    if out is None:
        typer.echo(data, nl=False)
    else:
        console.print(f"graph written to {out}")


@app.command()
def debug(
    agent: str = typer.Argument(..., help="registered agent (memagent) or package.module:attr"),
    input_: Optional[str] = typer.Option(None, "--input", help="the row: JSON ({\"input\": ..., \"label\": ...}"
                                         ", or a bare prompt string) or a .json / .jsonl file (see --line)"),
    line: int = typer.Option(1, min=1, help="which row of a .jsonl --input"),
    engine: Optional[str] = typer.Option(None, "--engine", help="hf:MODEL_DIR, hf:tiny or sglang:URL (default: "
                                         "the thread's own engine when resuming)"),
    db: Path = typer.Option(Path("debug.sqlite"), "--db", help="checkpoints database (compact SQLite)"),
    thread: Optional[str] = typer.Option(None, "--thread", help="resume this thread of --db (or name a new one)"),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer dir (required for sglang:)"),
    helper: list[str] = typer.Option([], "--helper", help="helper engine NAME=SPEC (repeatable; resume: the "
                                     "stored ones)"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="default 1.0 (resume: the thread's)"),
    max_new_tokens: Optional[int] = typer.Option(None, min=1, help="default 1024 (resume: the thread's)"),
    input_key: str = typer.Option("input"),
    label_key: str = typer.Option("label"),
    metadata_key: str = typer.Option("metadata"),
) -> None:
    """Step through a run node by node: see each update and each Turn's tokens, edit, fork, resume."""
    from .checkpoints.debugger import DebugSession
    from .checkpoints.tui import repl

    out = Console(highlight=False)
    try:
        row = _debug_row(input_, line, (input_key, label_key, metadata_key)) if input_ is not None else None
        sampling = None
        if temperature is not None or max_new_tokens is not None or row is not None:
            sampling = _sampling(temperature=1.0 if temperature is None else temperature,
                                 max_new_tokens=1024 if max_new_tokens is None else max_new_tokens)

        async def session() -> None:
            async with DebugSession.open(agent, db, thread_id=thread, row=row, engine=_engine_arg(engine),
                                         options=parse_options(option) or None, sampling=sampling,
                                         tokenizer=_tokenizer_arg(tokenizer),
                                         engines=parse_helpers(helper) or None) as s:
                await repl(s, out)

        asyncio.run(session())
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise _fail(exc) from None


def _debug_row(value: str, line: int, keys: tuple[str, str, str]) -> Any:
    """--input: a file (.json: one row; .jsonl: row `line`) or inline JSON; a bare string is the prompt."""
    from .batch import RowKeys, parse_row
    from .rollout import rollout_input

    path = Path(value)
    if len(value) < 4096 and path.is_file():
        lines = [raw for raw in path.read_bytes().splitlines() if raw.strip()]
        if path.suffix == ".jsonl":
            if line > len(lines):
                raise ConfigError(f"--line {line}: {path} has {len(lines)} rows")
            raw = lines[line - 1]
        else:
            raw = path.read_bytes()
    else:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value  # plain text: the prompt
        if not isinstance(parsed, dict):
            return rollout_input(parsed, None, {}, 0)
        raw = json.dumps(parsed).encode("utf-8")
    row = parse_row(raw, line, RowKeys(*keys))  # the rules of `run`'s rows, the same messages
    if row.inp is None:
        raise ConfigError(f"--input: {row.error}")
    return {**row.inp, "index": 0}


def _checkpoint_arg(value: Optional[str]) -> "str | int | None":
    """--checkpoint: an index into `history` (negative from the end) or a checkpoint id."""
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def _write_replay(result: Any, out: Optional[Path]) -> dict[str, Any]:
    """Print (and with --out write as a run directory) the rollout of a replay or fork."""
    from .batch import JsonlWriter
    from .records import sample_fields, trace_record

    rollout = result.rollout
    summary = {"thread": result.thread_id, "from_checkpoint": result.from_checkpoint,
               "forked_checkpoint": result.forked_checkpoint, "head_checkpoint": result.head_checkpoint,
               "status": rollout.status, "reason": rollout.reason, "reward": rollout.reward,
               "answer": rollout.answer, "turns": len(rollout.turns), "sequences": len(rollout.sequences)}
    if out is not None:
        spec = result.spec
        sample = {**sample_fields(rollout, spec)}
        sample["metadata"] = {**sample["metadata"], "checkpoint_thread": result.thread_id,
                              "replayed_from": result.from_checkpoint}
        trace = {**trace_record(rollout, None), "checkpoint_thread": result.thread_id}
        with JsonlWriter(out) as writer:
            writer(sample, trace)
        summary["out"] = str(out)
    return summary


@app.command("replay")
def replay_cmd(
    db: Path = typer.Argument(..., help="checkpoints database (run --checkpoints / debug --db)"),
    thread: str = typer.Argument(..., help="thread id (samples.jsonl: metadata.checkpoint_thread)"),
    checkpoint: Optional[str] = typer.Option(None, help="index from `history` (negative: from the end) or id; "
                                             "default: the latest"),
    engine: Optional[str] = typer.Option(None, help="engine to continue with (default: the one stored)"),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer dir (required for sglang:)"),
    helper: list[str] = typer.Option([], "--helper", help="helper engine NAME=SPEC (default: the stored ones)"),
    agent: Optional[str] = typer.Option(None, help="agent (default: the one stored with the thread)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write samples.jsonl / traces.jsonl of the new branch"),
) -> None:
    """Re-run a stored thread from one of its checkpoints (a new branch of the same thread)."""
    from .checkpoints.replay import replay

    try:
        result = replay(db, thread, _checkpoint_arg(checkpoint), agent=agent, engine=_engine_arg(engine),
                        tokenizer=_tokenizer_arg(tokenizer), engines=parse_helpers(helper) or None)
        console.print_json(json.dumps(_write_replay(result, out)))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise _fail(exc) from None


@app.command("fork")
def fork_cmd(
    db: Path = typer.Argument(..., help="checkpoints database (run --checkpoints / debug --db)"),
    thread: str = typer.Argument(..., help="thread id (samples.jsonl: metadata.checkpoint_thread)"),
    checkpoint: str = typer.Option(..., help="index from `history` (negative: from the end) or id"),
    set_: list[str] = typer.Option([], "--set", help="state KEY=JSON_VALUE to change (repeatable)"),
    as_node: Optional[str] = typer.Option(None, help="the node the edit counts as (decides what runs next)"),
    engine: Optional[str] = typer.Option(None, help="engine to continue with (default: the one stored)"),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer dir (required for sglang:)"),
    helper: list[str] = typer.Option([], "--helper", help="helper engine NAME=SPEC (default: the stored ones)"),
    agent: Optional[str] = typer.Option(None, help="agent (default: the one stored with the thread)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write samples.jsonl / traces.jsonl of the new branch"),
) -> None:
    """Edit the state at a checkpoint and run the new branch to its end."""
    from .checkpoints.replay import fork

    try:
        if not set_:
            raise ConfigError("--set KEY=VALUE: give at least one state key to change (else use `replay`)")
        result = fork(db, thread, _checkpoint_arg(checkpoint), parse_options(set_), as_node=as_node, agent=agent,
                      engine=_engine_arg(engine), tokenizer=_tokenizer_arg(tokenizer),
                      engines=parse_helpers(helper) or None)
        console.print_json(json.dumps(_write_replay(result, out)))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise _fail(exc) from None


@app.command("history")
def history_cmd(
    db: Path = typer.Argument(..., help="checkpoints database (run --checkpoints / debug --db)"),
    thread: Optional[str] = typer.Option(None, help="list this thread's checkpoints (default: list threads)"),
    agent: Optional[str] = typer.Option(None, help="agent (default: the one stored with the thread)"),
) -> None:
    """List the threads of a checkpoints database, or one thread's checkpoints."""
    from rich.table import Table

    from .checkpoints.replay import history, threads

    out = Console()
    try:
        if thread is None:
            table = Table("thread", "agent", "checkpoints")
            for info in threads(db):
                table.add_row(info["thread_id"], info["agent"] or "?", str(info["checkpoints"]))
        else:
            from .checkpoints.tui import history_table

            table = history_table(history(db, thread, agent=agent))
        out.print(table)
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise _fail(exc) from None


def _engine_arg(engine: Optional[str]) -> Any:
    """--engine as an Engine, or None for the thread's stored engine."""
    if engine is None:
        return None
    from .engines import make_engine

    try:
        return make_engine(engine)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"--engine: {exc}") from exc


def _tokenizer_arg(path: Optional[str]) -> Any:
    return _tokenizer(None, path) if path else None


@app.command()
def view(
    run_dir: Path = typer.Argument(..., help="a run directory written by `agentgraphs run` or `demo`"),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)"),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "--model", help="tokenizer dir (default: the hf: engine in summary.json)"),
) -> None:
    """Write a self-contained HTML report of a run: rollouts, graph paths, every token and its role in training."""
    from .viewer import write_report

    try:
        path = write_report(run_dir, out, tokenizer=tokenizer)
    except (AgentGraphsError, OSError) as exc:
        console.print("[red]error:[/red]", escape(str(exc)))
        raise typer.Exit(2) from None
    console.print(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB); open it in any browser, offline")


@app.command()
def check(
    run_dir: Path = typer.Argument(..., help="a run directory written by `agentgraphs run` or `demo`"),
    model: str = typer.Option(..., "--model", help="HF model directory (or hf:DIR / hf:ALIAS) to re-score with"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    threshold: float = typer.Option(1e-3, help="|delta log-prob| above which a re-scored trained token fails"),
    dtype: str = typer.Option("float32", help="model dtype: float32, bfloat16 or float16"),
    allow_drift: bool = typer.Option(False, "--allow-drift", help="report tokens over the threshold without "
                                     "failing (exit 1 then only on an invariant breach)"),
    as_json: bool = typer.Option(False, "--json", help="print the full report as JSON"),
) -> None:
    """The exactness audit: check every invariant and re-score every trained token; exit 1 on a breach or on
    any trained token over the threshold (unless --allow-drift), 2 on bad arguments or an empty run."""
    from .engines.factory import resolve_model_dir
    from .viewer import check_run
    from .viewer.check import report_json

    try:
        model_dir = resolve_model_dir(model[3:]) if model.startswith("hf:") else model
        report = check_run(run_dir, model_dir, device=device, threshold=threshold, dtype=dtype,
                           allow_drift=allow_drift)
    except (AgentGraphsError, OSError) as exc:
        # one line, never wrapped: scripts grep it and a wrapped path reads as two
        console.print("[red]error:[/red]", escape(" ".join(str(exc).split())), soft_wrap=True)
        raise typer.Exit(2) from None
    typer.echo(report_json(report) if as_json else report.to_text())
    if not report.ok:
        raise typer.Exit(1)

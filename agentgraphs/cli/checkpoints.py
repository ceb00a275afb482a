"""`agentgraphs debug`, `history`, `replay` and `fork`: a thin face over `agentgraphs.checkpoints`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from ..errors import AgentGraphsError, ConfigError
from .common import console, engine_arg, fail, parse_helpers, parse_options, tokenizer_arg

app = typer.Typer()

# what `replay` and `fork` share: which thread, and what continues it
DbArg = Annotated[Path, typer.Argument(help="checkpoints database (run --checkpoints / debug --db)")]
ThreadArg = Annotated[str, typer.Argument(help="thread id (samples.jsonl: metadata.checkpoint_thread)")]
EngineOpt = Annotated[Optional[str], typer.Option(help="engine to continue with (default: the one stored)")]
TokenizerOpt = Annotated[Optional[str], typer.Option(help="tokenizer dir (required for sglang:)")]
HelperOpt = Annotated[list[str], typer.Option("--helper", help="helper engine NAME=SPEC (default: the stored ones)")]
AgentOpt = Annotated[Optional[str], typer.Option(help="agent (default: the one stored with the thread)")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", help="write samples.jsonl / traces.jsonl of the new branch "
                                                "(a new directory, or one without an earlier run's files: see "
                                                "--overwrite)")]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="--out holds an earlier run: remove its samples.jsonl, "
                                            "traces.jsonl, summary.json and report.html before the branch is written")]


@app.command()
def debug(
    agent: str = typer.Argument(..., help="registered agent (memagent) or package.module:attr"),
    input_: Optional[str] = typer.Option(None, "--input", help="the row: JSON ({\"input\": ..., \"label\": ...}"
                                         ", or a bare prompt string) or a .json / .jsonl file (see --line)"),
    line: Optional[int] = typer.Option(None, min=1, help="which row of a .jsonl --input (default 1); only with "
                                       "a .jsonl file"),
    engine: Optional[str] = typer.Option(None, "--engine", help="hf:MODEL_DIR, hf:tiny or sglang:URL (default: "
                                         "the thread's own engine when resuming)"),
    db: Path = typer.Option(Path("debug.sqlite"), "--db", help="checkpoints database (compact SQLite)"),
    thread: Optional[str] = typer.Option(None, "--thread", help="resume this thread of --db (or name a new one)"),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer dir (required for sglang:)"),
    helper: list[str] = typer.Option([], "--helper", help="helper engine NAME=SPEC (repeatable; resume: the "
                                     "stored ones)"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="default 1.0 (resume: the thread's; another "
                                             "value is refused)"),
    max_new_tokens: Optional[int] = typer.Option(None, min=1, help="default 1024 (resume: the thread's; "
                                              "another value is stored with it)"),
    input_key: str = typer.Option("input"),
    label_key: str = typer.Option("label"),
    metadata_key: str = typer.Option("metadata"),
) -> None:
    """Step through a run node by node: see each update and each Turn's tokens, edit, fork, resume."""
    from ..batch import sampling_from_flags
    from ..checkpoints.debugger import DebugSession
    from ..checkpoints.tui import repl
    from ..rollout_inputs import read_input_row

    out = Console(highlight=False)
    try:
        row = (read_input_row(input_, line, (input_key, label_key, metadata_key))
               if input_ is not None else None)
        # only the flags given: a new thread fills the rest with defaults, a resumed one keeps its own
        flags = {k: v for k, v in (("temperature", temperature), ("max_new_tokens", max_new_tokens)) if v is not None}
        sampling_from_flags(**flags)  # a bad value is reported under its flag's name

        async def session() -> None:
            async with DebugSession.open(agent, db, thread_id=thread, row=row, engine=engine_arg(engine),
                                         options=parse_options(option) or None, sampling=flags or None,
                                         tokenizer=tokenizer_arg(tokenizer),
                                         engines=parse_helpers(helper) or None) as s:
                await repl(s, out)

        asyncio.run(session())
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise fail(exc) from None


def _checkpoint_arg(value: Optional[str]) -> "str | int | None":
    """--checkpoint: an index into `history` (negative from the end) or a checkpoint id."""
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def _write_replay(result: Any, out: Optional[Path], db: Path, overwrite: bool = False) -> dict[str, Any]:
    """Print (and with --out write as a run directory) the rollout of a replay or fork."""
    rollout = result.rollout
    summary = {"thread": result.thread_id, "from_checkpoint": result.from_checkpoint,
               "forked_checkpoint": result.forked_checkpoint, "head_checkpoint": result.head_checkpoint,
               "status": rollout.status, "reason": rollout.reason, "reward": rollout.reward,
               "answer": rollout.answer, "turns": len(rollout.turns), "sequences": len(rollout.sequences),
               "path": rollout.path}
    if out is not None:
        write_replay_dir(result, out, db, overwrite=overwrite)
        summary["out"] = str(out)
    return summary


def write_replay_dir(result: Any, out: Path, db: Path, *, overwrite: bool = False) -> None:
    """A replay or fork as `agentgraphs run` writes one row: samples.jsonl and traces.jsonl (the row's fields
    from the thread's stored row; line and group_index are not stored: null) and summary.json (engine,
    tokenizer, options), so `agentgraphs view` and `agentgraphs check` read it like any run. `out` holding an
    earlier run is refused as `run` refuses it (`batch.check_new_run_dir`), unless `overwrite`."""
    from ..batch import JsonlWriter, RunSummary, check_new_run_dir, clear_run_files, lead_with_headline

    check_new_run_dir(out, overwrite=overwrite)
    if overwrite:
        clear_run_files(out)
    from ..records import sample_fields, trace_record

    rollout, spec, row = result.rollout, result.spec, result.row or {}
    fields = sample_fields(rollout, spec)
    where = {"checkpoint_thread": result.thread_id, "replayed_from": result.from_checkpoint,
             **({"forked_checkpoint": result.forked_checkpoint} if result.forked_checkpoint else {})}
    sample = {"group_index": None, "index": row.get("index"), "line": None, "prompt": row.get("prompt"),
              "label": row.get("label"), **fields,
              "metadata": {**dict(row.get("metadata") or {}), **fields["metadata"], **where}}
    trace = {**trace_record(rollout, row.get("index")), "line": None, "checkpoint_thread": result.thread_id}
    with JsonlWriter(out) as writer:
        writer(sample, trace)
    totals = RunSummary(rows=1, wall_s=rollout.time_s)
    totals.add(rollout, spec.reward_key)
    ctx = result.context
    tokenizer = getattr(getattr(ctx, "tokenizer", None), "name_or_path", None)
    run = {"agent": spec.name, "engine": ctx.policy.name if ctx is not None else None, "tokenizer": tokenizer,
           "options": rollout.options.model_dump() if rollout.options is not None else {},
           **lead_with_headline(spec, totals.as_dict()), "checkpoints": str(db), **where}
    (out / "summary.json").write_text(json.dumps(run, indent=2, default=str) + "\n", encoding="utf-8")


@app.command("replay")
def replay_cmd(
    db: DbArg,
    thread: ThreadArg,
    checkpoint: Optional[str] = typer.Option(None, help="index from `history` (negative: from the end) or id; "
                                             "default: the latest"),
    engine: EngineOpt = None,
    tokenizer: TokenizerOpt = None,
    helper: HelperOpt = [],  # noqa: B006 (typer copies the default)
    agent: AgentOpt = None,
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Re-run a stored thread from one of its checkpoints (a new branch of the same thread)."""
    from ..batch import check_new_run_dir
    from ..checkpoints.replay import replay

    try:
        if out is not None:
            check_new_run_dir(out, overwrite=overwrite)  # before the replay, not after its work
        result = replay(db, thread, _checkpoint_arg(checkpoint), agent=agent, engine=engine_arg(engine),
                        tokenizer=tokenizer_arg(tokenizer), engines=parse_helpers(helper) or None)
        console.print_json(json.dumps(_write_replay(result, out, db, overwrite)))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise fail(exc) from None


@app.command("fork")
def fork_cmd(
    db: DbArg,
    thread: ThreadArg,
    checkpoint: str = typer.Option(..., help="index from `history` (negative: from the end) or id"),
    set_: list[str] = typer.Option([], "--set", help="state KEY=JSON_VALUE to change (repeatable)"),
    as_node: Optional[str] = typer.Option(None, help="the node the edit counts as (decides what runs next)"),
    engine: EngineOpt = None,
    tokenizer: TokenizerOpt = None,
    helper: HelperOpt = [],  # noqa: B006 (typer copies the default)
    agent: AgentOpt = None,
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Edit the state at a checkpoint and run the new branch to its end."""
    from ..batch import check_new_run_dir
    from ..checkpoints.replay import fork

    try:
        if not set_:
            raise ConfigError("--set KEY=VALUE: give at least one state key to change (else use `replay`)")
        if out is not None:
            check_new_run_dir(out, overwrite=overwrite)  # before the fork, not after its work
        result = fork(db, thread, _checkpoint_arg(checkpoint), parse_options(set_, "--set"), as_node=as_node,
                      agent=agent, engine=engine_arg(engine), tokenizer=tokenizer_arg(tokenizer),
                      engines=parse_helpers(helper) or None)
        console.print_json(json.dumps(_write_replay(result, out, db, overwrite)))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise fail(exc) from None


def _print_threads(found: list[Any], out: Console) -> None:
    """The threads as a table, or as plain lines where a table would not fit: an id is copied into --thread,
    so it is never cut (the agent column folds instead)."""
    from rich.table import Table

    widest = max((len(i["thread_id"]) for i in found), default=6)
    if out.width < widest + 24:  # too narrow for the id and two readable columns
        for i in found:
            out.print(f"{i['thread_id']}  {i['agent'] or '?'}  {i['checkpoints']} checkpoints", soft_wrap=True,
                      markup=False, highlight=False)
        return
    table = Table()
    table.add_column("thread", no_wrap=True, min_width=widest)
    table.add_column("agent", overflow="fold", min_width=5)
    table.add_column("checkpoints", overflow="fold", min_width=3)
    for info in found:
        table.add_row(info["thread_id"], info["agent"] or "?", str(info["checkpoints"]))
    out.print(table)


@app.command("history")
def history_cmd(
    db: Path = typer.Argument(..., help="checkpoints database (run --checkpoints / debug --db)"),
    thread: Optional[str] = typer.Option(None, help="list this thread's checkpoints (default: list threads)"),
    agent: Optional[str] = typer.Option(None, help="agent (default: the one stored with the thread)"),
) -> None:
    """List the threads of a checkpoints database, or one thread's checkpoints."""
    from ..checkpoints.replay import history, threads

    out = Console()
    try:
        if thread is None:
            _print_threads(threads(db), out)
        else:
            from ..checkpoints.tui import history_table

            out.print(history_table(history(db, thread, agent=agent)))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise fail(exc) from None

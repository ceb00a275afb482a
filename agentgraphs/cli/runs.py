"""`agentgraphs run` and `agentgraphs demo`: a dataset through an agent, written as slime samples and traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.progress import Progress, TaskID

from ..errors import AgentGraphsError
from .common import console, fail, parse_helpers, parse_options, progress_bar

app = typer.Typer()


@app.command()
def run(
    agent: str = typer.Argument(..., help="registered agent (memagent) or package.module:attr"),
    data: Path = typer.Option(..., "--data", help="JSONL with slime-style rows (input, label, metadata)"),
    engine: str = typer.Option(..., "--engine", help="hf:MODEL_DIR or sglang:http://HOST:PORT"),
    out: Path = typer.Option(..., "--out", help="output dir: samples.jsonl, traces.jsonl, summary.json (a new "
                             "directory, or one without an earlier run's files: see --overwrite)"),
    overwrite: bool = typer.Option(False, "--overwrite", help="--out holds an earlier run: remove its samples.jsonl, "
                                   "traces.jsonl, summary.json and report.html before this run writes"),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer dir (required for sglang:)"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    concurrency: int = typer.Option(8, min=1, help="rollouts in flight"),
    n_samples: int = typer.Option(1, "--n-samples-per-prompt", min=1, help="rollouts per row (a GRPO group)"),
    temperature: float = typer.Option(1.0, min=0.0),
    top_p: float = typer.Option(1.0),
    max_new_tokens: Optional[int] = typer.Option(
        None, min=1, help="cap of every LLM call (a method's own larger cap is lowered to it, and a reply cut there "
        "says so); unset: each call gets its method's own cap (1024 for a call that sets none)"),
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
    from ..batch import run_file

    try:
        with _Bar() as bar:
            summary = run_file(agent, data, engine, out, tokenizer=tokenizer, options=parse_options(option),
                               engines=parse_helpers(helper),
                               concurrency=concurrency, n_samples=n_samples, temperature=temperature,
                               top_p=top_p, max_new_tokens=max_new_tokens, evaluation=evaluation, limit=limit,
                               keys=(input_key, label_key, metadata_key), checkpoints=checkpoints, seed=seed,
                               on_start=bar.start, on_result=bar.advance, overwrite=overwrite)
    except (AgentGraphsError, ValueError, OSError) as exc:  # a bad flag, file or directory: no traceback
        raise fail(exc) from None
    console.print_json(json.dumps(summary))
    print_headline(summary)
    if summary["results"] and _usable_results(summary) == 0:
        # outputs are written (the reasons are in them), but a run that produced nothing usable fails
        n = summary["results"]
        console.print("[red]error:[/red]", escape(f"every row failed ({n} of {n}); first reason: {_first_reason(out)}"))
        raise typer.Exit(1)


class _Bar:
    """The progress bar of `run`: it appears once the run has started (its flags checked), and stops on exit."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def start(self, name: str, total: int) -> None:
        self.progress = progress_bar()
        self.progress.start()
        self.task = self.progress.add_task(name, total=total, status="")

    def advance(self, sample: dict[str, Any], trace: dict[str, Any]) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=1, status=sample["status"])

    def __enter__(self) -> "_Bar":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


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


@app.command()
def demo(
    out: Path = typer.Option(Path("out/demo"), "--out", help="output directory (a rerun replaces the demo's "
                             "earlier samples.jsonl, traces.jsonl, summary.json and report.html there)"),
    seed: int = typer.Option(0, min=0, help="data and sampling seed: the same seed writes the same samples.jsonl"),
) -> None:
    """The main job on the embedded default: MemAgent on the tiny model, no server needed."""
    from ..demo import run_demo

    with progress_bar() as bar:
        task = bar.add_task("memagent demo", total=8, status="")
        summary = run_demo(out, seed=seed,
                           on_result=lambda s, t: bar.update(task, advance=1, status=s["status"]))
    console.print_json(json.dumps(summary))
    print_headline(summary)
    console.print(f"samples: {out / 'samples.jsonl'}  traces: {out / 'traces.jsonl'}")

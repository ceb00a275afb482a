"""`agentgraphs view` and `agentgraphs check`: a run's HTML report and its exactness audit (`agentgraphs.viewer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..errors import AgentGraphsError
from .common import console, fail

app = typer.Typer()


@app.command()
def view(
    run_dir: Path = typer.Argument(..., help="a run directory written by `agentgraphs run` or `demo`"),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)"),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", "--model", help="tokenizer dir (default: the hf: engine in summary.json)"),
) -> None:
    """Write a self-contained HTML report of a run: rollouts, graph paths, every token and its role in training."""
    from ..viewer import write_report

    try:
        path = write_report(run_dir, out, tokenizer=tokenizer)
    except (AgentGraphsError, OSError) as exc:
        raise fail(exc) from None
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
    """The exactness audit: check every invariant and re-score every trained token (every policy output token
    of a run that trains nothing, such as an --eval run); exit 1 on a breach, on any re-scored token over the
    threshold (unless --allow-drift) or when --model was given and no token could be compared, 2 on bad
    arguments or an empty run."""
    from ..engines.factory import resolve_model_dir
    from ..viewer import check_run
    from ..viewer.check import report_json

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

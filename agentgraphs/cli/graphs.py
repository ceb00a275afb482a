"""`agentgraphs draw` and `agentgraphs langgraph-json`: an agent's graph as a picture, and the graph list of
`langgraph dev` (langgraph.json) generated from the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import AgentGraphsError
from .common import console, fail, parse_options

app = typer.Typer()


@app.command()
def draw(
    agent: str = typer.Argument(..., help="registered agent (memagent) or package.module:attr"),
    option: list[str] = typer.Option([], "--option", "-o", help="agent option KEY=VALUE (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="FILE.mmd, .dot, .svg or .png (svg/png: Graphviz "
                                       "`dot`, offline); default: Mermaid on stdout"),
) -> None:
    """Draw an agent's graph: Mermaid text, or SVG/PNG rendered offline with Graphviz."""
    from ..draw import draw as draw_graph

    try:
        data = draw_graph(agent, out, options=parse_options(option))
    except (AgentGraphsError, ValueError, OSError) as exc:
        raise fail(exc) from None
    if out is None:
        typer.echo(data, nl=False)
    else:
        console.print(f"graph written to {out}")


@app.command("langgraph-json")
def langgraph_json_cmd(
    out: Optional[Path] = typer.Option(None, "--out", help="file to write (the checkout's langgraph.json); "
                                       "default: stdout"),
) -> None:
    """The graph list of `langgraph dev` (langgraph.json), generated from the registry of agents."""
    from ..studio import langgraph_json, write_langgraph_json

    try:
        if out is None:
            typer.echo(langgraph_json(), nl=False)
        else:
            console.print(f"graphs written to {write_langgraph_json(out)}")
    except (AgentGraphsError, OSError) as exc:
        raise fail(exc) from None

"""The `agentgraphs` command line: thin faces over library functions (tests call those directly).

One Typer app per concern, each in its own module, attached here:

    runs         run, demo                          agentgraphs.batch, agentgraphs.demo
    kit          tiny-model, test-server, learn-check   agentgraphs.testing
    viewer       view, check                        agentgraphs.viewer
    checkpoints  debug, history, replay, fork       agentgraphs.checkpoints
    graphs       draw, langgraph-json               agentgraphs.draw, agentgraphs.studio
    retrieval    retrieval index | serve            agentgraphs.retrieval

`python -m agentgraphs.cli` and the `agentgraphs` console script both run `main`.
"""

from __future__ import annotations

import typer

from ..retrieval.cli import app as retrieval_app
from . import checkpoints, graphs, kit, runs, viewer
from .common import parse_helpers, parse_options

__all__ = ["app", "main", "parse_helpers", "parse_options"]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Agentic-RL graphs with token-exact traces (LangGraph + SGLang + slime).")
for _concern in (runs, kit, viewer, checkpoints, graphs):
    app.add_typer(_concern.app)
app.add_typer(retrieval_app, name="retrieval")


def main() -> None:
    from ..testing.tiny_model import register_tiny_alias

    register_tiny_alias()  # `hf:tiny` in every --engine flag, as in contexts and Studio
    app()

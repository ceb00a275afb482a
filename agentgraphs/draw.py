"""Draw an agent's graph: Mermaid text, Graphviz DOT, and SVG / PNG rendered offline by Graphviz's `dot`.

LangGraph's own `draw_mermaid_png` sends the graph to a web service; nothing here touches the network.
SVG and PNG need the `dot` program (Debian/Ubuntu: `apt-get install graphviz`; macOS: `brew install graphviz`).

    agentgraphs draw memagent                      # Mermaid on stdout
    agentgraphs draw memagent --out graph.svg      # or .png, .mmd, .dot
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError
from .spec import AgentSpec, load_spec

__all__ = ["FORMATS", "draw", "render", "to_dot", "to_mermaid"]

FORMATS = ("mmd", "dot", "svg", "png")
_START, _END = "__start__", "__end__"


def _compiled(agent: str | AgentSpec | Any, options: Mapping[str, Any] | None = None) -> Any:
    """The compiled graph of an agent name, a spec (with `options`), or a compiled graph itself."""
    if isinstance(agent, str):
        agent = load_spec(agent)
    if isinstance(agent, AgentSpec):
        agent = agent.graph(options)
    if not hasattr(agent, "get_graph"):
        raise ConfigError(f"cannot draw {type(agent).__name__}: give an agent name, an AgentSpec or a compiled graph")
    return agent


def to_mermaid(agent: str | AgentSpec | Any, options: Mapping[str, Any] | None = None) -> str:
    """The graph as Mermaid flowchart text (conditional edges dotted).

    >>> print(to_mermaid("memagent").splitlines()[0])
    ---
    """
    return str(_compiled(agent, options).get_graph().draw_mermaid())


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(agent: str | AgentSpec | Any, options: Mapping[str, Any] | None = None) -> str:
    """The graph in Graphviz DOT: nodes as boxes, start and end as ovals, conditional edges dashed.

    >>> dot = to_dot("memagent")
    >>> '"memory_update" -> "final_answer" [style=dashed]' in dot
    True
    """
    compiled = _compiled(agent, options)
    graph = compiled.get_graph()
    lines = [f"digraph {_quote(str(getattr(compiled, 'name', None) or 'graph'))} {{",
             '  graph [rankdir=TB, fontname="Helvetica"];',
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#4a6fa5", fontname="Helvetica"];',
             '  edge [color="#555555", fontname="Helvetica", fontsize=10];']
    for node_id, node in graph.nodes.items():
        label = _quote(str(getattr(node, "name", None) or node_id))
        if node_id in (_START, _END):
            label = _quote("start" if node_id == _START else "end")
            lines.append(f"  {_quote(node_id)} [label={label}, shape=oval, fillcolor=\"#f3f3f3\", color=\"#888888\"];")
        else:
            lines.append(f"  {_quote(node_id)} [label={label}];")
    for edge in graph.edges:
        attrs = []
        if edge.conditional:
            attrs.append("style=dashed")
        if edge.data is not None and str(edge.data) != edge.target:
            attrs.append(f"label={_quote(str(edge.data))}")
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_quote(edge.source)} -> {_quote(edge.target)}{suffix};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot: str, fmt: str) -> bytes:
    """Render DOT text to `svg` or `png` bytes with Graphviz's `dot` (offline)."""
    if fmt not in ("svg", "png"):
        raise ConfigError(f"render format {fmt!r}: use 'svg' or 'png'")
    exe = shutil.which("dot")
    if exe is None:
        raise ConfigError("drawing SVG/PNG needs Graphviz's `dot` program: apt-get install graphviz "
                          "(macOS: brew install graphviz), or write Mermaid (--out FILE.mmd)")
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode("utf-8"), capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise ConfigError(f"dot -T{fmt} failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
    return proc.stdout


def draw(agent: str | AgentSpec | Any, out: str | Path | None = None, *,
         options: Mapping[str, Any] | None = None) -> str | bytes:
    """The graph drawn in the format `out`'s suffix names (.mmd, .dot, .svg, .png), written to `out`.

    Without `out` the Mermaid text is returned. Returns what was written.

    >>> import tempfile, os
    >>> draw("memagent", os.path.join(tempfile.mkdtemp(), "g.dot")).startswith('digraph "memagent"')
    True
    """
    fmt = "mmd" if out is None else Path(out).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ConfigError(f"--out {out}: unknown format {fmt!r}; use one of .mmd, .dot, .svg, .png")
    data: str | bytes
    if fmt == "mmd":
        data = to_mermaid(agent, options)
    elif fmt == "dot":
        data = to_dot(agent, options)
    else:
        data = render(to_dot(agent, options), fmt)
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    return data

"""`agentgraphs draw`: Mermaid text with every node, and SVG / PNG files that Graphviz rendered offline
(checked as real files: the SVG parses as XML with one group per node and edge; the PNG has a valid
signature and header)."""

from __future__ import annotations

import shutil
import struct
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgraphs.cli import app
from agentgraphs.draw import draw, to_dot
from agentgraphs.errors import ConfigError
from agentgraphs.memagent import SPEC

runner = CliRunner()
NODES = {"prepare", "memory_update", "final_answer"}
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` (apt-get install graphviz)")


def test_mermaid_on_stdout_names_every_node_and_edge() -> None:
    result = runner.invoke(app, ["draw", "memagent", "-o", "max_chunks=2"])
    assert result.exit_code == 0, result.output
    text = result.output
    lines = text.splitlines()
    if lines[0] == "---":  # Mermaid's optional front matter (LangGraph writes its config there): skip it
        lines = lines[lines.index("---", 1) + 1:]
    assert lines[0].startswith("graph TD")  # the diagram's first statement: a top-down flowchart
    for node in NODES:
        assert f"\t{node}({node})" in text
    assert "prepare -.-> memory_update;" in text and "final_answer --> __end__;" in text


@needs_dot
def test_svg_has_one_group_per_node_and_edge(tmp_path: Path) -> None:
    out = tmp_path / "g.svg"
    result = runner.invoke(app, ["draw", "memagent", "--out", str(out)])
    assert result.exit_code == 0, result.output
    root = ET.parse(out).getroot()
    ns = {"svg": "http://www.w3.org/2000/svg"}
    groups = {g.get("class"): [] for g in root.iterfind(".//svg:g", ns)}
    for g in root.iterfind(".//svg:g", ns):
        groups[g.get("class")].append(g.findtext("svg:title", namespaces=ns))
    drawable = SPEC.graph().get_graph()
    assert set(groups["node"]) == set(drawable.nodes) == NODES | {"__start__", "__end__"}
    assert sorted(groups["edge"]) == sorted(f"{e.source}->{e.target}" for e in drawable.edges)
    texts = {t.text for t in root.iterfind(".//svg:text", ns)}
    assert NODES <= texts


@needs_dot
def test_png_is_a_valid_image(tmp_path: Path) -> None:
    out = tmp_path / "g.png"
    data = draw("memagent", out)
    assert out.read_bytes() == data
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    assert kind == b"IHDR" and length == 13 and 100 < width < 2000 and 200 < height < 3000
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0]  # the header's checksum holds
    assert data.endswith(b"IEND\xaeB`\x82")


def test_dot_of_a_compiled_graph_and_bad_formats(tmp_path: Path) -> None:
    dot = to_dot(SPEC.graph())
    assert '"__start__" -> "prepare";' in dot and '"prepare" -> "memory_update" [style=dashed];' in dot
    with pytest.raises(ConfigError, match="unknown format 'gif'"):
        draw("memagent", tmp_path / "g.gif")
    result = runner.invoke(app, ["draw", "memagent", "-o", "max_chunks=0"])
    assert result.exit_code == 2 and "max_chunks" in result.output

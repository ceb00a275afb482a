"""The README's Python examples run as written (a reader copies them), each in a fresh namespace.

A block opening with the comment `# needs: NAME` runs only where the named module imports (an optional
extra); every other ```python block must run here, on the tiny model, without a server.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, agentgraphs_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = BLOCKS[index]
    needs = re.match(r"# needs: ([\w.]+)", code)
    if needs and importlib.util.find_spec(needs.group(1)) is None:
        pytest.skip(f"needs the optional module {needs.group(1)}")
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.syspath_prepend(str(README.parent))  # `examples.*` imports as from a checkout
    namespace: dict[str, object] = {"__name__": f"readme_block_{index}"}
    compiled = compile(code, f"README.md block {index}", "exec", flags=0x2000)  # PyCF_ALLOW_TOP_LEVEL_AWAIT
    result = eval(compiled, namespace)  # noqa: S307 - our own README
    if asyncio.iscoroutine(result):
        asyncio.run(result)

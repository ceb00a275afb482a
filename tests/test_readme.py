"""The README's Python examples run as written (a reader copies them), each in a fresh namespace, and print
what their comments say they print.

A block opening with the comment `# needs: NAME` runs only where the named module imports (an optional
extra); every other ```python block must run here, on the tiny model, without a server. A comment
`# -> TEXT` (after a print, or on the line below it) is output the block shows: TEXT must be a line of what
the block prints, in the order the comments come (`...` in TEXT stands for any text, as in doctests).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
SHOWN = re.compile(r"(?:^|\s)# -> (.*)$")


def shown_output(code: str) -> list[str]:
    """The lines a block's `# -> TEXT` comments say it prints, in order."""
    return [m.group(1).rstrip() for line in code.splitlines() if (m := SHOWN.search(line))]


def shows(expected: str, line: str) -> bool:
    """Whether a printed line is the shown one (`...` matches any text)."""
    return re.fullmatch(".*".join(re.escape(part) for part in expected.split("...")), line.rstrip()) is not None


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3
    assert sum(1 for code in BLOCKS if shown_output(code)) >= 5  # the outputs a reader is told to expect


def test_shown_output_is_compared_line_by_line() -> None:
    code = 'print(1)  # -> 1\nprint("a b")\n# -> a ...'
    assert shown_output(code) == ["1", "a ..."]
    assert shows("a ...", "a b") and shows("1", "1") and not shows("1", "10") and not shows("a ...", "b a")


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, agentgraphs_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = BLOCKS[index]
    needs = re.match(r"# needs: ([\w.]+)", code)
    if needs and importlib.util.find_spec(needs.group(1)) is None:
        pytest.skip(f"needs the optional module {needs.group(1)}")
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.syspath_prepend(str(README.parent))  # `examples.*` imports as from a checkout
    namespace: dict[str, object] = {"__name__": f"readme_block_{index}"}
    # a reader saves a block as a file and runs it: no top-level await (a SyntaxError there)
    compiled = compile(code, f"README.md block {index}", "exec")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compiled, namespace)  # noqa: S102 - our own README
    lines = printed.getvalue().splitlines()
    at = 0
    for expected in shown_output(code):
        found = next((i for i in range(at, len(lines)) if shows(expected, lines[i])), None)
        assert found is not None, (f"README.md block {index} shows {expected!r} (after what it printed before), "
                                   f"but it printed:\n{printed.getvalue()}")
        at = found + 1

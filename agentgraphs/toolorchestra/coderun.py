"""Running an expert's Python for `enhance_reasoning`.

One small function, `run_python(code, timeout_s)`: the code runs in a fresh `python3 -I` subprocess
(isolated mode: no user site, no PYTHON* environment, an empty working directory), fed on stdin, with a
wall-clock timeout and an output cap. It is the seam where `agentgraphs.sandbox` plugs in once it lands;
until then it is NOT a security boundary (no network or filesystem isolation).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile

from typing_extensions import TypedDict

__all__ = ["CodeResult", "run_python", "extract_code"]

OUTPUT_CAP = 8_000  # characters of stdout+stderr kept
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


class CodeResult(TypedDict):
    ok: bool
    output: str
    timed_out: bool


def extract_code(text: str) -> str:
    """The last ```python block of a reply (the whole reply when it has no fence).

    >>> extract_code("Here:\\n```python\\nprint(1 + 1)\\n```")
    'print(1 + 1)\\n'
    """
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text


async def run_python(code: str, timeout_s: float = 60.0) -> CodeResult:
    """Run `code` in a separate interpreter; ok when it exits 0 within `timeout_s`.

    >>> import asyncio
    >>> asyncio.run(run_python("print(6 * 7)"))
    {'ok': True, 'output': '42\\n', 'timed_out': False}
    """
    with tempfile.TemporaryDirectory(prefix="agentgraphs-code-") as cwd:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=cwd, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            start_new_session=True)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(code.encode()), timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return CodeResult(ok=False, output=f"timed out after {timeout_s:g} s", timed_out=True)
    text = out.decode("utf-8", errors="replace")
    if len(text) > OUTPUT_CAP:
        text = text[:OUTPUT_CAP] + f"\n... ({len(text) - OUTPUT_CAP} more characters cut)"
    return CodeResult(ok=proc.returncode == 0, output=text, timed_out=False)

"""Running an expert's Python for `enhance_reasoning`, in `agentgraphs.sandbox`.

`run_expert_code(code, timeout_s)` runs the code isolated (namespaces, no network, a fresh working directory,
wall-clock / CPU / memory / process / output limits, whatever `agentgraphs.sandbox.capabilities()` finds
on the machine) and says what happened in text the orchestrator reads: the output on success, else what
stopped it and the error's last lines. A sandbox that cannot run at all is a failed execution, not a
crashed rollout.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from ..codeblocks import python_blocks
from ..sandbox import SandboxError, SandboxLimits, explain, run_python_async

__all__ = ["CodeResult", "run_expert_code", "extract_code"]


class CodeResult(TypedDict):
    ok: bool
    output: str
    timed_out: bool


def extract_code(text: str) -> str:
    """The last ```python (or untagged) block of a reply, stripped (the whole reply when it has no fence).

    >>> extract_code("Here:\\n```python\\nprint(1 + 1)\\n```")
    'print(1 + 1)'
    """
    blocks = python_blocks(text, untagged=True)
    return blocks[-1] if blocks else text


async def run_expert_code(code: str, timeout_s: float = 60.0) -> CodeResult:
    """Run `code` in the sandbox with `timeout_s` of wall clock (and as much CPU time).

    >>> import asyncio
    >>> asyncio.run(run_expert_code("print(6 * 7)"))
    {'ok': True, 'output': '42', 'timed_out': False}
    """
    try:
        result = await run_python_async(code, SandboxLimits(wall_s=timeout_s, cpu_s=timeout_s))
    except SandboxError as exc:
        return CodeResult(ok=False, output=f"the sandbox could not run the code: {exc}", timed_out=False)
    return CodeResult(ok=result["status"] == "ok", output=explain(result), timed_out=result["status"] == "timeout")

"""Running an expert's Python for `enhance_reasoning`, in `agentgraphs.sandbox`.

`run_expert_code(code, timeout_s)` runs the code isolated (namespaces, no network, a fresh working directory,
wall-clock / CPU / memory / process / output limits, whatever `agentgraphs.sandbox.capabilities()` finds
on the machine) and says what happened in text the orchestrator reads: the output on success, else what
stopped it and the error's last lines. A sandbox that cannot run on the machine at all is a ConfigError
(`agentgraphs.tool_code`) that fails the rollout: the orchestrator must not be trained on a tool that never
works.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from ..codeblocks import python_blocks
from ..sandbox import SandboxLimits, explain
from ..tool_code import run_tool_code

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
    """Run `code` in the sandbox with `timeout_s` of wall clock (and as much CPU time); ConfigError when the
    sandbox cannot run on this machine.

    >>> import asyncio
    >>> asyncio.run(run_expert_code("print(6 * 7)"))
    {'ok': True, 'output': '42', 'timed_out': False}
    """
    result = await run_tool_code(code, SandboxLimits(wall_s=timeout_s, cpu_s=timeout_s),
                                 tool="ToolOrchestra enhance_reasoning",
                                 drop="drop enhance_reasoning from the option experts")
    return CodeResult(ok=result["status"] == "ok", output=explain(result), timed_out=result["status"] == "timeout")

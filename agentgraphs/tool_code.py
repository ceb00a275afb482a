"""Running a model's code for a tool (AgentFlow's python_coder, ToolOrchestra's enhance_reasoning).

What the code does is the tool's result, errors and limits included: the model wrote it, the model reads
it. A sandbox that cannot run on this machine (a protection that does not hold, a launch or cgroup
failure) is not the model's doing: it is a ConfigError that fails the rollout with the fix, never a result
the policy trains on (it would learn that the tool never works).
"""

from __future__ import annotations

from .errors import ConfigError
from .sandbox import ExecutionResult, SandboxError, SandboxLimits, run_python_async

__all__ = ["run_tool_code"]


async def run_tool_code(code: str, limits: SandboxLimits, *, tool: str, drop: str) -> ExecutionResult:
    """Run `code` in the sandbox; ConfigError naming `tool` when the sandbox cannot run here (`drop`: how to
    do without the tool, e.g. "drop python_coder from the option tools").

    >>> import asyncio
    >>> asyncio.run(run_tool_code("print(6 * 7)", SandboxLimits(wall_s=10), tool="t", drop="-"))["stdout"]
    '42\\n'
    """
    try:
        return await run_python_async(code, limits)
    except SandboxError as exc:
        raise ConfigError(f"{tool}: the sandbox cannot run code on this machine: {exc}. Fix: `python -m "
                          f"agentgraphs.sandbox` says what holds and how to get the rest; or {drop}") from exc

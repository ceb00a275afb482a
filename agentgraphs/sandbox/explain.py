"""A plain-text account of an execution, for a tool result an LLM reads."""

from __future__ import annotations

from .types import ExecutionResult

__all__ = ["explain"]

_STOPPED = {
    "timeout": "it ran past its wall-clock limit ({wall:.1f} s) and was killed",
    "cpu_limit": "it used up its CPU-time limit and was killed",
    "memory_limit": "it exceeded its memory limit and was killed",
    "process_limit": "it ran more processes or threads at once than its limit and was killed",
    "output_limit": "it printed more than the output limit; the output below is cut off",
    "cancelled": "it was cancelled",
    "sandbox_error": "the sandbox could not run it",
}


def explain(result: ExecutionResult, max_chars: int = 4000) -> str:
    """stdout on success; otherwise what stopped it, then the output and the error's last lines.

    >>> explain({"status": "ok", "stdout": "4\\n", "stderr": "", "limits_hit": [], "wall_s": 0.1})
    '4'
    >>> explain({"status": "timeout", "stdout": "", "stderr": "", "limits_hit": ["wall"], "wall_s": 2.0})
    'Execution stopped: it ran past its wall-clock limit (2.0 s) and was killed.'
    """
    out = result["stdout"].strip()
    err = result["stderr"].strip()
    status = result["status"]
    if status == "ok" and not err:
        return _tail(out, max_chars) if out else "(the code ran and printed nothing)"
    parts = []
    if status in _STOPPED:
        parts.append("Execution stopped: " + _STOPPED[status].format(wall=result["wall_s"]) + ".")
    if "processes" in result["limits_hit"]:
        parts.append("Note: the process limit refused to start more processes.")
    if out:
        parts.append("Output:\n" + _tail(out, max_chars // 2))
    if err:
        parts.append(("Error:\n" if status != "ok" else "Warnings:\n") + _tail(err, max_chars // 2))
    elif status == "error":
        parts.append(f"Error: exited with status {result.get('exit_code')}"
                     + (f" ({result.get('signal')})" if result.get("signal") else "") + ".")
    return "\n".join(parts)


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]

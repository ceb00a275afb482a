"""Run untrusted Python in isolation: a standalone component (no LangGraph, nothing else of agentgraphs).

Each execution is its own process tree: wall-clock, CPU, memory, process-count and output limits; no
network; a fresh working directory removed afterwards; a scrubbed environment; the code on stdin.
Where the machine offers them it uses bubblewrap namespaces (user, pid, net, mount, ipc, uts), a
seccomp filter (`pip install 'agentgraphs[sandbox]'`), a cgroup per execution (pids, memory,
cpuacct) and a private unprivileged uid; `capabilities()` reports which protections hold here
(detected by a probe, not assumed) and `SandboxLimits(require=...)` refuses to run without some.

>>> from agentgraphs.sandbox import run_python, SandboxLimits
>>> result = run_python("import math; print(math.factorial(20))", SandboxLimits(wall_s=5))
>>> result["status"], result["stdout"].strip()
('ok', '2432902008176640000')

`python -m agentgraphs.sandbox` prints the report for this machine.
"""

from .detect import Capabilities, capabilities, format_report
from .explain import explain
from .runner import run_python, run_python_async
from .types import (
    PROTECTIONS,
    ExecutionResult,
    SandboxError,
    SandboxLimits,
    SandboxUnavailableError,
)

__all__ = [
    "PROTECTIONS",
    "Capabilities",
    "ExecutionResult",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "capabilities",
    "explain",
    "format_report",
    "run_python",
    "run_python_async",
]

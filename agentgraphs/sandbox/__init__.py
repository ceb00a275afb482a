"""Run untrusted Python in isolation: a standalone component (no LangGraph, nothing else of agentgraphs).

Each execution is its own process tree: wall-clock, CPU, memory, process-count, output, disk and
open-file limits; no network; nothing outside a fresh working directory (removed afterwards); a scrubbed
environment; the code on stdin. It uses bubblewrap namespaces (user, pid, net, mount, ipc, uts), a
seccomp filter (`pip install 'agentgraphs[sandbox]'`), a cgroup per execution (v1 or v2: pids, memory,
CPU) where it may create one, a private uid when root, rlimits, and its own count of the execution's
tasks, memory and CPU where no cgroup counts them. `capabilities()` establishes each protection by a
probe that tries to break it on this machine; `run_python` refuses (SandboxUnavailableError, before
any code starts) while one does not hold, unless `SandboxLimits(allow_missing={...})` names it.

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

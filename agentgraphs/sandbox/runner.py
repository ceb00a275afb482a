"""Run untrusted Python: one isolated process tree per execution, every limit enforced, always cleaned up.

`run_python` (blocking) and `run_python_async` (awaitable, cancellable) share one implementation: the
detected plan (`agentgraphs.sandbox.detect`), a refusal while a protection does not hold, then one execution
(`agentgraphs.sandbox.execution`); the async one runs on a dedicated thread pool so many executions proceed
at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading

from ..errors import ConfigError
from .detect import current_plan
from .execution import check_arguments, execute_with_plan
from .plan import allowed_missing
from .types import PROTECTIONS, ExecutionResult, SandboxLimits, SandboxUnavailableError

__all__ = ["run_python", "run_python_async"]


def run_python(code: str, limits: SandboxLimits | None = None) -> ExecutionResult:
    """Run `code` in a fresh sandbox and return what happened; never raises for anything the code does.

    Raises SandboxUnavailableError, before any code starts, when a protection does not hold on this
    machine and `limits.allow_missing` does not name it (the message says what to install or opt out of).

    >>> r = run_python("print(sum(range(10)))")
    >>> r["status"], r["stdout"]
    ('ok', '45\\n')
    >>> run_python("1/0")["stderr"].splitlines()[-1]
    'ZeroDivisionError: division by zero'
    """
    return _execute(code, limits or SandboxLimits(), None)


_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


THREADS_ENV = "AGENTGRAPHS_SANDBOX_THREADS"
DEFAULT_THREADS = 64


def pool_size() -> int:
    """How many executions `run_python_async` runs at once in this process (later ones wait their turn):
    $AGENTGRAPHS_SANDBOX_THREADS, default 64. Read once, when the first asynchronous execution starts.

    >>> pool_size() >= 1
    True
    """
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return DEFAULT_THREADS
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise ConfigError(f"{THREADS_ENV}={value!r}: give a whole number >= 1 (executions at once per process; "
                          f"default {DEFAULT_THREADS})")
    return size


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(pool_size(), thread_name_prefix="sandbox")
        return _executor


async def run_python_async(code: str, limits: SandboxLimits | None = None) -> ExecutionResult:
    """`run_python` as a coroutine; cancelling it kills the execution (and still cleans up).

    >>> import asyncio
    >>> asyncio.run(run_python_async("print('hi')"))["stdout"]
    'hi\\n'
    """
    cancel = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(_pool(), _execute, code, limits or SandboxLimits(),
                                                        cancel)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        raise


def _execute(code: str, limits: SandboxLimits, cancel: threading.Event | None) -> ExecutionResult:
    """One execution under the detected plan, refused (before any code starts) while a protection does not
    hold and neither `limits.allow_missing` nor the environment allows it to be missing."""
    check_arguments(code, limits)
    plan = current_plan()
    allowed = limits.allow_missing | allowed_missing()
    missing = [p for p in PROTECTIONS if p not in plan.held and p not in allowed]
    if missing:
        raise SandboxUnavailableError(plan.refusal(missing), missing)
    return execute_with_plan(code, limits, plan, cancel)

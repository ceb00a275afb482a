"""Calls that cannot hang their caller: a pure function run in a worker process under a hard deadline.

Some checks of model output have no bounded cost. math-verify simplifies `9^{9^{9^{9}}}` with sympy and
never returns; its own timeouts are SIGALRM-based, so they work on the main thread only (slime runs
rollouts on a background thread), and a big-integer power holds the GIL, so no other thread of the
process (the event loop included) runs meanwhile. Only another process can be stopped from outside.

`DeadlinePool.call("package.module:function", args, timeout_s=...)` sends the call to an idle worker (a
fresh interpreter running `python -m agentgraphs.deadline`, started on first use), waits at most
`timeout_s` for the answer, and on a timeout kills that worker; the next call starts a new one. Arguments
and results travel as one JSON line each way. The worker sees the caller's `sys.path` and imports the
target itself; the target must be a plain, importable, module-level function.

>>> pool = DeadlinePool(size=1)
>>> pool.call("operator:add", [2, 3], timeout_s=30)
{'ok': True, 'value': 5, 'reason': 'ok'}
>>> pool.call("time:sleep", [30], timeout_s=0.5)["reason"]
'timeout: time:sleep did not answer within 0.5 s; its worker was killed'
>>> pool.close()
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Sequence, TypedDict

__all__ = ["CallResult", "DeadlinePool"]

_STARTUP_TIMEOUT_S = 120.0  # a cold interpreter on a busy machine; never counted in a call's deadline
_READY = b"agentgraphs-deadline-ready\n"


class CallResult(TypedDict):
    """What a call gave: `ok` with `value`, or not ok with a `reason` ("timeout: ...", "error: ...")."""

    ok: bool
    value: Any
    reason: str


def _popen(preload: Sequence[str]) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    paths = [p for p in sys.path if isinstance(p, str) and p]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.Popen([sys.executable, "-m", "agentgraphs.deadline", *preload],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0, close_fds=True)


class _Spawner:
    """Starts worker processes from one thread that lives as long as the process.

    A worker asks the kernel to kill it when its parent dies (so a call hung in C cannot outlive the
    caller), and Linux means the parent THREAD: a worker started from a short-lived thread (an
    `asyncio.to_thread` worker) would die with that thread.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[tuple[str, ...], Future[subprocess.Popen[bytes]]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, preload: Sequence[str]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="agentgraphs-deadline-spawner",
                                                daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((tuple(preload), done))
        return done.result()

    def _serve(self) -> None:
        while True:
            preload, done = self._requests.get()
            try:
                done.set_result(_popen(preload))
            except BaseException as exc:  # handed to the caller, who reports it
                done.set_exception(exc)


_SPAWNER = _Spawner()


class _Worker:
    """One worker process; used by one thread at a time (the pool hands it out)."""

    def __init__(self, preload: Sequence[str]) -> None:
        self.proc = _SPAWNER.start(preload)
        self._buffer = b""
        try:
            line = self._read_line(time.monotonic() + _STARTUP_TIMEOUT_S)
        except EOFError:
            line = b"<exited>"
        if line != _READY:
            self.kill()
            raise RuntimeError(f"agentgraphs.deadline worker did not start (said {line!r}); run "
                               f"`{sys.executable} -m agentgraphs.deadline` to see why")

    def ask(self, request: bytes, deadline: float) -> bytes | None:
        """Send one request line; its answer line, or None when the deadline passed first."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(request)
        return self._read_line(deadline)

    def _read_line(self, deadline: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("the worker exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class DeadlinePool:
    """Up to `size` worker processes running pure functions under a deadline (see the module docstring).

    Thread-safe: any thread may call `call`; a call waits for an idle worker (that wait is not part of
    its deadline). `preload` names what each worker does before it takes calls, outside every deadline:
    a module to import ("package.module") or a function to call once ("package.module:function", e.g. to
    warm caches). Workers start on first use and are killed at interpreter exit.
    """

    def __init__(self, size: int = 2, *, preload: Sequence[str] = ()) -> None:
        if size < 1:
            raise ValueError(f"DeadlinePool size must be >= 1, got {size}")
        self.preload = tuple(preload)
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(size):
            self._slots.put(None)  # a slot without a worker starts one when it is taken
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()
        self.kills = 0  # workers killed at a deadline (for tests and logs)
        atexit.register(self.close)

    def call(self, target: str, args: Sequence[Any], *, timeout_s: float) -> CallResult:
        """`target(*args)` in a worker, answered within `timeout_s` seconds or killed."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        request = (json.dumps({"target": target, "args": list(args)}) + "\n").encode()
        worker = self._slots.get()
        try:
            if worker is None:
                worker = self._start()
            try:
                line = worker.ask(request, time.monotonic() + timeout_s)
            except (OSError, EOFError) as exc:  # the worker died under the call (memory, a crash)
                self._retire(worker)
                worker = None
                return CallResult(ok=False, value=None, reason=f"error: the worker of {target} died ({exc})")
            if line is None:
                self._retire(worker)
                worker = None
                self.kills += 1
                return CallResult(ok=False, value=None, reason=f"timeout: {target} did not answer within "
                                                               f"{timeout_s:g} s; its worker was killed")
            answer = json.loads(line)
            if "error" in answer:
                return CallResult(ok=False, value=None, reason=f"error: {answer['error']}")
            return CallResult(ok=True, value=answer["value"], reason="ok")
        finally:
            self._slots.put(worker)

    async def acall(self, target: str, args: Sequence[Any], *, timeout_s: float) -> CallResult:
        """`call` from async code: the wait happens on a thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.call, target, args, timeout_s=timeout_s)

    def _start(self) -> _Worker:
        worker = _Worker(self.preload)
        with self._lock:
            self._live.add(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self._live.discard(worker)
        worker.kill()

    def close(self) -> None:
        """Kill every worker (idle ones included); the pool starts new ones if used again."""
        with self._lock:
            live, self._live = list(self._live), set()
        for worker in live:
            worker.kill()


# -- the worker side ----------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when its parent dies (a hung call must not outlive it)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _resolve(target: str, cache: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    fn = cache.get(target)
    if fn is None:
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        cache[target] = fn
    return fn


def _serve(preload: Sequence[str]) -> None:
    """Answer JSON requests on stdin, one line each, on the original stdout; prints go to stderr."""
    _die_with_parent()
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a library that prints must not corrupt the answers
    for target in preload:
        try:
            if ":" in target:
                _resolve(target, {})()
            else:
                importlib.import_module(target)
        except Exception:  # reported by the first call that needs it
            pass
    answers.write(_READY)
    cache: dict[str, Callable[..., Any]] = {}
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            reply = json.dumps({"value": _resolve(request["target"], cache)(*request["args"])})
        except Exception as exc:  # the call's own failure (or a result JSON cannot carry) is its answer
            reply = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]})
        answers.write((reply + "\n").encode())


if __name__ == "__main__":
    _serve(sys.argv[1:])

"""A watchdog for a user's async function that blocks the event loop it runs on.

An `async def` reward (or eval_metrics) that calls something blocking (`time.sleep`, a CPU-bound loop, a
sync HTTP client) holds the event loop: the timeout that bounds it (`asyncio.wait`) is itself a callback on
that loop, so it cannot fire, and every other rollout of slime's rollout process stands still with it.

`guarded(coro, fn, what, timeout_s)` watches one such call (`coro`, what `fn(...)` returned) from a thread of
its own. Once the call is past its timeout (and a short grace, in which a loop that is merely busy handles
the timeout itself) while the loop's thread is still executing inside that coroutine's frame, the watchdog

- logs an ERROR naming the function, its timeout and the stack it is blocked in, once;
- raises `LoopBlocked` (a RewardError) inside that thread, with CPython's `PyThreadState_SetAsyncExc`: Python
  code (a busy loop, sympy) stops at its next bytecode; a blocking C call (`time.sleep`, a socket read) at
  its return. It raises again every `REPEAT_S` while the frame is still there (code that swallows it);
- marks the call blocked (`Watch.blocked`), so that its result is refused even when it returns a value.

Nothing here can stop a C call that never returns; the ERROR says where it is stuck.

>>> import asyncio, time
>>> async def bad_reward() -> float:
...     time.sleep(0.5)  # blocks the loop: the bug this module catches
...     return 1.0
>>> async def main() -> str:
...     coro = bad_reward()
...     with guarded(coro, bad_reward, "reward function", 0.1) as watch:
...         try:
...             await coro
...         except LoopBlocked:
...             return f"refused: blocked {watch.blocked}"
...     return "returned"
>>> asyncio.run(main())
'refused: blocked True'
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Iterator

from .errors import RewardError

__all__ = ["GRACE_S", "LoopBlocked", "REPEAT_S", "Watch", "guarded"]

logger = logging.getLogger(__name__)

GRACE_S = 0.25  # past the timeout: a loop that is only busy handles its own timeout in this time
REPEAT_S = 1.0  # LoopBlocked raised again at this interval while the frame is still running (it was swallowed)
_POLL_S = 0.05


class LoopBlocked(RewardError):
    """An async function blocked the event loop past its timeout (raised inside it by the watchdog)."""

    message = "an async function blocked the event loop past its timeout"

    def __init__(self, *args: Any) -> None:  # raised as a class by PyThreadState_SetAsyncExc: no arguments
        super().__init__(*(args or (self.message,)))


@dataclass(eq=False)  # each call its own watch: compared and hashed by identity
class Watch:
    """One guarded call: what the watchdog reads, and whether it found the call blocking the loop."""

    name: str
    what: str
    timeout_s: float
    thread_id: int
    coro: Any  # the coroutine watched; its frame (cr_frame) is what the loop's thread is checked for
    deadline: float
    blocked: bool = False
    where: str = ""  # file:line the loop's thread was blocked at when the watchdog fired
    last_raise: float = field(default=0.0, repr=False)

    def error(self) -> str:
        """The message a blocked call fails with: what it did and what to do instead."""
        at = f" (at {self.where})" if self.where else ""
        return (f"{self.what} {self.name} blocked the event loop past its {self.timeout_s} s{at} (Limits."
                "reward_timeout_s; slime: agentgraph_reward_timeout_s): the loop stood still, and every rollout "
                "on it, while it ran. An async function must await, never block: make it a plain `def` "
                "(agentgraphs runs that in a thread of its own, bounded) or move the blocking part into "
                "`await asyncio.to_thread(...)`")



_watches: set[Watch] = set()
_lock = threading.Condition()
_thread: threading.Thread | None = None


@contextmanager
def guarded(coro: Any, fn: Callable[..., Any], what: str, timeout_s: float) -> Iterator[Watch]:
    """Watch `coro` (what `fn(...)` returned), awaited inside the block on the current thread's event loop.
    An awaitable that is not a coroutine has no frame to watch: it is never marked blocked."""
    from .rollout import function_name  # the one owner of a user function's printed name

    watch = Watch(name=function_name(fn), what=what, timeout_s=timeout_s, thread_id=threading.get_ident(),
                  coro=coro, deadline=time.monotonic() + timeout_s)
    with _lock:
        _watches.add(watch)
        _start()
        _lock.notify()
    try:
        yield watch
    finally:
        with _lock:
            _watches.discard(watch)


def _start() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run, name="agentgraphs-loop-guard", daemon=True)
        _thread.start()


def _run() -> None:
    while True:
        with _lock:
            while not _watches:
                _lock.wait()
            now = time.monotonic()
            due = [w for w in _watches if now > w.deadline + GRACE_S]
            if not due:  # asleep until the first call could be due (a new call wakes it: guarded's notify)
                _lock.wait(min(w.deadline for w in _watches) + GRACE_S - now + _POLL_S)
                continue
        for watch in due:
            with _lock:
                if watch in _watches:  # not a call that ended since `due` was read
                    _check(watch)
        time.sleep(_POLL_S)


def _check(watch: Watch) -> None:
    frame = _frame_running(watch)
    if frame is None:  # the loop is not inside the call now: the loop's own timeout handles it
        return
    now = time.monotonic()
    if not watch.blocked:
        watch.blocked = True
        watch.where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        stack = "".join(traceback.format_stack(frame))
        logger.error("%s\nthe event loop's thread is blocked here:\n%s", watch.error(), stack)
    if now - watch.last_raise >= REPEAT_S:
        watch.last_raise = now
        _raise_in(watch)


def _frame_running(watch: Watch) -> FrameType | None:
    """The innermost frame of the loop's thread when `watch`'s coroutine is running on it, else None."""
    mine = getattr(watch.coro, "cr_frame", None)
    if mine is None:  # not a coroutine, or one that has finished
        return None
    top = sys._current_frames().get(watch.thread_id)
    frame = top
    while frame is not None:
        if frame is mine:
            return top
        frame = frame.f_back
    return None


def _raise_in(watch: Watch) -> None:
    exc = type("LoopBlocked", (LoopBlocked,), {"message": watch.error()})
    hit = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(watch.thread_id), ctypes.py_object(exc))
    if hit > 1:  # never expected: undo, as CPython's documentation asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(watch.thread_id), None)

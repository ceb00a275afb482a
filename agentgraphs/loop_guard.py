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

`rollout_running(max_time_s)` does the same for a graph's own code: an `async def` node that blocks the loop
holds the rollout's max_time_s deadline (`asyncio.wait_for`, a callback on that loop) as it would a reward's. While
rollouts run, the watchdog sends the loop a probe every `PROBE_S`; a probe left unanswered for longer than the
shortest max_time_s of the rollouts on that loop means one step has held the loop for a whole rollout's budget:
that rollout began before the step, so its deadline has passed unseen, and no loop that is only busy takes that
long to turn. The step is the bug, whichever rollout it runs for. When the loop's thread is then
inside LangGraph's node machinery, the watchdog logs an ERROR with the stack and raises `NodeBlockedLoop` there:
the node raises it, and its rollout fails with the message, while the others on the loop go on. Blocked elsewhere
(not in a graph), it only logs the ERROR.

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

import asyncio
import ctypes
import logging
import os
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Iterator

from .errors import AgentGraphsError, RewardError

__all__ = ["GRACE_S", "LoopBlocked", "NodeBlockedLoop", "PROBE_S", "REPEAT_S", "Watch", "guarded",
           "rollout_running"]

logger = logging.getLogger(__name__)

GRACE_S = 0.25  # past the timeout: a loop that is only busy handles its own timeout in this time
REPEAT_S = 1.0  # LoopBlocked raised again at this interval while the frame is still running (it was swallowed)
_POLL_S = 0.05
PROBE_S = 1.0  # while rollouts run, the loop is sent a probe at this interval (one callback; nothing else)


class LoopBlocked(RewardError):
    """An async function blocked the event loop past its timeout (raised inside it by the watchdog)."""

    message = "an async function blocked the event loop past its timeout"

    def __init__(self, *args: Any) -> None:  # raised as a class by PyThreadState_SetAsyncExc: no arguments
        super().__init__(*(args or (self.message,)))


class NodeBlockedLoop(AgentGraphsError):
    """A graph's node blocked the event loop for longer than a rollout's whole max_time_s (raised inside it)."""

    message = "a graph node blocked the event loop for longer than a rollout's max_time_s"

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



@dataclass(eq=False)
class LoopWatch:
    """The rollouts running on one event loop (their max_time_s each) and the probe the watchdog sent it."""

    loop: asyncio.AbstractEventLoop
    thread_id: int
    limits: list[float] = field(default_factory=list)
    probe_sent: float | None = None  # when the unanswered probe was sent; None: answered
    reported: bool = False  # this blocked stretch was logged
    last_raise: float = 0.0

    def answer(self) -> None:  # the probe, run by the loop: it turned
        self.probe_sent, self.reported = None, False

    def error(self, where: str) -> str:
        limit = min(self.limits)
        return (f"an async graph node blocked the event loop for over {limit} s, a rollout's whole max_time_s "
                f"(Limits.max_time_s; slime: agentgraph_max_time_s), at {where}: the loop stood still, and every "
                "rollout on it. An async node must await, never block: make it a plain `def` (LangGraph runs that "
                "in a thread) or move the blocking part into `await asyncio.to_thread(...)`")


_watches: set[Watch] = set()
_loops: dict[int, LoopWatch] = {}  # by id(loop), while it runs rollouts with a max_time_s
_lock = threading.Condition()
_thread: threading.Thread | None = None
_LANGGRAPH = os.sep + "langgraph" + os.sep  # a frame of LangGraph's own code: a node is running under it


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


@contextmanager
def rollout_running(max_time_s: float | None) -> Iterator[None]:
    """Count a rollout with this max_time_s as running on the current event loop (see the module's docstring);
    None (no deadline) watches nothing."""
    if max_time_s is None:
        yield
        return
    loop = asyncio.get_running_loop()
    with _lock:
        watch = _loops.setdefault(id(loop), LoopWatch(loop=loop, thread_id=threading.get_ident()))
        watch.limits.append(max_time_s)
        _start()
        _lock.notify()
    try:
        yield
    finally:
        with _lock:
            watch.limits.remove(max_time_s)
            if not watch.limits:
                _loops.pop(id(loop), None)


def _start() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run, name="agentgraphs-loop-guard", daemon=True)
        _thread.start()


def _run() -> None:
    while True:
        with _lock:
            while not _watches and not _loops:
                _lock.wait()
            _probe_loops()
            now = time.monotonic()
            due = [w for w in _watches if now > w.deadline + GRACE_S]
            if not due:  # asleep until the first call could be due or the next probe (a new one wakes it)
                wake = [w.deadline + GRACE_S - now + _POLL_S for w in _watches] + ([PROBE_S] if _loops else [])
                _lock.wait(min(wake))
                continue
        for watch in due:
            with _lock:
                if watch in _watches:  # not a call that ended since `due` was read
                    _check(watch)
        time.sleep(_POLL_S)


def _probe_loops() -> None:
    """Send each rollout loop a probe, or, when its last one is still unanswered past the shortest max_time_s
    of its rollouts, stop the node that holds it (called with the lock held)."""
    now = time.monotonic()
    for watch in list(_loops.values()):
        if watch.probe_sent is None:
            watch.probe_sent = now
            try:
                watch.loop.call_soon_threadsafe(watch.answer)
            except RuntimeError:  # the loop closed under its rollouts: nothing left to watch
                _loops.pop(id(watch.loop), None)
        elif now - watch.probe_sent > min(watch.limits):
            _stop_blocking_node(watch, now)


def _stop_blocking_node(watch: LoopWatch, now: float) -> None:
    top = sys._current_frames().get(watch.thread_id)
    frame, in_graph = top, False
    while frame is not None and not in_graph:
        in_graph = _LANGGRAPH in frame.f_code.co_filename
        frame = frame.f_back
    where = f"{top.f_code.co_filename}:{top.f_lineno}" if top is not None else "an unknown place"
    if not watch.reported:
        watch.reported = True
        stack = "".join(traceback.format_stack(top)) if top is not None else ""
        action = "raising NodeBlockedLoop in it" if in_graph else "not inside a graph node: left running"
        logger.error("%s (%s)\nthe event loop's thread is blocked here:\n%s", watch.error(where), action, stack)
    if in_graph and now - watch.last_raise >= REPEAT_S:
        watch.last_raise = now
        exc = type("NodeBlockedLoop", (NodeBlockedLoop,), {"message": watch.error(where)})
        _set_async_exc(watch.thread_id, exc)


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
    _set_async_exc(watch.thread_id, type("LoopBlocked", (LoopBlocked,), {"message": watch.error()}))


def _set_async_exc(thread_id: int, exc: type[BaseException]) -> None:
    hit = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))
    if hit > 1:  # never expected: undo, as CPython's documentation asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)

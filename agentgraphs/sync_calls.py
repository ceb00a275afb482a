"""Sync engine calls in flight, cancelled when the run that made them ends: one owner for rollouts and debugger steps.

A `def` node's `TracedChatModel.invoke()` runs in a worker thread (LangGraph runs sync nodes in the event loop's
default executor) that waits on a coroutine of a background event loop. Cancelling the run (a rollout's deadline,
slime's cancel, a debugger step's interrupt or timeout) cancels the node's asyncio task but cannot reach that
thread: the call would run to its answer, holding the thread and the server's work. So the run opens a
`SyncCalls` scope (`cancelling_sync_calls`, a context variable LangGraph hands on to every node), each sync call
waits through it (`wait_for_call`), and the scope's end cancels the calls still in flight: the coroutine is
cancelled, the engine aborts its request (SGLangEngine: /abort_request by rid; HFEngine stops between tokens),
the waiting thread raises `CallCancelled` and is free at once. Plain Python: no LangGraph.

>>> import concurrent.futures
>>> with cancelling_sync_calls("the demo ended") as scope:
...     pending = concurrent.futures.Future()
...     scope.hold(pending)
True
>>> pending.cancelled(), scope.closed
(True, True)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import TypeVar

from .errors import CallCancelled

T = TypeVar("T")


class SyncCalls:
    """The sync calls in flight of one run; `close()` (the run's end) cancels them and refuses later ones.

    `ended`: how the run's end reads in a cancelled call's error, e.g. "the rollout ended (its max_time_s
    deadline, a cancellation, or its end)"."""

    def __init__(self, ended: str) -> None:
        self.ended = ended
        self.closed = False
        self._futures: set[concurrent.futures.Future[object]] = set()
        self._lock = threading.Lock()

    def hold(self, future: concurrent.futures.Future[T]) -> bool:
        """Keep a sync call's future (its coroutine on another loop) until `release`, to be cancelled when the run
        ends. False, with the future cancelled, when it has ended already."""
        with self._lock:
            if not self.closed:
                self._futures.add(future)  # type: ignore[arg-type]
                return True
        future.cancel()
        return False

    def release(self, future: concurrent.futures.Future[T]) -> None:
        with self._lock:
            self._futures.discard(future)  # type: ignore[arg-type]

    def close(self) -> int:
        """The run ended: cancel its sync calls still in flight, refuse later ones; how many were cancelled."""
        with self._lock:
            self.closed = True
            pending, self._futures = list(self._futures), set()
        return sum(future.cancel() for future in pending)

    def wait(self, future: concurrent.futures.Future[T], what: str) -> T:
        """`future.result()`, unless the run ends first: then the call is cancelled and `CallCancelled` raised."""
        try:
            if self.hold(future):
                return future.result()
        except concurrent.futures.CancelledError:
            if not self.closed:
                raise
        finally:
            self.release(future)
        raise CallCancelled(f"{what}: {self.ended} while this call waited; the request was aborted and nothing is "
                            "recorded. Nothing to fix in the node: the run it belonged to is over")


_SCOPE: contextvars.ContextVar[SyncCalls | None] = contextvars.ContextVar("agentgraphs_sync_calls", default=None)


@contextlib.contextmanager
def cancelling_sync_calls(ended: str) -> Iterator[SyncCalls]:
    """Run the code inside (a rollout, a debugger step) in a scope of its own; on exit, however it ended, its sync
    calls still in flight are cancelled (`SyncCalls.close`)."""
    scope = SyncCalls(ended)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)
        scope.close()


def current_sync_calls() -> SyncCalls | None:
    """The scope of the run here (None outside a rollout or debugger step): read it in the caller's context."""
    return _SCOPE.get()


def wait_for_call(future: concurrent.futures.Future[T], scope: SyncCalls | None, what: str) -> T:
    """A sync call's result: through `scope` when the call runs inside one (cancelled with its run), else plain."""
    return future.result() if scope is None else scope.wait(future, what)


__all__ = ["SyncCalls", "cancelling_sync_calls", "current_sync_calls", "wait_for_call"]

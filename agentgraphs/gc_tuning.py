"""Python's garbage collector, tuned while rollouts run in the process.

A rollout allocates many short-lived containers in every LangGraph superstep (tasks, configs, state dicts,
futures) while its trace's lists of token ids live on. With Python's default thresholds (700, 10, 10) the
collector runs a young collection every 700 container allocations and considers a full one every 10 of the
next generation's; a full collection walks every live list of token ids. At 256 concurrent MemAgent rollouts
that was most of our CPU over a hand-written loop making the same calls (bench/README.md, overhead.py: the
collector took 1.7 s of a 4.7 s run, the hand loop's 0.4 s).

While at least one rollout runs (`rollouts_running`, entered by `agentgraphs.rollout.run_rollout`), the
thresholds are raised to `ROLLOUT_THRESHOLDS`, and the process's own are put back when the last one ends,
however it ends (an exception, a cancelled task). Cyclic garbage then lives a little longer (collected every
10,000 allocations instead of 700); nothing else changes. `AGENTGRAPHS_GC_THRESHOLDS="a,b,c"` picks other
thresholds, `AGENTGRAPHS_GC_THRESHOLDS=off` leaves the collector alone. Only Python's default thresholds
(700, 10, 10) are ever replaced: a process that set its own before the first rollout keeps them, and one that
sets its own while rollouts run keeps those too (they are not overwritten when the last rollout ends).

>>> with rollouts_running():
...     gc.get_threshold() == active_thresholds() or active_thresholds() is None
True
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import ConfigError

__all__ = ["ROLLOUT_THRESHOLDS", "active_thresholds", "rollouts_running"]

ROLLOUT_THRESHOLDS = (10_000, 50, 100)
_PYTHON_DEFAULT = (700, 10, 10)
ENV = "AGENTGRAPHS_GC_THRESHOLDS"
log = logging.getLogger(__name__)

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] | None = None  # the thresholds to put back
_applied: tuple[int, int, int] | None = None  # the thresholds we set (put back only if still these)


def active_thresholds() -> tuple[int, int, int] | None:
    """The thresholds rollouts run with: ROLLOUT_THRESHOLDS, or $AGENTGRAPHS_GC_THRESHOLDS; None for `off`."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return ROLLOUT_THRESHOLDS
    if value.lower() == "off":
        return None
    try:
        a, b, c = (int(x) for x in value.split(","))
    except ValueError:
        raise ConfigError(f"{ENV}={value!r}: give three integers 'a,b,c' (gc.set_threshold) or 'off'") from None
    if min(a, b, c) < 0:
        raise ConfigError(f"{ENV}={value!r}: thresholds must be >= 0")
    return a, b, c


@contextmanager
def rollouts_running() -> Iterator[None]:
    """Raise the collector's thresholds while any rollout in the process runs (see the module doc)."""
    global _running, _saved, _applied
    with _lock:
        if _running == 0:
            wanted = active_thresholds()  # a bad $AGENTGRAPHS_GC_THRESHOLDS raises here, before anything changes
            current = gc.get_threshold()
            # only Python's defaults are replaced: a process that tuned its collector keeps its choice
            if wanted is not None and current == _PYTHON_DEFAULT:
                _saved, _applied = current, wanted
                gc.set_threshold(*wanted)
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _saved is not None:
                if gc.get_threshold() == _applied:  # else the process chose its own meanwhile: keep them
                    gc.set_threshold(*_saved)
                _saved = _applied = None

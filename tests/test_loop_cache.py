"""Per-event-loop caches (engines, retrieval clients, bridge setups): an entry lives as long as its loop.

`asyncio.run` closes its loop when it returns; a client bound to that loop can never be used again, so the
cache must neither hand it out again nor keep the loop (and the client's connection pool) alive.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from agentgraphs.context import LoopCache, running_loop, shared_engine


def test_a_closed_loops_shared_engines_go() -> None:
    async def engine() -> tuple[Any, weakref.ref[Any]]:
        return shared_engine("sglang:http://127.0.0.1:9"), weakref.ref(asyncio.get_running_loop())

    first, first_loop = asyncio.run(engine())
    gone = weakref.ref(first)
    second, _ = asyncio.run(engine())  # a new loop: a new engine, and the closed loop's entry is dropped
    assert second is not first
    del first
    gc.collect()
    assert gone() is None, "the closed loop's engine is still referenced"
    assert first_loop() is None, "the closed loop is still referenced"


def test_entries_are_per_loop_and_dropped_with_their_loop() -> None:
    cache: LoopCache[str, object] = LoopCache()

    async def twice() -> tuple[object, object]:
        return cache.get("k", object, running_loop()), cache.get("k", object, running_loop())

    a, b = asyncio.run(twice())
    assert a is b  # one value per loop and key
    loop = asyncio.new_event_loop()
    try:
        other = loop.run_until_complete(twice())
        assert other[0] is not a and cache.loops() == [loop]  # the first loop is closed: its entry went
    finally:
        loop.close()
    assert cache.loops() == []
    shared = cache.get("k", object, None)  # made with no loop: kept for the process
    assert cache.get("k", object, None) is shared and cache.pop_loop(None) == {"k": shared}

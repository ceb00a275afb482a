"""A bounded free list of single-connection httpx clients: O(1) per request at any concurrency.

httpx's pool (httpcore 1.0.x) scans every connection on every request, so one client with a large pool
spends more CPU per request the more connections it holds (~18 ms per request at 512). `ConnectionSlots`
keeps `size` clients of one connection each; a request borrows an idle one (a list pop) and waits on a
semaphore when all are busy, which is the caller's backpressure: httpx's pool timeout never fires.
SGLangEngine and RetrievalClient both send their requests through it.

Each slot holds one socket: 1,024 slots need 1,024 file descriptors on top of what the process has open,
more than the usual soft limit (`ulimit -n`: 1,024 on many distributions). `ConnectionSlots` raises the
process's soft RLIMIT_NOFILE up to its hard limit when it would not fit (`ensure_open_files`), and warns
with the fix when even the hard limit is too low (a socket over the limit fails with "Too many open files").
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from .errors import ConfigError

__all__ = ["KEEPALIVE_EXPIRY_S", "ConnectionSlots", "ensure_open_files"]

# below uvicorn's default 5 s keep-alive: never reuse a socket the server is closing
KEEPALIVE_EXPIRY_S = 4.0
FD_HEADROOM = 64  # descriptors left for everything else (logs, SQLite, the event loop's own)
log = logging.getLogger(__name__)


def ensure_open_files(more: int) -> int:
    """Make room for `more` file descriptors beyond those open now: raise the soft RLIMIT_NOFILE (up to the
    hard limit) if needed. Returns the soft limit in force; logs a warning naming the fix when the hard limit
    is too low (the process may not raise it; `ulimit -Hn` as root, or fewer connections).

    >>> ensure_open_files(1) >= 1
    True
    """
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return more
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_now = 0
    needed = open_now + more + FD_HEADROOM
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the soft limit of open files (RLIMIT_NOFILE) from %d to %d for %d connections",
                     soft, target, more)
            soft = target
        if soft < needed:
            log.warning("%d connections need about %d open files, but this process may open %d (hard limit %d): "
                        "connections past it fail with 'Too many open files'. Raise the limit (`ulimit -n %d` "
                        "before starting, as a user allowed to) or use fewer connections (max_connections)",
                        more, needed, soft, hard, needed)
    return int(soft)


class ConnectionSlots:
    """`size` single-connection clients, each lent to one request at a time.

    >>> import asyncio
    >>> async def main() -> int:
    ...     slots = ConnectionSlots(2, httpx.Timeout(1.0),
    ...                             transport=httpx.MockTransport(lambda r: httpx.Response(204)))
    ...     async with slots.lend() as client:
    ...         status = (await client.get("http://127.0.0.1:9/health")).status_code
    ...     await slots.aclose()
    ...     return status
    >>> asyncio.run(main())
    204
    """

    def __init__(self, size: int, timeout: httpx.Timeout, *, trust_env: bool = True,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if size < 1:
            raise ConfigError(f"max_connections={size}: send at least 1")
        ensure_open_files(size)
        self._timeout = timeout
        self._trust_env = trust_env
        self._transport = transport
        self._free = asyncio.Semaphore(size)
        self._idle: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        self._ssl: ssl.SSLContext | None = None  # shared: building one per client costs ms

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[httpx.AsyncClient]:
        async with self._free:
            client = self._idle.pop() if self._idle else self._new()
            try:
                yield client
            finally:
                self._idle.append(client)

    def _new(self) -> httpx.AsyncClient:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        client = httpx.AsyncClient(
            timeout=self._timeout, verify=self._ssl, trust_env=self._trust_env, transport=self._transport,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1,
                                keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )
        self._all.append(client)
        return client

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._all))
        self._all.clear()
        self._idle.clear()

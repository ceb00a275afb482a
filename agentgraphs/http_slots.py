"""A bounded free list of single-connection httpx clients: O(1) per request at any concurrency.

httpx's pool (httpcore 1.0.x) scans every connection on every request, so one client with a large pool
spends more CPU per request the more connections it holds (~18 ms per request at 512). `ConnectionSlots`
keeps `size` clients of one connection each; a request borrows an idle one (a list pop) and waits on a
semaphore when all are busy, which is the caller's backpressure: httpx's pool timeout never fires.
SGLangEngine and RetrievalClient both send their requests through it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from .errors import ConfigError

__all__ = ["KEEPALIVE_EXPIRY_S", "ConnectionSlots"]

# below uvicorn's default 5 s keep-alive: never reuse a socket the server is closing
KEEPALIVE_EXPIRY_S = 4.0


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

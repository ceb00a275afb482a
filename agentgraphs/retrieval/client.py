"""Async client of the retrieval service: explicit timeouts, bounded retries, one typed error.

Connection errors, timeouts, 5xx, 408 and 429 are retried with capped, jittered exponential backoff
(`agentgraphs.http_retry`, the engines' policy); any other 4xx (the request itself is wrong) is not. Whatever
fails, the caller gets a `RetrievalError` saying where, how often and why, which a tool turns into an error
observation instead of a crashed rollout.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import httpx

from ..errors import ConfigError, RetrievalError
from ..http_retry import DEFAULT_BACKOFF_CAP_S, backoff_delay, retryable_status
from ..http_slots import ConnectionSlots
from .index import Hit

__all__ = ["RetrievalClient", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8000"


class RetrievalClient:
    """`await client.search("query", topk=3)` -> hits, against `agentgraphs retrieval serve`.

    At most `max_connections` requests are in flight (default 8; more wait for a slot). Each goes over
    its own single-connection httpx client (`agentgraphs.http_slots.ConnectionSlots`), so a request
    costs the same CPU at any concurrency: httpcore's own pool scans every connection per request.

    >>> import asyncio
    >>> async def main():
    ...     async with RetrievalClient("http://127.0.0.1:9", retries=0, timeout_s=1.0) as client:
    ...         try:
    ...             await client.search("anything")
    ...         except RetrievalError as exc:
    ...             return exc.attempts
    >>> asyncio.run(main())
    1
    """

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout_s: float = 10.0, retries: int = 2,
                 backoff_s: float = 0.25, backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S, max_connections: int = 8,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"retrieval url {base_url!r}: expected http://HOST:PORT")
        if timeout_s <= 0 or retries < 0 or backoff_s < 0 or backoff_cap_s < 0:
            raise ConfigError("retrieval client: timeout_s must be > 0, retries, backoff_s and backoff_cap_s >= 0")
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_cap_s = backoff_cap_s
        self._rng = random.Random()  # per client: jitter decorrelates workers, no global state
        self._slots = ConnectionSlots(max_connections, httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
                                      trust_env=False, transport=transport)

    async def __aenter__(self) -> RetrievalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._slots.aclose()

    async def search(self, query: str, topk: int = 3, *, eid: str | None = None) -> list[Hit]:
        """The top-k hits for one query, best first (of the example `eid`'s documents only, when given)."""
        return (await self.retrieve([query], topk=topk, eid=eid))[0]

    async def retrieve(self, queries: Sequence[str], topk: int = 3, *, eid: str | None = None) -> list[list[Hit]]:
        """One ranked list of hits per query (one request). A non-empty `eid` asks the service for the seed's
        per-example filter; a service that cannot filter refuses it (RetrievalError with field "eid")."""
        url = f"{self.base_url}/retrieve"
        body: dict[str, Any] = {"queries": list(queries), "topk": topk, "return_scores": True}
        if eid:
            body["eid"] = eid
        last = "no attempt made"
        for attempt in range(1, self.retries + 2):
            try:
                async with self._slots.lend() as http:
                    response = await http.post(url, json=body)
            except httpx.TimeoutException as exc:
                last = f"timed out ({type(exc).__name__})"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    return _parse(response, url, attempt, len(queries))
                last = f"HTTP {response.status_code}: {_error_text(response)}"
                if not retryable_status(response.status_code):
                    raise RetrievalError(url, attempt, f"request rejected, {last}", field=_error_field(response))
            if attempt <= self.retries:
                await asyncio.sleep(backoff_delay(attempt, self.backoff_s, self.backoff_cap_s, self._rng))
        raise RetrievalError(url, self.retries + 1, last)


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))[:300]
    except (ValueError, AttributeError):
        return response.text[:300]


def _error_field(response: httpx.Response) -> str | None:
    """The request field a 400 names ({"error", "field"}), if any."""
    try:
        field = response.json().get("field")
    except (ValueError, AttributeError):
        return None
    return field if isinstance(field, str) else None


def _parse(response: httpx.Response, url: str, attempt: int, n_queries: int) -> list[list[Hit]]:
    """Hits from either answer shape: ours and Search-R1's {"result": [[...]]}, or the bare [[...]] of
    ToolOrchestra's servers (NVlabs' retrieval_wiki.py, the seed's retrieval_general_thought.py)."""
    try:
        body: Any = response.json()
        result: Any = body if isinstance(body, list) else body["result"]
        if not isinstance(result, list) or len(result) != n_queries:
            raise ValueError(f"expected {n_queries} result list(s)")
        return [[Hit(document=_document(h["document"]), score=float(h["score"])) for h in hits] for hits in result]
    except (ValueError, KeyError, TypeError) as exc:
        raise RetrievalError(url, attempt, f"the answer breaks the /retrieve contract ({exc})") from None


def _document(doc: Any) -> Any:
    """The document with its text under "contents" (the seed's server names it "content")."""
    if isinstance(doc, dict) and not isinstance(doc.get("contents"), str) and isinstance(doc.get("content"), str):
        doc = {**doc, "contents": doc["content"]}
    if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
        raise ValueError("a document without text 'contents' (or 'content')")
    return doc

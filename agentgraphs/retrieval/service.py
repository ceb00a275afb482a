"""The retrieval HTTP service (starlette + uvicorn), in the request/response shape of the seed's server.

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id", "contents", "title"?}, "score": 12.3}, ...], ...]}
         (one ranked list per query; with "return_scores": false each item is the bare document)
    GET  /health    -> {"status": "ok", "kind": "bm25", "passages": N}

That is Search-R1's answer. ToolOrchestra's own servers on port 8000 (NVlabs' retrieval_wiki.py, the seed's
retrieval_general_thought.py) take the same request but answer the bare list of lists, which their clients
index directly (`results[0]`): serve with `bare_list` (`agentgraphs retrieval serve --bare-list`) for them.
`RetrievalClient` reads either answer. A malformed request is a 400 whose "error"
names the field and the fix: a body that is not JSON (or nested too deeply to parse), a missing or
mistyped field, an unknown field, a non-empty "eid" when the service has no example-id file (never
answered unfiltered), more than 512 queries, a query longer than
`max_query_chars` characters (default 8192; `agentgraphs retrieval serve --max-query-chars`), or a body
larger than any valid request can be.
Concurrent requests are coalesced into batched searches run on a few worker threads
(`agentgraphs.retrieval.batcher`, `--workers`, default 4), so the event loop keeps accepting requests, a
busy service answers many queries per `index.search` call, and one slow search does not hold up the
others; every request still gets exactly its own queries' hits.
    GET  /stats     -> {"requests", "queries", "batches", "searches"} counted since start

A request's "eid" filters its hits as the seed's server does (`example_ids`): started with an example-id file
(`example_ids`, `--example-ids FILE`), an eid the file lists is answered from the best `CANDIDATES` (1000)
hits, keeping that eid's documents only, up to topk; an eid the file lacks, an empty or a null eid keep every
hit. The seed's server always has its file; ours without one refuses a non-empty eid (400, field 'eid').
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .batcher import SearchBatcher
from .example_ids import (
    CANDIDATES,
    ExampleIds,
    allowed_ids,
    filter_hits,
    load_example_ids,
)
from .index import Hit, SearchIndex, load_index

__all__ = ["DEFAULT_KEEP_ALIVE_S", "DEFAULT_PORT", "MAX_QUERY_CHARS", "make_app", "parse_request", "serve"]

DEFAULT_PORT = 8000
DEFAULT_TOPK = 3
MAX_TOPK = 100
MAX_QUERIES = 512
MAX_QUERY_CHARS = 8192
REQUEST_FIELDS = frozenset({"queries", "topk", "return_scores", "eid"})
INLINE_JSON_BYTES = 64 * 1024  # larger bodies are parsed on a thread, off the event loop
# How long an idle keep-alive connection stays open. uvicorn's default (5 s) equals httpx's default client
# expiry (`keepalive_expiry=5.0`, which slime's shared client keeps), so a client could send on a socket the
# server was closing at that moment: httpx.ReadError, seen with a slime-style client at 1,024 concurrent
# ToolOrchestra rollouts (bench/scale.py). Longer than any usual client expiry, the client always closes first.
DEFAULT_KEEP_ALIVE_S = 75


NO_EXAMPLE_IDS = ("field 'eid': {eid!r:.80} asks for the seed's per-example document filter, but this service was "
                  "started without an example-id file; restart it with `agentgraphs retrieval serve INDEX "
                  "--example-ids FILE` (the seed's example_id_file, {{eid: [document ids]}}), or send no eid to "
                  "search the whole index")


class RequestError(ValueError):
    """A /retrieve body outside the contract (answered with HTTP 400, its "field" naming the bad field)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def parse_request(body: Any, *, max_topk: int = MAX_TOPK, max_query_chars: int = MAX_QUERY_CHARS
                  ) -> tuple[list[str], int, bool, str | None]:
    """(queries, topk, return_scores, eid) from a /retrieve body; RequestError names the bad field.

    >>> parse_request({"queries": ["who wrote hamlet"], "topk": 2, "return_scores": True, "eid": "qa____3"})
    (['who wrote hamlet'], 2, True, 'qa____3')
    >>> parse_request({"queries": "x"})
    Traceback (most recent call last):
    ...
    agentgraphs.retrieval.service.RequestError: field 'queries': expected a list of strings, got str; send {"queries": ["..."]}
    """
    if not isinstance(body, dict):
        raise RequestError('the body must be a JSON object like {"queries": ["..."], "topk": 3}')
    queries = body.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError(f"field 'queries': expected a list of strings, got {type(queries).__name__}; "
                           'send {"queries": ["..."]}', "queries")
    if not 1 <= len(queries) <= MAX_QUERIES:
        raise RequestError(f"field 'queries': {len(queries)} queries; send between 1 and {MAX_QUERIES}", "queries")
    long = next((i for i, q in enumerate(queries) if len(q) > max_query_chars), None)
    if long is not None:
        raise RequestError(f"field 'queries': query {long} has {len(queries[long])} characters; the limit is "
                           f"{max_query_chars} (agentgraphs retrieval serve --max-query-chars): send a shorter query",
                           "queries")
    topk = body.get("topk", DEFAULT_TOPK)
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_topk:
        raise RequestError(f"field 'topk': {topk!r}; send an integer between 1 and {max_topk}", "topk")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(f"field 'return_scores': {return_scores!r}; send true or false", "return_scores")
    eid = body.get("eid")
    if eid is not None and not isinstance(eid, str):
        raise RequestError(f"field 'eid': {eid!r:.80}; send the example's id as a string (or null: no filter)", "eid")
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        raise RequestError(f"unknown field {unknown[0]!r:.80}; a request has only {sorted(REQUEST_FIELDS)}",
                           str(unknown[0]))
    return queries, topk, return_scores, eid


def _shape(hits: list[list[Hit]], return_scores: bool) -> list[list[Any]]:
    if return_scores:
        return [[{"document": h["document"], "score": h["score"]} for h in q] for q in hits]
    return [[h["document"] for h in q] for q in hits]


def max_body_bytes(max_query_chars: int) -> int:
    """The largest body a valid request can have: MAX_QUERIES queries of max_query_chars characters, each
    character written as a JSON surrogate pair escape (12 bytes), plus room for the rest.

    >>> max_body_bytes(MAX_QUERY_CHARS) // 2**20  # MiB
    48
    """
    return MAX_QUERIES * max_query_chars * 12 + 64 * 1024


async def _read_body(request: Any, limit: int) -> bytes | None:
    """The request body, or None as soon as it grows past `limit` bytes (the rest is never read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _loads(raw: bytes) -> Any:
    """JSON, with every parse failure as ValueError (a deeply nested body raises RecursionError)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("the body is nested too deeply") from None


def make_app(index: SearchIndex, *, max_topk: int = MAX_TOPK, batch_window_s: float = 0.0,
             max_batch_queries: int = 128, max_query_chars: int = MAX_QUERY_CHARS, workers: int = 4,
             bare_list: bool = False, example_ids: ExampleIds | None = None) -> Any:
    """The ASGI app serving `index` (run it with uvicorn, or `serve`).

    `example_ids` ({eid: allowed document ids}, `example_ids.load_example_ids`) filters the hits of a request
    carrying an eid it lists, as the seed's server does; without it a request with a non-empty eid is a 400.

    Searches go through a `SearchBatcher(index, max_queries=max_batch_queries, window_s=batch_window_s,
    workers=workers)`; a query longer than `max_query_chars` characters is a 400. `bare_list` answers the
    per-query lists without the {"result": ...} wrapper, as ToolOrchestra's own servers do.
    """
    if max_query_chars < 1:
        raise ConfigError(f"retrieval service: max_query_chars={max_query_chars} must be >= 1")
    body_limit = max_body_bytes(max_query_chars)
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def retrieve(request: Request) -> JSONResponse:
        raw = await _read_body(request, body_limit)
        if raw is None:
            return JSONResponse({"error": f"the body is over {body_limit} bytes, larger than any valid request "
                                          f"(at most {MAX_QUERIES} queries of {max_query_chars} characters)"},
                                status_code=400)
        try:
            body = _loads(raw) if len(raw) <= INLINE_JSON_BYTES else await asyncio.to_thread(_loads, raw)
        except ValueError as exc:
            return JSONResponse({"error": f"the body is not JSON ({str(exc)[:120]})"}, status_code=400)
        try:
            queries, topk, return_scores, eid = parse_request(body, max_topk=max_topk,
                                                              max_query_chars=max_query_chars)
        except RequestError as exc:
            return JSONResponse({"error": str(exc), "field": exc.field}, status_code=400)
        if example_ids is None:
            if eid:  # answering unfiltered would hand the client documents it asked to exclude
                return JSONResponse({"error": NO_EXAMPLE_IDS.format(eid=eid), "field": "eid"}, status_code=400)
            hits = await batcher.search(queries, topk)
        else:
            allowed = allowed_ids(example_ids, eid)
            if allowed is None:  # no eid, or one the file lacks: every hit, as the seed
                hits = await batcher.search(queries, topk)
            else:  # the seed filters its 1000 best hits, then keeps the first topk
                hits = [filter_hits(h, allowed, topk) for h in await batcher.search(queries, CANDIDATES)]
        shaped = _shape(hits, return_scores)
        return JSONResponse(shaped if bare_list else {"result": shaped})

    async def health(request: Request) -> JSONResponse:
        health = {"status": "ok", "kind": index.kind, "passages": len(index.passages)}
        if example_ids is not None:
            health["example_ids"] = len(example_ids)
        return JSONResponse(health)

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(batcher.stats)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        batcher.close()

    batcher = SearchBatcher(index, max_queries=max_batch_queries, window_s=batch_window_s, workers=workers)
    return Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"]),
                             Route("/health", health, methods=["GET"]),
                             Route("/stats", stats, methods=["GET"])], lifespan=lifespan)


def serve(index_dir: str | Path, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          max_topk: int = MAX_TOPK, batch_window_s: float = 0.0, max_batch_queries: int = 128,
          max_query_chars: int = MAX_QUERY_CHARS, workers: int = 4,
          keep_alive_s: int = DEFAULT_KEEP_ALIVE_S, bare_list: bool = False,
          example_ids: str | Path | None = None) -> None:
    """Load the index and serve it until interrupted (what `agentgraphs retrieval serve` runs). An idle
    connection stays open `keep_alive_s` seconds (`DEFAULT_KEEP_ALIVE_S`: longer than clients' own expiry).
    `example_ids` is the seed's example-id file (`--example-ids`), checked against the index before serving."""
    if keep_alive_s < 1:
        raise ConfigError(f"keep_alive_s={keep_alive_s}: an idle connection must stay open at least 1 s; keep it "
                          f"above the clients' keep-alive expiry (httpx: 5 s), e.g. the default {DEFAULT_KEEP_ALIVE_S}")
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("the retrieval service needs uvicorn and starlette: "
                          "pip install 'agentgraphs[retrieval]'") from None
    index = load_index(index_dir)
    ids = load_example_ids(example_ids, index.passages) if example_ids is not None else None
    app = make_app(index, max_topk=max_topk, batch_window_s=batch_window_s, max_batch_queries=max_batch_queries,
                   max_query_chars=max_query_chars, workers=workers, bare_list=bare_list, example_ids=ids)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_keep_alive=keep_alive_s)

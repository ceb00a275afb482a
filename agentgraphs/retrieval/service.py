"""The retrieval HTTP service (starlette + uvicorn), in the request/response shape of the seed's server.

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id", "contents", "title"?}, "score": 12.3}, ...], ...]}
         (one ranked list per query; with "return_scores": false each item is the bare document)
    GET  /health    -> {"status": "ok", "kind": "bm25", "passages": N}

ToolOrchestra (after Search-R1) queries a retrieval server on port 8000 in exactly this shape, so its
clients work against this service and ours against theirs. A malformed request is a 400 whose "error"
names the field and the fix. Concurrent requests are coalesced into batched searches run in one worker
thread (`agentgraphs.retrieval.batcher`), so the event loop keeps accepting requests and a busy service
answers many queries per `index.search` call; every request still gets exactly its own queries' hits.
    GET  /stats     -> {"requests", "queries", "batches", "searches"} counted since start
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .batcher import SearchBatcher
from .index import Hit, SearchIndex, load_index

__all__ = ["make_app", "serve", "DEFAULT_PORT", "parse_request"]

DEFAULT_PORT = 8000
DEFAULT_TOPK = 3
MAX_TOPK = 100
MAX_QUERIES = 512


class RequestError(ValueError):
    """A /retrieve body outside the contract (answered with HTTP 400)."""


def parse_request(body: Any, *, max_topk: int = MAX_TOPK) -> tuple[list[str], int, bool]:
    """(queries, topk, return_scores) from a /retrieve body; RequestError names the bad field.

    >>> parse_request({"queries": ["who wrote hamlet"], "topk": 2, "return_scores": True})
    (['who wrote hamlet'], 2, True)
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
                           'send {"queries": ["..."]}')
    if not 1 <= len(queries) <= MAX_QUERIES:
        raise RequestError(f"field 'queries': {len(queries)} queries; send between 1 and {MAX_QUERIES}")
    topk = body.get("topk", DEFAULT_TOPK)
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_topk:
        raise RequestError(f"field 'topk': {topk!r}; send an integer between 1 and {max_topk}")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(f"field 'return_scores': {return_scores!r}; send true or false")
    return queries, topk, return_scores


def _shape(hits: list[list[Hit]], return_scores: bool) -> list[list[Any]]:
    if return_scores:
        return [[{"document": h["document"], "score": h["score"]} for h in q] for q in hits]
    return [[h["document"] for h in q] for q in hits]


def make_app(index: SearchIndex, *, max_topk: int = MAX_TOPK, batch_window_s: float = 0.0,
             max_batch_queries: int = 128) -> Any:
    """The ASGI app serving `index` (run it with uvicorn, or `serve`).

    Searches go through a `SearchBatcher(index, max_queries=max_batch_queries, window_s=batch_window_s)`.
    """
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def retrieve(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        try:
            queries, topk, return_scores = parse_request(body, max_topk=max_topk)
        except RequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        hits = await batcher.search(queries, topk)
        return JSONResponse({"result": _shape(hits, return_scores)})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "kind": index.kind, "passages": len(index.passages)})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(batcher.stats)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        batcher.close()

    batcher = SearchBatcher(index, max_queries=max_batch_queries, window_s=batch_window_s)
    return Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"]),
                             Route("/health", health, methods=["GET"]),
                             Route("/stats", stats, methods=["GET"])], lifespan=lifespan)


def serve(index_dir: str | Path, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          max_topk: int = MAX_TOPK, batch_window_s: float = 0.0, max_batch_queries: int = 128) -> None:
    """Load the index and serve it until interrupted (what `agentgraphs retrieval serve` runs)."""
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("the retrieval service needs uvicorn and starlette: "
                          "pip install 'agentgraphs[retrieval]'") from None
    app = make_app(load_index(index_dir), max_topk=max_topk, batch_window_s=batch_window_s,
                   max_batch_queries=max_batch_queries)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)

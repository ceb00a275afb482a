"""Coalesce concurrent searches into batched `index.search` calls, run on a few worker threads.

Each /retrieve request the service receives is queued here; a drain task takes what is queued (up to
`max_queries` queries) as one batch, runs ONE `index.search` per distinct top-k on a worker thread and
hands every request its own slice of the answer. Up to `workers` batches run at once: a slow search (a
long query, a large batch) holds one worker while the next requests go out on the others. When every
worker is busy, new requests queue up and form the next batch, so batches grow with the load without
waiting when the service is idle; `window_s` > 0 additionally waits that long for company before a batch
that is not yet full. Both indexes are safe to search from several threads (`DenseIndex` serialises its
embedder, whose tokenizer is not). Grouping by top-k (never cutting a
top-10 list down to 3) keeps every answer identical to `index.search([query], k)` for that query alone,
because both indexes score and rank each query of a batch independently.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from typing_extensions import TypedDict

from ..errors import ConfigError
from .index import Hit, SearchIndex

__all__ = ["BatcherStats", "SearchBatcher"]


class BatcherStats(TypedDict):
    """Counts since start: requests answered, their queries, and the `index.search` calls they took."""

    requests: int
    queries: int
    batches: int
    searches: int


@dataclass
class _Pending:
    queries: list[str]
    k: int
    future: asyncio.Future[list[list[Hit]]]


class SearchBatcher:
    """`await batcher.search(queries, k)`: the same hits as `index.search(queries, k)`, batched with others.

    >>> import asyncio
    >>> from agentgraphs.retrieval.index import BM25Index
    >>> idx = BM25Index.build([{"id": "1", "contents": "The Eiffel tower is in Paris."},
    ...                        {"id": "2", "contents": "Mount Fuji is in Japan."}])
    >>> async def main():
    ...     batcher = SearchBatcher(idx)
    ...     hits = await asyncio.gather(batcher.search(["fuji"], 1), batcher.search(["paris"], 1))
    ...     batcher.close()
    ...     return [h[0][0]["document"]["id"] for h in hits], batcher.stats["batches"]
    >>> asyncio.run(main())
    (['2', '1'], 1)
    """

    def __init__(self, index: SearchIndex, *, max_queries: int = 128, window_s: float = 0.0, workers: int = 4
                 ) -> None:
        if max_queries < 1 or window_s < 0 or workers < 1:
            raise ConfigError(f"search batcher: max_queries={max_queries} and workers={workers} must be >= 1, "
                              f"window_s={window_s} >= 0")
        self.index = index
        self.max_queries = max_queries
        self.window_s = window_s
        self.workers = workers
        self.stats = BatcherStats(requests=0, queries=0, batches=0, searches=0)
        self._queue: deque[_Pending] = deque()
        self._queued_queries = 0
        self._drainer: asyncio.Task[None] | None = None
        self._busy = 0  # batches running on the workers
        self._freed: asyncio.Event | None = None  # set when a batch finishes (a worker is free)
        self._running: set[asyncio.Task[None]] = set()
        self._worker = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="retrieval-search")

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """One ranked list of hits per query, answered from the next batch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[list[Hit]]] = loop.create_future()
        self._queue.append(_Pending(list(queries), k, future))
        self._queued_queries += len(queries)
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    def close(self) -> None:
        """Stop the worker threads (after the batches they are running)."""
        self._worker.shutdown(wait=True)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        self._freed = asyncio.Event()  # of this loop (a batcher may be driven by another loop later)
        while self._queue:
            if self._busy >= self.workers:  # every worker is busy: the queue grows into the next batch
                self._freed.clear()
                await self._freed.wait()
                continue
            if self.window_s and self._queued_queries < self.max_queries:
                await asyncio.sleep(self.window_s)
            batch = self._take()
            self._busy += 1
            task = loop.create_task(self._run(batch))
            self._running.add(task)  # a reference until it is done (the loop keeps only weak ones)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        try:
            answers = await loop.run_in_executor(self._worker, _search_batch, self.index, batch)
        except Exception as exc:  # noqa: BLE001  (the index failed: every request of the batch gets the error)
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(exc)
            return
        finally:
            self._busy -= 1
            if self._freed is not None:
                self._freed.set()
        self.stats["batches"] += 1
        self.stats["searches"] += len({p.k for p in batch})
        for p, hits in zip(batch, answers):
            self.stats["requests"] += 1
            self.stats["queries"] += len(p.queries)
            if not p.future.done():  # a request whose client went away was cancelled
                p.future.set_result(hits)

    def _take(self) -> list[_Pending]:
        batch = [self._queue.popleft()]
        n = len(batch[0].queries)
        while self._queue and n + len(self._queue[0].queries) <= self.max_queries:
            batch.append(self._queue.popleft())
            n += len(batch[-1].queries)
        self._queued_queries -= n
        return batch


def _search_batch(index: SearchIndex, batch: list[_Pending]) -> list[list[list[Hit]]]:
    """Per request, its hits: one `index.search` per distinct k over the queries that asked for it."""
    answers: list[list[list[Hit]]] = [[] for _ in batch]
    for k in dict.fromkeys(p.k for p in batch):
        members = [i for i, p in enumerate(batch) if p.k == k]
        hits = index.search([q for i in members for q in batch[i].queries], k)
        start = 0
        for i in members:
            answers[i] = hits[start:start + len(batch[i].queries)]
            start += len(batch[i].queries)
    return answers

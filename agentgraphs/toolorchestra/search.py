"""The search tool's retrieval: the run's retrieval service, asked with the row's example id (eid).

The seed's search tool sends every query with its row's eid (Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/
orchestra_solver.py:90-91, tools/search_retrieval/tool.py:92-97) and its service keeps only the documents its
example-id file lists for that eid (retrieval_general_thought.py:239-241; `agentgraphs retrieval serve
--example-ids`). A row with an eid is never searched unfiltered: a service that cannot filter (started without
an example-id file: it answers 400 naming the field 'eid'), or a `ctx.tools["retrieval"]` whose `search`
takes no `eid`, fails the rollout with a ConfigError saying how to give the run a filtering service.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from ..context import AgentContext, LoopCache
from ..errors import ConfigError, RetrievalError
from ..retrieval.index import Hit

__all__ = ["retrieval_client", "search_documents"]

# one client per event loop and settings (httpx clients are loop-bound); dropped with their loop
_CLIENTS: LoopCache[tuple[str, float, int], Any] = LoopCache()

NO_FILTER_FIX = ("start the retrieval service with the seed's example-id file (`agentgraphs retrieval serve INDEX "
                 "--example-ids FILE`), or drop 'eid' from the rows (or make it empty) to search the whole index")


def retrieval_client(ctx: AgentContext, url: str, timeout_s: float, retries: int) -> Any:
    """`ctx.tools["retrieval"]` when given (anything with `async search(query, topk)`, and an `eid` keyword
    for rows with one), else a RetrievalClient for `url`, shared by the rollouts of this event loop."""
    given = ctx.tools.get("retrieval")
    if given is not None:
        return given
    from ..retrieval.client import RetrievalClient

    return _CLIENTS.get((url, timeout_s, retries),
                        lambda: RetrievalClient(url, timeout_s=timeout_s, retries=retries), asyncio.get_running_loop())


async def search_documents(ctx: AgentContext, query: str, *, topk: int, eid: str | None, url: str,
                           timeout_s: float, retries: int) -> list[Hit]:
    """The top-`topk` hits for `query`, of example `eid`'s documents when it is non-empty. RetrievalError when
    the service fails (the tool's error note); ConfigError when the run cannot filter by eid (the rollout fails).
    """
    client = retrieval_client(ctx, url, timeout_s, retries)
    if not eid:
        hits: list[Hit] = await client.search(query, topk=topk)
        return hits
    if "eid" not in _parameters(client.search):
        raise ConfigError(f"toolorchestra: the row's eid {eid!r:.80} asks for the seed's per-example document "
                          "filter, but ctx.tools['retrieval'].search takes no `eid` keyword; give it one that "
                          f"keeps only that example's documents, or remove ctx.tools['retrieval'] and {NO_FILTER_FIX}")
    try:
        hits = await client.search(query, topk=topk, eid=eid)
    except RetrievalError as exc:
        if exc.field == "eid":  # the service refused the filter: searching on would break the seed's row
            raise ConfigError(f"toolorchestra: the row's eid {eid!r:.80} needs a retrieval service that filters "
                              f"by example, and the one at {exc.url} cannot ({exc.reason}); {NO_FILTER_FIX}") from None
        raise
    return hits


def _parameters(fn: Any) -> set[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return {"eid"}
    return {p.name for p in params}

"""RetrievalClient against the retrieval servers ToolOrchestra users already run on port 8000: NVlabs
ToolOrchestra's (evaluation/retrieval_wiki.py) and the seed's (agentic/ToolOrchestra/retrieval_general_thought.py)
answer /retrieve with the bare list of per-query lists (FastAPI returns `resp`), not Search-R1's
{"result": ...}; the seed's documents carry their text under "content", the original's under "contents"."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agentgraphs.errors import RetrievalError
from agentgraphs.retrieval import RetrievalClient


def answering(body: Any) -> RetrievalClient:
    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    return RetrievalClient(retries=0, transport=httpx.MockTransport(reply))


def search(client: RetrievalClient, query: str = "launch code", topk: int = 3) -> Any:
    async def go() -> Any:
        async with client:
            return await client.search(query, topk=topk)

    return asyncio.run(go())


def test_toolorchestras_bare_list_answer_is_read() -> None:
    original = [[{"document": {"id": "7", "contents": "The launch code is 4321. " * 5}, "score": 0.91}]]
    assert search(answering(original)) == original[0]


def test_the_seeds_content_field_is_the_documents_text() -> None:
    seed = [[{"document": {"id": "7", "content": "The launch code is 4321. " * 5}, "score": 0.91},
             {"document": {"content": "A web page the seed's Tavily fallback added."}, "score": -1}]]
    hits = search(answering(seed))
    assert [h["document"]["contents"] for h in hits] == [d["document"]["content"] for d in seed[0]]
    assert [h["score"] for h in hits] == [0.91, -1.0]


def test_an_answer_in_neither_shape_is_still_a_contract_error() -> None:
    for body in ({"results": [[]]}, [[{"document": {"id": "7"}, "score": 1.0}]], [[], []], "[[]]"):
        with pytest.raises(RetrievalError, match="contract"):
            search(answering(body))


def test_served_with_bare_list_toolorchestras_clients_read_results_0(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("bm25s")
    from starlette.testclient import TestClient
    from typer.testing import CliRunner

    from agentgraphs.cli import app as cli_app
    from agentgraphs.retrieval import BM25Index, make_app
    from agentgraphs.retrieval.synthetic import planted_facts, synthetic_corpus

    passages, fact = planted_facts()
    index = BM25Index.build(synthetic_corpus(50, words_per_passage=20) + passages)
    request = {"queries": [fact["question"]], "topk": 2, "return_scores": True}
    with TestClient(make_app(index, bare_list=True)) as http:
        results = http.post("/retrieve", json=request).json()
    assert isinstance(results, list) and fact["answer"] in results[0][0]["document"]["contents"]
    with TestClient(make_app(index)) as http:  # the default stays Search-R1's {"result": ...}
        assert http.post("/retrieve", json=request).json() == {"result": results}
    # ... and our client reads the bare list too
    client = RetrievalClient(retries=0, transport=httpx.ASGITransport(app=make_app(index, bare_list=True)))
    assert search(client, fact["question"], topk=2) == results[0]
    # the CLI flag reaches the service
    seen: dict[str, Any] = {}
    monkeypatch.setattr("agentgraphs.retrieval.service.serve", lambda index_dir, **kw: seen.update(kw))
    out = CliRunner().invoke(cli_app, ["retrieval", "serve", "idx", "--bare-list"])
    assert out.exit_code == 0, out.output
    assert seen["bare_list"] is True

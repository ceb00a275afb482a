"""Every HTTP client of ours (SGLangEngine, OpenAIChatEngine, RetrievalClient) tries again on the same answers and
waits as long between attempts: a server that is busy (429) or a proxy that gave up waiting (408) is not a
rejected request, and a server that stays down is asked again at most `backoff_cap_s` apart, never after a wait
that doubles without bound."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agentgraphs.engines import SamplingParams
from agentgraphs.engines.openai import OpenAIChatEngine
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.errors import EngineUnavailableError, RetrievalError
from agentgraphs.retrieval import RetrievalClient

DOWN = "http://127.0.0.1:9"  # nothing listens: every attempt fails at once, so only the waits are left
CAP_S = 8.0  # SGLangEngine's default backoff_cap_s


@pytest.mark.parametrize("status", [408, 429])
def test_retrieval_client_tries_a_busy_server_again(status: int) -> None:
    hits = [[{"document": {"id": "7", "contents": "The launch code is 4321."}, "score": 0.9}]]
    answers = iter([httpx.Response(status, json={"error": "busy"}), httpx.Response(200, json={"result": hits})])

    async def go() -> Any:
        transport = httpx.MockTransport(lambda request: next(answers))
        async with RetrievalClient(retries=1, backoff_s=0.0, transport=transport) as client:
            return await client.search("launch code")

    assert asyncio.run(go()) == hits[0]


def _waits(monkeypatch: pytest.MonkeyPatch, call: Any, error: type[Exception]) -> list[float]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    with pytest.raises(error):
        asyncio.run(call())
    return waits


async def _sglang() -> None:
    async with SGLangEngine(DOWN, max_retries=6, backoff_s=1.0) as engine:
        await engine.generate([1, 2, 3], SamplingParams(max_new_tokens=2))


async def _openai() -> None:
    engine = OpenAIChatEngine(f"{DOWN}/v1", model="m", max_retries=6, backoff_s=1.0, timeout=5.0)
    try:
        await engine.chat([{"role": "user", "content": "x"}], SamplingParams(max_new_tokens=2))
    finally:
        await engine.aclose()


async def _retrieval() -> None:
    async with RetrievalClient(DOWN, retries=6, backoff_s=1.0) as client:
        await client.search("anything")


@pytest.mark.parametrize("call, error", [(_sglang, EngineUnavailableError), (_openai, EngineUnavailableError),
                                         (_retrieval, RetrievalError)], ids=["sglang", "openai", "retrieval"])
def test_waits_between_attempts_grow_to_the_cap_and_no_further(monkeypatch: pytest.MonkeyPatch, call: Any,
                                                               error: type[Exception]) -> None:
    waits = _waits(monkeypatch, call, error)
    assert len(waits) == 6
    assert 0.5 <= waits[0] <= 1.0  # the first wait: backoff_s, jittered down by at most half
    assert max(waits) <= CAP_S and waits[-1] >= CAP_S / 2

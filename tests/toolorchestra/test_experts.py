"""ToolOrchestra's experts as users deploy them (README: `--helper NAME=openai:URL#MODEL`): text endpoints
on 127.0.0.1 that answer OpenAI chat completions, some with `usage`, some without, some from reasoning
models that think before they reply. The orchestrator is scripted over the tiny Qwen3-template model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines.base import Completion, SamplingParams
from agentgraphs.engines.hf import HFEngine
from agentgraphs.errors import TraceError
from agentgraphs.node import MaxNewTokensLowered
from agentgraphs.records import sample_fields, trace_record
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.runs import write_run_dir
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.tiny_model import ensure_tiny_model
from agentgraphs.toolorchestra import SPEC
from agentgraphs.trace import make_turn, sampling_mismatches
from agentgraphs.viewer.check import check_run
from agentgraphs.viewer.run_data import RunRecord
from rl_bridge.hooks import rollout_sampling
from tests.asgi_server import serving

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")


def call(name: str, model: str) -> str:
    body = json.dumps({"name": name, "arguments": {"model": model}})
    return f"<think>plan</think>\n<tool_call>\n{body}\n</tool_call>"


class ChatEndpoint:
    """An OpenAI-compatible /v1/chat/completions: each model name answers its scripted replies in order,
    each reply `(content, usage or None)`; every request body is kept."""

    def __init__(self) -> None:
        self.replies: dict[str, list[tuple[str, dict[str, int] | None]]] = {}
        self.requests: list[dict[str, Any]] = []

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            content, usage = self.replies[body["model"]].pop(0)
            out: dict[str, Any] = {"id": "c1", "object": "chat.completion", "model": body["model"],
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": content}}]}
            if usage is not None:
                out["usage"] = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
            return JSONResponse(out)

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[ChatEndpoint, str]]:
    chat = ChatEndpoint()
    with serving(chat.app()) as url:
        yield chat, f"{url}/v1"


def run(scorer: HFEngine, orchestrator: list[str], url: str, retrieval: Any = None,
        sampling: SamplingParams | None = None, **options: Any) -> Any:
    from agentgraphs.engines.openai import OpenAIChatEngine

    experts = {"search": ["searcher"], "answer": ["answerer"]}
    engines = {name: OpenAIChatEngine(url, model=name, max_retries=0) for name in ("searcher", "answerer")}
    policy = ScriptedPolicy(scorer, orchestrator, name="orchestrator")
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines=engines,
                       tools={"retrieval": retrieval} if retrieval is not None else {},
                       sampling=sampling or SamplingParams(temperature=1.0, max_new_tokens=256))
    inp = rollout_input("What is the launch code of Zorblax station?", "4321", {}, 0)
    return asyncio.run(run_rollout(SPEC, inp, ctx, options={"experts": experts, **options}))


def test_a_text_experts_reported_usage_is_what_the_cost_counts(scorer: HFEngine,
                                                               endpoint: tuple[ChatEndpoint, str]) -> None:
    chat, url = endpoint
    chat.replies["answerer"] = [("It is \\boxed{4321}.", {"prompt_tokens": 400, "completion_tokens": 9})]
    rollout = run(scorer, [call("answer", "answerer")], url, variant="original",
                  prices={"answerer": [1.0, 10.0]})
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    step = rollout.final_state["steps"][-1]
    # the endpoint said 400 prompt and 9 completion tokens: both are what the expert cost
    assert (step["expert_input_tokens"], step["expert_output_tokens"]) == (400, 9)
    features = sample_fields(rollout, SPEC)["train_metadata"]["reward_shaping"]["features"]
    assert features["cost"] == pytest.approx((400 * 1.0 + 9 * 10.0) / 1e6)


def test_a_text_expert_without_usage_is_counted_with_the_orchestrators_tokenizer(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """The seed counts every expert call this way (the query and the reply under the orchestrator's
    tokenizer); a zero would make the costliest expert look free."""
    chat, url = endpoint
    chat.requests.clear()
    reply = "It is \\boxed{4321}."
    chat.replies["answerer"] = [(reply, None)]
    rollout = run(scorer, [call("answer", "answerer")], url)
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    step = rollout.final_state["steps"][-1]
    tok = scorer.tokenizer
    sent = chat.requests[0]["messages"][-1]["content"]  # the user message (the seed's _make_stats counts it)
    assert step["expert_input_tokens"] == len(tok.encode(sent, add_special_tokens=False)) > 0
    assert step["expert_output_tokens"] == len(tok.encode(reply, add_special_tokens=False)) > 0


class Retrieval:
    """`ctx.tools["retrieval"]`: keeps every query it is asked and answers one passage."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def search(self, query: str, topk: int = 3) -> list[dict[str, Any]]:
        self.queries.append(query)
        return [{"document": {"id": "1", "contents": "The launch code of Zorblax station is 4321."}, "score": 1.0}]


def test_a_reasoning_expert_is_read_after_its_reasoning(scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """Qwen3 behind an OpenAI endpoint without a reasoning parser (README's own helper example) replies
    `<think>...</think>` first: the search query is the first line after it, and the answer's box is the
    reply's, not one the expert considered while thinking."""
    chat, url = endpoint
    usage = {"prompt_tokens": 10, "completion_tokens": 10}
    query = "<think>\nThe station's code must be in a document.\n</think>\n\nlaunch code Zorblax station\n"
    reply = "<think>\nIs it \\boxed{1}? No, the document says otherwise.\n</think>\n\n4321"
    chat.replies["searcher"] = [(query, usage)]
    chat.replies["answerer"] = [(reply, usage)]
    retrieval = Retrieval()
    rollout = run(scorer, [call("search", "searcher"), call("answer", "answerer")], url, retrieval=retrieval,
                  tool_protocol="original")  # the seed reads the whole reply: test_seed_tools.py
    assert rollout.status == "completed", rollout.reason
    assert retrieval.queries == ["launch code Zorblax station"]
    assert rollout.answer == "4321" and rollout.reward == 1.0


def test_an_expert_cut_off_in_its_reasoning_is_a_failed_tool_not_a_query_or_an_answer(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    chat, url = endpoint
    usage = {"prompt_tokens": 10, "completion_tokens": 10}
    chat.replies["searcher"] = [("<think>\nLet me think about which query\n", usage)]
    chat.replies["answerer"] = [("<think>\nIt could be \\boxed{4321} but I", usage),
                                ("\\boxed{4321}", usage)]
    retrieval = Retrieval()
    rollout = run(scorer, [call("search", "searcher"), call("answer", "answerer"), call("answer", "answerer")],
                  url, retrieval=retrieval, answer_failure="note",  # the failed answer is a note, the loop goes on
                  tool_protocol="original")  # the seed takes a cut reply as it is: test_seed_tools.py
    assert rollout.status == "completed", rollout.reason
    assert retrieval.queries == []  # no query was written: nothing is searched
    steps = rollout.final_state["steps"]
    assert [s["ok"] for s in steps] == [False, False, True]
    assert "reasoning never closed" in steps[0]["error"] and "reasoning never closed" in steps[1]["error"]
    assert rollout.summary["failed_tools"] == 2 and rollout.answer == "4321"


# a run whose sampling is not the expert servers' defaults: every field an expert request could carry is set
RUN_SAMPLING = SamplingParams(temperature=1.0, top_p=0.9, top_k=20, stop="</done>", sampling_seed=11,
                              max_new_tokens=16384)


def _expert_turn(rollout: Any) -> dict[str, Any]:
    (turn,) = [t for t in rollout.turns if t["engine"].startswith("openai:")]
    return turn


def test_a_seed_expert_is_asked_only_what_the_seed_asks_the_rest_is_its_servers(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """The seed calls `chat.completions.create(model, messages, max_tokens, temperature)` and nothing else
    (tools/expert_caller/tool.py:337-342): its SGLang expert servers fill top_p, top_k, ... from the model's
    generation_config.json. None of the run's top_p, top_k, stop or seed reaches the expert."""
    chat, url = endpoint
    chat.requests.clear()
    chat.replies["answerer"] = [("It is \\boxed{4321}.", None)]
    rollout = run(scorer, [call("answer", "answerer")], url, sampling=RUN_SAMPLING)
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    (body,) = chat.requests
    assert set(body) == {"model", "messages", "max_tokens", "temperature"}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("answerer", 8192, 0.7)
    # the Turn records what the request carried; what it left to the server is unknown here: None
    expert = _expert_turn(rollout)
    assert not expert["trainable"]
    assert (expert["temperature"], expert["top_p"], expert["top_k"], expert["min_p"]) == (0.7, None, None, None)
    # the orchestrator still samples with the run's sampling, and records it
    trained = [t for t in rollout.turns if t["trainable"]]
    assert trained and all((t["temperature"], t["top_p"], t["top_k"]) == (1.0, 0.9, 20) for t in trained)


def test_the_original_variants_expert_gets_the_runs_sampling(scorer: HFEngine,
                                                             endpoint: tuple[ChatEndpoint, str]) -> None:
    chat, url = endpoint
    chat.requests.clear()
    chat.replies["answerer"] = [("It is \\boxed{4321}.", None)]
    rollout = run(scorer, [call("answer", "answerer")], url, sampling=RUN_SAMPLING, variant="original")
    assert rollout.status == "completed", rollout.reason
    (body,) = chat.requests
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": "answerer", "max_tokens": 2048, "temperature": 1.0, "top_p": 0.9, "top_k": 20, "stop": ["</done>"],
        "seed": 11}
    expert = _expert_turn(rollout)
    assert (expert["temperature"], expert["top_p"], expert["top_k"], expert["min_p"]) == (1.0, 0.9, 20, 0.0)


def test_the_runs_token_cap_still_bounds_a_seed_experts_max_tokens(scorer: HFEngine,
                                                                 endpoint: tuple[ChatEndpoint, str]) -> None:
    chat, url = endpoint
    chat.requests.clear()
    chat.replies["answerer"] = [("It is \\boxed{4321}.", None)]
    with pytest.warns(MaxNewTokensLowered, match="max_new_tokens=8192"):
        rollout = run(scorer, [call("answer", "answerer")], url, sampling=RUN_SAMPLING.replace(max_new_tokens=300))
    assert rollout.status == "completed", rollout.reason
    (body,) = chat.requests
    assert set(body) == {"model", "messages", "max_tokens", "temperature"} and body["max_tokens"] == 300


def test_a_turn_left_to_the_servers_defaults_passes_rl_bridge_and_check(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str], tmp_path: Path) -> None:
    """rl_bridge's sampling check and `agentgraphs check` read only trained turns' sampling: an expert turn
    with None for what its request left out passes both; a trainable turn with a None is still refused."""
    chat, url = endpoint
    chat.replies["answerer"] = [("It is \\boxed{4321}.", None)]
    rollout = run(scorer, [call("answer", "answerer")], url, sampling=RUN_SAMPLING)
    assert _expert_turn(rollout)["top_p"] is None
    slime = rollout_sampling(SimpleNamespace(rollout_temperature=1.0, rollout_top_p=0.9, rollout_top_k=20), {})
    assert sampling_mismatches(rollout.turns, slime) == []
    run_dir = write_run_dir([RunRecord(1, {"index": 0, **sample_fields(rollout, SPEC)}, trace_record(rollout, 0))],
                            tmp_path / "run", {"agent": "toolorchestra"})
    report = check_run(run_dir)
    assert report.ok and report.rollouts == 1 and report.sequences >= 1, report.verdict()
    # a trainable turn never leaves its sampling to a server: refused where it is recorded and where it is read
    forged = {**rollout.turns[0], "top_p": None}
    assert forged["trainable"]
    assert [m["key"] for m in sampling_mismatches([forged], slime)] == ["top_p"]
    with pytest.raises(TraceError, match="whole sampling"):
        make_turn(Completion([1], [-0.5], "stop"), node="orchestrator", prompt_ids=[1], trainable=True,
                  temperature=1.0, top_p=None, engine="e")


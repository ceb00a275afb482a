"""OpenAIChatEngine (helper models over an OpenAI-compatible endpoint) against the local server's
/v1/chat/completions, and the one log-prob bound shared by the SGLang engine and the trace checks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from agentgraphs.context import AgentContext
from agentgraphs.engines import MAX_LOGPROB, SamplingParams, make_engine
from agentgraphs.engines.openai import OpenAIChatEngine
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.errors import ConfigError, EngineRequestError, EngineUnavailableError
from agentgraphs.node import TraceState, call_llm
from agentgraphs.testing.fake_engines import FixedLatencyEngine
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.trace import check_trace


@pytest.fixture(scope="module")
def server(tiny_engine: Any) -> Any:
    with SGLangTestServer(tiny_engine) as srv:
        yield srv


def test_chat_answers_what_the_model_generates(server: Any, tiny_engine: Any, qwen25: Any) -> None:
    messages = [{"role": "user", "content": "Name a colour."}]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)

    async def go() -> Any:
        engine = make_engine(f"openai:{server.url}/v1#tiny")
        try:
            return await engine.chat(messages, params)
        finally:
            await engine.aclose()

    out = asyncio.run(go())
    # an independent path to the same text: the tokenizer's template, then greedy generation in-process
    ids = qwen25.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = list(ids["input_ids"]) if isinstance(ids, dict) or hasattr(ids, "keys") else list(ids)
    direct = asyncio.run(tiny_engine.generate(ids, params))
    assert out.text == qwen25.decode(direct.token_ids, skip_special_tokens=True)
    assert out.token_ids == [] and out.logprobs == []  # text only: nothing here can be trained
    assert out.finish_reason == direct.finish_reason
    assert server.stats.chat_requests >= 1 and server.stats.generate_requests == 0


class HelperState(TraceState):
    question: str
    verdict: str


async def judge(state: HelperState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="judge", engine="judge",
                         messages=[{"role": "user", "content": state["question"]}], max_new_tokens=8)
    return {"verdict": out.text, **out.update}


async def solve(state: HelperState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="solve", messages=[{"role": "user", "content": "Hi"}],
                         max_new_tokens=6)
    return out.update


def test_helper_turns_record_text_and_are_never_trained(server: Any, tiny_engine: Any) -> None:
    builder = StateGraph(HelperState, context_schema=AgentContext)
    builder.add_node("solve", solve)
    builder.add_node("judge", judge)
    builder.add_edge(START, "solve")
    builder.add_edge("solve", "judge")
    builder.add_edge("judge", END)
    graph = builder.compile()

    async def go() -> dict[str, Any]:
        ctx = AgentContext(policy=tiny_engine, engines={"judge": f"openai:{server.url}/v1#tiny"},
                           sampling=SamplingParams(temperature=0.0))
        try:
            return await graph.ainvoke({"question": "Is 2+2=4?", "verdict": "", "turns": []}, context=ctx)
        finally:
            await ctx.engines["judge"].aclose()

    final = asyncio.run(go())
    policy_turn, judge_turn = final["turns"]
    assert judge_turn["trainable"] is False and judge_turn["output_ids"] == [] and judge_turn["prompt_ids"] == []
    assert judge_turn["engine"].startswith("openai:") and judge_turn["text"] == final["verdict"]
    assert policy_turn["trainable"] is True
    seqs = check_trace(final["turns"], "per_turn")
    assert [s["turn_indices"] for s in seqs] == [[0]]


def test_retries_then_typed_errors(server: Any) -> None:
    async def chat(url: str, retries: int = 2) -> Any:
        engine = OpenAIChatEngine(url, model="tiny", max_retries=retries, backoff_s=0.01, timeout=5.0)
        try:
            return await engine.chat([{"role": "user", "content": "x"}], SamplingParams(max_new_tokens=2))
        finally:
            await engine.aclose()

    server.faults.schedule("http503", 2)
    out = asyncio.run(chat(f"{server.url}/v1"))
    assert out.retries == 2
    with pytest.raises(EngineRequestError) as err:  # 404: a wrong base URL is not retried
        asyncio.run(chat(f"{server.url}/v2"))
    assert err.value.status_code == 404
    with pytest.raises(EngineUnavailableError):
        asyncio.run(chat("http://127.0.0.1:9/v1", retries=1))


@pytest.mark.parametrize("spec, words", [
    ("openai:http://127.0.0.1:1/v1", "name the model after '#'"),
    ("openai:127.0.0.1:1/v1#m", "must start with http"),
    ("gpt:x", "unknown kind"),
])
def test_bad_engine_strings_say_what_to_write(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        make_engine(spec)


def test_token_engine_only_options_are_refused_for_text_engines(server: Any, tiny_engine: Any) -> None:
    async def node(state: Any, runtime: Any) -> Any:
        return await call_llm(state, runtime, node="x", engine="judge", prompt_ids=[1, 2, 3])

    ctx = AgentContext(policy=tiny_engine, engines={"judge": OpenAIChatEngine(f"{server.url}/v1", model="t")})
    with pytest.raises(ConfigError, match="takes chat messages"):
        asyncio.run(node({"turns": []}, ctx))


def test_logprob_between_old_bounds_is_accepted_everywhere(tmp_path: Path) -> None:
    """A server log-prob in (1e-6, 1e-4] passed the engine but failed the trace: one bound now."""
    lp = 5e-5
    assert lp <= MAX_LOGPROB
    fake = FixedLatencyEngine(latency_s=0.0, logprob=lp)

    async def go() -> Any:
        async with SGLangEngine(server_url, max_retries=0) as engine:
            return await engine.generate([1, 2, 3], SamplingParams(max_new_tokens=4))

    with SGLangTestServer(fake) as srv:
        server_url = srv.url
        out = asyncio.run(go())
    assert out.logprobs == [lp] * 4
    from agentgraphs.trace import make_turn

    turn = make_turn(out, node="n", prompt_ids=[1, 2, 3], trainable=True, temperature=1.0, engine="e")
    seqs = check_trace([turn], "per_turn")  # the trace accepts what the engine accepted
    assert seqs[0]["rollout_log_probs"] == [lp] * 4
    # and both refuse the same value above the bound
    bad = make_turn(out, node="n", prompt_ids=[1], trainable=True, temperature=1.0, engine="e")
    bad["output_logprobs"] = [MAX_LOGPROB * 2] * 4
    with pytest.raises(Exception, match="log-prob"):
        check_trace([bad], "per_turn")


def test_top_k_and_min_p_reach_the_helper_server(server: Any, tiny_engine: Any, qwen25: Any) -> None:
    """top_k / min_p / stop_token_ids / ignore_eos are sent, not dropped: before, a helper asked for top_k=1
    at temperature 1 sampled from the whole distribution (fails on the code before: the text differs)."""
    messages = [{"role": "user", "content": "Name a colour."}]

    async def go(params: SamplingParams) -> Any:
        engine = make_engine(f"openai:{server.url}/v1#tiny")
        try:
            return await engine.chat(messages, params)
        finally:
            await engine.aclose()

    ids = qwen25.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = list(ids["input_ids"]) if isinstance(ids, dict) or hasattr(ids, "keys") else list(ids)
    greedy = asyncio.run(tiny_engine.generate(ids, SamplingParams(temperature=0.0, max_new_tokens=12)))
    want = qwen25.decode(greedy.token_ids, skip_special_tokens=True)
    for seed in (1, 2, 3):  # three seeded draws at temperature 1: top_k=1 leaves one token each step
        out = asyncio.run(go(SamplingParams(temperature=1.0, top_k=1, max_new_tokens=12, sampling_seed=seed)))
        assert out.text == want
    # min_p=1 keeps only the most likely token too
    assert asyncio.run(go(SamplingParams(temperature=1.0, min_p=1.0, max_new_tokens=12, sampling_seed=4))).text == want
    # ignore_eos + stop_token_ids arrive as well: the reply runs to max_new_tokens
    out = asyncio.run(go(SamplingParams(temperature=0.0, max_new_tokens=5, ignore_eos=True, stop_token_ids=[1])))
    assert out.finish_reason == "length" and out.meta["completion_tokens"] == 5


def _chat_app(finish_reason: str) -> Any:
    """An OpenAI-shaped chat endpoint whose every answer ends with `finish_reason`."""
    import json

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        body = json.dumps({"id": "c1", "model": "m", "choices": [{"index": 0, "finish_reason": finish_reason,
                           "message": {"role": "assistant", "content": "The answer is"}}]}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    return app


def test_an_aborted_or_unknown_finish_is_not_a_finished_answer(tiny_engine: Any) -> None:
    """SGLang's chat endpoint answers finish_reason "abort" with the partial text; it was read as "stop", so a
    judge's cut-off verdict counted as its answer (fails on the code before: no RolloutAborted, no error)."""
    from agentgraphs.errors import EngineProtocolError
    from agentgraphs.node import RolloutAborted

    from tests.asgi_server import serving

    async def ask(url: str) -> Any:
        ctx = AgentContext(policy=tiny_engine, engines={"judge": f"openai:{url}/v1#m"})
        try:
            return await call_llm({}, ctx, node="judge", engine="judge", trainable=False,
                                  messages=[{"role": "user", "content": "Is 2+2=4?"}])
        finally:
            await ctx.engines["judge"].aclose()

    with serving(_chat_app("abort")) as url:
        with pytest.raises(RolloutAborted):
            asyncio.run(ask(url))
    with serving(_chat_app("cancelled")) as url:
        with pytest.raises(EngineProtocolError, match="finish_reason 'cancelled'"):
            asyncio.run(ask(url))
    with serving(_chat_app("length")) as url:
        assert asyncio.run(ask(url)).completion.finish_reason == "length"

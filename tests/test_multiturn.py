"""A 3-turn conversation through SGLangEngine against the local SGLang-contract server (and through
HFEngine directly): trained ids and log-probs are exactly what the engine returned, glue is masked,
and a teacher-forced pass of the tiny model reproduces every trained log-prob.

The tiny random model never samples <|im_end|> in 12 tokens, so its turns all finish by "length" (the
template appends <|im_end|> as masked glue); a scripted policy covers turns that finish by "stop" (the
model's own, trained <|im_end|>)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from agentgraphs.context import AgentContext
from agentgraphs.engines import Completion, SamplingParams
from agentgraphs.node import TraceState, call_llm
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.trace import build_sequences, check_trace


class RecordingEngine:
    """Wraps an engine and keeps every completion it returned (what 'the server returned')."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.tokenizer = getattr(inner, "tokenizer", None)
        self.calls: list[tuple[list[int], Completion]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        out = await self.inner.generate(prompt_ids, params)
        self.calls.append((list(prompt_ids), out))
        return out


async def ask(state: TraceState, runtime: Any) -> dict:
    out = await call_llm(state, runtime, node="ask", conversation="main",
                         messages=[{"role": "user", "content": "What is 12 * 7? Think step by step."}])
    return out.update


async def observe(state: TraceState, runtime: Any) -> dict:
    out = await call_llm(state, runtime, node="observe", conversation="main",
                         messages=[{"role": "tool", "content": "calculator: 84"}])
    return out.update


async def confirm(state: TraceState, runtime: Any) -> dict:
    out = await call_llm(state, runtime, node="confirm", conversation="main",
                         messages=[{"role": "user", "content": "Give the final answer in \\boxed{}."}])
    return out.update


def three_turn_graph() -> Any:
    g = StateGraph(TraceState, context_schema=AgentContext)
    for name, fn in (("ask", ask), ("observe", observe), ("confirm", confirm)):
        g.add_node(name, fn)
    g.add_edge(START, "ask")
    g.add_edge("ask", "observe")
    g.add_edge("observe", "confirm")
    g.add_edge("confirm", END)
    return g.compile()


IM_END, NEWLINE, IM_START = 151645, 198, 151644  # Qwen2.5's <|im_end|>, "\n", <|im_start|>


async def arun_graph(engine: Any, tokenizer: Any, temperature: float, seed: int) -> list:
    ctx = AgentContext(policy=engine, tokenizer=tokenizer,
                       sampling=SamplingParams(temperature=temperature, max_new_tokens=12, sampling_seed=seed))
    final = await three_turn_graph().ainvoke({"turns": []}, {"recursion_limit": 20}, context=ctx)
    return final["turns"]


def run_graph(engine: Any, tokenizer: Any, temperature: float, seed: int) -> list:
    return asyncio.run(arun_graph(engine, tokenizer, temperature, seed))


def run_through_server(inner: Any, tokenizer: Any, temperature: float, seed: int) -> tuple[RecordingEngine, list, str]:
    """The graph through SGLangEngine -> SGLangTestServer -> `inner`; the engine is made and closed
    inside the event loop that uses it, so no connection outlives the run."""
    recorder = RecordingEngine(inner)

    async def main(url: str) -> tuple[list, str]:
        async with SGLangEngine(url, max_retries=0) as engine:
            return await arun_graph(engine, tokenizer, temperature, seed), engine.name

    with SGLangTestServer(recorder, port=0) as srv:
        turns, name = asyncio.run(main(srv.url))
    return recorder, turns, name


def assert_teacher_forced(tiny_engine: Any, turns: list, layout: str) -> None:
    for seq in check_trace(turns, layout):  # invariants 1-3
        start = len(seq["tokens"]) - seq["response_length"]
        temps = {turns[i]["temperature"] for i in seq["turn_indices"]}
        assert len(temps) == 1
        forced = tiny_engine.score(seq["tokens"][:start], seq["tokens"][start:], temps.pop())
        for k, m in enumerate(seq["loss_mask"]):
            if m:
                assert abs(forced[k] - seq["rollout_log_probs"][k]) <= 1e-4, (layout, k)
            else:
                assert seq["rollout_log_probs"][k] == 0.0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_three_turns_through_sglang_engine(tiny_engine: Any, temperature: float) -> None:
    recorder, turns, engine_name = run_through_server(tiny_engine, tiny_engine.tokenizer, temperature, seed=7)
    assert [t["node"] for t in turns] == ["ask", "observe", "confirm"]
    assert len(recorder.calls) == 3
    for t, (prompt, comp) in zip(turns, recorder.calls):
        assert t["prompt_ids"] == prompt
        assert t["output_ids"] == comp.token_ids  # exactly the server's ids
        assert t["output_logprobs"] == comp.logprobs  # exactly its log-probs
        assert t["temperature"] == temperature and t["engine"] == engine_name
    # append-only: each prompt extends the previous prompt + output
    for prev, nxt in zip(turns, turns[1:]):
        head = prev["prompt_ids"] + prev["output_ids"]
        assert nxt["prompt_ids"][: len(head)] == head
    [seq] = build_sequences(turns, "concat")
    start = len(seq["tokens"]) - seq["response_length"]
    trained = {start + k for k, m in enumerate(seq["loss_mask"]) if m}
    outputs = sum(len(t["output_ids"]) for t in turns)
    assert len(trained) == outputs  # only generated tokens are trained; glue + observations masked
    assert_teacher_forced(tiny_engine, turns, "concat")
    assert_teacher_forced(tiny_engine, turns, "per_turn")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_three_turns_through_hf_engine(tiny_engine: Any, temperature: float) -> None:
    turns = run_graph(tiny_engine, tiny_engine.tokenizer, temperature, seed=3)
    assert len(turns) == 3
    assert_teacher_forced(tiny_engine, turns, "concat")
    assert_teacher_forced(tiny_engine, turns, "per_turn")


def test_glue_after_length_finish_is_masked(tiny_engine: Any) -> None:
    turns = run_graph(tiny_engine, tiny_engine.tokenizer, 1.0, seed=11)
    [seq] = build_sequences(turns, "concat")
    start = len(seq["tokens"]) - seq["response_length"]
    checked = 0
    for prev, nxt in zip(turns, turns[1:]):
        if prev["finish_reason"] != "length":
            continue
        assert prev["output_ids"][-1] != IM_END
        glue_start = len(prev["prompt_ids"]) + len(prev["output_ids"])  # the same index in seq["tokens"]
        assert nxt["prompt_ids"][glue_start] == IM_END  # <|im_end|> appended as glue
        assert seq["tokens"][glue_start] == IM_END
        assert seq["loss_mask"][glue_start - start] == 0  # not trained: the model never produced it
        assert seq["rollout_log_probs"][glue_start - start] == 0.0
        assert seq["loss_mask"][glue_start - start - 1] == 1  # the last generated token is
        checked += 1
    assert checked == 2  # both follow-up turns come after a "length" finish


def test_end_of_turn_the_model_generated_is_trained(tiny_engine: Any) -> None:
    replies = ["12 * 7 = 84.",  # 10 ids + <|im_end|>: finishes by "stop"
               "Twelve times seven: ten sevens are seventy, two sevens are fourteen, so eighty-four.",  # "length"
               "\\boxed{84}"]  # "stop"
    policy = ScriptedPolicy(tiny_engine, replies)
    recorder, turns, engine_name = run_through_server(policy, tiny_engine.tokenizer, 1.0, seed=0)
    assert [t["finish_reason"] for t in turns] == ["stop", "length", "stop"]
    for t, (prompt, comp) in zip(turns, recorder.calls):
        assert (t["prompt_ids"], t["output_ids"], t["output_logprobs"]) == (prompt, comp.token_ids, comp.logprobs)
    [seq] = build_sequences(turns, "concat")
    start = len(seq["tokens"]) - seq["response_length"]
    for i, (t, (_, comp)) in enumerate(zip(turns, recorder.calls)):
        end = len(t["prompt_ids"]) + len(t["output_ids"])  # where this turn's output ends in seq["tokens"]
        if t["finish_reason"] == "stop":
            # the model's own <|im_end|>: trained, with exactly the log-prob the server returned
            assert t["output_ids"][-1] == IM_END and seq["tokens"][end - 1] == IM_END
            assert seq["loss_mask"][end - 1 - start] == 1
            assert seq["rollout_log_probs"][end - 1 - start] == comp.logprobs[-1]
            if i + 1 < len(turns):  # then the glue, without a second <|im_end|>, masked
                assert seq["tokens"][end:end + 2] == [NEWLINE, IM_START]
                assert turns[i + 1]["prompt_ids"][end:end + 2] == [NEWLINE, IM_START]
                assert seq["loss_mask"][end - start:end - start + 2] == [0, 0]
                assert seq["rollout_log_probs"][end - start:end - start + 2] == [0.0, 0.0]
        else:  # "length": <|im_end|> is glue here, masked
            assert seq["tokens"][end] == IM_END and seq["loss_mask"][end - start] == 0
    assert sum(seq["loss_mask"]) == sum(len(t["output_ids"]) for t in turns)
    assert_teacher_forced(tiny_engine, turns, "concat")
    assert_teacher_forced(tiny_engine, turns, "per_turn")

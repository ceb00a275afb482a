"""A 3-turn conversation through SGLangEngine against the local SGLang-contract server (and through
HFEngine directly): trained ids and log-probs are exactly what the engine returned, glue is masked,
and a teacher-forced pass of the tiny model reproduces every trained log-prob."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from agentgraphs.engine import Completion, SamplingParams
from agentgraphs.node import AgentContext, TraceState, call_llm
from agentgraphs.sglang_engine import SGLangEngine
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


def run_graph(engine: Any, tokenizer: Any, temperature: float, seed: int) -> list:
    ctx = AgentContext(policy=engine, tokenizer=tokenizer,
                       sampling=SamplingParams(temperature=temperature, max_new_tokens=12, sampling_seed=seed))
    final = asyncio.run(three_turn_graph().ainvoke({"turns": []}, {"recursion_limit": 20}, context=ctx))
    return final["turns"]


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
    recorder = RecordingEngine(tiny_engine)
    with SGLangTestServer(recorder, port=0) as srv:
        engine = SGLangEngine(srv.url, max_retries=0)
        turns = run_graph(engine, tiny_engine.tokenizer, temperature, seed=7)
    assert [t["node"] for t in turns] == ["ask", "observe", "confirm"]
    assert len(recorder.calls) == 3
    for t, (prompt, comp) in zip(turns, recorder.calls):
        assert t["prompt_ids"] == prompt
        assert t["output_ids"] == comp.token_ids  # exactly the server's ids
        assert t["output_logprobs"] == comp.logprobs  # exactly its log-probs
        assert t["temperature"] == temperature and t["engine"] == engine.name
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
    for prev, nxt in zip(turns, turns[1:]):
        if prev["finish_reason"] == "length":
            glue_start = len(prev["prompt_ids"]) + len(prev["output_ids"])
            assert nxt["prompt_ids"][glue_start] == 151645  # <|im_end|> appended as glue
    [seq] = build_sequences(turns, "concat")
    start = len(seq["tokens"]) - seq["response_length"]
    for k, m in enumerate(seq["loss_mask"]):
        if seq["tokens"][start + k] == 151645 and m == 0:
            assert seq["rollout_log_probs"][k] == 0.0

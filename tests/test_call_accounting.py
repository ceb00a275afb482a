"""Every engine call is accounted for: `llm_calls` is what the engines answered, and a trainable call whose Turn
the graph dropped is named (a warning and `metadata["untrained_calls"]`). The graphs are the patterns of
LangGraph's own docs: map-reduce with Send storing `reply.content`, summarise-then-RemoveMessage. The count
of reference is the SGLang-contract server's own count of /generate requests."""

from __future__ import annotations

import asyncio
import json
import logging
import operator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Send

import rl_bridge
from agentgraphs.batch import run_file
from agentgraphs.chat_model import TracedChatModel, messages_graph_spec
from agentgraphs.context import AgentContext, Limits
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.node import TraceState, call_llm
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.spec import AgentSpec
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.trace import check_trace
from tests.test_bridge import SLIME_SAMPLING, make_args

TOPICS = ["cats", "dogs", "owls"]


class MapReduceState(MessagesState):
    summaries: Annotated[list[str], operator.add]


def _map_reduce(keep_messages: bool) -> Any:
    """LangGraph's map-reduce: one Send per topic, each branch asks the model; a final call combines them.
    `keep_messages=False` is the docs' form (a branch stores `reply.content`); True stores the AIMessage."""
    model = TracedChatModel(sampling={"max_new_tokens": 5})

    def fan_out(state: MapReduceState) -> list[Send]:
        return [Send("write", {"topic": t}) for t in TOPICS]

    async def write(branch: dict[str, Any]) -> dict[str, Any]:
        reply = await model.ainvoke([HumanMessage(f"One word about {branch['topic']}.")])
        if keep_messages:
            return {"summaries": [reply.content], "messages": [reply]}
        return {"summaries": [reply.content]}

    async def combine(state: MapReduceState) -> dict[str, Any]:
        ask = HumanMessage("Combine: " + " | ".join(state["summaries"]))
        return {"messages": [ask, await model.ainvoke([ask])]}

    g = StateGraph(MapReduceState)
    g.add_node("write", write)
    g.add_node("combine", combine)
    g.add_conditional_edges(START, fan_out, ["write"])
    g.add_edge("write", "combine")
    g.add_edge("combine", END)
    return g.compile(name="map_reduce")


MAP_REDUCE = messages_graph_spec(_map_reduce(False), reward=lambda rin, ctx: 0.0, name="map_reduce",
                                 requires_label=False)
MAP_REDUCE_KEPT = messages_graph_spec(_map_reduce(True), reward=lambda rin, ctx: 0.0,
                                      name="map_reduce_kept", requires_label=False)


class SummaryState(MessagesState):
    summary: str


def _summarise_and_remove() -> Any:
    """The docs' memory pattern: answer twice, then summarise into `summary` and delete all but the last
    two messages with RemoveMessage."""
    model = TracedChatModel(sampling={"max_new_tokens": 5})

    async def chat(state: SummaryState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def more(state: SummaryState) -> dict[str, Any]:
        return {"messages": [HumanMessage("Tell me more.")]}

    async def summarize(state: SummaryState) -> dict[str, Any]:
        reply = await model.ainvoke([*state["messages"], HumanMessage("Summarize the conversation above.")])
        return {"summary": reply.content, "messages": [RemoveMessage(id=m.id) for m in state["messages"][:-2]]}

    g = StateGraph(SummaryState)
    for name, fn in (("chat", chat), ("more", more), ("chat_again", chat), ("summarize", summarize)):
        g.add_node(name, fn)
    g.add_edge(START, "chat")
    g.add_edge("chat", "more")
    g.add_edge("more", "chat_again")
    g.add_edge("chat_again", "summarize")
    g.add_edge("summarize", END)
    return g.compile(name="summarise_and_remove")


SUMMARISE = messages_graph_spec(_summarise_and_remove(), reward=lambda rin, ctx: 0.0,
                                name="summarise_and_remove", requires_label=False)


class ForgetState(TraceState):
    answer: str


async def _forgetful(state: ForgetState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="forgetful", messages=[{"role": "user", "content": "Hi"}],
                         max_new_tokens=4)
    return {"answer": out.text}  # forgot `**out.update`


async def _judged(state: ForgetState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="judged", messages=[{"role": "user", "content": "Rate it"}],
                         max_new_tokens=4, engine="judge")
    return {"answer": out.text}  # a helper's call: counted, never trained, so not named


def _forget_graph() -> Any:
    g = StateGraph(ForgetState, context_schema=AgentContext)
    g.add_node("forgetful", _forgetful)
    g.add_node("judged", _judged)
    g.add_edge(START, "forgetful")
    g.add_edge("forgetful", "judged")
    g.add_edge("judged", END)
    return g.compile()


FORGETFUL = AgentSpec(name="forgetful", build_graph=lambda o: _forget_graph(), make_input=lambda r, o: {"turns": []},
                      answer=lambda s: s.get("answer", ""), reward=lambda rin, ctx: 0.0, requires_label=False)


def test_map_reduce_storing_content_is_counted_and_named(server: Any, tiny_model_dir: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": "Write about animals."}) + "\n")
    with caplog.at_level(logging.WARNING, logger="agentgraphs.rollout"):
        summary = run_file("tests.test_call_accounting:MAP_REDUCE", data, f"sglang:{server.url}", tmp_path / "out",
                           tokenizer=str(tiny_model_dir), max_new_tokens=16)
    assert server.stats.generate_requests == 4  # the server answered four calls
    (sample,) = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    meta = sample["metadata"]
    assert sample["status"] in ("completed", "truncated")
    assert meta["llm_calls"] == 4 and summary["llm_calls"] == 4
    assert meta["trace_summary"]["turns_by_node"] == {"combine": 1}  # only the combine call reached the state
    untrained = meta["untrained_calls"]
    assert [c["node"] for c in untrained] == ["write"] * 3
    assert all("AIMessage" in c["reason"] and c["output_tokens"] > 0 for c in untrained)
    (trace,) = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    assert trace["llm_calls"] == 4 and len(trace["untrained_calls"]) == 3
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "3 trainable LLM call(s) are not trained" in said and "'write' x3" in said


async def test_map_reduce_storing_the_aimessage_trains_every_call(server: Any, tiny_engine: Any) -> None:
    async with SGLangEngine(server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tiny_engine.tokenizer, sampling={"max_new_tokens": 16})
        rollout = await run_rollout(MAP_REDUCE_KEPT, rollout_input("Write about animals."), ctx)
    assert rollout.status in ("completed", "truncated"), rollout.error
    assert server.stats.generate_requests == rollout.llm_calls == len(rollout.turns) == 4
    assert rollout.untrained_calls == []
    assert sorted(t["node"] for t in rollout.turns) == ["combine", "write", "write", "write"]
    assert len(check_trace(rollout.turns, "concat")) == 4  # four separate prompts: four sequences


def test_summarise_and_remove_names_the_dropped_calls(server: Any, tiny_model_dir: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    args = make_args(server.url, tiny_model_dir, "tests.test_call_accounting:SUMMARISE")
    s = Sample(group_index=0, index=7, prompt="Hello there.", label=None, metadata={})
    with caplog.at_level(logging.WARNING, logger="agentgraphs.rollout"):
        out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 16}))
    assert server.stats.generate_requests == out.metadata["llm_calls"] == 3
    # chat's AIMessage was removed, summarize's reply was kept only as text; chat_again's message survived
    assert [c["node"] for c in out.metadata["untrained_calls"]] == ["chat", "summarize"]
    assert out.metadata["trace_summary"]["turns_by_node"] == {"chat_again": 1}
    assert "sample 7" in caplog.text and "'chat' x1" in caplog.text and "'summarize' x1" in caplog.text


async def test_call_llm_without_its_update_is_named_and_helpers_are_counted(tiny_engine: Any) -> None:
    policy = ScriptedPolicy(tiny_engine, ["Hello!"])
    judge = ScriptedPolicy(tiny_engine, ["7/10"], name="judge")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"judge": judge})
    rollout = await run_rollout(FORGETFUL, rollout_input("Hi"), ctx)
    assert rollout.status == "completed", rollout.error
    assert len(policy.calls) + len(judge.calls) == rollout.llm_calls == 2 and rollout.turns == []
    (dropped,) = rollout.untrained_calls
    assert dropped["node"] == "forgetful" and "out.update" in dropped["reason"]


async def test_dropped_calls_count_against_the_call_limit(tiny_engine: Any) -> None:
    policy = ScriptedPolicy(tiny_engine, lambda call: "x")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, limits=Limits(max_llm_calls=3),
                       sampling={"max_new_tokens": 4})
    rollout = await run_rollout(MAP_REDUCE, rollout_input("Write about animals."), ctx)
    # the three branches kept no Turn, yet they count: the combine call would be the fourth
    assert rollout.status == "failed" and "rollout made 3 LLM calls, the limit is 3" in rollout.reason
    assert len(policy.calls) == rollout.llm_calls == 3
    # parallel branches are counted when they start: a limit of 2 lets two of the three through
    policy = ScriptedPolicy(tiny_engine, lambda call: "x")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, limits=Limits(max_llm_calls=2),
                       sampling={"max_new_tokens": 4})
    rollout = await run_rollout(MAP_REDUCE, rollout_input("Write about animals."), ctx)
    assert rollout.status == "failed" and "the limit is 2" in rollout.reason
    assert len(policy.calls) == 2 and rollout.llm_calls <= 2  # the failing superstep may cancel them unanswered


def test_a_kept_state_outside_a_rollout_is_unaffected(tiny_engine: Any) -> None:
    """Plain LangGraph use (no run_rollout): nothing is recorded, nothing changes."""
    policy = ScriptedPolicy(tiny_engine, lambda call: "fine")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, sampling={"max_new_tokens": 4})
    out = asyncio.run(_map_reduce(False).ainvoke({"messages": [HumanMessage("Go")]}, context=ctx))
    assert len(policy.calls) == 4 and isinstance(out["messages"][-1], AIMessage)


def test_the_warning_is_said_once_and_every_sample_names_the_calls(tiny_engine: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    spec = replace(MAP_REDUCE, name="map_reduce_thrice", _graphs={})
    with caplog.at_level(logging.DEBUG, logger="agentgraphs.rollout"):
        rollouts = [asyncio.run(run_rollout(spec, rollout_input(f"take {i}"), AgentContext(
            policy=ScriptedPolicy(tiny_engine, lambda call: "word"), tokenizer=tiny_engine.tokenizer,
            sampling={"max_new_tokens": 4}))) for i in range(3)]
    assert all(len(r.untrained_calls) == 3 and r.llm_calls == 4 for r in rollouts)
    said = [r for r in caplog.records if "map_reduce_thrice" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]


async def _own_call(state: ForgetState, runtime: Any) -> dict[str, Any]:
    """A node that asks the policy itself, bypassing call_llm, beside one recorded call."""
    from agentgraphs.engines import SamplingParams

    ctx = runtime.context
    prompt = ctx.template(None).render([{"role": "user", "content": "Draft"}])
    draft = await ctx.policy.generate(list(prompt), SamplingParams(max_new_tokens=4, ignore_eos=True))
    out = await call_llm(state, runtime, node="own_call", messages=[{"role": "user", "content": draft.text}],
                         max_new_tokens=4)
    return {"answer": out.text, **out.update}


def _own_call_graph() -> Any:
    g = StateGraph(ForgetState, context_schema=AgentContext)
    g.add_node("own_call", _own_call)
    g.add_edge(START, "own_call")
    g.add_edge("own_call", END)
    return g.compile()


OWN_CALL = AgentSpec(name="own_call", build_graph=lambda o: _own_call_graph(), make_input=lambda r, o: {"turns": []},
                     reward=lambda rin, ctx: 0.0, requires_label=False)


def test_a_node_calling_the_policy_engine_itself_is_counted_and_named(server: Any, tiny_model_dir: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """engine.generate called in a node makes no Turn: its tokens can never train. The sample says so, as for a
    dropped Turn, instead of counting one call of the two the server answered and naming none."""
    args = make_args(server.url, tiny_model_dir, "tests.test_call_accounting:OWN_CALL")
    s = Sample(group_index=0, index=3, prompt="Hello there.", label=None, metadata={})
    with caplog.at_level(logging.WARNING, logger="agentgraphs.rollout"):
        out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 16}))
    assert out.status != Sample.Status.FAILED, out.metadata["status_reason"]
    assert server.stats.generate_requests == out.metadata["llm_calls"] == 2
    (own,) = out.metadata["untrained_calls"]
    assert own["node"] == "own_call" and own["output_tokens"] == 4
    assert "called the engine itself (engine.generate), outside call_llm / TracedChatModel" in own["reason"]
    assert out.metadata["trace_summary"]["turns_by_node"] == {"own_call": 1}  # the recorded call still trains
    assert "sample 3" in caplog.text and "'own_call' x1" in caplog.text


def _own_model_graph() -> Any:
    """A graph written with a LangChain chat model of its own (here a fake; in real life ChatOpenAI pointed at
    the SGLang router) instead of TracedChatModel: the engine answers, but no Turn is ever made."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=["\\boxed{42}"] * 8)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g.compile(name="own_model")


OWN_MODEL = messages_graph_spec(_own_model_graph(), reward=lambda rin, ctx: 1.0, name="own_model")


def test_a_training_rollout_with_no_trainable_turn_says_nothing_of_it_trains(
        server: Any, tiny_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A sample that trains nothing while its reward counts in its group was reported as completed, 'ok'."""
    args = make_args(server.url, tiny_model_dir, "tests.test_call_accounting:OWN_MODEL")
    s = Sample(group_index=0, index=4, prompt="What is 6 * 7?", label="42", metadata={})
    with caplog.at_level(logging.WARNING, logger="agentgraphs.rollout"):
        out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 16}))
    assert out.status == Sample.Status.COMPLETED and out.reward == 1.0 and not any(out.loss_mask)
    assert out.metadata["llm_calls"] == 0
    assert out.metadata["status_reason"] == "ok; no trainable policy turn: nothing of this rollout trains"
    said = caplog.text
    assert "own_model: sample 4 ended with no trainable policy turn" in said and "through call_llm or " \
        "TracedChatModel" in said

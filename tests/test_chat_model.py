"""TracedChatModel: unmodified LangGraph agents (create_react_agent, ToolNode, a messages state) trained with
the same exactness as call_llm nodes. Scripted policies choose the text; the tiny model supplies the ids and
log-probs; the SGLang-contract server's record is the reference for what the engine returned."""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # slime loads examples from the repository root; so do the tests
    sys.path.insert(0, str(ROOT))

import rl_bridge
from agentgraphs.batch import run_file
from agentgraphs.chat_model import (
    ERROR_KEY,
    TURN_KEY,
    TracedChatModel,
    messages_graph_spec,
    turns_from_messages,
)
from agentgraphs.context import AgentContext, Limits
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample, SampleV03
from agentgraphs.trace import check_trace
from rl_bridge.setup import clear_cache
from tests.test_bridge import SLIME_SAMPLING, check_against_server, make_args
from tests.test_multiturn import RecordingEngine

with warnings.catch_warnings():  # create_react_agent's own deprecation notice (it moved to langchain.agents)
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

    from examples import react_agent

QUESTION = "What is twice the population of Paris (millions)?"
LOOKUP = '<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris", "field": "population"}}\n</tool_call>'
CALC = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2.1 * 2"}}\n</tool_call>'
FINAL = "Twice the population of Paris is \\boxed{4.2} million."


def react_script(call: ScriptCall) -> str:
    """Decide from the prompt (so the same script serves any number of rollouts): tool results so far."""
    return [LOOKUP, CALC, FINAL][min(call.prompt_text.count("<tool_response>"), 2)]


def agent(**kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(TracedChatModel(), [react_agent.calculator, react_agent.lookup], **kwargs)


def reference_text(tokenizer: Any, messages: list[Any], tools: list[Any], system: str | None = None) -> str:
    """Plain transformers' rendering of the whole conversation, the model's turns as the text it wrote."""
    dicts: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if isinstance(m, AIMessage):
            dicts.append({"role": "assistant", "content": m.response_metadata[TURN_KEY]["visible_text"]})
        else:
            dicts.append({"role": {"human": "user", "tool": "tool", "system": "system"}[m.type], "content": m.content})
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return tokenizer.apply_chat_template(dicts, tools=[convert_to_openai_tool(t) for t in tools], tokenize=False,
                                         add_generation_prompt=False)


@pytest.fixture()
def scripted_server(tiny_engine: Any):
    recorder = RecordingEngine(ScriptedPolicy(tiny_engine, react_script))
    with SGLangTestServer(recorder, port=0) as srv:
        srv.recorder = recorder  # type: ignore[attr-defined]
        yield srv
    clear_cache()


async def test_react_agent_is_one_exact_sequence_against_the_server(scripted_server: Any, tiny_engine: Any) -> None:
    tok = tiny_engine.tokenizer
    async with SGLangEngine(scripted_server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tok, sampling={"max_new_tokens": 64})
        rollout = await run_rollout(react_agent.SPEC, rollout_input(QUESTION, "4.2"), ctx)
    assert rollout.status == "completed", rollout.error
    assert rollout.reward == 1.0 and rollout.answer == FINAL
    messages = rollout.final_state["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert [c["name"] for m in messages[1:4:2] for c in m.tool_calls] == ["lookup", "calculator"]
    assert [m.content for m in messages if m.type == "tool"] == ["2.1", "4.2"]

    calls = scripted_server.recorder.calls
    assert len(calls) == 3 and [t["prompt_ids"] for t in rollout.turns] == [p for p, _ in calls]
    assert [t["output_ids"] for t in rollout.turns] == [c.token_ids for _, c in calls]
    assert [b["input_ids"] for b in scripted_server.stats.bodies] == [p for p, _ in calls]
    assert len({t["conversation"] for t in rollout.turns}) == 1
    (seq,) = rollout.sequences  # ONE training sequence for the whole tool loop
    check_against_server([seq], calls)  # invariants 1-3 token by token against what the server returned
    assert sum(seq["loss_mask"]) == sum(len(c.token_ids) for _, c in calls)
    # the masked stretches are exactly template glue + tool results
    start = len(seq["tokens"]) - seq["response_length"]
    masked = [tok.decode([t]) for t, m in zip(seq["tokens"][start:], seq["loss_mask"]) if not m]
    assert "".join(masked) == ("\n<|im_start|>user\n<tool_response>\n2.1\n</tool_response><|im_end|>\n<|im_start|>"
                               "assistant\n") + "\n<|im_start|>user\n<tool_response>\n4.2\n</tool_response><|im_end|>\n"\
                                                "<|im_start|>assistant\n"
    # independent reference: plain transformers renders the finished conversation to the same text
    text = reference_text(tok, messages, [react_agent.calculator, react_agent.lookup], system=react_agent.SYSTEM_PROMPT)
    assert tok.decode(seq["tokens"]) + "\n" == text


async def test_trimmed_history_starts_a_new_sequence(tiny_engine: Any) -> None:
    def trim(state: dict[str, Any]) -> dict[str, Any]:  # keep the question and the latest tool round only
        msgs = state["messages"]
        return {"llm_input_messages": msgs[:1] + msgs[-2:] if len(msgs) > 3 else msgs}

    policy = ScriptedPolicy(tiny_engine, [LOOKUP, CALC, FINAL])
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, sampling={"max_new_tokens": 64})
    out = await agent(pre_model_hook=trim).ainvoke({"messages": [{"role": "user", "content": QUESTION}]},
                                                   {"recursion_limit": 20}, context=ctx)
    turns = turns_from_messages(out["messages"])
    assert len(turns) == 3
    conv = [t["conversation"] for t in turns]
    assert conv[0] == conv[1] != conv[2]  # the 2nd call extends the 1st; the trimmed 3rd breaks the prefix
    seqs = check_trace(turns, "concat")
    assert [s["turn_indices"] for s in seqs] == [[0, 1], [2]]
    # the breaking call's prompt is a fresh render of exactly what the model was shown
    shown = [out["messages"][0], *out["messages"][3:5]]
    assert tiny_engine.tokenizer.decode(turns[2]["prompt_ids"]) == reference_text(
        tiny_engine.tokenizer, shown, [react_agent.calculator, react_agent.lookup]) + "<|im_start|>assistant\n"


def _two_question_graph() -> Any:
    model = TracedChatModel()

    async def ask(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def follow_up(state: MessagesState) -> dict[str, Any]:
        return {"messages": [HumanMessage("And what is 3 + 3?")]}

    g = StateGraph(MessagesState)
    g.add_node("ask", ask)
    g.add_node("follow_up", follow_up)
    g.add_node("ask_again", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", "follow_up")
    g.add_edge("follow_up", "ask_again")
    g.add_edge("ask_again", END)
    return g.compile()


@pytest.fixture(scope="module")
def qwen3_engine(agentgraphs_cache: Path) -> Any:
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


async def test_qwen3_drops_earlier_think_so_the_next_call_starts_a_sequence(qwen3_engine: Any) -> None:
    tok = qwen3_engine.tokenizer
    policy = ScriptedPolicy(qwen3_engine, ["<think>\nTwo plus two.\n</think>\n\n\\boxed{4}",
                                           "<think>\nThree plus three.\n</think>\n\n\\boxed{6}"])
    ctx = AgentContext(policy=policy, tokenizer=tok, sampling={"max_new_tokens": 64})
    out = await _two_question_graph().ainvoke({"messages": [{"role": "user", "content": "What is 2 + 2?"}]},
                                              {"recursion_limit": 20}, context=ctx)
    first, second = turns_from_messages(out["messages"])
    assert first["conversation"] != second["conversation"]
    assert [t["node"] for t in (first, second)] == ["ask", "ask_again"]
    prompt = tok.decode(second["prompt_ids"])
    assert "Two plus two." not in prompt  # Qwen3's template rewrote the earlier turn: the model never saw it
    assert prompt == tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": first["text"][:-10]},
         {"role": "user", "content": "And what is 3 + 3?"}], tokenize=False, add_generation_prompt=True)
    seqs = check_trace([first, second], "concat")
    assert [s["turn_indices"] for s in seqs] == [[0], [1]]
    assert out["messages"][1].content == "\\boxed{4}"
    assert out["messages"][1].additional_kwargs["reasoning_content"] == "Two plus two."


@pytest.mark.parametrize("think,n_sequences", [("<think>\nFacts first.\n</think>\n\n", 1),
                                               ("<think>Facts first.</think>", 2)])
async def test_qwen3_tool_loop_extends_only_where_the_template_keeps_the_text(
        qwen3_engine: Any, think: str, n_sequences: int) -> None:
    policy = ScriptedPolicy(qwen3_engine, [think + LOOKUP, think + "\\boxed{2.1}"])
    ctx = AgentContext(policy=policy, tokenizer=qwen3_engine.tokenizer, sampling={"max_new_tokens": 64})
    out = await agent().ainvoke({"messages": [{"role": "user", "content": "Population of Paris?"}]},
                                {"recursion_limit": 20}, context=ctx)
    turns = turns_from_messages(out["messages"])
    assert len(turns) == 2 and len(check_trace(turns, "concat")) == n_sequences


@pytest.mark.parametrize("text,error", [
    ('<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris",}}\n</tool_call>', "bad JSON"),
    ('<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>', "unknown tool 'weather'"),
    ('<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris"', "never closed"),
    (LOOKUP + '\n<tool_call>\n{"name": "lookup"}\n</tool_call>', "keys must be exactly"),
])
async def test_malformed_tool_calls_become_an_answer_with_a_recorded_error(tiny_engine: Any, text: str,
                                                                          error: str) -> None:
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, [text]), tokenizer=tiny_engine.tokenizer,
                       sampling={"max_new_tokens": 64})
    rollout = await run_rollout(react_agent.SPEC, rollout_input(QUESTION, "4.2"), ctx)
    assert rollout.status == "completed" and rollout.reward == 0.0
    (msg,) = [m for m in rollout.final_state["messages"] if m.type == "ai"]
    assert msg.tool_calls == [] and error in msg.response_metadata[ERROR_KEY]
    assert msg.invalid_tool_calls and error in msg.invalid_tool_calls[0]["error"]
    (seq,) = rollout.sequences  # still trained: the format error is the policy's to learn from
    assert sum(seq["loss_mask"]) == len(rollout.turns[0]["output_ids"])


async def test_edited_history_renders_afresh(tiny_engine: Any) -> None:
    model = TracedChatModel(context=AgentContext(policy=ScriptedPolicy(tiny_engine, ["Four.", "Six.", "Six.", "Six."]),
                                                 tokenizer=tiny_engine.tokenizer))
    first = await model.ainvoke([HumanMessage("2 + 2?")])
    follow = [first, HumanMessage("3 + 3?")]
    extended = await model.ainvoke([HumanMessage("2 + 2?"), *follow])
    edited = await model.ainvoke([HumanMessage("2 + 2, please?"), *follow])
    turns = [m.response_metadata[TURN_KEY] for m in (first, extended, edited)]
    assert turns[1]["conversation"] == turns[0]["conversation"] != turns[2]["conversation"]
    head = turns[0]["prompt_ids"] + turns[0]["output_ids"]
    assert turns[1]["prompt_ids"][: len(head)] == head
    first.content = "Five."  # an edited model turn is shown as edited, and breaks the prefix too
    rewritten = await model.ainvoke([HumanMessage("2 + 2?"), first, HumanMessage("3 + 3?")])
    assert rewritten.response_metadata[TURN_KEY]["conversation"] != turns[0]["conversation"]
    assert "Five." in tiny_engine.tokenizer.decode(rewritten.response_metadata[TURN_KEY]["prompt_ids"])


def test_sync_invoke_and_messages_stream_mode(tiny_engine: Any) -> None:
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, react_script), tokenizer=tiny_engine.tokenizer,
                       sampling={"max_new_tokens": 64})
    out = agent().invoke({"messages": [{"role": "user", "content": QUESTION}]}, {"recursion_limit": 20}, context=ctx)
    assert out["messages"][-1].content == FINAL and len(turns_from_messages(out["messages"])) == 3
    streamed = [chunk for chunk, meta in agent().stream({"messages": [{"role": "user", "content": QUESTION}]},
                                                        {"recursion_limit": 20}, context=ctx,
                                                        stream_mode="messages") if chunk.type != "tool"]
    assert len(streamed) == 3  # each AIMessage arrives whole, with its Turn
    assert [len(c.response_metadata[TURN_KEY]["output_ids"]) for c in streamed] == \
        [len(t["output_ids"]) for t in turns_from_messages(out["messages"])]


async def test_llm_call_limit_fails_the_rollout(tiny_engine: Any) -> None:
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, react_script), tokenizer=tiny_engine.tokenizer,
                       sampling={"max_new_tokens": 64}, limits=Limits(max_llm_calls=2))
    rollout = await run_rollout(react_agent.SPEC, rollout_input(QUESTION, "4.2"), ctx)
    assert rollout.status == "failed" and "LLMCallLimitExceeded" in rollout.reason
    assert len(rollout.turns) == 2  # the turns made before the failure are reported


@pytest.mark.parametrize("return_list", [False, True])
def test_rl_bridge_generate_in_both_slime_modes(scripted_server: Any, tiny_model_dir: Path,
                                                return_list: bool) -> None:
    extra = {"agentgraph_return_list": True} if return_list else {}
    args = make_args(scripted_server.url, tiny_model_dir, "examples.react_agent:SPEC", **extra)
    cls = SampleV03 if return_list else Sample
    s = cls(group_index=0, index=3, prompt=QUESTION, label="4.2", metadata={"source": "t"})
    out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 64}))
    samples = out if return_list else [out]
    assert len(samples) == 1 and samples[0].status == cls.Status.COMPLETED and samples[0].reward == 1.0
    seqs = samples[0].train_metadata["turns"]
    assert len(seqs) == 1 and samples[0].train_metadata["layout"] == "concat"
    assert samples[0].tokens == seqs[0]["tokens"] and samples[0].loss_mask == seqs[0]["loss_mask"]
    check_against_server(seqs, scripted_server.recorder.calls)


def test_agentgraphs_run(tiny_engine: Any, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": QUESTION, "label": "4.2"}) + "\n" +
                    json.dumps({"input": "What is twice the population of Paris?", "label": "5"}) + "\n")
    summary = run_file("examples.react_agent:SPEC", data, ScriptedPolicy(tiny_engine, react_script),
                       tmp_path / "out", max_new_tokens=64, concurrency=2)
    rows = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert summary["by_status"] == {"completed": 2}
    assert sorted(r["reward"] for r in rows) == [0.0, 1.0]
    assert all(len(r["train_metadata"]["turns"]) == 1 and r["metadata"]["answer"] == FINAL for r in rows)
    traces = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    assert all(len(t["turns"]) == 3 for t in traces)


# ------------------------------------------------------------------------------------ langgraph dev


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def langgraph_dev(tiny_model_dir: Path, tmp_path: Path) -> Any:
    """A real `langgraph dev` server process on 127.0.0.1 serving this repository's langgraph.json."""
    import os
    import shutil
    import signal
    import subprocess
    import time

    import httpx

    exe = shutil.which("langgraph", path=str(Path(sys.executable).parent)) or shutil.which("langgraph")
    if exe is None:
        pytest.skip('needs `pip install "langgraph-cli[inmem]" langgraph-sdk`')
    port = _free_port()
    env = {**os.environ, "AGENTGRAPHS_ENGINE": f"hf:{tiny_model_dir}", "LANGSMITH_TRACING": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "langgraph-dev.log", "wb") as log:
        proc = subprocess.Popen([exe, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):  # up to ~120 s on a loaded machine; usually a few seconds
            if proc.poll() is not None:
                raise AssertionError(f"langgraph dev exited: {(tmp_path / 'langgraph-dev.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("langgraph dev did not come up")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
def test_react_agent_in_langgraph_dev_via_the_sdk(langgraph_dev: str, tiny_engine: Any) -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph_sdk import get_client

    from agentgraphs.chat import ChatTemplate

    async def run() -> dict[str, Any]:
        client = get_client(url=langgraph_dev)
        thread = await client.threads.create()
        await client.runs.wait(thread["thread_id"], "react_agent",
                               input={"messages": [{"role": "user", "content": QUESTION}]},
                               context={"sampling": {"max_new_tokens": 8, "temperature": 0.0}},
                               config={"recursion_limit": 10})
        return await client.threads.get_state(thread["thread_id"])

    state = asyncio.run(run())
    messages = state["values"]["messages"]
    turns = turns_from_messages(messages)  # the trace survives in the server's thread state
    assert len(turns) >= 1 and turns[0]["node"] == "agent" and len(turns[0]["output_ids"]) <= 8
    tools = [convert_to_openai_tool(t) for t in (react_agent.calculator, react_agent.lookup)]
    expected = ChatTemplate(tiny_engine.tokenizer).render(
        [{"role": "system", "content": react_agent.SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}],
        tools=tools)
    assert turns[0]["prompt_ids"] == expected
    # independent check of the log-probs: the same weights, teacher-forced in this process (greedy: T=0 -> 1)
    rescored = asyncio.run(tiny_engine.score_async(turns[0]["prompt_ids"], turns[0]["output_ids"], 1.0))
    assert rescored == pytest.approx(turns[0]["output_logprobs"], abs=1e-3)
    check_trace(turns, "concat")


def test_sync_invoke_over_http_keeps_one_engine_loop(scripted_server: Any, tiny_engine: Any) -> None:
    """Sync calls share one background loop, so an HTTP engine (bound to its first loop) serves them all."""
    ctx = AgentContext(policy=SGLangEngine(scripted_server.url), tokenizer=tiny_engine.tokenizer,
                       sampling={"max_new_tokens": 64})
    out = agent().invoke({"messages": [{"role": "user", "content": QUESTION}]}, {"recursion_limit": 20}, context=ctx)
    turns = turns_from_messages(out["messages"])
    assert [t["output_ids"] for t in turns] == [c.token_ids for _, c in scripted_server.recorder.calls]
    assert len(check_trace(turns, "concat")) == 1


async def test_parallel_tool_calls_in_one_turn_stay_one_sequence(tiny_engine: Any) -> None:
    both = LOOKUP + "\n" + LOOKUP.replace("Paris", "Lima")
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, [both, "\\boxed{12.1}"]), tokenizer=tiny_engine.tokenizer,
                       sampling={"max_new_tokens": 64})
    rollout = await run_rollout(react_agent.SPEC, rollout_input("Paris and Lima together?", "12.1"), ctx)
    assert rollout.status == "completed" and rollout.reward == 1.0
    messages = rollout.final_state["messages"]
    assert [c["args"]["city"] for c in messages[1].tool_calls] == ["Paris", "Lima"]
    assert [m.content for m in messages if m.type == "tool"] == ["2.1", "10"]
    assert len(rollout.sequences) == 1 and len({t["conversation"] for t in rollout.turns}) == 1


def test_abort_and_truncation_through_rl_bridge(scripted_server: Any, tiny_model_dir: Path) -> None:
    args = make_args(scripted_server.url, tiny_model_dir, "examples.react_agent:SPEC")
    scripted_server.faults.schedule("abort", 1)
    s = asyncio.run(rl_bridge.generate(args, Sample(index=0, prompt=QUESTION, label="4.2"), SLIME_SAMPLING))
    assert s.status == Sample.Status.ABORTED
    # 16 tokens cut the first tool call: no call is parsed, the turn is the answer and the rollout TRUNCATED
    s = asyncio.run(rl_bridge.generate(args, Sample(index=1, prompt=QUESTION, label="4.2"), SLIME_SAMPLING))
    assert s.status == Sample.Status.TRUNCATED and s.reward == 0.0
    check_against_server(s.train_metadata["turns"], scripted_server.recorder.calls[-1:])


async def test_turns_survive_checkpoints_and_a_replay_extends_the_same_sequence(tiny_engine: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    graph = react_agent.build_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}, "recursion_limit": 20}
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, react_script), tokenizer=tiny_engine.tokenizer,
                       sampling={"max_new_tokens": 64})
    await graph.ainvoke({"messages": [{"role": "user", "content": QUESTION}]}, config, context=ctx)
    state = await graph.aget_state(config)
    turns = turns_from_messages(state.values["messages"])
    assert len(turns) == 3 and len(check_trace(turns, "concat")) == 1
    # replay from the checkpoint right after the first tool result: a different model continues exactly there
    history = [s async for s in graph.aget_state_history(config)]
    (fork,) = [s for s in history if len(s.values.get("messages", [])) == 3 and s.next == ("agent",)]
    other = AgentContext(policy=ScriptedPolicy(tiny_engine, ["It is \\boxed{4.2}."]), tokenizer=tiny_engine.tokenizer,
                         sampling={"max_new_tokens": 64})
    replayed = await graph.ainvoke(None, fork.config, context=other)
    new_turns = turns_from_messages(replayed["messages"])
    assert len(new_turns) == 2 and new_turns[0] == turns[0]
    assert new_turns[1]["conversation"] == turns[0]["conversation"] and new_turns[1]["prompt_ids"] == turns[1]["prompt_ids"]
    assert len(check_trace(new_turns, "concat")) == 1


@pytest.mark.parametrize("sync_first", [True, False])
async def test_sync_node_in_an_async_run_over_http(scripted_server: Any, tiny_engine: Any, sync_first: bool) -> None:
    """A plain `def` node calling `model.invoke()` (LangGraph's quickstart shape) in a graph run with ainvoke,
    as `agentgraphs run` and rl_bridge run every graph, next to an `async def` node on the same SGLang engine:
    both are answered by the server, and the trace is exactly what it returned (it failed with 'bound to a
    different event loop' whichever node used the engine first)."""
    model = TracedChatModel()

    def sync_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def async_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState, context_schema=AgentContext)
    first, second = (sync_node, async_node) if sync_first else (async_node, sync_node)
    builder.add_node("first", first)
    builder.add_node("tool", lambda state: {"messages": [HumanMessage("<tool_response>\n2.1\n</tool_response>")]})
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "tool")
    builder.add_edge("tool", "second")
    builder.add_edge("second", END)
    spec = messages_graph_spec(builder.compile(), reward=lambda rin, ctx: 0.0, name="sync_node")
    async with SGLangEngine(scripted_server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tiny_engine.tokenizer, sampling={"max_new_tokens": 64})
        rollout = await run_rollout(spec, rollout_input(QUESTION, "4.2"), ctx)
    assert rollout.status == "completed", rollout.reason
    calls = scripted_server.recorder.calls
    assert [t["node"] for t in rollout.turns] == ["first", "second"] and len(calls) == 2
    assert [t["prompt_ids"] for t in rollout.turns] == [p for p, _ in calls]
    assert [t["output_ids"] for t in rollout.turns] == [c.token_ids for _, c in calls]
    check_against_server(rollout.sequences, calls)

"""agentgraphs.checkpoints.savers: compact SQLite savers round-trip Turns exactly and grow linearly.

A conversation graph loops one LLM node (call_llm with conversation="main") N times against an
in-process engine; runs with the compact savers must give back exactly what LangGraph's own savers
give back (final state, every state in the history, resumes and forks), in a database that grows
linearly with the conversation instead of with its cube.
"""

from __future__ import annotations

import os
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from agentgraphs.checkpoints.savers import (
    ENTRIES_TABLE,
    CompactAsyncSqliteSaver,
    compact_async_sqlite_saver,
    compact_sqlite_saver,
)
from agentgraphs.context import AgentContext
from agentgraphs.engines import Completion, SamplingParams
from agentgraphs.node import TraceState
from agentgraphs.testing.agents import looping_chat_graph
from agentgraphs.testing.fake_engines import FixedLatencyEngine
from agentgraphs.trace import make_turn


def chat_graph(checkpointer: Any) -> Any:
    return looping_chat_graph(checkpointer)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture(scope="module")
def context(tokenizer: Any) -> AgentContext:
    reply = tokenizer.encode("Let me think about this part again. " * 6, add_special_tokens=False)
    # log-probs like -0.5 - 0.0137 * i are not short decimals: their bits must survive storage
    engine = FixedLatencyEngine(latency_s=0.0, script=(*reply, tokenizer.eos_token_id), tokenizer=tokenizer,
                                logprob_step=0.0137)
    return AgentContext(policy=engine, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=256))


def _input(n: int) -> dict[str, Any]:
    return {"turns": [], "step": 0, "limit": n, "doc_ids": list(range(1000, 1600))}


def _config(thread: str = "t") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 500}


def db_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return os.path.getsize(path)


async def run_to_end(saver: Any, n: int, ctx: AgentContext, thread: str = "t") -> tuple[Any, list[Any]]:
    graph = chat_graph(saver)
    final = await graph.ainvoke(_input(n), _config(thread), context=ctx)
    history = [s async for s in graph.aget_state_history(_config(thread))]
    return final, history


async def test_state_and_history_match_langgraphs_own_saver(tmp_path: Path, context: AgentContext) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "plain.sqlite")) as plain:
        want_final, want_history = await run_to_end(plain, 12, context)
    async with compact_async_sqlite_saver(str(tmp_path / "compact.sqlite")) as saver:
        final, history = await run_to_end(saver, 12, context)
        state = await chat_graph(saver).aget_state(_config())
    assert final == want_final
    assert state.values == want_final
    assert [s.values for s in history] == [s.values for s in want_history]
    assert [s.next for s in history] == [s.next for s in want_history]
    turn = final["turns"][-1]
    assert all(type(x) is float for x in turn["output_logprobs"]) and turn["output_logprobs"][3] == -0.5 - 3 * 0.0137
    assert list(turn.keys()) == list(want_final["turns"][-1].keys())


async def test_a_new_process_reads_and_resumes_from_a_mid_checkpoint(tmp_path: Path, context: AgentContext) -> None:
    path = str(tmp_path / "c.sqlite")
    async with compact_async_sqlite_saver(path) as saver:
        final, history = await run_to_end(saver, 10, context)
    mid = next(s for s in history if s.values["step"] == 5)
    # a fresh saver (empty caches), as after a restart; the context is passed again on resume
    async with compact_async_sqlite_saver(path) as saver:
        graph = chat_graph(saver)
        again = await graph.aget_state(mid.config)
        assert again.values == mid.values
        assert again.values["turns"] == final["turns"][:5]
        resumed = await graph.ainvoke(None, mid.config, context=context)
        assert resumed == final  # same engine script: replaying regenerates identical turns
        newest = await graph.aget_state(_config())
        assert newest.values == final


async def test_update_state_forks_and_the_fork_continues(tmp_path: Path, context: AgentContext) -> None:
    async with compact_async_sqlite_saver(str(tmp_path / "c.sqlite")) as saver:
        graph = chat_graph(saver)
        final, history = await run_to_end(saver, 6, context)
        mid = next(s for s in history if s.values["step"] == 3)
        extra = make_turn(Completion([7, 8, 9], [-0.25, -1.5, -3.0], "stop", text="x"), node="judge",
                          prompt_ids=[1, 2, 3], trainable=False, temperature=0.0, engine="judge")
        fork_config = await graph.aupdate_state(mid.config, {"turns": [extra], "limit": 4})
        fork = await graph.aget_state(fork_config)
        assert fork.values["turns"] == mid.values["turns"] + [extra]
        assert fork.values["limit"] == 4
        out = await graph.ainvoke(None, fork_config, context=context)
        assert out["turns"][:4] == mid.values["turns"] + [extra]
        assert len(out["turns"]) == 5 and out["step"] == 4
        # the original branch is untouched
        original = await graph.aget_state(history[0].config)
        assert original.values == final


def test_sync_saver_round_trips_and_forks(tmp_path: Path) -> None:
    def grow(state: TraceState) -> dict[str, Any]:
        turns = state["turns"]
        k = len(turns)
        prompt = [*turns[-1]["prompt_ids"], *turns[-1]["output_ids"], 500 + k] if turns else list(range(300))
        done = Completion([10 + k, 11 + k, 2**31 + k], [-0.1 * (k + 1), 0.0, -7e-9], "stop", text=f"t{k}")
        return {"turns": [make_turn(done, node="grow", prompt_ids=prompt, trainable=True, temperature=0.7,
                                    engine="fake", conversation="c")]}

    builder = StateGraph(TraceState)
    builder.add_node("grow", grow)
    builder.add_edge(START, "grow")
    builder.add_conditional_edges("grow", lambda s: "grow" if len(s["turns"]) < 8 else END, ["grow", END])
    with compact_sqlite_saver(str(tmp_path / "s.sqlite")) as saver:
        graph = builder.compile(checkpointer=saver)
        final = graph.invoke({"turns": []}, _config())
        history = list(graph.get_state_history(_config()))
        assert graph.get_state(_config()).values == final
        for snap in history:
            assert snap.values.get("turns", []) == final["turns"][: len(snap.values.get("turns", []))]
        mid = next(s for s in history if len(s.values["turns"]) == 4)
        fork = graph.update_state(mid.config, {"turns": []})
        assert graph.get_state(fork).values["turns"] == final["turns"][:4]
        assert graph.invoke(None, fork)["turns"] == final["turns"]


async def test_odd_values_come_back_exactly(tmp_path: Path) -> None:
    odd = make_turn(Completion([1], [-1.0], "stop"), node="n", prompt_ids=[5], trainable=True,
                    temperature=1.0, engine="e")
    odd["output_logprobs"] = [0]  # an int where a float belongs: must come back an int
    reordered = dict(reversed(list(odd.items())))
    values = {"turns": [odd, reordered], "ids": list(range(-5, 400)), "big": list(range(2**32, 2**32 + 300)),
              "bools": [True] * 300, "doc": "h\u00e9llo \ud800 w\u00f6rld \U0001f389 " * 600}
    async with compact_async_sqlite_saver(str(tmp_path / "c.sqlite")) as saver:
        cfg = {"configurable": {"thread_id": "x", "checkpoint_ns": ""}}
        checkpoint = {"v": 4, "id": "1", "ts": "", "channel_values": values, "channel_versions": {},
                      "versions_seen": {}, "updated_channels": None}
        stored = await saver.aput(cfg, checkpoint, {}, {})
        back = (await saver.aget_tuple(stored)).checkpoint["channel_values"]
    assert back == values
    assert type(back["turns"][0]["output_logprobs"][0]) is int
    assert list(back["turns"][1].keys()) == list(reordered.keys())
    assert all(type(b) is bool for b in back["bools"])
    with sqlite3.connect(tmp_path / "c.sqlite") as conn:  # the long text went to the side table
        assert conn.execute(f"SELECT count(*) FROM {ENTRIES_TABLE} WHERE lower(kind) = 's'").fetchone() == (1,)


async def test_database_grows_linearly_with_the_conversation(tmp_path: Path, context: AgentContext) -> None:
    sizes, unique, trace = {}, {}, {}
    for n in (16, 64):
        path = tmp_path / f"c{n}.sqlite"
        async with compact_async_sqlite_saver(str(path)) as saver:
            final, _ = await run_to_end(saver, n, context)
        sizes[n] = db_bytes(path)
        last = final["turns"][-1]
        unique[n] = len(last["prompt_ids"]) + len(last["output_ids"])  # the conversation's distinct ids
        trace[n] = sum(len(t["prompt_ids"]) + len(t["output_ids"]) for t in final["turns"])
        with sqlite3.connect(path) as conn:
            kinds = dict(conn.execute(f"SELECT lower(kind), count(*) FROM {ENTRIES_TABLE} GROUP BY lower(kind)")
                         .fetchall())
        assert kinds["t"] == n  # every turn stored once
    growth, content_growth = sizes[64] / sizes[16], unique[64] / unique[16]
    assert growth < 1.5 * content_growth, (sizes, unique)  # LangGraph's own saver: ~31x here
    assert sizes[64] <= 4 * 4 * trace[64]  # the benchmark's target, with 4 bytes per traced id


async def test_a_missing_entry_is_a_clear_error(tmp_path: Path, context: AgentContext) -> None:
    path = tmp_path / "c.sqlite"
    async with compact_async_sqlite_saver(str(path)) as saver:
        await run_to_end(saver, 2, context)
    with sqlite3.connect(path) as conn:
        conn.execute(f"DELETE FROM {ENTRIES_TABLE} WHERE lower(kind) = 't'")
    async with CompactAsyncSqliteSaver.from_conn_string(str(path)) as saver:
        with pytest.raises(LookupError, match=ENTRIES_TABLE):
            await chat_graph(saver).aget_state(_config())


def _checkpoint(i: int, values: dict[str, Any]) -> dict[str, Any]:
    return {"v": 4, "id": f"{i:04d}", "ts": "", "channel_values": values, "channel_versions": {},
            "versions_seen": {}, "updated_channels": None}


_CFG = {"configurable": {"thread_id": "x", "checkpoint_ns": ""}}


async def test_a_list_changed_in_place_is_stored_again(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sqlite")
    ids = list(range(300))
    async with compact_async_sqlite_saver(path) as saver:
        s1 = await saver.aput(_CFG, _checkpoint(1, {"doc": ids}), {}, {})
        ids.append(999)  # the same list object, grown in place, checkpointed again
        s2 = await saver.aput(s1, _checkpoint(2, {"doc": ids}), {}, {})
        ids[5] = 12345  # same length, one item changed in place
        s3 = await saver.aput(s2, _checkpoint(3, {"doc": ids}), {}, {})
        got = [(await saver.aget_tuple(s)).checkpoint["channel_values"]["doc"] for s in (s1, s2, s3)]
    want = [list(range(300)), [*range(300), 999], [*range(5), 12345, *range(6, 300), 999]]
    assert got == want
    async with compact_async_sqlite_saver(path) as fresh:  # and from the database alone
        assert [(await fresh.aget_tuple(s)).checkpoint["channel_values"]["doc"] for s in (s1, s2, s3)] == want


async def test_editing_a_loaded_value_does_not_change_the_next_load(tmp_path: Path) -> None:
    async with compact_async_sqlite_saver(str(tmp_path / "c.sqlite")) as saver:
        stored = await saver.aput(_CFG, _checkpoint(1, {"doc": list(range(300))}), {}, {})
        first = (await saver.aget_tuple(stored)).checkpoint["channel_values"]["doc"]
        first.append(-1)
        first[0] = -2
        again = (await saver.aget_tuple(stored)).checkpoint["channel_values"]["doc"]
        assert again == list(range(300)) and again is not first


async def test_a_failed_write_is_written_again_by_the_next_put(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sqlite")
    t1 = make_turn(Completion([1, 2], [-0.1, -0.2], "stop"), node="n", prompt_ids=[5, 6], trainable=True,
                   temperature=1.0, engine="e", conversation="c")
    # extends t1: stored as a delta against t1's entry, which the failed write never committed
    t2 = make_turn(Completion([3], [-0.3], "stop"), node="n", prompt_ids=[5, 6, 1, 2, 7], trainable=True,
                   temperature=1.0, engine="e", conversation="c")
    doc, text = list(range(300)), "x" * 5000
    async with compact_async_sqlite_saver(path) as saver:
        real = saver._write

        async def locked(rows: Any) -> None:
            raise sqlite3.OperationalError("database is locked")

        saver._write = locked  # type: ignore[method-assign]
        with pytest.raises(sqlite3.OperationalError):
            await saver.aput(_CFG, _checkpoint(1, {"turns": [t1], "doc": doc, "text": text}), {}, {})
        with pytest.raises(sqlite3.OperationalError):  # a write of the next turn fails too
            await saver.aput_writes(_CFG, [("turns", [t2])], "task")
        saver._write = real  # type: ignore[method-assign]
        s1 = await saver.aput(_CFG, _checkpoint(1, {"turns": [t1], "doc": doc, "text": text}), {}, {})
        s2 = await saver.aput(s1, _checkpoint(2, {"turns": [t1, t2], "doc": doc, "text": text}), {}, {})
    async with compact_async_sqlite_saver(path) as fresh:  # empty caches: everything from the database
        assert (await fresh.aget_tuple(s1)).checkpoint["channel_values"] == {"turns": [t1], "doc": doc, "text": text}
        assert (await fresh.aget_tuple(s2)).checkpoint["channel_values"] == {"turns": [t1, t2], "doc": doc,
                                                                             "text": text}
    with sqlite3.connect(path) as conn:  # t2 is still stored as a delta against t1
        rows = conn.execute(f"SELECT kind, type, data FROM {ENTRIES_TABLE} WHERE lower(kind) = 't'").fetchall()
    bases = sorted(JsonPlusSerializer().loads_typed((type_, zlib.decompress(data) if kind == "T" else data))["b"]
                   is not None for kind, type_, data in rows)
    assert bases == [False, True]


# -- messages graphs: TracedChatModel's Turns ride in AIMessages -----------------------------------------

def react_graph(tokenizer: Any, turns: int, checkpointer: Any) -> tuple[Any, AgentContext]:
    """create_react_agent over TracedChatModel with a local tool; the engine answers at call `turns`."""
    import warnings

    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    from agentgraphs.chat_model import TracedChatModel
    from agentgraphs.testing.fake_engines import Reply

    result = " ".join(f"station{k} opened in {1900 + k}" for k in range(60))

    @tool
    async def lookup(topic: str) -> str:
        """Look up the facts recorded about a topic."""
        return result

    def script(text: str) -> tuple[int, ...]:
        return (*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id)

    call = 'Checking.\n<tool_call>\n{"name": "lookup", "arguments": {"topic": "stations"}}\n</tool_call>'
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    engine = FixedLatencyEngine(latency_s=0.0, tokenizer=tokenizer, logprob_step=0.0137, replies=(
        Reply(scripts=(script("Done: \\boxed{7}."),), marker=im_start, count=3 + 2 * (turns - 1)),
        Reply(scripts=(script(call),))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(TracedChatModel(), [lookup], checkpointer=checkpointer)
    return graph, AgentContext(policy=engine, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=128))


async def _react_run(graph: Any, ctx: AgentContext, thread: str) -> list[Any]:
    """Every state the run went through, as streamed (the reference for what the saver gives back)."""
    inp = {"messages": [{"role": "user", "content": f"Thread {thread}: when did the stations open?"}]}
    return [v async for v in graph.astream(inp, _config(thread), context=ctx, stream_mode="values")]


async def test_messages_graph_stores_each_message_and_turn_once(tmp_path: Path, tokenizer: Any) -> None:
    from agentgraphs.chat_model import turns_from_messages

    path = tmp_path / "c.sqlite"
    async with compact_async_sqlite_saver(str(path)) as saver:
        graph, ctx = react_graph(tokenizer, 12, saver)
        seen = await _react_run(graph, ctx, "t")
        history = [s.values async for s in graph.aget_state_history(_config())]
    assert history[::-1][1:] == seen  # every state (the first checkpoint is the empty input step)
    async with compact_async_sqlite_saver(str(path)) as fresh:  # empty caches: all from the database
        graph, _ = react_graph(tokenizer, 12, fresh)
        assert [s.values async for s in graph.aget_state_history(_config())][::-1][1:] == seen
    final = seen[-1]["messages"]
    turns = turns_from_messages(final)
    assert len(turns) == 12 and all(t["conversation"] == turns[0]["conversation"] for t in turns)
    with sqlite3.connect(path) as conn:
        kinds = dict(conn.execute(f"SELECT lower(kind), count(*) FROM {ENTRIES_TABLE} GROUP BY lower(kind)")
                     .fetchall())
    assert kinds["t"] == 12 and kinds["m"] == len(final)  # every message once, every Turn once
    trace = 4 * sum(len(t["prompt_ids"]) + len(t["output_ids"]) for t in turns)
    assert db_bytes(path) <= 4 * trace  # LangGraph's own saver: ~17x at 12 turns, ~32x at 30


async def test_messages_graph_resumes_mid_conversation_from_a_fresh_saver(tmp_path: Path, tokenizer: Any) -> None:
    from agentgraphs.chat_model import turns_from_messages
    from agentgraphs.trace import check_trace

    path = str(tmp_path / "c.sqlite")
    async with compact_async_sqlite_saver(path) as saver:
        graph, ctx = react_graph(tokenizer, 6, saver)
        seen = await _react_run(graph, ctx, "t")
        history = [s async for s in graph.aget_state_history(_config())]
    mid = next(s for s in history if len(s.values["messages"]) == 5 and s.next == ("agent",))
    async with compact_async_sqlite_saver(path) as fresh:
        graph, ctx = react_graph(tokenizer, 6, fresh)
        resumed = await graph.ainvoke(None, mid.config, context=ctx)
        newest = (await graph.aget_state(_config())).values
    turns = turns_from_messages(resumed["messages"])
    assert newest == resumed and len(turns) == 6
    assert len(check_trace(turns, "concat")) == 1  # the resumed calls extend the restored conversation
    assert [t["prompt_ids"] for t in turns] == [t["prompt_ids"] for t in turns_from_messages(seen[-1]["messages"])]


async def test_many_threads_at_once_keep_their_own_histories(tmp_path: Path, tokenizer: Any) -> None:
    import asyncio

    path = tmp_path / "c.sqlite"
    async with compact_async_sqlite_saver(str(path)) as saver:
        graph, ctx = react_graph(tokenizer, 4, saver)
        runs = await asyncio.gather(*(_react_run(graph, ctx, f"t{i}") for i in range(48)))
        for i, seen in enumerate(runs):
            history = [s.values async for s in graph.aget_state_history(_config(f"t{i}"))]
            assert history[::-1][1:] == seen
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"SELECT count(*) FROM {ENTRIES_TABLE} WHERE lower(kind) = 't'").fetchone() == (48 * 4,)


async def test_a_message_given_a_new_field_value_is_stored_again(tmp_path: Path, tokenizer: Any) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    msgs = [HumanMessage("hi", id="1"), AIMessage("hello", id="2")]
    async with compact_async_sqlite_saver(str(tmp_path / "c.sqlite")) as saver:
        s1 = await saver.aput(_CFG, _checkpoint(1, {"messages": list(msgs)}), {}, {})
        msgs[1].content = "hello again"  # a new value for a field of the same message object
        s2 = await saver.aput(s1, _checkpoint(2, {"messages": list(msgs)}), {}, {})
        got = [(await saver.aget_tuple(s)).checkpoint["channel_values"]["messages"][1].content for s in (s1, s2)]
    assert got == ["hello", "hello again"]


async def test_entries_written_uncompressed_read_back_the_same(tmp_path: Path, context: AgentContext) -> None:
    """Entries are compressed when that pays (capital kind letters); a database whose entries are all stored
    plain (as before compression) gives back the same states."""
    path = tmp_path / "c.sqlite"
    async with compact_async_sqlite_saver(str(path)) as saver:
        final, history = await run_to_end(saver, 8, context)
    with sqlite3.connect(path) as conn:
        packed = conn.execute(f"SELECT key, kind, data FROM {ENTRIES_TABLE} WHERE kind != lower(kind)").fetchall()
        assert packed  # the turns and the document's ids were compressed
        conn.executemany(f"UPDATE {ENTRIES_TABLE} SET kind = ?, data = ? WHERE key = ?",
                         [(kind.lower(), zlib.decompress(data), key) for key, kind, data in packed])
    async with compact_async_sqlite_saver(str(path)) as fresh:
        graph = chat_graph(fresh)
        assert [s.values async for s in graph.aget_state_history(_config())] == [s.values for s in history]

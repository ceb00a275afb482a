"""Checkpoint size: a 64-turn run with LangGraph's AsyncSqliteSaver vs agentgraphs' compact saver.

    python bench/checkpoints.py [--quick]

Two runs, each with both savers, against an in-process engine (FixedLatencyEngine, no latency) and the
tiny model's real Qwen2.5 tokenizer and chat template:

- conversation (THE TARGET RUN): one LLM node looping 64 times in ONE conversation
  (call_llm(conversation="main"), a new user message each turn), so prompt k = prompt k-1 + output k-1
  + glue; also run at 16 turns to measure growth;
- memagent: MemAgent over a 30-chunk document (chunk 1000 tokens; gated: issue 21's target is 30 turns)
  and a 64-chunk one (reported): memory updates + the answer. Its database must also hold the document,
  as text (the graph's input) and as ids (state), neither of which is a turn's token id; "content bytes"
  adds them (UTF-8 text + 4 B/id);
- messages (gated): `create_react_agent` over `TracedChatModel` with a local tool, 30 policy turns (~100
  generated + ~400 tool tokens each), the Turns riding in AIMessages; the compact saver's history is
  checked against the states the run streamed (two runs of a messages graph differ in message and call
  ids, so the two savers are not compared state by state here; tests/checkpoints/test_savers.py does).

Definitions (printed with the figures):
- trace token bytes = 4 bytes x (sum over all turns of len(prompt_ids) + len(output_ids)): the ids the
  Turn list holds, as `traces.jsonl` and get_state() show them. TARGET: database <= 4 x this.
- unique token bytes = 4 bytes x the distinct ids: for a conversation its final length (last prompt +
  output); for MemAgent the document + every prompt's non-document ids + outputs. Not a target; shows
  whether growth is linear in content.
Database size = the SQLite file after a WAL checkpoint (pages in use, indices and free space included).
Both savers' results are checked equal (final state and every state of the history).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # noqa: E402

from agentgraphs.checkpoints.savers import CompactAsyncSqliteSaver  # noqa: E402
from agentgraphs.context import AgentContext, Limits  # noqa: E402
from agentgraphs.engines import SamplingParams  # noqa: E402
from agentgraphs.memagent.graph import MemAgentOptions, build_graph as memagent_graph  # noqa: E402
from agentgraphs.memagent.synthetic import make_needle_example  # noqa: E402
from agentgraphs.testing.agents import looping_chat_graph  # noqa: E402
from agentgraphs.testing.fake_engines import FixedLatencyEngine, Reply  # noqa: E402

NAME = "checkpoints"
TARGET = 4.0
REPLY = "Let me look at this part of the problem again and continue from where I stopped. " * 4


def chat_graph(checkpointer: Any) -> Any:
    return looping_chat_graph(checkpointer)


def db_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return os.path.getsize(path)


async def _run(saver_cls: Any, path: Path, graph_of: Any, inp: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 1000}
    async with saver_cls.from_conn_string(str(path)) as saver:
        graph = graph_of(saver)
        started = time.perf_counter()
        final = await graph.ainvoke(inp, config, context=ctx)
        run_s = time.perf_counter() - started
        started = time.perf_counter()
        history = [s.values async for s in graph.aget_state_history(config)]
        history_s = time.perf_counter() - started
    return {"final": final, "history": history, "run_s": run_s, "history_s": history_s, "db": db_bytes(path)}


def _trace_ids(turns: list[Any]) -> int:
    return sum(len(t["prompt_ids"]) + len(t["output_ids"]) for t in turns)


def _report(label: str, plain: dict[str, Any], compact: dict[str, Any], unique_ids: int,
            gated: bool = True) -> dict[str, Any]:
    if plain["final"] != compact["final"] or plain["history"] != compact["history"]:
        raise SystemExit(f"{label}: the compact saver gave back different states: comparison void")
    turns = compact["final"]["turns"]
    trace_bytes, unique_bytes = 4 * _trace_ids(turns), 4 * unique_ids
    row = {
        "turns": len(turns), "checkpoints": len(compact["history"]),
        "trace_token_bytes": trace_bytes, "unique_token_bytes": unique_bytes,
        "plain_db_bytes": plain["db"], "compact_db_bytes": compact["db"],
        "plain_ratio": round(plain["db"] / trace_bytes, 3), "compact_ratio": round(compact["db"] / trace_bytes, 3),
        "compact_vs_unique": round(compact["db"] / unique_bytes, 2),
        "plain_run_s": round(plain["run_s"], 3), "compact_run_s": round(compact["run_s"], 3),
        "plain_history_s": round(plain["history_s"], 3), "compact_history_s": round(compact["history_s"], 3),
    }
    print(f"  {label}: {row['turns']} turns, {row['checkpoints']} checkpoints; trace token bytes "
          f"{trace_bytes:,}, unique token bytes {unique_bytes:,}; states identical with both savers")
    print(f"    AsyncSqliteSaver   {plain['db']:>12,} B = {row['plain_ratio']:7.3f} x trace bytes   "
          f"run {plain['run_s']:.2f} s, history read {plain['history_s']:.2f} s")
    print(f"    compact saver      {compact['db']:>12,} B = {row['compact_ratio']:7.3f} x trace bytes "
          f"({row['compact_vs_unique']:.2f} x unique)   run {compact['run_s']:.2f} s, "
          f"history read {compact['history_s']:.2f} s   "
          + (f"target <= {TARGET:.0f}x {_common.verdict(row['compact_ratio'] <= TARGET)}" if gated
             else f"({_common.verdict(row['compact_ratio'] <= TARGET)} against the same bar; not the target run)"))
    return row


async def conversation(tmp: Path, n: int, ctx: AgentContext) -> tuple[dict[str, Any], dict[str, Any]]:
    inp = {"turns": [], "step": 0, "limit": n}
    plain = await _run(AsyncSqliteSaver, tmp / f"plain-conv{n}.sqlite", chat_graph, inp, ctx)
    compact = await _run(CompactAsyncSqliteSaver, tmp / f"compact-conv{n}.sqlite", chat_graph, inp, ctx)
    last = compact["final"]["turns"][-1]
    return plain, compact | {"unique": len(last["prompt_ids"]) + len(last["output_ids"])}


async def memagent(tmp: Path, chunks: int, chunk_tokens: int, ctx: AgentContext) -> tuple[dict[str, Any], dict[str, Any]]:
    row = make_needle_example(ctx.tokenizer, chunks * chunk_tokens - 40, seed=0, chunk_size=chunk_tokens)
    inp = {"turns": [], "question": row["question"], "document": row["document"]}
    mem_ctx = AgentContext(policy=ctx.policy, tokenizer=ctx.tokenizer, sampling=ctx.sampling, evaluation=True,
                           limits=Limits(max_llm_calls=chunks + 8, recursion_limit=1000))
    options = MemAgentOptions(variant="original", chunk_tokens=chunk_tokens, eval_max_chunks=None)

    def graph_of(saver: Any) -> Any:
        return memagent_graph(options, checkpointer=saver)

    # one database per run (a second run into the same file and thread would continue the first one's state)
    plain = await _run(AsyncSqliteSaver, tmp / f"plain-mem{chunks}.sqlite", graph_of, inp, mem_ctx)
    compact = await _run(CompactAsyncSqliteSaver, tmp / f"compact-mem{chunks}.sqlite", graph_of, inp, mem_ctx)
    final = compact["final"]
    doc = len(final["doc_ids"])
    unique = doc + sum(len(t["prompt_ids"]) - _chunk_len(final, i) + len(t["output_ids"])
                       for i, t in enumerate(final["turns"]))
    return plain, compact | {"unique": unique, "document": row["document"], "doc_ids": doc}


async def messages(tmp: Path, turns: int, tok: Any) -> dict[str, Any]:
    """The react agent over TracedChatModel with both savers; the compact history checked against the run."""
    import _scale_work as work

    from agentgraphs.chat_model import turns_from_messages

    rules = []
    for rule in work.react_replies(tok, turns, 100):
        marker = tok.convert_tokens_to_ids(rule["marker"]) if rule["marker"] else None
        scripts = tuple((*tok.encode(t, add_special_tokens=False), tok.eos_token_id) for t in rule["texts"])
        rules.append(Reply(scripts=scripts, marker=marker, count=rule.get("count", 1)))
    engine = FixedLatencyEngine(latency_s=0.0, tokenizer=tok, replies=tuple(rules), logprob_step=0.0137)
    ctx = AgentContext(policy=engine, tokenizer=tok, sampling=SamplingParams(max_new_tokens=256))
    spec = work.react_spec(work.tool_results(tok, 400))
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 1000}
    inp = {"messages": [{"role": "user", "content": work.QUESTION.format(i=0)}]}
    out: dict[str, Any] = {}
    for label, cls in (("plain", AsyncSqliteSaver), ("compact", CompactAsyncSqliteSaver)):
        path = tmp / f"{label}-messages.sqlite"
        async with cls.from_conn_string(str(path)) as saver:
            graph = spec.graph(None, checkpointer=saver)
            started = time.perf_counter()
            seen = [v async for v in graph.astream(inp, config, context=ctx, stream_mode="values")]
            run_s = time.perf_counter() - started
            history = [st.values async for st in graph.aget_state_history(config)]
        if history[::-1][1:] != seen:
            raise SystemExit(f"messages: the {label} saver gave back other states than the run went through")
        got = turns_from_messages(seen[-1]["messages"])
        if len(got) != turns:
            raise SystemExit(f"messages: {len(got)} turns, expected {turns}")
        out[label] = {"db": db_bytes(path), "run_s": run_s, "trace": 4 * _trace_ids(got), "turns": len(got),
                      "checkpoints": len(history)}
    return out


def _chunk_len(final: dict[str, Any], i: int) -> int:
    chunks = final["chunks"]
    return sum(b - a for a, b in chunks[i]) if i < len(chunks) else 0


def main() -> None:
    p = _common.parser(__doc__.splitlines()[0])
    args = p.parse_args()
    n = 16 if args.quick else 64
    short = 6 if args.quick else 30  # the 30 turns
    chunk_tokens = 500 if args.quick else 1000
    tok = _common.tiny_tokenizer()
    reply = tok.encode(REPLY, add_special_tokens=False)
    engine = FixedLatencyEngine(latency_s=0.0, script=(*reply, tok.eos_token_id), tokenizer=tok, logprob_step=0.0137)
    ctx = AgentContext(policy=engine, tokenizer=tok, sampling=SamplingParams(max_new_tokens=512))
    print(f"{NAME}: {n}-turn runs, LangGraph AsyncSqliteSaver vs agentgraphs.checkpoints.savers.CompactAsyncSqliteSaver;"
          f" outputs of {len(reply) + 1} tokens; machine: {_common.machine()['cores']} cores")
    print("  trace token bytes = 4 B x sum over turns of (len(prompt_ids) + len(output_ids)); "
          "target: compact database <= 4 x trace token bytes")
    results: dict[str, Any] = {"quick": args.quick, "target": TARGET}
    with tempfile.TemporaryDirectory(prefix="agentgraphs-bench-") as d:
        tmp = Path(d)
        small = asyncio.run(conversation(tmp, 16 if not args.quick else 4, ctx))
        plain, compact = asyncio.run(conversation(tmp, n, ctx))
        results["conversation"] = _report("conversation", plain, compact, compact["unique"])
        base_plain, base_compact = small
        g_plain = plain["db"] / base_plain["db"]
        g_compact = compact["db"] / base_compact["db"]
        g_unique = compact["unique"] / base_compact["unique"]
        g_trace = _trace_ids(compact["final"]["turns"]) / _trace_ids(base_compact["final"]["turns"])
        k = len(base_compact["final"]["turns"])
        print(f"    growth {k} -> {n} turns: unique ids x{g_unique:.2f}, trace ids x{g_trace:.2f}; "
              f"AsyncSqliteSaver x{g_plain:.1f}, compact x{g_compact:.2f} (linear in content: "
              f"{_common.verdict(g_compact <= 1.5 * g_unique)})")
        results["conversation"].update(growth_turns=[k, n], growth_unique=round(g_unique, 3),
                                       growth_plain=round(g_plain, 3), growth_compact=round(g_compact, 3))
        for key, chunks, gated in (("memagent30", short, True), ("memagent", n, False)):
            plain, compact = asyncio.run(memagent(tmp, chunks, chunk_tokens, ctx))
            results[key] = mem = _report(f"memagent ({chunks} chunks of {chunk_tokens} tokens)", plain, compact,
                                         compact["unique"], gated=gated)
            doc_text = len(compact["document"].encode("utf-8"))
            content = mem["trace_token_bytes"] + 4 * compact["doc_ids"] + doc_text
            mem.update(chunk_tokens=chunk_tokens, document_text_bytes=doc_text, document_ids=compact["doc_ids"],
                       content_bytes=content, compact_vs_content=round(compact["db"] / content, 3),
                       plain_vs_content=round(plain["db"] / content, 3))
            print(f"    content bytes = trace token bytes + document text {doc_text:,} B + document ids "
                  f"{4 * compact['doc_ids']:,} B = {content:,} B: AsyncSqliteSaver {mem['plain_vs_content']:.2f}x, "
                  f"compact saver {mem['compact_vs_content']:.2f}x")
        got = asyncio.run(messages(tmp, short, tok))
        plain, compact = got["plain"], got["compact"]
        msg = results["messages"] = {
            "turns": compact["turns"], "checkpoints": compact["checkpoints"], "trace_token_bytes": compact["trace"],
            "plain_db_bytes": plain["db"], "compact_db_bytes": compact["db"],
            "plain_ratio": round(plain["db"] / plain["trace"], 3), "compact_ratio": round(compact["db"] / compact["trace"], 3),
            "plain_run_s": round(plain["run_s"], 3), "compact_run_s": round(compact["run_s"], 3)}
        print(f"  messages (create_react_agent over TracedChatModel, {msg['turns']} turns, {msg['checkpoints']} "
              f"checkpoints): trace token bytes {msg['trace_token_bytes']:,}; every state of the history as the run "
              f"streamed it, with both savers")
        print(f"    AsyncSqliteSaver   {plain['db']:>12,} B = {msg['plain_ratio']:7.3f} x trace bytes   run "
              f"{plain['run_s']:.2f} s")
        print(f"    compact saver      {compact['db']:>12,} B = {msg['compact_ratio']:7.3f} x trace bytes   run "
              f"{compact['run_s']:.2f} s   target <= {TARGET:.0f}x {_common.verdict(msg['compact_ratio'] <= TARGET)}")
    conv, mem, mem30 = results["conversation"], results["memagent"], results["memagent30"]
    passed = conv["compact_ratio"] <= TARGET and mem30["compact_ratio"] <= TARGET and msg["compact_ratio"] <= TARGET
    results["passed"] = passed
    _common.finish(args.results_dir, NAME, results, passed, f"{n}-turn conversation {conv['compact_ratio']:.3f}x, "
                   f"MemAgent {short} chunks {mem30['compact_ratio']:.2f}x, messages graph {short} turns "
                   f"{msg['compact_ratio']:.2f}x trace token bytes <= {TARGET:.0f}x (LangGraph's saver "
                   f"{conv['plain_ratio']:.1f}x / {mem30['plain_ratio']:.1f}x / {msg['plain_ratio']:.1f}x); "
                   f"MemAgent {n} chunks {mem['compact_ratio']:.2f}x")


if __name__ == "__main__":
    main()

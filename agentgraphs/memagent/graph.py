"""MemAgent as a LangGraph graph: prepare -> memory_update (loop over chunks) -> final_answer -> score.

The document is tokenized ONCE in `prepare`; every chunk is a slice of those ids, spliced verbatim
into the memory-update prompt (no decode/re-encode). Each memory update and the final answer are
separate engine calls with their own prompts, so each becomes its own training sequence (per_turn).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Literal, Optional, Sequence

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import NotRequired  # typing.NotRequired is Python 3.11+

from ..context import AgentContext, context_of
from ..node import TraceState, call_llm
from ..spec import MethodOptions
from ..long_text import encode_text
from .prompts import INITIAL_MEMORY, final_prompt, memory_from_response, memory_update_prompt

CHUNK_PLACEHOLDER = "\u2063<<agentgraphs:chunk>>\u2063"


class MemAgentOptions(MethodOptions):
    """MemAgent's settings (defaults: the original MemAgent; the seed's variant in the descriptions)."""

    chunk_tokens: int = Field(5000, ge=1, description="document tokens per memory update")
    memory_max_new_tokens: int = Field(1024, ge=1, description="cap of each memory update")
    final_max_new_tokens: int = Field(1024, ge=1, description="cap of the final answer")
    question_max_tokens: int = Field(1024, ge=1, description="longer questions are cut (prompt text only)")
    max_chunks: Optional[int] = Field(8, ge=1, description="training cap: the middle of longer documents is "
                                      "cut; null reads everything")
    eval_max_chunks: Optional[int] = Field(None, ge=1, description="evaluation cap (null: read everything)")
    train_final_answer: bool = Field(True, description="train the final answer (original); the seed masks it")
    reward_split: Literal["broadcast", "divide"] = Field(
        "broadcast", description="every sequence gets the reward (original) or reward / n (the seed)")


Span = list[int]  # [start, end) into doc_ids
_INLINE_TOKENIZE_CHARS = 100_000  # ~20K tokens, a few ms: longer documents are tokenized off the event loop


class MemAgentState(TraceState):
    question: str
    document: str
    doc_ids: NotRequired[list[int]]
    chunks: NotRequired[list[list[Span]]]
    chunk_index: NotRequired[int]
    memory: NotRequired[str]
    answer: NotRequired[str]


def chunk_spans(n_tokens: int, chunk_tokens: int, max_chunks: int | None) -> list[list[Span]]:
    """Chunks of `chunk_tokens` ids as spans into the document ids.

    With a cap, the document is first cut to `max_chunks * chunk_tokens` ids by dropping its MIDDLE
    (the first and last halves are kept), then chunked; a chunk may straddle the cut (two spans).

    >>> chunk_spans(10, 4, None)
    [[[0, 4]], [[4, 8]], [[8, 10]]]
    >>> chunk_spans(10, 2, 2)
    [[[0, 2]], [[8, 10]]]
    """
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be > 0, got {chunk_tokens}")
    segments: list[Span] = [[0, n_tokens]]
    if max_chunks is not None and n_tokens > max_chunks * chunk_tokens:
        keep = max_chunks * chunk_tokens
        head = keep - keep // 2
        segments = [[0, head], [n_tokens - keep // 2, n_tokens]]
    chunks: list[list[Span]] = []
    current: list[Span] = []
    room = chunk_tokens
    for start, end in segments:
        while start < end:
            take = min(room, end - start)
            current.append([start, start + take])
            start += take
            room -= take
            if room == 0:
                chunks.append(current)
                current, room = [], chunk_tokens
    if current:
        chunks.append(current)
    return chunks


def chunk_ids(doc_ids: Sequence[int], spans: Sequence[Span]) -> list[int]:
    out: list[int] = []
    for start, end in spans:
        out.extend(doc_ids[start:end])
    return out


async def prepare(state: MemAgentState, runtime: Runtime[AgentContext], opts: MemAgentOptions) -> dict[str, Any]:
    """Tokenize the document once, cut it into chunks, and start from the initial memory.

    Every function of this graph is async: LangGraph runs a sync node or router of an async graph in a
    thread pool, and those hops cost ~0.2 ms CPU per LLM call (bench/overhead.py). Only a long document is
    tokenized on a worker thread (the tokenizer releases the GIL), so the event loop keeps serving the
    other rollouts meanwhile.
    """
    ctx = context_of(runtime)
    tok = ctx.tokenizer
    question = state["question"]
    q_ids = tok.encode(question, add_special_tokens=False)
    if len(q_ids) > opts.question_max_tokens:
        # prompt text only (never trained): keep the question's first question_max_tokens tokens
        question = tok.decode(q_ids[: opts.question_max_tokens])
    document = state["document"]
    if len(document) > _INLINE_TOKENIZE_CHARS:
        doc_ids = await asyncio.to_thread(encode_text, tok, document)
    else:
        doc_ids = encode_text(tok, document)
    cap = opts.eval_max_chunks if ctx.evaluation else opts.max_chunks
    chunks = chunk_spans(len(doc_ids), opts.chunk_tokens, cap)
    # the text is no longer needed: keep one copy of the document (its ids) per rollout
    return {"question": question, "document": "", "doc_ids": doc_ids, "chunks": chunks,
            "chunk_index": 0, "memory": INITIAL_MEMORY}


async def memory_update(state: MemAgentState, runtime: Runtime[AgentContext], opts: MemAgentOptions,
                        ) -> dict[str, Any]:
    """Read one chunk and rewrite the memory. Trained: this is what MemAgent learns."""
    i = state["chunk_index"]
    ids = chunk_ids(state["doc_ids"], state["chunks"][i])
    user = memory_update_prompt(state["question"], state["memory"], CHUNK_PLACEHOLDER)
    out = await call_llm(
        state, runtime, node="memory_update", messages=[{"role": "user", "content": user}],
        splice={CHUNK_PLACEHOLDER: ids}, max_new_tokens=opts.memory_max_new_tokens,
    )
    return {"memory": memory_from_response(out.text), "chunk_index": i + 1, **out.update}


async def final_answer(state: MemAgentState, runtime: Runtime[AgentContext], opts: MemAgentOptions,
                       ) -> dict[str, Any]:
    """Answer from memory alone, in \\boxed{}."""
    user = final_prompt(state["question"], state["memory"])
    out = await call_llm(
        state, runtime, node="final_answer", messages=[{"role": "user", "content": user}],
        trainable=opts.train_final_answer, max_new_tokens=opts.final_max_new_tokens,
    )
    return {"answer": out.text, **out.update}


async def route_after_update(state: MemAgentState) -> str:
    return "memory_update" if state["chunk_index"] < len(state["chunks"]) else "final_answer"


def build_graph(options: MemAgentOptions | None = None, *, checkpointer: Any = None) -> Any:
    """The compiled MemAgent graph for resolved options (defaults when None).

    The reward is not a node: `run_rollout` scores the finished state once (AgentSpec.reward).

    >>> g = build_graph(MemAgentOptions(chunk_tokens=2000))
    >>> sorted(g.get_graph().nodes)
    ['__end__', '__start__', 'final_answer', 'memory_update', 'prepare']
    """
    opts = options or MemAgentOptions()
    builder = StateGraph(MemAgentState, context_schema=AgentContext)
    builder.add_node("prepare", partial(prepare, opts=opts))
    builder.add_node("memory_update", partial(memory_update, opts=opts))
    builder.add_node("final_answer", partial(final_answer, opts=opts))
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges("prepare", route_after_update, ["memory_update", "final_answer"])
    builder.add_conditional_edges("memory_update", route_after_update, ["memory_update", "final_answer"])
    builder.add_edge("final_answer", END)
    return builder.compile(checkpointer=checkpointer, name="memagent")

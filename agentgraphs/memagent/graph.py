"""MemAgent as a LangGraph graph: prepare -> memory_update (loop over chunks) -> final_answer -> score.

The document is tokenized ONCE in `prepare` and cut into chunks of those ids. A chunk reaches the
memory-update prompt as the document's ids spliced verbatim (`chunk_as: ids`, the original) or decoded
to text and rendered with the prompt (`chunk_as: text`, the seed); either way the prompt is recorded
exactly as sent. Each memory update and the final answer are separate engine calls with their own
prompts, so each becomes its own training sequence (per_turn). `variant` picks the seed's or the
original's settings (memagent/variants.py).
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
from ..trace import RewardSplit
from .prompts import INITIAL_MEMORY, final_prompt, memory_from_response, memory_update_prompt, strip_response
from .variants import TEMPLATE_PRESETS, VARIANTS

CHUNK_PLACEHOLDER = "\u2063<<agentgraphs:chunk>>\u2063"


class MemAgentOptions(MethodOptions):
    """MemAgent's settings. `variant` fills the options it governs (memagent/variants.py): "seed" (the
    default) reproduces what the seed's code trains, "original" the MemAgent paper's; an option set
    explicitly wins over the variant. The defaults written below are the seed's.

    >>> MemAgentOptions().max_chunks, MemAgentOptions(variant="original").max_chunks
    (512, 8)
    >>> MemAgentOptions(variant="original", max_chunks=4).max_chunks  # explicit beats the preset
    4
    """

    presets = VARIANTS
    template_presets = TEMPLATE_PRESETS
    variant: Literal["seed", "original"] = Field(
        "seed", description="preset of the options below: the seed's training (seed) or MemAgent's (original)")
    chunk_tokens: int = Field(5000, ge=1, description="document tokens per memory update (both 5000)")
    memory_max_new_tokens: int = Field(1024, ge=1, description="cap of each memory update (both 1024)")
    final_max_new_tokens: int = Field(256, ge=1, description="cap of the final answer (seed 256; original 1024)")
    question_max_tokens: Optional[int] = Field(
        None, ge=1, description="longer questions are cut to their first tokens (prompt text only; seed null: "
        "never cut; original 1024)")
    max_chunks: Optional[int] = Field(512, ge=1, description="training cap in chunks; null reads everything "
                                      "(seed 512; original 8)")
    eval_max_chunks: Optional[int] = Field(512, ge=1, description="evaluation cap in chunks; null reads "
                                           "everything (seed 512; original null)")
    truncation: Literal["middle", "tail"] = Field(
        "tail", description="what a capped document loses: its tail, the first chunks are read (seed), or its "
        "middle, the first and last halves are read (original)")
    chunk_as: Literal["ids", "text"] = Field(
        "text", description="a chunk enters the prompt as the document's ids spliced verbatim (original) or "
        "decoded to text without special tokens and tokenized with the prompt (seed)")
    strip_responses: bool = Field(
        True, description="the new memory and the answer lose stop-token text and surrounding whitespace, and "
        "an empty memory update keeps the previous memory (seed); false: the response as generated (original)")
    memory_after_think: bool = Field(
        False, description="the new memory is the update's text after its last </think> (original, as its "
        "RULER-HQA script takes it; its training keeps the whole response); false: the whole update, thoughts "
        "included (seed)")
    train_final_answer: bool = Field(True, description="train the final answer (both variants; false masks it)")
    reward_split: RewardSplit = Field(
        "divide", description="every sequence gets the trajectory's advantage (original) or it divided by the "
        "number of trained sequences, the final answer included (seed)")


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


def chunk_spans(n_tokens: int, chunk_tokens: int, max_chunks: int | None,
                truncation: Literal["middle", "tail"] = "middle") -> list[list[Span]]:
    """Chunks of `chunk_tokens` ids as spans into the document ids.

    With a cap, a document longer than `max_chunks * chunk_tokens` ids is first cut to that many:
    `middle` drops its middle (the first and last halves are kept; a chunk may straddle the cut, as two
    spans), `tail` drops its end (the first `max_chunks` chunks are kept).

    >>> chunk_spans(10, 4, None)
    [[[0, 4]], [[4, 8]], [[8, 10]]]
    >>> chunk_spans(10, 2, 2), chunk_spans(10, 2, 2, "tail")
    ([[[0, 2]], [[8, 10]]], [[[0, 2]], [[2, 4]]])
    """
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be > 0, got {chunk_tokens}")
    if truncation not in ("middle", "tail"):
        raise ValueError(f"truncation must be 'middle' or 'tail', got {truncation!r}")
    segments: list[Span] = [[0, n_tokens]]
    if max_chunks is not None and n_tokens > max_chunks * chunk_tokens:
        keep = max_chunks * chunk_tokens
        if truncation == "tail":
            segments = [[0, keep]]
        else:
            segments = [[0, keep - keep // 2], [n_tokens - keep // 2, n_tokens]]
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

    In evaluation the question and the document lose their surrounding whitespace first, as both references'
    RULER-HQA scripts do (the seed's eval_ruler_hqa.py:251-252, MemAgent's taskutils/memory_eval/utils/
    recurrent.py:49-50); in training both are formatted as the row gives them (the seed's rollout.py:106-107).

    Every function of this graph is async: LangGraph runs a sync node or router of an async graph in a
    thread pool, and those hops cost ~0.2 ms CPU per LLM call (bench/overhead.py). Only a long document is
    tokenized on a worker thread (the tokenizer releases the GIL), so the event loop keeps serving the
    other rollouts meanwhile.
    """
    ctx = context_of(runtime)
    tok = ctx.tokenizer
    question, document = state["question"], state["document"]
    if ctx.evaluation:  # both references' RULER-HQA scripts strip them; training reads the row as given
        question, document = question.strip(), document.strip()
    cap_q = opts.question_max_tokens
    if cap_q is not None and len(q_ids := tok.encode(question, add_special_tokens=False)) > cap_q:
        # prompt text only (never trained): keep the question's first question_max_tokens tokens
        question = tok.decode(q_ids[:cap_q])
    if len(document) > _INLINE_TOKENIZE_CHARS:
        doc_ids = await asyncio.to_thread(encode_text, tok, document)
    else:
        doc_ids = encode_text(tok, document)
    cap = opts.eval_max_chunks if ctx.evaluation else opts.max_chunks
    chunks = chunk_spans(len(doc_ids), opts.chunk_tokens, cap, opts.truncation)
    # the text is no longer needed: keep one copy of the document (its ids) per rollout
    return {"question": question, "document": "", "doc_ids": doc_ids, "chunks": chunks,
            "chunk_index": 0, "memory": INITIAL_MEMORY}


async def memory_update(state: MemAgentState, runtime: Runtime[AgentContext], opts: MemAgentOptions,
                        ) -> dict[str, Any]:
    """Read one chunk and rewrite the memory. Trained: this is what MemAgent learns."""
    ctx = context_of(runtime)
    i = state["chunk_index"]
    ids = chunk_ids(state["doc_ids"], state["chunks"][i])
    if opts.chunk_as == "text":  # the seed: the chunk's text, tokenized with the prompt around it
        chunk, splice = ctx.tokenizer.decode(ids, skip_special_tokens=True), None
    else:  # the original: the document's ids, verbatim
        chunk, splice = CHUNK_PLACEHOLDER, {CHUNK_PLACEHOLDER: ids}
    user = memory_update_prompt(state["question"], state["memory"], chunk)
    out = await call_llm(
        state, runtime, node="memory_update", messages=[{"role": "user", "content": user}],
        splice=splice, max_new_tokens=opts.memory_max_new_tokens,
    )
    memory = memory_from_response(out.text) if opts.memory_after_think else out.text
    if opts.strip_responses:
        memory = strip_response(memory, stop_texts(ctx)) or state["memory"]
    return {"memory": memory, "chunk_index": i + 1, **out.update}


async def final_answer(state: MemAgentState, runtime: Runtime[AgentContext], opts: MemAgentOptions,
                       ) -> dict[str, Any]:
    """Answer from memory alone, in \\boxed{}."""
    user = final_prompt(state["question"], state["memory"])
    out = await call_llm(
        state, runtime, node="final_answer", messages=[{"role": "user", "content": user}],
        trainable=opts.train_final_answer, max_new_tokens=opts.final_max_new_tokens,
    )
    answer = strip_response(out.text, stop_texts(context_of(runtime))) if opts.strip_responses else out.text
    return {"answer": answer, **out.update}


def stop_texts(ctx: AgentContext) -> tuple[str, ...]:
    """The special-token texts a response may carry where generation stopped: the policy template's end of
    turn and the tokenizer's eos and pad tokens (Qwen: `<|im_end|>`, `<|endoftext|>`, the seed's two)."""
    tok = ctx.tokenizer
    found = (ctx.template(None).end_of_turn, getattr(tok, "eos_token", None), getattr(tok, "pad_token", None))
    return tuple(dict.fromkeys(t for t in found if isinstance(t, str) and t))


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

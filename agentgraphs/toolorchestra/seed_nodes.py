"""The QA tool nodes under `tool_protocol: seed`: search, enhance_reasoning and answer as the seed runs them
(Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/orchestra_solver.py:502-640; the text is seed_tools.py's).

    search            the expert (the seed's query-writer system message) writes a query in <query></query>
                      (else the problem's first 200 characters: a failed expert too); the documents, or
                      "No relevant documents found.", are the tool's result and a `[Search by X]` context part
    enhance_reasoning the expert (a reasoner's system message) reasons over the problem and the context parts in
                      text; its whole reply is the result and a `[Reasoning by X]` part (nothing is run)
    answer            the expert answers over the problem and the parts; the answer is `seed_tools.extract_answer`
                      of its reply; the episode ends (a failed expert: `answer_failure`)

Each result goes back to the orchestrator as a tool message (graph.py keeps the conversation). Every expert
reply is its whole text, as the seed's endpoint returns it (a reasoning expert's <think> block included: the
seed's experts run without a reasoning parser, launch.sh). An expert's cost is counted as the seed's
`_make_stats` counts it (orchestra_solver.py:446-456): its user message and the tool's result under the
orchestrator's tokenizer (search: the documents), and its latency is the expert call's alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from ..context import AgentContext, context_of
from ..errors import EngineError, RetrievalError
from ..long_text import count_tokens
from ..node import call_llm
from .options import ToolOrchestraOptions, ToolOrchestraState
from .prompts import (SEED_ANSWER_SYSTEM, SEED_NO_DOCUMENTS, SEED_REASONING_PART, SEED_REASONING_SYSTEM,
                      SEED_SEARCH_FAILED_PART, SEED_SEARCH_PART, SEED_SEARCH_SYSTEM, SEED_UNAVAILABLE)
from .search import search_documents
from .seed_tools import answer_prompt, extract_answer, extract_query, format_documents, reasoning_prompt, search_prompt
from .steps import breaker_error, chosen_expert, expert_sampling, finish_step

__all__ = ["SEED_TOOL_NODES", "answer", "enhance_reasoning", "search", "tool_message"]


def tool_message(tool: str, content: str) -> dict[str, str]:
    """A tool's result in the orchestrator's conversation (prompt_builder.py:158-165; the seed's random
    tool_call_id, which Qwen3's template never renders, is left out).

    >>> tool_message("search", "No relevant documents found.")["role"]
    'tool'
    """
    return {"role": "tool", "name": tool, "content": content}


async def _ask(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions, node: str,
               system: str, prompt: str) -> tuple[str, dict[str, Any], float, str | None]:
    """(the expert's whole reply, or our error text when it failed; state update; seconds; error or None)."""
    name, engine = chosen_expert(state)
    started = time.monotonic()
    try:
        out = await call_llm(state, runtime, node=node, engine=engine, trainable=False,
                             messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                             **expert_sampling(opts))
    except EngineError as exc:
        error = f"expert {name!r} failed: {exc}"
        return error, {}, time.monotonic() - started, error
    return out.text, out.update, time.monotonic() - started, None


def _stats(ctx: AgentContext, prompt: str, result: str) -> tuple[int, int]:
    # the seed's _make_stats: the user message and the result under the orchestrator's tokenizer
    return count_tokens(ctx.tokenizer, prompt), (count_tokens(ctx.tokenizer, result) if result else 0)


def _result(state: ToolOrchestraState, tool: str, result: str, parts: list[str], tokens: tuple[int, int],
            latency_s: float, error: str | None, failures: int) -> dict[str, Any]:
    return {"context_parts": parts, "history": [*(state.get("history") or []), tool_message(tool, result)],
            "steps": finish_step(state, tokens, latency_s, error), "pending": "", "expert_failures": failures}


def _skipped(state: ToolOrchestraState, opts: ToolOrchestraOptions, tool: str) -> dict[str, Any] | None:
    # the open breaker's tool result, no expert called, the count left as it is (orchestra_solver.py:469-480)
    error = breaker_error(state, opts)
    if error is None:
        return None
    return {"history": [*(state.get("history") or []), tool_message(tool, SEED_UNAVAILABLE)],
            "steps": finish_step(state, (0, 0), 0.0, error), "pending": ""}


async def search(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                 ) -> dict[str, Any]:
    """The seed's two-phase search (orchestra_solver.py:572-605)."""
    skipped = _skipped(state, opts, "search")
    if skipped is not None:
        return skipped
    ctx = context_of(runtime)
    parts = list(state.get("context_parts") or [])
    prompt = search_prompt(state["problem"], parts)
    reply, update, seconds, error = await _ask(state, runtime, opts, "search_expert", SEED_SEARCH_SYSTEM, prompt)
    query = extract_query(reply if error is None else "", state["problem"])
    name = chosen_expert(state)[0]
    try:
        hits = await search_documents(ctx, query, topk=opts.retrieval_topk, eid=state.get("eid"),
                                      url=opts.retrieval_url, timeout_s=opts.retrieval_timeout_s,
                                      retries=opts.retrieval_retries)
    except RetrievalError as exc:
        error = error or f"search for {query[:200]!r} failed: {exc}"
        parts.append(SEED_SEARCH_FAILED_PART.format(expert=name))
        result = SEED_NO_DOCUMENTS
    else:
        result = format_documents(hits, opts.document_max_chars)
        parts.append(SEED_SEARCH_PART.format(expert=name, documents=result))
    out = _result(state, "search", result, parts, _stats(ctx, prompt, result), seconds, error, failures=0)
    return {**out, **update}


async def enhance_reasoning(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                            ) -> dict[str, Any]:
    """The seed's text reasoning expert (orchestra_solver.py:620-640); a failed one counts toward the breaker."""
    skipped = _skipped(state, opts, "enhance_reasoning")
    if skipped is not None:
        return skipped
    parts = list(state.get("context_parts") or [])
    prompt = reasoning_prompt(state["problem"], parts)
    reply, update, seconds, error = await _ask(state, runtime, opts, "reasoning_expert", SEED_REASONING_SYSTEM,
                                               prompt)
    parts.append(SEED_REASONING_PART.format(expert=chosen_expert(state)[0], result=reply))
    failures = state.get("expert_failures", 0) + 1 if error is not None else 0
    tokens = _stats(context_of(runtime), prompt, reply)
    return {**_result(state, "enhance_reasoning", reply, parts, tokens, seconds, error, failures), **update}


async def answer(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                 ) -> dict[str, Any]:
    """The seed's answer (orchestra_solver.py:504-525): the episode ends with `extract_answer` of the reply. A
    failed expert ends it with its error as the answer (`answer_failure: error_text`, the seed) or an empty one
    (`empty`); `note` makes the error the tool's result and the orchestrator goes on."""
    skipped = _skipped(state, opts, "answer")
    if skipped is not None:
        return skipped
    prompt = answer_prompt(state["problem"], list(state.get("context_parts") or []))
    reply, update, seconds, error = await _ask(state, runtime, opts, "answer_expert", SEED_ANSWER_SYSTEM, prompt)
    tokens = _stats(context_of(runtime), prompt, reply)
    out: dict[str, Any] = {"steps": finish_step(state, tokens, seconds, error), "pending": "", "expert_failures": 0,
                           **update}
    if error is None:
        return {**out, "answer": extract_answer(reply), "done": True}
    if opts.answer_failure == "note":
        return {**out, "history": [*(state.get("history") or []), tool_message("answer", error)]}
    return {**out, "answer": error if opts.answer_failure == "error_text" else "", "done": True}


SEED_TOOL_NODES: dict[str, Callable[..., Any]] = {"search": search, "enhance_reasoning": enhance_reasoning,
                                                  "answer": answer}

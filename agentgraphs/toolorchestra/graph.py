"""ToolOrchestra (QA mode) as a LangGraph graph: orchestrator -> tool -> orchestrator ... -> answer.

Every orchestrator turn is rendered whole from state (the chat template over its messages and tools), so each
turn is its own training sequence (per_turn) and everything a tool returned sits in the prompt: masked by
construction. The trained ids are the prompt the engine saw and the ids it returned (call_llm records both).
What the prompt holds is the option `tool_protocol`'s:
    seed      the seed's one conversation: its system prompt, `Problem: ...`, then each earlier turn as
              generated and its tool's result as a tool message (the tool nodes are seed_nodes.py's)
    original  a FRESH user message: the problem + the context rebuilt from the episode's notes (this module's)

Tools run experts, other engines addressed by name in `AgentContext.engines` (never trained):
    search            the expert writes a query; the retrieval service returns top-k passages (of the row's
                      example only, for a row with a non-empty eid, as the seed's service filters: search.py)
    enhance_reasoning original: the expert writes Python; it runs (timeout) and the code + output become a note;
                      seed: the expert reasons in text
    answer            the expert answers (original: \\boxed{}; seed: <answer>); the episode ends (a failed answer
                      expert too, by default)
A seed-format row (`seed_rows`) brings its own tool list (rendered as it is) and maps the expert name the
orchestrator chooses to the model whose engine is called. A failing search or code expert, or retrieval
service, becomes an "earlier attempt" note (seed: the seed's tool result); the loop goes on (with the seed's
circuit breaker: after 2 failed enhance_reasoning experts in a row, every expert tool is skipped). A sandbox
that cannot run on the machine fails the rollout (ConfigError): it is no result of the expert's. A
format-invalid orchestrator turn ends the episode unanswered (`invalid_call: end`, the seed) or becomes a note
too (`invalid_call: continue`, the original).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from ..answers import last_boxed
from ..context import AgentContext, context_of
from ..errors import ConfigError, EngineError, RetrievalError
from ..long_text import count_tokens, encode_text
from ..node import call_llm
from ..toolcalls import split_reasoning
from .coderun import extract_code, run_expert_code
from .notes import Note, render_context
from .options import (TOOLS, Step, ToolOrchestraOptions, ToolOrchestraState, max_turns, orchestrator_turn_tokens,
                      row_experts)
from .parsing import parse_choice
from .prompts import ANSWER_EXPERT, CODE_EXPERT, ORCHESTRATOR_USER, SEARCH_EXPERT, tool_schemas
from .search import search_documents
from .seed_nodes import SEED_TOOL_NODES, tool_message
from .seed_tools import fit_messages, orchestrator_messages
from .steps import breaker_error, chosen_expert, expert_sampling, finish_step


def _context_text(ctx: AgentContext, opts: ToolOrchestraOptions, notes: list[Note]) -> str:
    tok = ctx.tokenizer

    def cut(text: str, n: int) -> str:
        return tok.decode(encode_text(tok, text)[:n])

    return render_context(notes, partial(count_tokens, tok), opts.context_max_tokens, cut)


async def orchestrator(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                       ) -> dict[str, Any]:
    """The trained call: choose a tool and an expert. A format-invalid turn is recorded as a step."""
    ctx = context_of(runtime)
    notes = state.get("notes") or []
    row = state.get("seed_row")
    experts = row_experts(row) if row is not None else opts.experts
    _check_experts(ctx, {"model_mapping": list(row["model_mapping"].values())} if row is not None else experts)
    # a seed row's own tool list goes to the chat template as the seed gives it (none when it is empty)
    tools = (row["tools"] or None) if row is not None else tool_schemas(experts)
    out = await call_llm(state, runtime, node="orchestrator", messages=_orchestrator_messages(state, ctx, opts, tools),
                         tools=tools, max_new_tokens=opts.orchestrator_max_new_tokens or _turn_tokens(ctx, opts))
    choice = parse_choice(out.text, experts)
    step = Step(tool=choice.tool, model=choice.model, ok=choice.ok,
                orchestrator_input_tokens=len(out.turn["prompt_ids"]),
                orchestrator_output_tokens=len(out.turn["output_ids"]),
                expert_input_tokens=0, expert_output_tokens=0, expert_tokens=0, latency_s=0.0)
    update: dict[str, Any] = {"steps": [*(state.get("steps") or []), step],
                              "pending": choice.tool if choice.ok else "", **out.update}
    seed = opts.tool_protocol == "seed"
    if seed:  # the conversation goes on with the turn as SGLang's text: its <|im_end|> kept under slime's default
        # skip_special_tokens=False (orchestra_solver.py:130, 392; spec.reply_text_keys refuses another value)
        update["history"] = [*(state.get("history") or []), {"role": "assistant", "content": out.completion.text}]
    if not choice.ok:
        step["error"] = str(choice.error)
        invalid = f"Format-invalid tool call: {choice.error}"
        if opts.invalid_call == "end":
            update["stopped"] = f"format-invalid tool call: {choice.error}"
        elif seed:  # no seed behaviour (its invalid turn ends the episode): the error is the turn's tool result
            update["history"].append(tool_message("invalid_call", invalid))
        else:
            update["notes"] = [*notes, Note(kind="attempt", text=invalid)]
    return update


def _orchestrator_messages(state: ToolOrchestraState, ctx: AgentContext, opts: ToolOrchestraOptions,
                           tools: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    """tool_protocol seed: the one conversation the seed's orchestrator keeps, its oldest middle messages
    dropped when the contents pass the seed's budget (seed_tools.fit_messages); original: a fresh user
    message with the context rebuilt from the notes."""
    if opts.tool_protocol == "seed":
        count = partial(count_tokens, ctx.tokenizer)
        messages = orchestrator_messages(state["problem"], state.get("history") or [])
        # the budget is cut by the turn's max_new_tokens as call_llm asks it (orchestra_solver.py:364-367)
        return fit_messages(messages, str(tools) if tools else "", _turn_tokens(ctx, opts), count)  # the list's repr
    context = _context_text(ctx, opts, state.get("notes") or [])
    return [{"role": "user", "content": ORCHESTRATOR_USER.format(problem=state["problem"], context=context)}]


def _turn_tokens(ctx: AgentContext, opts: ToolOrchestraOptions) -> int:
    return orchestrator_turn_tokens(opts, ctx.sampling.max_new_tokens, bool(ctx.max_new_tokens_cap))


def _check_experts(ctx: AgentContext, experts: Mapping[str, list[str]]) -> None:
    missing = sorted({m for models in experts.values() for m in models if m not in ctx.engines})
    if missing:
        where = "the row's model_mapping" if "model_mapping" in experts else "the 'experts' option"
        raise ConfigError(f"toolorchestra: experts {missing} have no engine; add them to AgentContext.engines "
                          f"(known: {sorted(ctx.engines)}) or change {where}")


async def _expert(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions,
                  node: str, prompt: str) -> tuple[str | None, dict[str, Any], tuple[int, int], str | None]:
    """Ask the chosen expert; (its reply or None, state update, (input, output) tokens, error).

    The reply is what follows a reasoning model's `</think>` (the whole text without a think block): a
    query, code or answer the expert only considered while thinking is not its reply. A reply cut off
    inside its reasoning has none: the call is a failed tool, as an expert that is down."""
    model, engine = chosen_expert(state)
    try:
        out = await call_llm(state, runtime, node=node, engine=engine, trainable=False,
                             messages=[{"role": "user", "content": prompt}], **expert_sampling(opts))
    except EngineError as exc:
        return None, {}, (0, 0), f"expert {model!r} failed: {exc}"
    tokens = _expert_tokens(context_of(runtime), out, prompt)
    reply = split_reasoning(out.text)[1]
    if reply is None:
        return None, out.update, tokens, (f"expert {model!r} gave no reply: its reasoning never closed "
                                          f"(finish {out.completion.finish_reason!r} after {tokens[1]} tokens; "
                                          "raise expert_max_new_tokens or ask it not to think)")
    return reply, out.update, tokens, None


def _expert_tokens(ctx: AgentContext, out: Any, prompt: str) -> tuple[int, int]:
    """(input, output) tokens of one expert call, as its engine reports them: a token engine's prompt and
    output ids, a text endpoint's `usage`. An endpoint that reports none is counted as the seed counts every
    expert call: its prompt and reply texts under the orchestrator's tokenizer (never a made-up 0)."""
    c = out.completion
    n_in = c.prompt_tokens or len(out.turn["prompt_ids"]) or count_tokens(ctx.tokenizer, prompt)
    reported = c.meta.get("completion_tokens")
    if c.token_ids:
        n_out = len(c.token_ids)
    elif isinstance(reported, int) and not isinstance(reported, bool):
        n_out = reported
    else:
        n_out = count_tokens(ctx.tokenizer, out.text)
    return n_in, n_out


UNAVAILABLE = ("Expert unavailable: the expert service is not responding after multiple attempts. Please answer "
               "based on available information.")


def _breaker_open(state: ToolOrchestraState, opts: ToolOrchestraOptions) -> dict[str, Any] | None:
    """The skipped step, with an "expert unavailable" note, when the seed's circuit breaker is open, else None."""
    error = breaker_error(state, opts)
    if error is None:
        return None
    return {"notes": [*(state.get("notes") or []), Note(kind="attempt", text=UNAVAILABLE)],
            "steps": finish_step(state, (0, 0), 0.0, error), "pending": ""}


async def search(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                 ) -> dict[str, Any]:
    """The expert writes a query (the first line of its reply; the problem when the reply is empty); the
    retrieval service's passages become notes."""
    skipped = _breaker_open(state, opts)
    if skipped is not None:
        return skipped
    ctx = context_of(runtime)
    started = time.monotonic()
    notes = list(state.get("notes") or [])
    prompt = SEARCH_EXPERT.format(problem=state["problem"], context=_context_text(ctx, opts, notes))
    text, update, tokens, error = await _expert(state, runtime, opts, "search_expert", prompt)
    if text is not None:
        query = text.strip().splitlines()[0].strip() if text.strip() else state["problem"]
        try:
            hits = await search_documents(ctx, query, topk=opts.retrieval_topk, eid=state.get("eid"),
                                          url=opts.retrieval_url, timeout_s=opts.retrieval_timeout_s,
                                          retries=opts.retrieval_retries)
        except RetrievalError as exc:
            error = f"search for {query[:200]!r} failed: {exc}"
        else:
            notes += [Note(kind="document", text=_document_text(h["document"], opts.document_max_chars))
                      for h in hits]
            if not hits:
                notes.append(Note(kind="attempt", text=f"search for {query[:200]!r} found nothing"))
    if error is not None:
        notes.append(Note(kind="attempt", text=error))
    return {"notes": notes, "steps": finish_step(state, tokens, time.monotonic() - started, error), "pending": "",
            "expert_failures": 0, **update}


def _document_text(doc: Mapping[str, Any], max_chars: int) -> str:
    """The document's text, stripped and cut to its first `max_chars` characters (the seed's
    max_content_length), after its title when it has one."""
    text = str(doc["contents"]).strip()[:max_chars]
    title = doc.get("title")
    return f"(title: {title}) {text}" if title else text


async def enhance_reasoning(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                            ) -> dict[str, Any]:
    """The expert writes Python; the code and what it printed become a note."""
    skipped = _breaker_open(state, opts)
    if skipped is not None:
        return skipped
    ctx = context_of(runtime)
    started = time.monotonic()
    notes = list(state.get("notes") or [])
    prompt = CODE_EXPERT.format(problem=state["problem"], context=_context_text(ctx, opts, notes))
    text, update, tokens, error = await _expert(state, runtime, opts, "code_expert", prompt)
    if text is not None:
        code = extract_code(text).strip()
        result = await run_expert_code(code, opts.code_timeout_s)
        status = "output" if result["ok"] else ("timed out" if result["timed_out"] else "failed")
        notes.append(Note(kind="code", text=f"```python\n{code}\n```\n{status}:\n{result['output'].rstrip()}"))
    else:
        notes.append(Note(kind="attempt", text=str(error)))
    failures = state.get("expert_failures", 0) + 1 if error is not None else 0
    return {"notes": notes, "steps": finish_step(state, tokens, time.monotonic() - started, error), "pending": "",
            "expert_failures": failures, **update}


async def answer(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions
                 ) -> dict[str, Any]:
    """The expert answers; the last \\boxed{} of its reply (else the whole reply, after any reasoning) is the
    answer and the episode ends. A failed expert ends it too, with its error as the answer (seed) or an empty
    one (original); `answer_failure: note` makes it an attempt note and the orchestrator goes on."""
    skipped = _breaker_open(state, opts)
    if skipped is not None:
        return skipped
    ctx = context_of(runtime)
    started = time.monotonic()
    notes = list(state.get("notes") or [])
    prompt = ANSWER_EXPERT.format(problem=state["problem"], context=_context_text(ctx, opts, notes))
    text, update, tokens, error = await _expert(state, runtime, opts, "answer_expert", prompt)
    out: dict[str, Any] = {"steps": finish_step(state, tokens, time.monotonic() - started, error), "pending": "",
                           "expert_failures": 0, **update}
    if text is None:
        if opts.answer_failure == "note":
            out["notes"] = [*notes, Note(kind="attempt", text=str(error))]
        else:
            out.update(answer=str(error) if opts.answer_failure == "error_text" else "", done=True)
        return out
    boxed = last_boxed(text)
    out.update(answer=(boxed if boxed is not None else text).strip(), done=True)
    return out


async def route(state: ToolOrchestraState, runtime: Runtime[AgentContext], opts: ToolOrchestraOptions) -> str:
    """Next: the tool the orchestrator chose, another orchestrator turn, or the end (answered, stopped by a
    format-invalid call in the seed variant, or out of turns)."""
    if state.get("done") or state.get("stopped"):
        return END
    if state.get("pending") in TOOLS:
        return str(state["pending"])
    cap = max_turns(opts, context_of(runtime).evaluation)
    turns_left = cap is None or len(state.get("steps") or []) < cap
    return "orchestrator" if turns_left else END


def build_graph(options: ToolOrchestraOptions | None = None, *, checkpointer: Any = None) -> Any:
    """The compiled ToolOrchestra QA graph for resolved options (defaults when None).

    >>> sorted(build_graph().get_graph().nodes)
    ['__end__', '__start__', 'answer', 'enhance_reasoning', 'orchestrator', 'search']
    """
    opts = options or ToolOrchestraOptions()
    builder = StateGraph(ToolOrchestraState, context_schema=AgentContext)
    builder.add_node("orchestrator", partial(orchestrator, opts=opts))
    nodes = SEED_TOOL_NODES if opts.tool_protocol == "seed" else {
        "search": search, "enhance_reasoning": enhance_reasoning, "answer": answer}
    for tool in TOOLS:
        builder.add_node(tool, partial(nodes[tool], opts=opts))
    builder.add_edge(START, "orchestrator")
    for node in ("orchestrator", *TOOLS):
        builder.add_conditional_edges(node, partial(route, opts=opts), ["orchestrator", *TOOLS, END])
    return builder.compile(checkpointer=checkpointer, name="toolorchestra")

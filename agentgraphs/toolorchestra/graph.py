"""ToolOrchestra (QA mode) as a LangGraph graph: orchestrator -> tool -> orchestrator ... -> answer.

Every orchestrator turn renders a FRESH prompt (problem + the context rebuilt from the episode's notes +
the tools in the chat template), so each turn is its own training sequence (per_turn) and everything a
tool returned sits in the prompt: masked by construction. The trained ids are the prompt the engine saw
and the ids it returned (call_llm records both), whatever Qwen3's template would do to a history.

Tools run experts, other engines addressed by name in `AgentContext.engines` (never trained):
    search            the expert writes a query; the retrieval service returns top-k passages
    enhance_reasoning the expert writes Python; it runs (timeout) and the code + output become a note
    answer            the expert answers (\\boxed{}); the episode ends
A failing expert or retrieval service becomes an "earlier attempt" note; the loop goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict

from ..answers import last_boxed
from ..errors import ConfigError, EngineError, RetrievalError
from ..node import AgentContext, TraceState, call_llm, context_of
from .coderun import extract_code, run_python
from .notes import Note, render_context
from .parsing import parse_choice
from .prompts import ANSWER_EXPERT, CODE_EXPERT, ORCHESTRATOR_USER, SEARCH_EXPERT, tool_schemas

TOOLS = ("search", "enhance_reasoning", "answer")

DEFAULT_OPTIONS: dict[str, Any] = {
    # tool -> the expert engines (names in AgentContext.engines) the orchestrator may pick
    "experts": {"search": ["search-expert"], "enhance_reasoning": ["code-expert"], "answer": ["answer-expert"]},
    "max_turns": 30,  # orchestrator turns in training
    "eval_max_turns": 50,  # ... and in evaluation
    "context_max_tokens": 6000,  # budget of the rebuilt context in each orchestrator prompt
    "orchestrator_max_new_tokens": 2048,
    "expert_max_new_tokens": 2048,
    "retrieval_url": "http://127.0.0.1:8000",  # `agentgraphs retrieval serve` (the seed's port)
    "retrieval_topk": 3,
    "retrieval_timeout_s": 10.0,
    "retrieval_retries": 2,
    "code_timeout_s": 60.0,
    "judge": None,  # engine name of an LLM judge, asked when exact match fails; None: exact match only
    "prices": {},  # expert -> USD per million tokens, for the cost feature (missing: 1.0)
    "reward_shaping": "cost_aware",  # ToolOrchestra's group reward in the converter; "none": plain GRPO
    "preference": {"accuracy": 1.0, "cost": 0.0, "latency": 0.0},  # weights of the cost-aware reward
    "reward_split": "broadcast",  # every orchestrator turn gets the rollout's value
}


class Step(TypedDict):
    """One orchestrator turn: what it chose and what the tool cost."""

    tool: str
    model: str
    ok: bool
    error: NotRequired[str]
    expert_tokens: int
    latency_s: float


class ToolOrchestraState(TraceState):
    problem: str
    answers: NotRequired[list[str]]
    notes: NotRequired[list[Note]]
    steps: NotRequired[list[Step]]
    pending: NotRequired[str]  # the tool the last orchestrator turn chose, until it has run
    answer: NotRequired[str]
    done: NotRequired[bool]


def options_of(ctx: AgentContext) -> dict[str, Any]:
    return {**DEFAULT_OPTIONS, **{k: v for k, v in ctx.config.items() if k in DEFAULT_OPTIONS}}


def max_turns(ctx: AgentContext) -> int:
    opts = options_of(ctx)
    return int(opts["eval_max_turns"] if ctx.evaluation else opts["max_turns"])


def _context_text(ctx: AgentContext, notes: list[Note]) -> str:
    tok = ctx.tokenizer

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    def cut(text: str, n: int) -> str:
        return tok.decode(tok.encode(text, add_special_tokens=False)[:n])

    return render_context(notes, count, int(options_of(ctx)["context_max_tokens"]), cut)


async def orchestrator(state: ToolOrchestraState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """The trained call: choose a tool and an expert. A format-invalid turn is recorded as a step."""
    ctx = context_of(runtime)
    opts = options_of(ctx)
    notes = state.get("notes") or []
    _check_experts(ctx, opts["experts"])
    user = ORCHESTRATOR_USER.format(problem=state["problem"], context=_context_text(ctx, notes))
    out = await call_llm(state, runtime, node="orchestrator", messages=[{"role": "user", "content": user}],
                         tools=tool_schemas(opts["experts"]),
                         max_new_tokens=int(opts["orchestrator_max_new_tokens"]))
    choice = parse_choice(out.text, opts["experts"])
    step = Step(tool=choice.tool, model=choice.model, ok=choice.ok, expert_tokens=0, latency_s=0.0)
    update: dict[str, Any] = {"steps": [*(state.get("steps") or []), step], "pending": choice.tool if choice.ok
                              else "", **out.update}
    if not choice.ok:
        step["error"] = str(choice.error)
        update["notes"] = [*notes, Note(kind="attempt", text=f"Format-invalid tool call: {choice.error}")]
    return update


def _check_experts(ctx: AgentContext, experts: Mapping[str, list[str]]) -> None:
    missing = sorted({m for models in experts.values() for m in models if m not in ctx.engines})
    if missing:
        raise ConfigError(f"toolorchestra: experts {missing} have no engine; add them to AgentContext.engines "
                          f"(known: {sorted(ctx.engines)}) or change the 'experts' option")


async def _expert(state: ToolOrchestraState, runtime: Runtime[AgentContext], node: str, prompt: str
                  ) -> tuple[str | None, dict[str, Any], int, str | None]:
    """Ask the chosen expert; (text or None, state update, tokens, error)."""
    ctx = context_of(runtime)
    model = (state.get("steps") or [])[-1]["model"]
    try:
        out = await call_llm(state, runtime, node=node, engine=model, trainable=False,
                             messages=[{"role": "user", "content": prompt}],
                             max_new_tokens=int(options_of(ctx)["expert_max_new_tokens"]))
    except EngineError as exc:
        return None, {}, 0, f"expert {model!r} failed: {exc}"
    tokens = len(out.turn["prompt_ids"]) + len(out.turn["output_ids"])
    return out.text, out.update, tokens, None


def _finish_step(state: ToolOrchestraState, tokens: int, started: float, error: str | None) -> list[Step]:
    steps = [dict(s) for s in (state.get("steps") or [])]
    last = steps[-1]
    last["expert_tokens"] = tokens
    last["latency_s"] = round(time.monotonic() - started, 4)
    if error is not None:
        last["ok"] = False
        last["error"] = error
    return steps  # type: ignore[return-value]


async def search(state: ToolOrchestraState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    ctx = context_of(runtime)
    opts = options_of(ctx)
    started = time.monotonic()
    notes = list(state.get("notes") or [])
    prompt = SEARCH_EXPERT.format(problem=state["problem"], context=_context_text(ctx, notes))
    text, update, tokens, error = await _expert(state, runtime, "search_expert", prompt)
    if text is not None:
        query = text.strip().splitlines()[0].strip() if text.strip() else ""
        try:
            hits = await retrieval_client(ctx, opts).search(query or state["problem"], topk=int(opts["retrieval_topk"]))
        except RetrievalError as exc:
            error = f"search for {query!r} failed: {exc}"
        else:
            notes += [Note(kind="document", text=_document_text(h["document"])) for h in hits]
            if not hits:
                notes.append(Note(kind="attempt", text=f"search for {query!r} found nothing"))
    if error is not None:
        notes.append(Note(kind="attempt", text=error))
    return {"notes": notes, "steps": _finish_step(state, tokens, started, error), "pending": "", **update}


def _document_text(doc: Mapping[str, Any]) -> str:
    title = doc.get("title")
    return f"(title: {title}) {doc['contents']}" if title else str(doc["contents"])


async def enhance_reasoning(state: ToolOrchestraState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    ctx = context_of(runtime)
    started = time.monotonic()
    notes = list(state.get("notes") or [])
    prompt = CODE_EXPERT.format(problem=state["problem"], context=_context_text(ctx, notes))
    text, update, tokens, error = await _expert(state, runtime, "code_expert", prompt)
    if text is not None:
        code = extract_code(text).strip()
        result = await run_python(code, float(options_of(ctx)["code_timeout_s"]))
        status = "output" if result["ok"] else ("timed out" if result["timed_out"] else "failed")
        notes.append(Note(kind="code", text=f"```python\n{code}\n```\n{status}:\n{result['output'].rstrip()}"))
    else:
        notes.append(Note(kind="attempt", text=str(error)))
    return {"notes": notes, "steps": _finish_step(state, tokens, started, error), "pending": "", **update}


async def answer(state: ToolOrchestraState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """The expert answers; the last \\boxed{} (else the whole reply) is the answer and the episode ends.
    A failed expert is an attempt note and the orchestrator goes on."""
    ctx = context_of(runtime)
    started = time.monotonic()
    notes = list(state.get("notes") or [])
    prompt = ANSWER_EXPERT.format(problem=state["problem"], context=_context_text(ctx, notes))
    text, update, tokens, error = await _expert(state, runtime, "answer_expert", prompt)
    out: dict[str, Any] = {"steps": _finish_step(state, tokens, started, error), "pending": "", **update}
    if text is None:
        out["notes"] = [*notes, Note(kind="attempt", text=str(error))]
        return out
    boxed = last_boxed(text)
    out.update(answer=(boxed if boxed is not None else text).strip(), done=True)
    return out


async def route(state: ToolOrchestraState, runtime: Runtime[AgentContext]) -> str:
    """After an orchestrator turn: its tool, or another turn, or the end (answer given / turns used up)."""
    if state.get("done"):
        return END
    if state.get("pending") in TOOLS:
        return str(state["pending"])
    return "orchestrator" if len(state.get("steps") or []) < max_turns(context_of(runtime)) else END


_CLIENTS: dict[tuple[str, float, int, Any], Any] = {}


def retrieval_client(ctx: AgentContext, opts: Mapping[str, Any]) -> Any:
    """`ctx.tools["retrieval"]` when given, else one RetrievalClient per (options, event loop)."""
    given = ctx.tools.get("retrieval")
    if given is not None:
        return given
    from ..retrieval.client import RetrievalClient

    key = (str(opts["retrieval_url"]), float(opts["retrieval_timeout_s"]), int(opts["retrieval_retries"]),
           asyncio.get_running_loop())
    client = _CLIENTS.get(key)
    if client is None:
        client = RetrievalClient(key[0], timeout_s=key[1], retries=key[2])
        _CLIENTS[key] = client
    return client


def build_graph(options: Mapping[str, Any] | None = None, *, checkpointer: Any = None) -> Any:
    """The compiled ToolOrchestra QA graph (options arrive at run time through AgentContext.config).

    >>> sorted(build_graph().get_graph().nodes)
    ['__end__', '__start__', 'answer', 'enhance_reasoning', 'orchestrator', 'search']
    """
    builder = StateGraph(ToolOrchestraState, context_schema=AgentContext)
    builder.add_node("orchestrator", orchestrator)
    builder.add_node("search", search)
    builder.add_node("enhance_reasoning", enhance_reasoning)
    builder.add_node("answer", answer)
    builder.add_edge(START, "orchestrator")
    for node in ("orchestrator", *TOOLS):
        builder.add_conditional_edges(node, route, ["orchestrator", *TOOLS, END])
    return builder.compile(checkpointer=checkpointer, name="toolorchestra")

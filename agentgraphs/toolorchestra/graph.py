"""ToolOrchestra (QA mode) as a LangGraph graph: orchestrator -> tool -> orchestrator ... -> answer.

Every orchestrator turn renders a FRESH prompt (problem + the context rebuilt from the episode's notes +
the tools in the chat template), so each turn is its own training sequence (per_turn) and everything a
tool returned sits in the prompt: masked by construction. The trained ids are the prompt the engine saw
and the ids it returned (call_llm records both), whatever Qwen3's template would do to a history.

Tools run experts, other engines addressed by name in `AgentContext.engines` (never trained):
    search            the expert writes a query; the retrieval service returns top-k passages (of the row's
                      example only, for a row with a non-empty eid, as the seed's service filters: search.py)
    enhance_reasoning the expert writes Python; it runs (timeout) and the code + output become a note
    answer            the expert answers (\\boxed{}); the episode ends (a failed answer expert too, by default)
A seed-format row (`seed_rows`) brings its own tool list (rendered as it is) and maps the expert name the
orchestrator chooses to the model whose engine is called. A failing search or code expert, or retrieval service, becomes an "earlier attempt" note; the loop goes on
(with the seed's circuit breaker: after 2 failed code experts in a row, every expert tool is skipped). A sandbox that
cannot run on the machine fails the rollout (ConfigError): it is no result of the expert's. A format-invalid
orchestrator turn ends the episode unanswered (`invalid_call: end`, the seed) or becomes a note too
(`invalid_call: continue`, the original).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal, Optional, Union

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import Field, model_validator
from typing_extensions import NotRequired, TypedDict

from ..answers import last_boxed
from ..context import AgentContext, context_of
from ..errors import ConfigError, EngineError, RetrievalError
from ..long_text import count_tokens, encode_text
from ..node import TraceState, call_llm
from ..spec import MethodOptions, judge_option
from ..toolcalls import split_reasoning
from ..trace import RewardSplit
from .coderun import extract_code, run_expert_code
from .notes import Note, render_context
from .parsing import parse_choice
from .prompts import ANSWER_EXPERT, CODE_EXPERT, ORCHESTRATOR_USER, SEARCH_EXPERT, tool_schemas
from .search import search_documents

TOOLS = ("search", "enhance_reasoning", "answer")

Experts = dict[str, list[str]]


Price = Union[float, list[float]]  # USD per million tokens: one price, or [input, output]

# What `variant` presets. "seed": the seed reproduction (Takenzz/AgentFlow 4b5aa84, agentic/ToolOrchestra);
# "original": ToolOrchestra as its paper describes it. README's ToolOrchestra section has the table with the
# seed's file:line for each value.
VARIANTS: dict[str, dict[str, Any]] = {
    "seed": {"max_turns": 12, "eval_max_turns": 12, "invalid_call": "end", "correctness": "contains",
             "cost_counts_orchestrator": True, "train_unanswered": False, "group_std": "population",
             "drop_group_at_min_std": True, "retrieval_topk": 5, "document_max_chars": 500,
             "answer_failure": "error_text", "expert_circuit_breaker": 2},
    "original": {"max_turns": 30, "eval_max_turns": 50, "invalid_call": "continue", "correctness": "exact",
                 "cost_counts_orchestrator": False, "train_unanswered": True, "group_std": "sample",
                 "drop_group_at_min_std": False, "retrieval_topk": 30, "document_max_chars": 4000,
                 "answer_failure": "empty", "expert_circuit_breaker": None},
}


class ToolOrchestraOptions(MethodOptions):
    """ToolOrchestra's settings. `variant` presets the options that differ between the seed reproduction
    (default) and the original; an option given explicitly overrides its variant's value.

    >>> ToolOrchestraOptions().max_turns, ToolOrchestraOptions(variant="original").max_turns
    (12, 30)
    >>> ToolOrchestraOptions(variant="original", invalid_call="end").invalid_call
    'end'
    """

    presets = VARIANTS

    variant: Literal["seed", "original"] = Field(
        "seed", description="preset of the options below: seed (the seed reproduction) or original (the paper)")
    experts: Experts = Field(
        default_factory=lambda: {"search": ["search-expert"], "enhance_reasoning": ["code-expert"],
                                 "answer": ["answer-expert"]},
        description="tool -> the expert engines (names in AgentContext.engines) the orchestrator may pick")
    max_turns: int = Field(12, ge=1, description="orchestrator turns per episode in training (seed 12, "
                           "original 30)")
    eval_max_turns: Optional[int] = Field(12, ge=1, description="orchestrator turns per episode in evaluation "
                                          "(seed 12, original 50; null: no cap)")
    invalid_call: Literal["end", "continue"] = Field(
        "end", description="a format-invalid orchestrator turn ends the episode unanswered (seed) or becomes "
        "an earlier-attempt note and the loop goes on (original)")
    context_max_tokens: int = Field(6000, ge=1, description="budget of the context rebuilt in each prompt")
    orchestrator_max_new_tokens: int = Field(2048, ge=1, description="cap of each orchestrator turn")
    expert_max_new_tokens: int = Field(2048, ge=1, description="cap of each expert call")
    answer_failure: Literal["error_text", "empty", "note"] = Field(
        "error_text", description="a failed answer expert ends the episode with its error as the answer (seed) "
        "or with an empty answer (original); note: an earlier-attempt note and the loop goes on")
    expert_circuit_breaker: int | None = Field(
        2, ge=1, description="after this many consecutive enhance_reasoning calls whose expert failed, every "
        "later expert tool is skipped with an 'expert unavailable' note (seed 2; original: null, no breaker)")
    retrieval_url: str = Field("http://127.0.0.1:8000", description="`agentgraphs retrieval serve` (seed: 8000)")
    retrieval_topk: int = Field(5, ge=1, le=100, description="passages per search (seed 5, original 30)")
    document_max_chars: int = Field(500, ge=1, description="characters of each retrieved document's text kept "
                                    "in the context (seed 500, original 4000)")
    retrieval_timeout_s: float = Field(10.0, gt=0, description="per retrieval request")
    retrieval_retries: int = Field(2, ge=0, description="retries of a failed retrieval request")
    code_timeout_s: float = Field(60.0, gt=0, description="wall-clock limit of enhance_reasoning's code")
    correctness: Literal["contains", "exact"] = Field(
        "contains", description="contains (seed): normalised equality, or the gold inside the answer unless "
        "the gold has <= 3 words and the answer over 10x as many; exact (original): SQuAD exact match")
    judge: Optional[str] = judge_option(None)  # asked when the `correctness` rule says wrong
    prices: dict[str, Price] = Field(default_factory=dict, description="expert -> USD per million tokens, "
                                     "one price or [input, output] (missing: 1.0), for the cost feature")
    cost_counts_orchestrator: bool = Field(
        True, description="the cost feature counts the orchestrator's own prompt and output tokens of every "
        "turn (seed) besides the experts' (original: experts only)")
    orchestrator_price: Optional[Price] = Field(
        None, description="USD per million orchestrator tokens (one price or [input, output]); null: the "
        "cheapest expert's price, as the seed does")
    reward_shaping: Literal["cost_aware", "none"] = Field(
        "cost_aware", description="ToolOrchestra's group reward in the converter; none: plain GRPO")
    preference: dict[str, float] = Field(
        default_factory=lambda: {"accuracy": 1.0, "cost": 0.0, "latency": 0.0},
        description="weights of the cost-aware reward: accuracy, cost, latency, tool:NAME, expert:NAME; a row's "
        "own metadata.pref_vec (the seed's rows) replaces them for that row")
    train_unanswered: bool = Field(
        False, description="train the turns of a rollout that never answered (original, with its group "
        "value) or mask them (seed; the rollout still counts in its group's statistics)")
    group_std: Literal["population", "sample"] = Field(
        "population", description="std of the per-group standardisation: population (seed, / n) or sample "
        "(original, / (n - 1), as torch.std)")
    drop_group_at_min_std: bool = Field(
        True, description="a group whose std is exactly 0.1 is dropped too (seed keeps std > 0.1; original "
        "drops std < 0.1)")
    reward_split: RewardSplit = Field(
        "broadcast", description="every orchestrator turn gets the rollout's value (seed and original)")

    @model_validator(mode="after")
    def _check(self) -> "ToolOrchestraOptions":
        unknown = sorted(set(self.experts) - set(TOOLS))
        if unknown or "answer" not in self.experts:
            raise ValueError(f"experts: tools must be among {list(TOOLS)} and include 'answer', got "
                             f"{sorted(self.experts)}")
        empty = sorted(t for t, models in self.experts.items() if not models or not all(models))
        if empty:
            raise ValueError(f"experts: {empty} need a non-empty list of engine names")
        bad = unknown_features(self.preference, self.experts)
        if bad:
            raise ValueError(f"preference: unknown features {bad}; use {feature_names(self.experts)}")
        for name, price in [*self.prices.items(), ("orchestrator_price", self.orchestrator_price)]:
            if isinstance(price, list) and (len(price) != 2 or min(price) < 0) or \
                    isinstance(price, float) and price < 0:
                raise ValueError(f"prices: {name}: {price!r}; give one price >= 0 or [input, output]")
        return self


def expert_names(experts: Mapping[str, list[str]]) -> list[str]:
    """Every expert engine the options name, once, in order."""
    return list(dict.fromkeys(m for models in experts.values() for m in models))


def named_engines(opts: ToolOrchestraOptions) -> dict[str, str]:
    """{option: engine name} of every expert engine the options name (`AgentSpec.named_engines`): a run without
    one is refused before any rollout (it failed every rollout at its first node).

    >>> named_engines(ToolOrchestraOptions(experts={"answer": ["big", "small"], "search": ["small"]}))
    {'experts.answer[0]': 'big', 'experts.answer[1]': 'small', 'experts.search[0]': 'small'}
    """
    return {f"experts.{tool}[{i}]": model for tool, models in opts.experts.items() for i, model in enumerate(models)}


def unknown_features(weights: Mapping[str, Any], experts: Mapping[str, list[str]]) -> list[str]:
    """The keys of preference `weights` that name no feature of the cost-aware reward, sorted.

    >>> unknown_features({"accuracy": 1.0, "tool:search": 0.1, "answer-1": 0.2}, {"answer": ["big"]})
    ['answer-1']
    """
    names = expert_names(experts)
    return sorted(k for k in weights if k not in ("accuracy", "cost", "latency")
                  and not (k.startswith("tool:") and k[5:] in TOOLS)
                  and not (k.startswith("expert:") and k[7:] in names))


def feature_names(experts: Mapping[str, list[str]]) -> str:
    """The features a preference may weigh, for an error message."""
    return ", ".join(["accuracy", "cost", "latency", *("tool:" + t for t in TOOLS),
                      *("expert:" + m for m in expert_names(experts))])


class Step(TypedDict):
    """One orchestrator turn: what it chose, its own tokens, and what the tool cost."""

    tool: str
    model: str
    ok: bool
    error: NotRequired[str]
    orchestrator_input_tokens: int  # the turn's prompt
    orchestrator_output_tokens: int  # ... and what the orchestrator generated
    expert_input_tokens: int
    expert_output_tokens: int
    expert_tokens: int  # input + output
    latency_s: float


class ToolOrchestraState(TraceState):
    problem: str
    preference: NotRequired[dict[str, float]]  # the row's own weights (a seed row's pref_vec), over the option's
    seed_row: NotRequired[dict[str, Any]]  # a seed-format row's tools, model_mapping, prices (seed_rows.SeedRow)
    eid: NotRequired[str]  # the row's example id: its searches see only that example's documents (search.py)
    notes: NotRequired[list[Note]]
    steps: NotRequired[list[Step]]
    pending: NotRequired[str]  # the tool the last orchestrator turn chose, until it has run
    answer: NotRequired[str]
    done: NotRequired[bool]  # the answer tool ran: the episode is over
    stopped: NotRequired[str]  # why the episode ended without an answer (a format-invalid call, seed variant)
    expert_failures: NotRequired[int]  # consecutive enhance_reasoning calls whose expert failed (the breaker)


def max_turns(opts: ToolOrchestraOptions, evaluation: bool) -> int | None:
    """The turn cap of this run (None: no cap)."""
    return opts.eval_max_turns if evaluation else opts.max_turns


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
    user = ORCHESTRATOR_USER.format(problem=state["problem"], context=_context_text(ctx, opts, notes))
    out = await call_llm(state, runtime, node="orchestrator", messages=[{"role": "user", "content": user}],
                         tools=tools, max_new_tokens=opts.orchestrator_max_new_tokens)
    choice = parse_choice(out.text, experts)
    step = Step(tool=choice.tool, model=choice.model, ok=choice.ok,
                orchestrator_input_tokens=len(out.turn["prompt_ids"]),
                orchestrator_output_tokens=len(out.turn["output_ids"]),
                expert_input_tokens=0, expert_output_tokens=0, expert_tokens=0, latency_s=0.0)
    update: dict[str, Any] = {"steps": [*(state.get("steps") or []), step],
                              "pending": choice.tool if choice.ok else "", **out.update}
    if not choice.ok:
        step["error"] = str(choice.error)
        if opts.invalid_call == "end":
            update["stopped"] = f"format-invalid tool call: {choice.error}"
        else:
            update["notes"] = [*notes, Note(kind="attempt", text=f"Format-invalid tool call: {choice.error}")]
    return update


def row_experts(row: Mapping[str, Any]) -> Experts:
    """{tool: the expert names the orchestrator may choose} of a seed-format row: every tool this graph runs,
    with the names the row maps (the seed's parser reads any call its solver dispatches, whatever tools the
    row offered, and its expert caller knows only the mapped names).

    >>> row_experts({"tools": [], "model_mapping": {"answer-1": "m", "search-1": "m"}})["answer"]
    ['answer-1', 'search-1']
    """
    return {tool: list(row["model_mapping"]) for tool in TOOLS}


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
    model = (state.get("steps") or [])[-1]["model"]
    row = state.get("seed_row")
    engine = row["model_mapping"][model] if row is not None else model  # a seed row's expert name -> its model
    try:
        out = await call_llm(state, runtime, node=node, engine=engine, trainable=False,
                             messages=[{"role": "user", "content": prompt}],
                             max_new_tokens=opts.expert_max_new_tokens)
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


def _finish_step(state: ToolOrchestraState, tokens: tuple[int, int], started: float, error: str | None
                 ) -> list[Step]:
    steps = [dict(s) for s in (state.get("steps") or [])]
    last = steps[-1]
    last["expert_input_tokens"], last["expert_output_tokens"] = tokens
    last["expert_tokens"] = tokens[0] + tokens[1]
    last["latency_s"] = round(time.monotonic() - started, 4)
    if error is not None:
        last["ok"] = False
        last["error"] = error
    return steps  # type: ignore[return-value]


UNAVAILABLE = ("Expert unavailable: the expert service is not responding after multiple attempts. Please answer "
               "based on available information.")


def _breaker_open(state: ToolOrchestraState, opts: ToolOrchestraOptions) -> dict[str, Any] | None:
    """The skipped step when the seed's circuit breaker is open, else None. The seed counts consecutive tool
    results carrying the expert's error; in QA only enhance_reasoning's can (its search falls back to the
    question, its answer ends the episode), and any other tool that runs resets the count."""
    limit = opts.expert_circuit_breaker
    failures = state.get("expert_failures", 0)
    if limit is None or failures < limit:
        return None
    error = f"expert circuit breaker open: {failures} consecutive failed enhance_reasoning experts"
    return {"notes": [*(state.get("notes") or []), Note(kind="attempt", text=UNAVAILABLE)],
            "steps": _finish_step(state, (0, 0), time.monotonic(), error), "pending": ""}


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
    return {"notes": notes, "steps": _finish_step(state, tokens, started, error), "pending": "", "expert_failures": 0,
            **update}


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
    return {"notes": notes, "steps": _finish_step(state, tokens, started, error), "pending": "",
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
    out: dict[str, Any] = {"steps": _finish_step(state, tokens, started, error), "pending": "",
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
    builder.add_node("search", partial(search, opts=opts))
    builder.add_node("enhance_reasoning", partial(enhance_reasoning, opts=opts))
    builder.add_node("answer", partial(answer, opts=opts))
    builder.add_edge(START, "orchestrator")
    for node in ("orchestrator", *TOOLS):
        builder.add_conditional_edges(node, partial(route, opts=opts), ["orchestrator", *TOOLS, END])
    return builder.compile(checkpointer=checkpointer, name="toolorchestra")

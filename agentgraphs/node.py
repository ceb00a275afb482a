"""The LLM node helper: one call inside a LangGraph node that talks to an engine and records a Turn.

    async def planner(state: MyState, runtime: Runtime[AgentContext]) -> dict:
        out = await call_llm(state, runtime, node="planner", conversation="planner",
                             messages=[{"role": "user", "content": state["question"]}])
        return {"answer": out.text, **out.update}

The conversation named by `conversation` is rebuilt from the Turns already in state: the next prompt
is the last turn's prompt + its output ids + glue for the new `messages`. So nothing but Turns has to
be checkpointed, and replaying from a checkpoint continues exactly the same token sequence.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

# typing_extensions' TypedDict understands NotRequired on Python 3.10 too (subclasses use it)
from typing_extensions import TypedDict

from .calls import CallLedger, Source, current_ledger, making_recorded_call, record_call
from .chat import ChatTemplate, Conversation, Message
from .context import AgentContext, context_of
from .engines import Completion, Engine, SamplingParams
from .errors import ConfigError
from .trace import Turn, conversation_tail, make_turn, sampling_record

__all__ = [
    "CAP_SOURCES",
    "LLMCallLimitExceeded",
    "LLMResult",
    "MaxNewTokensLowered",
    "RolloutAborted",
    "SamplingBase",
    "TraceState",
    "ask_judge",
    "call_llm",
    "call_params",
    "check_call_budget",
    "next_prompt",
    "recorded_call",
    "sent_fields",
]

# what a call's sampling overrides are applied to: the run's sampling (`AgentContext.sampling`), or the
# server's defaults (`call_params`); "server" is for untrained helper calls only
SamplingBase = Literal["context", "server"]


class TraceState(TypedDict):
    """Base state of every agent graph: the trace. Extend it with the method's own fields."""

    turns: Annotated[list[Turn], operator.add]


@dataclass(frozen=True)
class LLMResult:
    """What `call_llm` returns: the text to parse, the raw completion, and the state update."""

    text: str
    completion: Completion
    turn: Turn

    @property
    def update(self) -> dict[str, list[Turn]]:
        return {"turns": [self.turn]}

    @property
    def truncated(self) -> bool:
        return self.completion.finish_reason == "length"


class RolloutAborted(Exception):
    """The engine aborted a generation (weights update, server shutdown): slime re-queues the sample."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        super().__init__(f"engine aborted the generation of node {turn['node']!r} (rid {turn['rid']})")


class LLMCallLimitExceeded(Exception):
    """The graph made more LLM calls than Limits.max_llm_calls allows."""


def next_prompt(
    turns: Sequence[Turn],
    template: ChatTemplate,
    *,
    conversation: str,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] | None = None,
    splice: Mapping[str, Sequence[int]] | None = None,
) -> list[int]:
    """The next prompt ids: a fresh render, or the named conversation extended append-only (its last turn's
    prompt + output ids + glue for `messages`: the turn the new one extends, `agentgraphs.trace.extended_turn`)."""
    tail = conversation_tail(turns, conversation)
    previous = turns[tail] if tail is not None else None
    if previous is None:
        return template.render(messages, tools=tools, splice=splice)
    if splice:
        raise ConfigError("splice= applies to a conversation's first prompt only")
    conv = Conversation(template, previous["prompt_ids"])
    conv.add_output(previous["output_ids"], previous["finish_reason"])
    if messages:
        conv.add_messages(messages)
    return conv.ids


async def call_llm(
    state: Mapping[str, Any],
    runtime: Any,
    *,
    node: str,
    messages: Sequence[Message] = (),
    prompt_ids: Sequence[int] | None = None,
    conversation: str = "",
    trainable: bool = True,
    engine: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    splice: Mapping[str, Sequence[int]] | None = None,
    sampling_base: SamplingBase = "context",
    **sampling: Any,
) -> LLMResult:
    """Render or extend a prompt, call an engine, and return the text plus a Turn for state.

    `messages` are the full first messages of a new conversation, or only the NEW messages
    (tool results, user turns) when `conversation` already has a turn in `state["turns"]`.
    `prompt_ids` bypasses templating entirely (the caller owns the exact ids). Keyword overrides
    (`max_new_tokens=`, `temperature=`, `stop=`...) adjust the context's sampling params; a
    `max_new_tokens=` override is lowered to the context's own when that is a cap the run set
    (`AgentContext.max_new_tokens_cap`: slime's --rollout-max-response-len, `agentgraphs run --max-new-tokens`),
    with a warning naming both; otherwise it is used as asked.
    `stop=` is one string or a list, `stop_token_ids=` one id or a list; an unknown key or a value of the
    wrong type raises ConfigError naming it, before any engine call.
    `sampling_base="server"` applies the overrides to the server's defaults instead of the run's sampling
    (`call_params`): a helper asked as a method's own code asks it, e.g. ToolOrchestra's seed sends its experts
    only temperature and max_tokens; refused on a trainable call (ConfigError).
    The Turn records the sampling used (temperature, top_p, top_k, min_p): a trainable call sampled
    differently from slime's rollout settings is refused by rl_bridge (README, "Training with slime").
    Turns from helper engines (`engine="judge"`) are recorded with trainable=False.
    """
    ctx = context_of(runtime)
    turns: Sequence[Turn] = state.get("turns") or []

    def prompt(template: ChatTemplate) -> tuple[Sequence[int], str]:
        if prompt_ids is not None:
            return prompt_ids, conversation
        ids = next_prompt(turns, template, conversation=conversation, messages=messages, tools=tools, splice=splice)
        return ids, conversation

    def chat_messages(eng: Engine) -> Sequence[Message]:
        # a helper model behind a text API: the whole conversation goes as messages; nothing is trained
        if prompt_ids is not None or conversation:
            raise ConfigError(
                f"node {node!r}: engine {eng.name!r} takes chat messages, not token ids: pass the whole "
                "conversation as messages= (no prompt_ids=, no conversation=), or give this role a token engine "
                "(hf: / sglang:)")
        if not messages:
            raise ConfigError(f"node {node!r}: engine {eng.name!r} needs messages=")
        return messages

    completion, turn = await recorded_call(ctx, node=node, engine=engine, prompt=prompt, trainable=trainable,
                                           overrides=sampling, turns_seen=len(turns), source="call_llm",
                                           chat_messages=chat_messages, sampling_base=sampling_base)
    if not hasattr(ctx.engine(engine), "generate"):  # a text engine's answer: its text as given
        return LLMResult(text=completion.text, completion=completion, turn=turn)
    return LLMResult(text=_visible_text(completion, ctx.template(engine)), completion=completion, turn=turn)


PromptFn = Callable[[ChatTemplate], tuple[Sequence[int], str]]  # template -> (prompt ids, conversation)


async def ask_judge(ctx: AgentContext, engine: str, prompt: str, *, max_new_tokens: int,
                    sampling: Mapping[str, Any] | None = None) -> LLMResult:
    """A reward's question to its judge engine `engine`: one user message, answered through `call_llm` (the
    rollout's call budget and accounting) as the node "judge", never trained; greedily, unless `sampling`
    gives the judge's own sampling overrides (SamplingParams fields, e.g. a method whose judge samples)."""
    overrides = dict(sampling) if sampling is not None else {"temperature": 0.0}
    return await call_llm({}, ctx, node="judge", engine=engine, trainable=False,
                          messages=[{"role": "user", "content": prompt}], **overrides,
                          max_new_tokens=max_new_tokens)


async def recorded_call(
    ctx: AgentContext,
    *,
    node: str,
    prompt: PromptFn,
    engine: str | None = None,
    trainable: bool = True,
    overrides: Mapping[str, Any] | None = None,
    turns_seen: int = 0,
    source: Source = "call_llm",
    ledger: CallLedger | None = None,
    chat_messages: Callable[[Engine], Sequence[Message]] | None = None,
    sampling_base: SamplingBase = "context",
) -> tuple[Completion, Turn]:
    """One recorded engine call, the way `call_llm` and `TracedChatModel` both make it.

    In order: the call budget (`check_call_budget`, counting `turns_seen` and the rollout's ledger); the
    engine named `engine` (None: the policy); the prompt, `prompt(template) -> (prompt ids, conversation)`,
    and the call with the context's sampling plus `overrides` (`call_params`); the Turn, trainable only when
    asked for, made by the policy, with token ids, outside evaluation; its entry in the rollout's ledger
    (`agentgraphs.calls`, as `source`); RolloutAborted when the engine aborted the generation. A text engine
    (messages in, text out) is called with `chat_messages(engine)` when given, and refused otherwise.
    `sampling_base`: what `overrides` apply to (`call_params`); a text request then carries only
    `sent_fields`, and the Turn records None for the settings it left to the server.

    >>> import asyncio
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> ctx = AgentContext(policy=f"hf:{ensure_tiny_model()}", sampling={"max_new_tokens": 3})
    >>> completion, turn = asyncio.run(recorded_call(ctx, node="solve", prompt=lambda t: (t.render(
    ...     [{"role": "user", "content": "Hi"}]), "")))
    >>> turn["node"], turn["trainable"], len(turn["output_ids"]) <= 3
    ('solve', True, True)
    """
    ledger = ledger if ledger is not None else current_ledger()
    check_call_budget(ctx, turns_seen, ledger)
    eng = ctx.engine(engine)
    tokens = hasattr(eng, "generate")
    if sampling_base == "server" and trainable and engine in (None, "policy"):
        raise ConfigError(f"node {node!r}: sampling_base='server' on a trainable call: a trained token must be "
                          "sampled with the run's sampling (slime's --rollout-temperature, --rollout-top-p, ...); "
                          "pass trainable=False, or leave sampling_base at 'context'")
    sent: frozenset[str] | None = None
    if tokens:
        prompt_ids, conversation = prompt(ctx.template(engine))
        params = call_params(ctx, overrides or {}, node=node, prompt_ids=prompt_ids, base=sampling_base)
        with making_recorded_call():
            completion = await eng.generate(list(prompt_ids), params)
    elif chat_messages is not None:
        messages = chat_messages(eng)
        prompt_ids, conversation = [], ""
        params = call_params(ctx, overrides or {}, node=node, base=sampling_base)
        sent = sent_fields(ctx, overrides or {}, sampling_base)
        completion = await eng.chat(list(messages), params, fields=sent)
    else:
        raise ConfigError(f"node {node!r}: engine {eng.name!r} is a text engine; this call needs a token engine "
                          "(hf: / sglang:)")
    turn = make_turn(completion, node=node, prompt_ids=prompt_ids, conversation=conversation, engine=eng.name,
                     trainable=trainable and tokens and engine in (None, "policy") and not ctx.evaluation,
                     **sampling_record(params, sent))
    record_call(turn, source, ledger)
    if completion.finish_reason == "abort":
        raise RolloutAborted(turn)
    return completion, turn


def call_params(ctx: AgentContext, overrides: Mapping[str, Any], *, node: str = "",
                prompt_ids: Sequence[int] | None = None, base: SamplingBase = "context") -> SamplingParams:
    """The sampling of one engine call: the context's (`base="context"`) or the server's defaults
    (`base="server"`), with the call's overrides; a `max_new_tokens` over the cap the run set is lowered to it
    either way. In a seeded context (`AgentContext.seed`) a token-engine call without its own `sampling_seed`
    gets one (`call_seed`), so "server" keeps a seeded run's token engines deterministic.

    The server's defaults: an OpenAI-compatible text server fills every field the request leaves out
    (`sent_fields`; SGLang's chat route from the model's generation_config.json), so these params hold the
    overrides only where they are sent. A token engine's /generate fills nothing from generation_config:
    SGLang's SamplingParams defaults apply (ours, `SamplingParams()`: temperature 1.0, top_p 1.0, top_k -1,
    min_p 0, no stop), sent explicitly; max_new_tokens is the run's cap when it set one.

    >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object(),
    ...                    sampling={"top_p": 0.9, "top_k": 20, "max_new_tokens": 512})
    >>> p = call_params(ctx, {"temperature": 0.7}, base="server")
    >>> p.temperature, p.top_p, p.top_k, p.max_new_tokens
    (0.7, 1.0, -1, 512)
    """
    if base not in ("context", "server"):
        raise ConfigError(f"sampling_base={base!r}: choose 'context' (the run's sampling) or 'server' (the "
                          "server's defaults)")
    cap = bool(ctx.max_new_tokens_cap)
    start = ctx.sampling
    if base == "server":
        start = SamplingParams(**{f: getattr(ctx.sampling, f) for f in _run_fields_under_server(ctx)})
    params = _params(start, overrides, node=node, cap=cap)
    if prompt_ids is not None and params.sampling_seed is None:
        seed = ctx.call_seed(node, prompt_ids)
        if seed is not None:
            params = params.replace(sampling_seed=seed)
    return params


def sent_fields(ctx: AgentContext, overrides: Mapping[str, Any], base: SamplingBase) -> frozenset[str] | None:
    """The SamplingParams fields a text request carries: under "context" all (None: the engine's whole
    sampling); under "server" only the call's overrides, and max_new_tokens when the run set a cap (a
    ceiling on every call), the rest left to the server's defaults. No seed unless overridden.

    >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object(), sampling={"top_p": 0.9})
    >>> sorted(sent_fields(ctx, {"temperature": 0.7, "max_new_tokens": 64}, "server"))
    ['max_new_tokens', 'temperature']
    """
    if base == "context":
        return None
    return frozenset(overrides) | _run_fields_under_server(ctx)


def _run_fields_under_server(ctx: AgentContext) -> frozenset[str]:
    # the one rule of what a "server"-based call keeps of the run's sampling: a max_new_tokens cap the run set
    # (slime's --rollout-max-response-len) is a ceiling on every call, so it is carried and sent; nothing else
    return frozenset({"max_new_tokens"}) if ctx.max_new_tokens_cap else frozenset()


def _params(base: SamplingParams, overrides: Mapping[str, Any], *, node: str = "", cap: bool = True,
            ) -> SamplingParams:
    if not overrides:
        return base
    where = "sampling override (call_llm keyword, TracedChatModel sampling= or .bind())"
    SamplingParams.check_keys(overrides.keys(), where)
    try:
        params = base.replace(**overrides)  # checks every value's type and range, naming the field
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    # a cap the run set (slime: --rollout-max-response-len) is a ceiling per call: the trainer's is real
    if cap and params.max_new_tokens > base.max_new_tokens:
        _warn_lowered(node, params.max_new_tokens, base.max_new_tokens)
        params = params.replace(max_new_tokens=base.max_new_tokens)
    return params


def _warn_lowered(node: str, asked: int, cap: int) -> None:
    # the warnings module shows each distinct message once per process: one line per (node, asked, cap)
    warnings.warn(f"node {node or '?'!r} asks max_new_tokens={asked}; the run's cap is {cap} "
                  f"({CAP_SOURCES}), so it gets {cap}. A reply cut there is TRUNCATED with this cap named; raise "
                  f"the cap to {asked} to run the call as its method asks", MaxNewTokensLowered, stacklevel=4)


class MaxNewTokensLowered(UserWarning):
    """A call's own max_new_tokens was lowered to the cap the run set (`AgentContext.max_new_tokens_cap`)."""


CAP_SOURCES = ("AgentContext.sampling.max_new_tokens; `agentgraphs run --max-new-tokens`; slime "
               "--rollout-max-response-len")


def _visible_text(completion: Completion, template: ChatTemplate) -> str:
    # The end-of-turn token is part of the trained ids but not of the text a parser should see.
    text = completion.text
    eot = template.end_of_turn
    text = text.removesuffix(eot)
    return text


def check_call_budget(ctx: AgentContext, turns_seen: int, ledger: CallLedger | None = None) -> None:
    """Refuse the next call once the rollout has made `Limits.max_llm_calls`: counted from the Turns the
    caller sees and the calls the rollout's ledger let through (parallel branches included), so a graph
    that drops Turns still stops. A call let through is counted at once, before it is answered."""
    ledger = ledger if ledger is not None else current_ledger()
    made = max(turns_seen, ledger.started if ledger is not None else 0)
    if made >= ctx.limits.max_llm_calls:
        raise LLMCallLimitExceeded(
            f"rollout made {made} LLM calls, the limit is {ctx.limits.max_llm_calls}; "
            "raise Limits.max_llm_calls or check the graph's stop condition"
        )
    if ledger is not None:
        ledger.started += 1


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
from dataclasses import dataclass
from typing import Annotated, Any, Mapping, Sequence

# typing_extensions' TypedDict understands NotRequired on Python 3.10 too (subclasses use it)
from typing_extensions import TypedDict

from .calls import CallLedger, current_ledger, record_call
from .chat import ChatTemplate, Conversation, Message
from .context import AgentContext, Limits, context_of, shared_engine, shared_tokenizer
from .engines import Completion, SamplingParams
from .errors import ConfigError
from .trace import Turn, make_turn, sampling_record

# AgentContext and friends live in agentgraphs.context; imported here too because every graph module
# (and user code written against earlier versions) takes them from the node helper.
__all__ = [
    "AgentContext",
    "LLMCallLimitExceeded",
    "LLMResult",
    "Limits",
    "RolloutAborted",
    "TraceState",
    "call_llm",
    "call_params",
    "check_call_budget",
    "context_of",
    "last_turn_of",
    "next_prompt",
    "shared_engine",
    "shared_tokenizer",
]


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


def last_turn_of(turns: Sequence[Turn], conversation: str) -> Turn | None:
    for turn in reversed(turns):
        if turn["conversation"] == conversation:
            return turn
    return None


def next_prompt(
    turns: Sequence[Turn],
    template: ChatTemplate,
    *,
    conversation: str,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] | None = None,
    splice: Mapping[str, Sequence[int]] | None = None,
) -> list[int]:
    """The next prompt ids: a fresh render, or the named conversation extended append-only."""
    previous = last_turn_of(turns, conversation) if conversation else None
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
    **sampling: Any,
) -> LLMResult:
    """Render or extend a prompt, call an engine, and return the text plus a Turn for state.

    `messages` are the full first messages of a new conversation, or only the NEW messages
    (tool results, user turns) when `conversation` already has a turn in `state["turns"]`.
    `prompt_ids` bypasses templating entirely (the caller owns the exact ids). Keyword overrides
    (`max_new_tokens=`, `temperature=`, `stop=`...) adjust the context's sampling params; a
    `max_new_tokens=` override never exceeds the context's own (slime's --rollout-max-response-len).
    The Turn records the sampling used (temperature, top_p, top_k, min_p): a trainable call sampled
    differently from slime's rollout settings is refused by rl_bridge (README, "Training with slime").
    Turns from helper engines (`engine="judge"`) are recorded with trainable=False.
    """
    ctx = context_of(runtime)
    turns: Sequence[Turn] = state.get("turns") or []
    check_call_budget(ctx, len(turns))
    template = ctx.template(engine)
    if prompt_ids is None and hasattr(ctx.engine(engine), "generate"):
        prompt_ids = next_prompt(
            turns, template, conversation=conversation, messages=messages, tools=tools, splice=splice
        )
    eng = ctx.engine(engine)
    if not hasattr(eng, "generate"):  # a text engine (OpenAI-compatible helper): messages in, text out
        return await _call_text_engine(eng, node=node, messages=messages, conversation=conversation,
                                       prompt_ids=prompt_ids, params=call_params(ctx, sampling))
    params = call_params(ctx, sampling, node=node, prompt_ids=prompt_ids)
    completion = await eng.generate(list(prompt_ids), params)
    is_policy = engine in (None, "policy")
    turn = make_turn(
        completion,
        node=node,
        prompt_ids=prompt_ids,
        trainable=trainable and is_policy and not ctx.evaluation,
        engine=eng.name,
        conversation=conversation,
        **sampling_record(params),
    )
    record_call(turn, "call_llm")
    if completion.finish_reason == "abort":
        raise RolloutAborted(turn)
    return LLMResult(text=_visible_text(completion, template), completion=completion, turn=turn)


async def _call_text_engine(eng: Any, *, node: str, messages: Sequence[Message], conversation: str,
                            prompt_ids: Sequence[int] | None, params: SamplingParams) -> LLMResult:
    """A helper model behind a text API: the whole conversation goes as messages; nothing is trained."""
    if prompt_ids is not None or conversation:
        raise ConfigError(
            f"node {node!r}: engine {eng.name!r} takes chat messages, not token ids: pass the whole conversation "
            "as messages= (no prompt_ids=, no conversation=), or give this role a token engine (hf: / sglang:)")
    if not messages:
        raise ConfigError(f"node {node!r}: engine {eng.name!r} needs messages=")
    completion = await eng.chat(list(messages), params)
    turn = make_turn(completion, node=node, prompt_ids=[], trainable=False, engine=eng.name, conversation="",
                     **sampling_record(params))
    record_call(turn, "call_llm")
    return LLMResult(text=completion.text, completion=completion, turn=turn)


def call_params(ctx: AgentContext, overrides: Mapping[str, Any], *, node: str = "",
                prompt_ids: Sequence[int] | None = None) -> SamplingParams:
    """The sampling of one engine call: the context's, with the call's overrides; in a seeded context
    (`AgentContext.seed`) a token-engine call without its own `sampling_seed` gets one (`call_seed`)."""
    params = _params(ctx.sampling, overrides)
    if prompt_ids is not None and params.sampling_seed is None:
        seed = ctx.call_seed(node, prompt_ids)
        if seed is not None:
            params = params.replace(sampling_seed=seed)
    return params


def _params(base: SamplingParams, overrides: Mapping[str, Any]) -> SamplingParams:
    if not overrides:
        return base
    for key in ("stop", "stop_token_ids"):
        if key in overrides and isinstance(overrides[key], list):
            overrides = {**overrides, key: tuple(overrides[key])}
    if "max_new_tokens" in overrides:
        # the context's max_new_tokens (slime: --rollout-max-response-len) is a ceiling per call
        overrides = {**overrides, "max_new_tokens": min(int(overrides["max_new_tokens"]), base.max_new_tokens)}
    try:
        return base.replace(**overrides)
    except TypeError as exc:
        raise ConfigError(f"unknown sampling override in call_llm: {exc}") from None


def _visible_text(completion: Completion, template: ChatTemplate) -> str:
    # The end-of-turn token is part of the trained ids but not of the text a parser should see.
    text = completion.text
    eot = template.end_of_turn
    if text.endswith(eot):
        text = text[: -len(eot)]
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


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
import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Mapping, Sequence

# typing_extensions' TypedDict understands NotRequired on Python 3.10 too (subclasses use it)
from typing_extensions import TypedDict

from .chat import ChatTemplate, Conversation, Message
from .engine import Completion, Engine, SamplingParams, make_engine
from .errors import ConfigError
from .trace import Turn, make_turn


class TraceState(TypedDict):
    """Base state of every agent graph: the trace. Extend it with the method's own fields."""

    turns: Annotated[list[Turn], operator.add]


@dataclass
class Limits:
    """Per-rollout limits. `max_llm_calls` guards against graphs that loop forever.

    The defaults admit MemAgent evaluation on multi-million-token documents (one call per
    5000-token chunk); lower them for agents whose loops should be short.
    """

    max_llm_calls: int = 2000
    max_time_s: float | None = None
    recursion_limit: int = 5000


@dataclass
class AgentContext:
    """Per-run objects, passed as LangGraph's runtime context (never stored in state).

    `policy` is the trained model's engine; `engines` holds helper models by name (judge, executor,
    experts) that may also be addressed by `call_llm(..., engine="judge")`; `config` carries method
    options (chunk size, max steps...) so one graph serves training and evaluation.

    Plain data works too, so a graph can be driven from `langgraph dev` or a JSON request: engines
    may be given as strings (`"hf:MODEL_DIR"`, `"sglang:http://host:port"`, `"hf:tiny"` for the
    embedded tiny model), `tokenizer` may be a path or omitted (the engine's own is used), and
    `sampling` / `limits` may be dicts. `AgentContext()` alone uses $AGENTGRAPHS_ENGINE, else the
    embedded tiny model.

    >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object(),
    ...                    sampling={"temperature": 0.7})
    >>> ctx.policy.name, ctx.sampling.temperature
    ('sglang:http://127.0.0.1:30000', 0.7)
    """

    policy: Engine = field(default_factory=lambda: os.environ.get("AGENTGRAPHS_ENGINE", "hf:tiny"))  # type: ignore[assignment]
    tokenizer: Any = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    engines: dict[str, Engine] = field(default_factory=dict)
    tokenizers: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    config: dict[str, Any] = field(default_factory=dict)
    evaluation: bool = False
    _templates: dict[str, ChatTemplate] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):
            self.policy = shared_engine(self.policy)
        self.engines = {k: shared_engine(v) if isinstance(v, str) else v for k, v in self.engines.items()}
        if isinstance(self.sampling, Mapping):
            self.sampling = SamplingParams.from_slime(dict(self.sampling))
        if isinstance(self.limits, Mapping):
            self.limits = Limits(**dict(self.limits))
        if isinstance(self.tokenizer, (str, os.PathLike)):
            self.tokenizer = shared_tokenizer(str(self.tokenizer))
        if self.tokenizer is None:
            self.tokenizer = getattr(self.policy, "tokenizer", None)
            if self.tokenizer is None:
                raise ConfigError(
                    f"no tokenizer for engine {self.policy.name!r}: pass tokenizer= (an HF tokenizer or "
                    "the model's directory)"
                )

    def engine(self, name: str | None) -> Engine:
        if name is None or name == "policy":
            return self.policy
        try:
            return self.engines[name]
        except KeyError:
            raise ConfigError(
                f"no engine named {name!r} in the context; known: {['policy', *self.engines]}. "
                "Add it to AgentContext.engines"
            ) from None

    def template(self, name: str | None = None) -> ChatTemplate:
        key = name or "policy"
        tpl = self._templates.get(key)
        if tpl is None:
            tokenizer = self.tokenizers.get(key, self.tokenizer)
            tpl = ChatTemplate(tokenizer, template_kwargs=self.template_kwargs)
            self._templates[key] = tpl
        return tpl


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


def context_of(runtime: Any) -> AgentContext:
    """Accept a LangGraph Runtime[AgentContext] or an AgentContext.

    With no context at all (e.g. a `langgraph dev` run started from the UI), the engine named by the
    environment variable AGENTGRAPHS_ENGINE is used (`hf:tiny` when unset: the embedded tiny model).
    """
    ctx = getattr(runtime, "context", runtime)
    if ctx is None:
        return AgentContext()
    if isinstance(ctx, Mapping):
        return AgentContext(**dict(ctx))
    if not isinstance(ctx, AgentContext):
        raise ConfigError(
            f"the graph was invoked with context of type {type(ctx).__name__}: pass "
            "context=AgentContext(...) (or a dict of its fields) to graph.ainvoke / graph.astream"
        )
    return ctx


_SHARED_ENGINES: dict[tuple[str, Any], Engine] = {}
_SHARED_TOKENIZERS: dict[str, Any] = {}


def shared_engine(spec: str) -> Engine:
    """One engine per spec string (and event loop, for HTTP engines) in this process.

    `hf:tiny` is the embedded default: the tiny Qwen2 model of the testing kit, built offline.
    """
    loop: Any = None
    if spec.startswith("sglang:"):
        try:
            import asyncio

            # the loop itself, not its id: a new loop can reuse a dead loop's id, and an HTTP
            # engine bound to the dead loop must not be handed out again
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
    key = (spec, loop)
    engine = _SHARED_ENGINES.get(key)
    if engine is None:
        if spec == "hf:tiny":
            from .testing.tiny_model import ensure_tiny_model

            spec = f"hf:{ensure_tiny_model()}"
        engine = make_engine(spec)
        _SHARED_ENGINES[key] = engine
    return engine


def shared_tokenizer(path: str, *, trust_remote_code: bool = False) -> Any:
    """One tokenizer per model directory in this process (the bridge, the CLI and contexts share it)."""
    tok = _SHARED_TOKENIZERS.get(path)
    if tok is None:
        from .tokenizers import load_tokenizer  # checks a local path before transformers sees it

        tok = load_tokenizer(path, trust_remote_code=trust_remote_code)
        _SHARED_TOKENIZERS[path] = tok
    return tok


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
    Turns from helper engines (`engine="judge"`) are recorded with trainable=False.
    """
    ctx = context_of(runtime)
    turns: Sequence[Turn] = state.get("turns") or []
    _check_budget(ctx, turns)
    template = ctx.template(engine)
    if prompt_ids is None:
        prompt_ids = next_prompt(
            turns, template, conversation=conversation, messages=messages, tools=tools, splice=splice
        )
    params = _params(ctx.sampling, sampling)
    eng = ctx.engine(engine)
    completion = await eng.generate(list(prompt_ids), params)
    is_policy = engine in (None, "policy")
    turn = make_turn(
        completion,
        node=node,
        prompt_ids=prompt_ids,
        trainable=trainable and is_policy and not ctx.evaluation,
        temperature=params.temperature,
        engine=eng.name,
        conversation=conversation,
    )
    if completion.finish_reason == "abort":
        raise RolloutAborted(turn)
    return LLMResult(text=_visible_text(completion, template), completion=completion, turn=turn)


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


def _check_budget(ctx: AgentContext, turns: Sequence[Turn]) -> None:
    if len(turns) >= ctx.limits.max_llm_calls:
        raise LLMCallLimitExceeded(
            f"rollout made {len(turns)} LLM calls, the limit is {ctx.limits.max_llm_calls}; "
            "raise Limits.max_llm_calls or check the graph's stop condition"
        )

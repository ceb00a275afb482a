"""A token-exact LangChain chat model, so LangGraph agents written with the usual parts train unmodified.

    from langgraph.prebuilt import create_react_agent
    agent = create_react_agent(TracedChatModel(), [calculator, lookup])
    SPEC = messages_graph_spec(agent, reward=my_reward, name="react")

`TracedChatModel` takes its engine, tokenizer and sampling from the run's AgentContext (LangGraph's
runtime context), so one compiled graph serves `langgraph dev`, `agentgraphs run` and
`rl_bridge.generate`. Each call renders the messages with the chat template INCREMENTALLY: when they
extend an earlier call (the same messages, then that call's own AIMessage untouched, then new
non-assistant messages) and the template renders that history to the same text, the prompt is the
earlier prompt ids + its exact output ids + masked glue, in the same `conversation`; otherwise (history
edited or trimmed, or a template that rewrites earlier turns, as Qwen3 drops old <think> blocks) the
prompt is rendered afresh under a new conversation name, so `concat` layout starts a new training sequence
there. The check costs O(new tokens) per call where the template treats contents as opaque text (Qwen2.5): each
AIMessage records that its prompt decodes to exactly the template's text of the messages it saw, so the next
call renders the history as a skeleton (`ChatTemplate.render_skeleton`: a placeholder per content) and decodes
and compares only the new ids; other templates (Qwen3) are checked by a full render and decode. Tool calls
are parsed from the text with the core hermes parser; the trained ids are never re-encoded. The Turn rides in
`AIMessage.response_metadata["agentgraphs_turn"]`, so it lives in the standard `messages` state, checkpoints and
Studio; `turns_from_messages` collects them in order.

Streaming: engines return whole completions (SGLang /generate is called without streaming), so the model
does not implement `_astream`; LangGraph's `messages` stream mode emits each AIMessage whole when its call
ends (tested).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields as dataclass_fields
from typing import Any, NamedTuple

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableBinding, RunnableLambda, RunnableMap
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field, ValidationError

from .calls import CallLedger, current_ledger
from .chat import ChatTemplate, Conversation, Skeleton
from .context import AgentContext, context_of
from .engines import SamplingParams
from .errors import ConfigError, InputError
from .history_digest import digest, history_digests
from .node import recorded_call
from .spec import AgentSpec, RewardFn, RolloutInput
from .sync_calls import current_sync_calls, wait_for_call
from .toolcalls import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    parse_tool_calls,
    split_reasoning,
)
from .trace import Turn

__all__ = ["STRUCTURED_ERROR_KEY", "TURN_KEY", "StructuredParser", "TracedBinding", "TracedChatModel",
           "messages_graph_spec", "to_template_messages", "turns_from_messages"]

TURN_KEY = "agentgraphs_turn"  # response_metadata key of the Turn
INPUT_KEY = "agentgraphs_input_digest"  # digest of the template messages + tools the call saw
OUTPUT_KEY = "agentgraphs_message_digest"  # digest of the AIMessage as made (detects later edits)
# its prompt decodes to the template's text of its messages (checked): the skeleton of that text, by length and
# digest (`ChatTemplate.render_skeleton`), so the next call renders only its own skeleton
RENDERED_KEY = "agentgraphs_prompt_skeleton"
ERROR_KEY = "tool_call_error"  # why the text's tool calls were rejected (None when fine or absent)
_DEFAULT_CONTEXTS: dict[str, AgentContext] = {}


class TracedChatModel(BaseChatModel):
    """A LangChain chat model over an agentgraphs Engine that records exact Turns.

    Fields: `context` (an AgentContext for use outside a graph; inside one the run's context wins),
    `engine` (a helper engine name in the context; None = the policy), `trainable`, and `sampling`
    (overrides of the context's SamplingParams, e.g. `{"max_new_tokens": 256}`; `bind(temperature=...)`
    works too).

    Inside a graph run that was given a context (`rl_bridge.generate`, `run_rollout`, `graph.ainvoke(...,
    context=...)`), that context supplies the engine, sampling and evaluation flag, so the run's policy server
    is the one sampled and evaluation trains nothing; a `context=` of the model's own whose engine differs from
    the run's is refused (ConfigError), not silently ignored. LangChain-style arguments such as
    `temperature=`, `max_tokens=` or `model_kwargs=` are refused too: pass them in `sampling=` or `.bind()`.

    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> model = TracedChatModel(context=AgentContext(policy=f"hf:{ensure_tiny_model()}",
    ...                                              sampling={"max_new_tokens": 4}))
    >>> msg = model.invoke("Hi")
    >>> turn = msg.response_metadata["agentgraphs_turn"]
    >>> len(turn["output_ids"]) == len(turn["output_logprobs"]) <= 4
    True
    """

    context: Any = None
    engine: str | None = None
    trainable: bool = True
    sampling: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        # BaseChatModel ignores unknown arguments; here `temperature=0.3` would sample at the context's own
        # temperature unnoticed, so anything that is not a field is refused, naming where it belongs
        unknown = [key for key in data if key not in type(self).model_fields]
        if unknown:
            raise ConfigError(_unknown_argument_message(unknown[0], data[unknown[0]], sorted(type(self).model_fields)))
        super().__init__(**data)
        SamplingParams.from_mapping(self.sampling, where="TracedChatModel(sampling=...)")

    @property
    def _llm_type(self) -> str:
        return "agentgraphs-traced"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Bind tools (functions, BaseTools, pydantic models or OpenAI schemas): rendered through the
        chat template's `tools=` and parsed back from hermes `<tool_call>` blocks."""
        if tool_choice not in (None, "auto"):
            raise ConfigError(f"tool_choice={tool_choice!r}: TracedChatModel cannot force a tool call (the "
                              "policy's text is trained as generated); use tool_choice=None or 'auto'")
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def with_structured_output(self, schema: Mapping[str, Any] | type, *, include_raw: bool = False,
                               method: str = "function_calling", strict: bool | None = None,
                               **kwargs: Any) -> Any:
        """Structured output the exact way: the policy writes it, unconstrained, and it is parsed afterwards.

        `method="function_calling"` (default): `schema` is rendered as the one tool in the chat template and
        the answer is the arguments of the first `<tool_call>` the policy writes for it (a pydantic class
        validates them). `method="json_mode"`: the message content parsed as JSON (say so in your prompt).
        The trained ids are the policy's own sampled ids, so nothing forces a well-formed answer: a reply
        without the call, with bad JSON or failing validation is a parse failure, raised as LangChain's
        OutputParserException, or with `include_raw=True` returned as `{"raw", "parsed": None,
        "parsing_error"}` and written on the raw AIMessage (`response_metadata["structured_output_error"]`).
        The Turn travels in the raw AIMessage only: to train the call, use `include_raw=True` and store
        `raw` in `messages` (with `include_raw=False` the call is reported as untrained).

        Refused (ConfigError): `method="json_schema"` and `strict=True` promise schema-valid output, which
        takes constrained decoding; that changes the distribution the tokens are sampled from, so the
        recorded log-probs would not be the ones slime's trainer recomputes.

        >>> from pydantic import BaseModel
        >>> class Verdict(BaseModel):
        ...     correct: bool
        >>> TracedChatModel().with_structured_output(Verdict, method="json_schema")
        Traceback (most recent call last):
        ...
        agentgraphs.errors.ConfigError: with_structured_output(method='json_schema'): ...
        """
        return _structured_output(self, schema, include_raw=include_raw, method=method, strict=strict, **kwargs)

    def bind(self, **kwargs: Any) -> Any:
        """LangChain's `bind`, keeping what is bound through a later `bind_tools` / `with_structured_output`."""
        return TracedBinding(bound=self, kwargs=kwargs, config={})

    def with_config(self, config: Any = None, **kwargs: Any) -> Any:
        """LangChain's `with_config`; a `configurable` sampling key is refused (ConfigError): it would be ignored."""
        _check_configurable({**(config or {}), **kwargs})
        return TracedBinding(bound=self, kwargs={}, config={**(config or {}), **kwargs})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        # Engines are async and an HTTP engine belongs to one event loop: sync calls run on one background
        # loop per process. The run's context, node name and call ledger are read here, in the caller's
        # context (the background loop has none of them).
        call = self._call(messages, stop, _run_context(), _node_name(), kwargs, current_ledger())
        # in an async run this thread is one LangGraph runs a `def` node in, which cancelling the run cannot
        # reach: the run's sync-call scope (a rollout's, a debugger step's) cancels the call when the run ends
        return wait_for_call(asyncio.run_coroutine_threadsafe(call, _sync_loop()), current_sync_calls(),
                             "TracedChatModel.invoke()")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return await self._call(messages, stop, _run_context(), _node_name(), kwargs, current_ledger())

    async def _call(self, messages: list[BaseMessage], stop: str | list[str] | None, run_context: Any, node: str,
                    kwargs: dict[str, Any], ledger: CallLedger | None) -> ChatResult:
        ctx = await self._context(run_context)
        kwargs = dict(kwargs)
        tools = kwargs.pop("tools", None) or None
        overrides = {**self.sampling, **kwargs}
        if stop:
            overrides["stop"] = stop  # a str or a list: SamplingParams makes a str ONE stop string
        plan: PromptPlan | None = None

        def prompt(template: ChatTemplate) -> tuple[list[int], str]:
            nonlocal plan
            plan = plan_prompt(messages, template, tools)
            return plan.ids, plan.conversation

        _, turn = await recorded_call(ctx, node=node, engine=self.engine, prompt=prompt, trainable=self.trainable,
                                      overrides=overrides, turns_seen=sum(1 for _ in _recorded_turns(messages)),
                                      source="chat_model", ledger=ledger)
        assert plan is not None
        template = ctx.template(self.engine)
        message = _ai_message(turn, template, tools, plan.digest, plan.skeleton)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _context(self, run_context: Any) -> AgentContext:
        """The context of this call: the run's when the run was given one, else the model's own, else the
        default ($AGENTGRAPHS_ENGINE). The model's own context may agree with the run's, never contradict it."""
        if run_context is None:
            return await _acontext(self.context)
        ctx = await _acontext(run_context)
        if self.context is not None:
            _check_own_context(await _acontext(self.context), ctx, self.engine)
        return ctx


class TracedBinding(RunnableBinding):
    """`TracedChatModel.bind(...)` / `.with_config(...)`. LangChain's own binding hands `bind_tools` and
    `with_structured_output` to the bare model, so what was bound was dropped unnoticed
    (`create_react_agent(model.bind(temperature=0.5), tools)` sampled at the run's temperature); here they
    keep it, as `model.bind_tools(tools).bind(temperature=0.5)` does."""

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(**self.bound.bind_tools(tools, tool_choice=tool_choice, **kwargs).kwargs)

    def with_structured_output(self, schema: Mapping[str, Any] | type, *, include_raw: bool = False,
                               method: str = "function_calling", strict: bool | None = None, **kwargs: Any) -> Any:
        return _structured_output(self, schema, include_raw=include_raw, method=method, strict=strict, **kwargs)

    def with_config(self, config: Any = None, **kwargs: Any) -> Any:
        _check_configurable({**(config or {}), **kwargs})
        return super().with_config(config, **kwargs)


def _check_configurable(config: Mapping[str, Any]) -> None:
    """Refuse `with_config(configurable={"temperature": ...})`: TracedChatModel has no configurable fields, so
    LangChain would ignore it and the call would sample at the run's setting, the user's intent lost."""
    configurable = config.get("configurable") or {}
    sampling_keys = {f.name for f in dataclass_fields(SamplingParams)} | set(_LANGCHAIN_SAMPLING)
    named = sorted(k for k in configurable if k in sampling_keys)
    if named:
        key = named[0]
        raise ConfigError(
            f"TracedChatModel.with_config(configurable={{{key!r}: {configurable[key]!r}}}): TracedChatModel reads "
            "no configurable fields, so this would be ignored and the call sampled with the run's setting. Use "
            f".bind({_LANGCHAIN_SAMPLING.get(key, key)}={configurable[key]!r}) or TracedChatModel(sampling=...)")


def _structured_output(llm: Any, schema: Mapping[str, Any] | type, *, include_raw: bool, method: str,
                       strict: bool | None, **kwargs: Any) -> Any:
    """`with_structured_output` on a TracedChatModel or a binding of one (`llm`): see the method."""
    if kwargs:
        raise ConfigError(f"with_structured_output: unsupported arguments {sorted(kwargs)}; pass schema, "
                          "include_raw and method ('function_calling' or 'json_mode')")
    if method == "json_schema" or strict:
        what = "method='json_schema'" if method == "json_schema" else "strict=True"
        raise ConfigError(
            f"with_structured_output({what}): schema-valid output needs constrained decoding, which "
            "changes the distribution the policy samples from, so the recorded log-probs would not be the "
            "ones slime's trainer recomputes. Use method='function_calling' (the default: the schema is a "
            "tool the policy calls) or 'json_mode', and treat parse failures (include_raw=True gives them "
            "as parsing_error)")
    if method not in ("function_calling", "json_mode"):
        raise ConfigError(f"with_structured_output(method={method!r}): use 'function_calling' or 'json_mode'")
    llm = llm.bind(tools=[convert_to_openai_tool(schema)]) if method == "function_calling" else llm
    parse = StructuredParser(schema, method)
    if include_raw:
        return RunnableMap(raw=llm) | RunnableLambda(parse.with_raw)
    return llm | RunnableLambda(parse.parsed)


def _run_context() -> Any:
    """The run's context as given to LangGraph (an AgentContext, a dict or None); None outside a run."""
    try:
        from langgraph.runtime import get_runtime

        return getattr(get_runtime(), "context", None)
    except (RuntimeError, KeyError):  # called outside a LangGraph run
        return None


def _check_own_context(own: AgentContext, run: AgentContext, engine: str | None) -> None:
    """Refuse a TracedChatModel(context=...) whose engine differs from the one the run's context gives it:
    the run's wins, and sampling the run's server while the model names another would be a silent surprise."""
    if own is run:
        return
    role = engine or "policy"
    mine, theirs = _engine_name(own, engine), _engine_name(run, engine)
    if mine != theirs:
        raise ConfigError(
            f"TracedChatModel(context=...) names {role} engine {mine!r}, but this graph runs with a context whose "
            f"{role} engine is {theirs!r}; inside a run the run's context supplies the engine, sampling and "
            "evaluation flag. Fix: drop context= from the model (keep it only for use outside a graph run), or "
            "for a helper model add its engine to the run's AgentContext.engines and pass "
            "TracedChatModel(engine='NAME')")


def _engine_name(ctx: AgentContext, engine: str | None) -> str | None:
    try:
        return ctx.engine(engine).name
    except ConfigError:
        return None  # the model's own context lacks it: the run's context is asked (and refuses) at the call


def _unknown_argument_message(key: str, value: Any, fields: Sequence[str]) -> str:
    """Why TracedChatModel refuses constructor argument `key`, and where its value belongs."""
    sampling_keys = [f.name for f in dataclass_fields(SamplingParams)]
    if key == "model_kwargs" and isinstance(value, Mapping):
        where = f"pass sampling={dict(value)!r} (TracedChatModel's sampling overrides) or .bind(**{dict(value)!r})"
    elif key in sampling_keys or key in _LANGCHAIN_SAMPLING:
        name = _LANGCHAIN_SAMPLING.get(key, key)
        where = f"pass sampling={{{name!r}: {value!r}}} or use .bind({name}={value!r})"
    elif key in ("model", "model_name", "base_url", "api_key", "openai_api_base", "openai_api_key"):
        where = ("the engine comes from the AgentContext: AgentContext(policy=...) or AgentContext(engines={NAME: "
                 "...}) with TracedChatModel(engine='NAME')")
    else:
        where = f"TracedChatModel's fields are {', '.join(fields)}"
    return f"TracedChatModel({key}={value!r}): not an argument of TracedChatModel (it would be ignored); {where}"


# LangChain chat models' sampling arguments, by the SamplingParams field they mean
_LANGCHAIN_SAMPLING = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens",
                       "seed": "sampling_seed", "stop_sequences": "stop"}


async def _acontext(raw: Any) -> AgentContext:
    if isinstance(raw, AgentContext):
        return raw
    # a JSON context (`langgraph dev`) or none ($AGENTGRAPHS_ENGINE): load the models it names off the
    # event loop first (a server's loop must not block on reading weights), then build it from the caches
    await asyncio.to_thread(_load_models, raw)
    return _default_context() if raw is None else context_of(raw)


_SYNC: dict[str, asyncio.AbstractEventLoop] = {}
_SYNC_LOCK = threading.Lock()


def _sync_loop() -> asyncio.AbstractEventLoop:
    """The background event loop that runs sync `invoke()` calls (started on first use, a daemon thread)."""
    with _SYNC_LOCK:
        loop = _SYNC.get("loop")
        if loop is None:
            loop = _SYNC["loop"] = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentgraphs-chat-model", daemon=True).start()
        return loop


def _load_models(raw: Mapping[str, Any] | None) -> None:
    """Fill the process caches with the in-process engines and tokenizers a plain-data context names."""
    import os

    from .context import shared_engine, shared_tokenizer

    fields = dict(raw or {})
    specs = [fields.get("policy", os.environ.get("AGENTGRAPHS_ENGINE", "")),
             *dict(fields.get("engines") or {}).values()]
    for spec in specs:
        if isinstance(spec, str) and spec.startswith("hf:"):  # HTTP engines belong to the loop that uses them
            shared_engine(spec)
    if isinstance(fields.get("tokenizer"), str):
        shared_tokenizer(fields["tokenizer"])


def _default_context() -> AgentContext:
    """No context given (a `langgraph dev` run from the UI): $AGENTGRAPHS_ENGINE, built once per value."""
    import os

    key = os.environ.get("AGENTGRAPHS_ENGINE", "")
    ctx = _DEFAULT_CONTEXTS.get(key)
    if ctx is None:
        ctx = _DEFAULT_CONTEXTS[key] = AgentContext()
    return ctx


def _node_name() -> str:
    try:
        from langgraph.config import get_config

        return str(get_config().get("metadata", {}).get("langgraph_node") or "chat_model")
    except (RuntimeError, KeyError):
        return "chat_model"


# -- messages -> template messages -------------------------------------------------------------------
def _text_of(message: BaseMessage, index: int) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            raise InputError(f"messages[{index}].content", f"has a {kind!r} block; only text is supported",
                             "pass text content (images and other media are not rendered by the chat template)")
    return "".join(parts)


def _own_turn(message: BaseMessage) -> Turn | None:
    """The Turn of an AIMessage this model made and nobody edited since; None otherwise."""
    if not isinstance(message, AIMessage):
        return None
    meta = message.response_metadata or {}
    turn = meta.get(TURN_KEY)
    if not isinstance(turn, Mapping) or meta.get(OUTPUT_KEY) != _message_digest(message):
        return None
    return turn  # type: ignore[return-value]


def _message_digest(message: AIMessage) -> str:
    calls = [(c["name"], c["args"]) for c in message.tool_calls]
    return digest([message.content, calls])


def to_template_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as chat-template dicts. The model's own unedited AIMessages are rendered as the
    exact text it generated (tool-call blocks and reasoning included), never re-serialized.

    >>> to_template_messages([SystemMessage("Be brief."), HumanMessage("Hi")])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if isinstance(m, AIMessage):
            turn = _own_turn(m)
            if turn is not None:
                out.append({"role": "assistant", "content": _generated_text(turn)})
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": _text_of(m, i)}
            if m.tool_calls:
                entry["tool_calls"] = [{"type": "function", "id": c.get("id"),
                                        "function": {"name": c["name"], "arguments": c["args"]}}
                                       for c in m.tool_calls]
            out.append(entry)
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": _text_of(m, i)})
        elif isinstance(m, SystemMessage):
            out.append({"role": "system", "content": _text_of(m, i)})
        elif isinstance(m, ToolMessage):
            entry = {"role": "tool", "content": _text_of(m, i), "tool_call_id": m.tool_call_id}
            if m.name:
                entry["name"] = m.name
            out.append(entry)
        elif isinstance(m, ChatMessage):
            out.append({"role": m.role, "content": _text_of(m, i)})
        else:
            raise InputError(f"messages[{i}]", f"is a {type(m).__name__}, which has no chat-template role",
                             "use System/Human/AI/Tool messages")
    return out


def _generated_text(turn: Mapping[str, Any]) -> str:
    """What the model wrote, without the end-of-turn token: the turn's text, which the ids decode to."""
    return str(turn.get("visible_text", turn["text"]))


# -- prompts ------------------------------------------------------------------------------------------
class PromptPlan(NamedTuple):
    """A call's prompt: its ids, its conversation name, the digest of the messages + tools it renders, and
    when its ids are known to decode to exactly the template's text of those messages, the signature of that
    text's skeleton ({"chars", "sha256"}; None when not known or the template has no skeleton)."""

    ids: list[int]
    conversation: str
    digest: str
    skeleton: dict[str, Any] | None


def plan_prompt(messages: Sequence[BaseMessage], template: ChatTemplate,
                tools: Sequence[Mapping[str, Any]] | None) -> PromptPlan:
    """The prompt for a call on `messages`.

    Extends the last call whose AIMessage is in `messages` when everything before it is what that call
    saw, everything after it is new non-assistant messages, and the template renders the whole history
    to exactly the text of the extended ids; otherwise renders afresh under a new conversation name.
    """
    dicts = to_template_messages(messages)
    k = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
    seen, before = history_digests(dicts, tools, k, messages)
    skeleton = template.render_skeleton(dicts, tools=tools) if dicts else None
    extended = _extend(messages, dicts, template, tools, skeleton, k, before)
    if extended is not None:
        ids, conversation, checked = extended
        return PromptPlan(ids, conversation, seen, _signature(skeleton) if checked else None)
    conversation = f"chat-{uuid.uuid4().hex[:12]}"
    if skeleton is None:
        return PromptPlan(template.render(dicts, tools=tools), conversation, seen, None)
    # a fresh render costs O(context) anyway: check the skeleton against the real text here, so a later call
    # relies on a skeleton that was seen to stand for this history
    text = template.render_text(dicts, tools=tools)
    ids = template.encode(text)
    checked = skeleton.fill(skeleton.text) == text and _decode(template, ids) == text
    return PromptPlan(ids, conversation, seen, _signature(skeleton) if checked else None)


def _extend(messages: Sequence[BaseMessage], dicts: list[dict[str, Any]], template: ChatTemplate,
            tools: Sequence[Mapping[str, Any]] | None, skeleton: Skeleton | None, k: int | None,
            before: str | None) -> tuple[list[int], str, bool] | None:
    """(ids, conversation, whether `skeleton` is checked to stand for the text the ids decode to), or None.
    `k`: the last AIMessage's index; `before`: the digest of the messages before it (with the tools)."""
    if k is None or k == len(messages) - 1:
        return None
    turn = _own_turn(messages[k])
    if turn is None or turn["finish_reason"] == "abort" or not turn["conversation"]:
        return None
    meta = messages[k].response_metadata
    if meta.get(INPUT_KEY) != before:
        return None  # the history before that call was edited, trimmed or re-tooled
    conv = Conversation(template, turn["prompt_ids"])
    conv.add_output(turn["output_ids"], turn["finish_reason"])
    conv.add_messages(dicts[k + 1:])
    earlier = meta.get(RENDERED_KEY)
    if skeleton is not None and isinstance(earlier, Mapping):
        same = _new_text_matches(skeleton, earlier, template, turn["prompt_ids"],
                                 conv.ids[len(turn["prompt_ids"]):])
        if same is not None:
            return (conv.ids, turn["conversation"], True) if same else None
    text = template.render_text(dicts, tools=tools)
    if _decode(template, conv.ids) != text:
        return None  # the template renders this history differently (e.g. Qwen3 drops earlier <think>)
    return conv.ids, turn["conversation"], skeleton is not None and skeleton.fill(skeleton.text) == text


def _signature(skeleton: Skeleton | None) -> dict[str, Any] | None:
    if skeleton is None:
        return None
    text = skeleton.text.encode("utf-8", "surrogatepass")
    return {"chars": len(skeleton.text), "sha256": hashlib.sha256(text).hexdigest()}


def _new_text_matches(skeleton: Skeleton, earlier: Mapping[str, Any], template: ChatTemplate,
                      prompt_ids: list[int], new_ids: list[int]) -> bool | None:
    """Whether prompt_ids + new_ids decode to the text `skeleton` stands for, given that prompt_ids decode to
    the text of the earlier call's skeleton (`earlier`: that call checked it). The skeleton must start with
    the earlier one (same length and digest), and the new ids decode to the rest with its contents filled
    in: O(new tokens). None: it cannot be checked that way (the caller renders and decodes the whole)."""
    chars = earlier.get("chars")
    if not isinstance(chars, int) or not prompt_ids or not 0 < chars <= len(skeleton.text):
        return None
    head, tail = skeleton.text[:chars], skeleton.text[chars:]
    if _signature(Skeleton(head, {})) != dict(earlier):
        return None  # not the text the earlier prompt decodes to
    if len(skeleton.placeholders(head)) + len(skeleton.placeholders(tail)) != len(skeleton.contents):
        return None  # a placeholder cut by the boundary
    # decode from the prompt's last token on: the new ids decode as they do after it (a leading space, a
    # character split across tokens), and that token's text must be where the earlier prompt's text ends
    anchor = _decode(template, prompt_ids[-1:])
    if not anchor or not head.endswith(anchor):
        return None
    text = _decode(template, [prompt_ids[-1], *new_ids])
    return text.startswith(anchor) and text[len(anchor):] == skeleton.fill(tail)


def _decode(template: ChatTemplate, ids: Sequence[int]) -> str:
    return template.decode(ids)


# -- completions -> AIMessage -------------------------------------------------------------------------
def _ai_message(turn: Turn, template: ChatTemplate, tools: Sequence[Mapping[str, Any]] | None,
                input_digest: str, skeleton: dict[str, Any] | None = None) -> AIMessage:
    ids = turn["output_ids"]
    if ids and ids[-1] == template.end_of_turn_id:
        ids = ids[:-1]
    visible = template.decode(ids)
    reasoning, answer = split_reasoning(visible)
    answer = answer or ""  # an unclosed <think>: all reasoning, no answer
    tool_calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    error: str | None = None
    content = answer.strip()
    if tools and (TOOL_CALL_OPEN in answer or TOOL_CALL_CLOSE in answer):
        names = [t.get("function", t).get("name") for t in tools]
        parsed = parse_tool_calls(visible, allowed=names)
        if parsed.ok:
            content = parsed.content
            tool_calls = [{"name": c["name"], "args": c["arguments"], "id": f"call_{uuid.uuid4().hex[:16]}",
                           "type": "tool_call"} for c in parsed.calls]
        else:
            error = parsed.error
            invalid = [{"type": "invalid_tool_call", "name": None, "args": content, "id": None, "error": error}]
    extra = {"reasoning_content": reasoning} if reasoning is not None else {}
    message = AIMessage(content=content, tool_calls=tool_calls, invalid_tool_calls=invalid, additional_kwargs=extra)
    turn_record = {**turn, "visible_text": visible}
    message.response_metadata = {
        TURN_KEY: turn_record, INPUT_KEY: input_digest, OUTPUT_KEY: _message_digest(message), RENDERED_KEY: skeleton,
        ERROR_KEY: error, "finish_reason": turn["finish_reason"], "model_name": turn["engine"],
    }
    return message


# -- structured output --------------------------------------------------------------------------------
STRUCTURED_ERROR_KEY = "structured_output_error"  # response_metadata key: why the structured parse failed


class StructuredParser:
    """Reads `with_structured_output`'s answer from an AIMessage the policy wrote; never edits its text."""

    def __init__(self, schema: Mapping[str, Any] | type, method: str) -> None:
        self.schema = schema
        self.method = method
        self.name = convert_to_openai_tool(schema)["function"]["name"]
        self.model = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None

    def parsed(self, message: AIMessage) -> Any:
        """The structured answer; OutputParserException when the policy did not write a valid one."""
        if self.method == "json_mode":
            text = _text_of(message, -1)
            fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text.strip(), re.DOTALL)
            try:
                value = json.loads(fenced.group(1) if fenced else text)
            except ValueError as exc:
                raise OutputParserException(f"json_mode: the reply is not JSON ({exc})", llm_output=text) from None
        else:
            value = self._tool_arguments(message)
        if self.model is None:
            return value
        try:
            return self.model.model_validate(value)
        except ValidationError as exc:
            raise OutputParserException(f"{self.name}: the arguments do not validate: {exc}",
                                        llm_output=_text_of(message, -1)) from None

    def _tool_arguments(self, message: AIMessage) -> Any:
        for call in message.tool_calls:
            if call["name"] == self.name:
                return call["args"]
        error = (message.response_metadata or {}).get(ERROR_KEY)
        problem = (f"the policy's tool call is malformed ({error})" if error
                   else "the policy wrote no <tool_call> for it")
        raise OutputParserException(f"structured output {self.name!r}: {problem}", llm_output=_text_of(message, -1))

    def with_raw(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """LangChain's include_raw=True shape; a failure is also written on the raw message."""
        raw = inputs["raw"]
        try:
            return {"raw": raw, "parsed": self.parsed(raw), "parsing_error": None}
        except OutputParserException as exc:
            raw.response_metadata = {**(raw.response_metadata or {}), STRUCTURED_ERROR_KEY: str(exc)}
            return {"raw": raw, "parsed": None, "parsing_error": exc}


# -- collecting the trace -----------------------------------------------------------------------------
def turns_from_messages(messages: Sequence[Any]) -> list[Turn]:
    """The Turns recorded with the AIMessages of `messages`, in order (each once). Messages may be LangChain
    objects or their serialized dicts (as the LangGraph SDK returns a thread's state).

    >>> turns_from_messages([HumanMessage("Hi"), AIMessage("Hello"), {"type": "human", "content": "Hi"}])
    []
    """
    turns = _recorded_turns(messages)
    return [{k: v for k, v in turn.items() if k != "visible_text"} for turn in turns]  # type: ignore[misc]


def _recorded_turns(messages: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
    """The Turn records in `messages` as stored (not copied), each once."""
    seen: set[str] = set()
    for m in messages:
        meta = (m.get("response_metadata") if isinstance(m, Mapping) else getattr(m, "response_metadata", None)) or {}
        turn = meta.get(TURN_KEY)
        if not isinstance(turn, Mapping):
            continue
        key = f"{turn.get('rid')}:{len(turn.get('prompt_ids') or [])}"
        if key in seen:
            continue
        seen.add(key)
        yield turn


def _turns_of_state(state: Mapping[str, Any]) -> list[Turn]:
    return turns_from_messages(state.get("messages") or [])


# -- AgentSpec for messages graphs --------------------------------------------------------------------
def messages_input(row: RolloutInput, options: Any = None) -> dict[str, Any]:
    """A row's prompt as the graph's `messages` input: a string becomes one user message; a list of
    {role, content} dicts (a chat prompt) is passed as is.

    >>> messages_input({"prompt": "2+2?", "label": "4", "metadata": {}, "index": 0})
    {'messages': [{'role': 'user', 'content': '2+2?'}]}
    """
    prompt = row["prompt"]
    if isinstance(prompt, str) and prompt.strip():
        return {"messages": [{"role": "user", "content": prompt}]}
    if isinstance(prompt, list) and prompt and all(isinstance(m, Mapping) and "role" in m for m in prompt):
        return {"messages": [dict(m) for m in prompt]}
    raise InputError("prompt", "must be a non-empty string or a list of {role, content} messages",
                     "put the user's question under --input-key")


def last_ai_text(state: Mapping[str, Any]) -> str:
    """The content of the last AIMessage in the state's messages ('' when there is none)."""
    for m in reversed(state.get("messages") or []):
        if isinstance(m, AIMessage):
            return _text_of(m, -1)
    return ""


def messages_graph_spec(graph: Any, *, reward: RewardFn, name: str | None = None, options: Any = None,
                        answer: Callable[[Mapping[str, Any]], str] = last_ai_text,
                        make_input: Callable[[RolloutInput, Any], dict[str, Any]] = messages_input,
                        turns_of: Callable[[Mapping[str, Any]], list[Turn]] | None = None,
                        layout: str = "concat", **spec_fields: Any) -> AgentSpec:
    """An AgentSpec for a graph with a `messages` state whose LLM calls go through TracedChatModel.

    `graph` is a compiled graph or `build_graph(options)`; `name` defaults to the compiled graph's name.
    Input: the row's prompt as a user message;
    answer: the last AIMessage's text; turns: those recorded in the messages (`turns_of` to collect them
    elsewhere too, e.g. `lambda s: turns_from_messages(s["messages"] + s["drafts"])` for a graph that keeps
    some AIMessages in another key); layout `concat`, which merges each chain of extending calls into one
    sequence and starts a new one at every prefix break.

    >>> spec = messages_graph_spec(lambda o: None, reward=lambda r, c: 0.0, name="echo")
    >>> spec.layout, spec.make_input({"prompt": "Hi", "label": None, "metadata": {}, "index": 0}, None)
    ('concat', {'messages': [{'role': 'user', 'content': 'Hi'}]})
    """
    compiled = hasattr(graph, "astream")
    build = (lambda options=None: graph) if compiled else graph
    name = name or (getattr(graph, "name", None) if compiled else None)
    if not name or name == "LangGraph":  # LangGraph's default name says nothing about the agent
        raise ConfigError("messages_graph_spec: pass name= (the agent's name in records and logs)")
    extra = {"options": options} if options is not None else {}
    return AgentSpec(name=name, build_graph=build, make_input=make_input, answer=answer, reward=reward,
                     layout=layout, turns_of=turns_of or _turns_of_state,  # type: ignore[arg-type]
                     **extra, **spec_fields)

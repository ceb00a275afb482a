"""AgentSpec: binds a graph to RL (input mapping, reward, sequence layout, reward split).

A spec is all rl_bridge and the CLI need to run an agent. A user's own agent is one graph plus one
AgentSpec (see examples/new_agent.py); slime finds it through `agentgraph: pkg.module:attr`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar, Iterable, Mapping, TypedDict, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from .context import AgentContext
from .errors import ConfigError, InputError, did_you_mean, validation_message
from .trace import Layout, RewardSplit, Turn

logger = logging.getLogger(__name__)

RewardValue = Union[float, dict[str, Any]]


class RolloutInput(TypedDict):
    """One input row, named as slime names a Sample's fields (prompt, label, metadata)."""

    prompt: Any
    label: Any
    metadata: dict[str, Any]
    index: int | None


class RewardInput(TypedDict):
    """What a reward function sees, the same on every path (`run_rollout`, `agentgraphs run`, slime's rm).

    `prompt` is the input row's prompt (a judge needs the question: `agentgraphs.row_fields.question_of`);
    `metadata` is the input row's own metadata (never the fields agentgraphs adds); `trace_summary` counts
    the rollout's calls and tokens (`agentgraphs.records.trace_summary`); `options` are the resolved
    method options as a dict. Built in one place: `agentgraphs.records.reward_input`.
    """

    answer: str
    prompt: Any
    label: Any
    metadata: dict[str, Any]
    status: str
    trace_summary: dict[str, Any]
    options: dict[str, Any]


class MethodOptions(BaseModel):
    """Base class of every method's options: typed fields with defaults, ranges and a description each.

    Unknown keys are errors (a typo must not pass silently); values are checked strictly (`"8"` is not 8,
    `"yes"` is not true). Declare a method's options as a subclass; a graph is built from an instance.

    >>> from pydantic import Field
    >>> class MyOptions(MethodOptions):
    ...     max_steps: int = Field(3, ge=1, description="planner turns per rollout")
    >>> MyOptions(max_steps=5).max_steps
    5

    Variants: a method that reproduces more than one source declares a `variant` field and `presets`,
    {variant name: {option: value}}. The chosen variant's preset fills every option the input does not
    set; an option set explicitly always wins over the preset.

    >>> from typing import Literal
    >>> class Steps(MethodOptions):
    ...     presets = {"fast": {"max_steps": 1}, "slow": {"max_steps": 9}}
    ...     variant: Literal["fast", "slow"] = "fast"
    ...     max_steps: int = 1
    >>> Steps().max_steps, Steps(variant="slow").max_steps, Steps(variant="slow", max_steps=4).max_steps
    (1, 9, 4)

    A variant may also render its prompts with chat-template kwargs of its own, `template_presets`, {variant
    name: {kwarg: value}} (the seed's engine passes `enable_thinking=False`): `template_kwargs` applies them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    template_presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    def template_kwargs(self, template: str | None, given: Mapping[str, Any]) -> dict[str, Any]:
        """The chat-template kwargs a run renders with: `given` (the run's), over this variant's
        `template_presets` for the keys the policy's `template` reads (a template that never reads one, as
        Qwen2.5's never reads `enable_thinking`, renders the same without it, and `check_template_kwargs`
        would refuse it).

        >>> from typing import Literal
        >>> class Seeded(MethodOptions):
        ...     template_presets = {"seed": {"enable_thinking": False}}
        ...     variant: Literal["seed", "original"] = "seed"
        >>> qwen3 = "{% if enable_thinking is false %}<think></think>{% endif %}"
        >>> Seeded().template_kwargs(qwen3, {}), Seeded().template_kwargs(qwen3, {"enable_thinking": True})
        ({'enable_thinking': False}, {'enable_thinking': True})
        >>> Seeded().template_kwargs("{{ messages }}", {}), Seeded(variant="original").template_kwargs(qwen3, {})
        ({}, {})
        """
        from .chat import template_variables

        preset = dict(self.template_presets.get(str(getattr(self, "variant", "")), {}))
        read = (template_variables(template) or frozenset()) if preset and isinstance(template, str) else frozenset()
        return {**{k: v for k, v in preset.items() if k in read}, **given}

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        """The variant's preset under the given values (an unknown variant is the field's error)."""
        if not cls.presets or not isinstance(data, Mapping) or "variant" not in cls.model_fields:
            return data
        preset = cls.presets.get(data.get("variant", cls.model_fields["variant"].default))
        return data if preset is None else {**preset, **data}

    @model_validator(mode="before")
    @classmethod
    def _variant_is_a_name(cls, data: Any) -> Any:
        """A `variant` that is not a string (a YAML list) is an error naming it, before `_fill_from_preset`
        looks it up (pydantic runs the before-validators defined later first)."""
        if cls.presets and isinstance(data, Mapping) and not isinstance(data.get("variant", ""), str):
            raise ValueError(f"variant: expected one of {sorted(cls.presets)}, got {data['variant']!r:.80}")
        return data

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A class with presets must have a `variant` field whose default is a preset, and presets that name
        only its options (a typo in a preset would otherwise pass as an unknown option at every resolve)."""
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.presets:
            return
        if "variant" not in cls.model_fields:
            raise TypeError(f"{cls.__name__}: presets need a `variant` field naming the default preset")
        unknown = sorted({k for preset in cls.presets.values() for k in preset} - set(cls.model_fields))
        if unknown or cls.model_fields["variant"].default not in cls.presets:
            raise TypeError(f"{cls.__name__}: presets name unknown options {unknown} or the `variant` default "
                            f"{cls.model_fields['variant'].default!r} is not one of {sorted(cls.presets)}")

    @classmethod
    def variant_table(cls) -> dict[str, dict[str, Any]]:
        """Option -> {variant: value} for every option some preset sets (what choosing a variant changes).

        >>> from typing import Literal
        >>> class Opts(MethodOptions):
        ...     presets = {"a": {"turns": 1}, "b": {"turns": 2}}
        ...     variant: Literal["a", "b"] = "a"
        ...     turns: int = 1
        >>> Opts.variant_table()
        {'turns': {'a': 1, 'b': 2}}
        """
        keys = dict.fromkeys(k for preset in cls.presets.values() for k in preset)
        return {k: {name: preset.get(k, cls.model_fields[k].default) for name, preset in cls.presets.items()}
                for k in keys}


def options_model(name: str, defaults: Mapping[str, Any]) -> type[MethodOptions]:
    """A MethodOptions subclass from a dict of defaults (each field typed as its default's type).

    >>> Opts = options_model("demo", {"check": True, "max_new_tokens": 64})
    >>> Opts(check=False).model_dump()
    {'check': False, 'max_new_tokens': 64}
    """
    fields: dict[str, Any] = {}
    for key, value in defaults.items():
        kind: Any = Any if value is None else type(value)
        if kind is float:
            kind = float  # strict floats still take ints
        fields[key] = (kind, value)
    model = create_model(f"{name.title().replace('_', '').replace('-', '')}Options", __base__=MethodOptions, **fields)
    return model


def options_error(agent: str, exc: ValidationError, options_type: type[BaseModel]) -> ConfigError:
    """One line per bad option: its name, what is wrong, the value given, and what the option is; an unknown
    option names the closest known one and lists them all (the fix for a misspelt name).

    >>> class Opts(MethodOptions):
    ...     max_chunks: int = 8
    ...     chunk_tokens: int = 512
    >>> try:
    ...     Opts.model_validate({"max_chunk": 4})
    ... except ValidationError as exc:
    ...     print(options_error("demo", exc, Opts))
    agent 'demo' (Opts): unknown option 'max_chunk' (did you mean 'max_chunks'?); its options: chunk_tokens, max_chunks
    """
    known = sorted(options_type.model_fields)

    def unknown(key: str) -> str:
        return f"unknown option {key or 'options'!r}" + did_you_mean(key, known)

    listed = (f"; its options: {', '.join(known)}" if any(e["type"] == "extra_forbidden" for e in exc.errors())
              else "")
    return ConfigError(f"agent {agent!r} ({exc.title}): " + validation_message(
        exc, label=lambda key: f"option {key or 'options'}", unknown=unknown) + listed)


OptionsT = TypeVar("OptionsT", bound="MethodOptions")


def reward_options(rin: "RewardInput", options_type: type[OptionsT], agent: str) -> OptionsT:
    """The options a RewardInput carries (`rin["options"]`, as the run resolved and dumped them), read back
    through the method's options type: its defaults and variant presets, never a default of the reward's own;
    a bad one is a ConfigError naming it (`options_error`).

    >>> class Opts(MethodOptions):
    ...     rule: str = "contains"
    >>> reward_options({"options": {}}, Opts, "demo").rule, reward_options({"options": None}, Opts, "demo").rule
    ('contains', 'contains')
    """
    try:
        return options_type.model_validate(dict(rin.get("options") or {}))
    except ValidationError as exc:
        raise options_error(agent, exc, options_type) from None


def state_answer(state: Mapping[str, Any]) -> str:
    """The final answer most graphs keep: the state's `answer` key, as text ("" when absent).

    >>> state_answer({"answer": "42"}), state_answer({})
    ('42', '')
    """
    return str(state.get("answer", ""))


RewardFn = Callable[[RewardInput, AgentContext | None], Union[RewardValue, Awaitable[RewardValue]]]
MetricsFn = Callable[[RewardInput], Union[dict[str, float], Awaitable[dict[str, float]]]]


@dataclass
class AgentSpec:
    """Everything needed to run a graph as an RL rollout.

    - `options`: the method's options, a MethodOptions subclass (or a dict of defaults, typed from them);
      overridable from the CLI (`-o KEY=VALUE`) and slime's YAML (`agentgraph_options`);
    - `build_graph(options)` returns a compiled graph (context schema AgentContext) for resolved options;
    - `make_input(row, options)` maps a RolloutInput to the graph's input state (raise InputError on bad rows);
    - `answer(final_state)` extracts the final answer text (stored in sample metadata, fed to reward);
      default `state_answer`: the state's `answer` key;
    - `reward(RewardInput, ctx)` scores it (sync or async; ctx is None when no engines are at hand);
    - `layout`: `per_turn` (each trainable turn its own sequence) or `concat` (merge where exact);
    - `reward_split`: `broadcast` the trajectory's reward to every sequence, or `divide` it among them;
    - `requires_label`: rows without a label are run but not scored (reward None) instead of failing;
    - `summarize(final_state)`: method facts for sample metadata (e.g. chunks read of chunks total);
    - `eval_metrics(RewardInput)`: numeric metrics recorded with the reward (accuracy tables, eval logs);
      sync or async (an async one keeps the event loop free while it waits, e.g. on a worker process);
    - `dict_reward`: the reward returns a dict whose scalar is under `reward_key` (slime --reward-key);
    - `reward_shaping(options, trace_summary)`: a named group shaping the converter applies with the
      group in view (`agentgraphs.shaping`, e.g. ToolOrchestra's "cost_aware"), or None.
    - `turns_of(state)`: where the graph keeps its Turns (default `state["turns"]`; messages graphs keep
      them in their AIMessages, see `agentgraphs.chat_model.messages_graph_spec`).
    - `headline_metric`: the `eval_metrics` key a run summary leads with (one a random model cannot score
      on), and `metric_notes`: a caveat per metric, printed with the summary (e.g. a seed's quirk).
    - `named_engines(options)`: {option: engine name} of the helper engines the options name that a run must
      have in AgentContext.engines (AgentFlow's role engines); `check_engines` refuses a missing one.
    - `row_engines(row, options)`: {row field: engine name} of the helper engines one row names (a ToolOrchestra
      seed row's model_mapping); `check_row_engines` fails that row before it generates when one is missing.

    >>> spec = AgentSpec(name="echo", build_graph=lambda o: None, make_input=lambda r, o: {},
    ...                  reward=lambda r, c: 0.0)
    >>> spec.layout, spec.answer({"answer": 42})
    ('per_turn', '42')
    """

    name: str
    build_graph: Callable[[Any], Any]  # (resolved MethodOptions) -> compiled graph
    make_input: Callable[[RolloutInput, Any], dict[str, Any]]  # (row, resolved MethodOptions) -> graph input
    reward: RewardFn
    answer: Callable[[Mapping[str, Any]], str] = state_answer
    layout: Layout = "per_turn"
    reward_split: RewardSplit = "broadcast"
    eval_metrics: MetricsFn | None = None
    options: Any = MethodOptions  # type[MethodOptions]; a dict of defaults is turned into one
    reward_key: str = "reward"
    dict_reward: bool = False
    requires_label: bool = True
    summarize: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    # (resolved options, trace summary) -> {"name", "weights", "features"} for agentgraphs.shaping, or None
    reward_shaping: Callable[[Any, Mapping[str, Any]], dict[str, Any] | None] | None = None
    description: str = ""
    turns_of: Callable[[Mapping[str, Any]], list[Turn]] | None = None
    headline_metric: str | None = None
    metric_notes: Mapping[str, str] = field(default_factory=dict)
    named_engines: Callable[[Any], Mapping[str, str]] | None = None  # (resolved options) -> {option: engine}
    row_engines: Callable[[RolloutInput, Any], Mapping[str, str]] | None = None  # (row, options) -> {field: engine}
    # (options) -> {slime text-only sampling key: the value the graph's reply texts assume}: where a graph builds
    # later prompts from reply text (AgentFlow's seed variant), slime handing another value is refused
    reply_text_keys: Callable[[Any], Mapping[str, object]] | None = None
    _graphs: dict[str, Any] = field(default_factory=dict, repr=False)
    # saver -> options json -> graph compiled with it; dropped with the saver
    _saver_graphs: weakref.WeakKeyDictionary[Any, dict[str, Any]] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False, init=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.options, Mapping):
            self.options = options_model(self.name, self.options)
        if not (isinstance(self.options, type) and issubclass(self.options, MethodOptions)):
            raise ConfigError(f"AgentSpec {self.name!r}: options must be a MethodOptions subclass or a dict of "
                              f"defaults, got {self.options!r:.80}")

    def collect_turns(self, state: Mapping[str, Any]) -> list[Turn]:
        """The Turns of a (final or partial) graph state, in call order."""
        if self.turns_of is not None:
            return list(self.turns_of(state))
        return list(state.get("turns") or [])

    def resolve_options(self, overrides: Mapping[str, Any] | MethodOptions | None = None) -> MethodOptions:
        """Defaults + overrides, validated: ConfigError naming each bad or unknown option.

        >>> from agentgraphs.memagent import SPEC
        >>> SPEC.resolve_options({"max_chunks": 4}).max_chunks
        4
        """
        if isinstance(overrides, self.options):
            return overrides
        if isinstance(overrides, MethodOptions):
            overrides = overrides.model_dump()
        try:
            # strict: "8" is not 8 (a field that should take a YAML list as a tuple says so in a validator)
            return self.options.model_validate(dict(overrides or {}))
        except ValidationError as exc:
            raise options_error(self.name, exc, self.options) from None

    def default_options(self) -> MethodOptions:
        return self.resolve_options(None)

    def check_engines(self, options: MethodOptions, engines: Iterable[str]) -> None:
        """ConfigError before any rollout when the options name a helper engine the run's context will not
        have (`engines`: the names in AgentContext.engines): the reward's judge (`check_judge`), and every
        engine `named_engines(options)` lists (a role's calls would otherwise fail each rollout mid-way)."""
        engines = list(engines)
        check_judge(options, engines, self.name)
        for option, name in (self.named_engines(options) if self.named_engines else {}).items():
            if name not in engines:
                raise missing_engine_error(option, name, engines, self.name)

    def check_row_engines(self, row: RolloutInput, options: MethodOptions, engines: Iterable[str]) -> None:
        """InputError (`missing_row_engine_error`) when the row names a helper engine (`row_engines`) that
        `engines` (the run's AgentContext.engines) lacks: the row fails before it generates, never mid-way."""
        engines = list(engines)
        for name_field, name in (self.row_engines(row, options) if self.row_engines else {}).items():
            if name not in engines:
                raise missing_row_engine_error(name_field, name, engines)

    def check_reply_text_keys(self, options: MethodOptions, sampling_params: Mapping[str, Any]) -> None:
        """ConfigError before the rollout when slime's sampling_params set a text-only key (skip_special_tokens)
        to another value than the graph's reply texts assume (`reply_text_keys`): the method reads replies as
        SGLang's text under that value, and our engines return the ids with one text only."""
        for key, assumed in (self.reply_text_keys(options) if self.reply_text_keys else {}).items():
            value = sampling_params.get(key)
            if value is not None and value != assumed:
                raise ConfigError(
                    f"slime sampling_params[{key!r}] = {value!r}, but {self.name} with these options reads its "
                    f"replies as SGLang's text with {key}={assumed!r} (the seed's launch, slime's default), and "
                    "builds later prompts from them, so every prompt after a reply would differ from the one "
                    f"slime's setting gives. Fix: drop --rollout-{key.replace('_', '-')} from the launch")

    def reward_split_for(self, options: MethodOptions) -> RewardSplit:
        """The options' `reward_split` where the method makes it an option, else the spec's."""
        return getattr(options, "reward_split", self.reward_split)

    def graph(self, options: MethodOptions | Mapping[str, Any] | None = None, *, checkpointer: Any = None) -> Any:
        """The compiled graph for these options, built once per process.

        With a `checkpointer` (e.g. `agentgraphs.checkpoints.savers.CompactAsyncSqliteSaver`) the graph is
        compiled with it (a saver belongs to one open database), once per saver and options (1,024 rollouts
        through one saver compile once): through `build_graph(options, checkpointer=...)` when the spec's
        build_graph takes that keyword, else as a copy of the cached graph.

        >>> from agentgraphs.checkpoints.savers import compact_sqlite_saver
        >>> from agentgraphs.memagent import SPEC
        >>> with compact_sqlite_saver(":memory:") as saver:
        ...     SPEC.graph({"max_chunks": 2}, checkpointer=saver).checkpointer is saver
        True
        """
        resolved = self.resolve_options(options)
        key = resolved.model_dump_json()
        if checkpointer is not None:
            try:
                per_saver = self._saver_graphs.setdefault(checkpointer, {})
            except TypeError:  # a saver that cannot be weakly referenced: compile for this call only
                per_saver = {}
            graph = per_saver.get(key)
            if graph is None:
                if _takes_checkpointer(self.build_graph):
                    graph = self.build_graph(resolved, checkpointer=checkpointer)  # type: ignore[call-arg]
                else:
                    graph = self.graph(resolved).copy(update={"checkpointer": checkpointer})
                per_saver[key] = graph
            return graph
        graph = self._graphs.get(key)
        if graph is None:
            graph = self.build_graph(resolved)
            self._graphs[key] = graph
        return graph


def _takes_checkpointer(fn: Callable[..., Any]) -> bool:
    """Whether `fn` accepts a `checkpointer=` keyword (a parameter of that name, or **kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == "checkpointer" and p.kind is not p.POSITIONAL_ONLY)
               for p in params)


# marks the field `judge_option` makes, so `judge_of` finds a method's judge whatever else its options hold
_ENGINE_ROLE = "agentgraphs_engine_role"


def judge_option(default: str | None) -> Any:
    """The `judge` option, one name and meaning in every method with an LLM judge: the name of an engine in
    `AgentContext.engines` that the reward asks; a run whose context has no engine of that name is refused
    (`check_judge` before any rollout, `judge_engine` at reward time), never scored by the rule alone in
    silence; null: never a judge, the method's rule alone.

    >>> class Opts(MethodOptions):
    ...     judge: str | None = judge_option("judge")
    >>> Opts().judge, Opts(judge=None).judge, judge_of(Opts())
    ('judge', None, 'judge')
    """
    return Field(default, description="engine name (in AgentContext.engines) of the reward's LLM judge; a run "
                 "without an engine of that name is refused; null: no judge (the method's rule alone)",
                 json_schema_extra={_ENGINE_ROLE: "judge"})


def judge_of(options: MethodOptions) -> str | None:
    """The judge engine the options name (their `judge_option` field), or None: null, or no judge option."""
    for name, info in type(options).model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and extra.get(_ENGINE_ROLE) == "judge":
            return getattr(options, name) or None
    return None


def missing_judge_error(name: str, engines: Iterable[str], agent: str | None = None) -> ConfigError:
    """The refusal of a `judge` option naming an engine the run does not have, with both fixes."""
    known = sorted(engines)
    return ConfigError(
        f"{agent + ': ' if agent else ''}the `judge` option names the engine {name!r}, which this run does not "
        f"have (its helper engines: {known or 'none'}), so the reward could not ask its judge where the rule "
        f"finds no match. Fix: give the engine (CLI: --helper {name}=ENGINE; slime: agentgraph_engines: "
        f"{{{name}: ENGINE}}), or set judge: null (CLI: -o judge=null) to score by the method's rule alone")


def missing_engine_error(option: str, name: str, engines: Iterable[str], agent: str | None = None) -> ConfigError:
    """The refusal of an option naming a helper engine the run does not have, with the fixes.

    >>> print(missing_engine_error("verifier_engine", "generator", ["coder"], "agentflow"))
    agentflow: the option `verifier_engine` names the engine 'generator', which this run does not have (its helper \
engines: ['coder']). Fix: give the engine (CLI: --helper generator=ENGINE; slime: agentgraph_engines: {generator: \
ENGINE}), or name one the run has in `verifier_engine`
    """
    known = sorted(engines)
    return ConfigError(
        f"{agent + ': ' if agent else ''}the option `{option}` names the engine {name!r}, which this run does not "
        f"have (its helper engines: {known or 'none'}). Fix: give the engine (CLI: --helper {name}=ENGINE; slime: "
        f"agentgraph_engines: {{{name}: ENGINE}}), or name one the run has in `{option}`")


def missing_row_engine_error(name_field: str, name: str, engines: Iterable[str]) -> InputError:
    """The refusal of a row naming a helper engine the run does not serve, with the fixes.

    >>> print(missing_row_engine_error("metadata.model_mapping.answer-1", "Qwen/Qwen3-32B", ["judge"]))
    input field 'metadata.model_mapping.answer-1': names the model 'Qwen/Qwen3-32B', which this run serves no engine for (its helper engines: ['judge']). Fix: serve it as an engine of that name (CLI: --helper 'Qwen/Qwen3-32B=ENGINE'; slime: agentgraph_engines: {'Qwen/Qwen3-32B': ENGINE}, e.g. sglang:http://HOST:PORT or openai:http://HOST:PORT/v1#Qwen/Qwen3-32B), or map the row to a model the run serves
    """
    known = sorted(engines)
    return InputError(name_field, f"names the model {name!r}, which this run serves no engine for (its helper "
                      f"engines: {known or 'none'})",
                      f"serve it as an engine of that name (CLI: --helper '{name}=ENGINE'; slime: agentgraph_engines: "
                      f"{{'{name}': ENGINE}}, e.g. sglang:http://HOST:PORT or openai:http://HOST:PORT/v1#{name}), "
                      "or map the row to a model the run serves")


def check_judge(options: MethodOptions, engines: Iterable[str], agent: str | None = None) -> None:
    """ConfigError (`missing_judge_error`) when the options' judge names an engine not in `engines`: called
    with a run's helper engines before any rollout (`AgentSpec.check_engines`).

    >>> opts = load_spec("agentflow").resolve_options({})
    >>> check_judge(opts, ["helper", "judge"])
    >>> check_judge(opts, ["helper"], "agentflow")
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: agentflow: the `judge` option names the engine 'judge', which this run ...
    """
    name = judge_of(options)
    engines = list(engines)
    if name is not None and name not in engines:
        raise missing_judge_error(name, engines, agent)


def judge_engine(ctx: AgentContext | None, name: str | None) -> str | None:
    """The engine the reward asks as its judge: `name`, which the context must have (ConfigError naming the
    fixes otherwise: a reward that asks no judge where the option names one would score by its rule alone);
    None when `name` is None (no judge).

    >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object(),
    ...                    engines={"judge": "openai:http://127.0.0.1:8001/v1#judge-model"})
    >>> judge_engine(ctx, "judge"), judge_engine(ctx, None), judge_engine(None, None)
    ('judge', None, None)
    >>> judge_engine(ctx, "grader")
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: the `judge` option names the engine 'grader', which this run does not have ...
    """
    if not name:
        return None
    engines = ctx.engines if ctx is not None else {}
    if name not in engines:
        raise missing_judge_error(name, engines)
    return name


# The registry of short names (`load_spec("memagent")`). A method registers its spec where it is defined
# (`SPEC = register(AgentSpec(...))` in its spec module); the built-in method packages below are imported on
# the first lookup, and installed packages add theirs through the entry-point group `agentgraphs.methods`
# (`[project.entry-points."agentgraphs.methods"] my_agent = "my_pkg.agent:SPEC"`), loaded when first asked for.
BUILTIN_METHODS = ("agentgraphs.memagent", "agentgraphs.agentflow", "agentgraphs.toolorchestra",
                   "agentgraphs.toolorchestra.tau2")
ENTRY_POINT_GROUP = "agentgraphs.methods"
_REGISTRY: dict[str, "AgentSpec | str"] = {}  # a registered spec, or an entry point's 'package.module:attr'
_discovered = False


def register(spec: AgentSpec) -> AgentSpec:
    """Register `spec` under its name for `load_spec` and `langgraph.json`; returns it, so a method's spec
    module writes `SPEC = register(AgentSpec(name=..., ...))`. A second, different spec under a taken name is
    a ConfigError (the same spec module imported again replaces its own).

    >>> from agentgraphs.memagent import SPEC
    >>> register(SPEC) is SPEC is load_spec("memagent")
    True
    """
    if not isinstance(spec, AgentSpec):
        raise ConfigError(f"register: expected an AgentSpec, got {type(spec).__name__}")
    taken = _REGISTRY.get(spec.name)
    if isinstance(taken, AgentSpec) and taken is not spec and _origin(taken) != _origin(spec):
        raise ConfigError(f"agent name {spec.name!r} is already registered (by {_origin(taken)}); give the "
                          f"spec from {_origin(spec)} another name")
    _REGISTRY[spec.name] = spec
    return spec


def _origin(spec: AgentSpec) -> str:
    """Where a spec is defined: its build_graph's module and name (the same after a module is re-imported)."""
    fn = spec.build_graph
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def _discover(name: str | None = None) -> None:
    """Import the built-in method packages (each registers its specs) and read the installed entry points;
    with a `name`, stop as soon as it is registered."""
    global _discovered
    if _discovered:
        return
    for package in BUILTIN_METHODS:
        importlib.import_module(package)
        if name is not None and name in _REGISTRY:
            return
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _REGISTRY:
            logger.warning("entry point %s = %r of group %s ignored: the name is taken by a registered agent",
                           point.name, point.value, ENTRY_POINT_GROUP)
            continue
        _REGISTRY[point.name] = point.value
    _discovered = True


def registered_names() -> list[str]:
    """Every registered agent name: the built-in methods, specs registered so far, installed entry points.

    >>> {"memagent", "agentflow", "toolorchestra", "toolorchestra-tau2"} <= set(registered_names())
    True
    """
    _discover()
    return sorted(_REGISTRY)


def _load_module(module_name: str, agent: str) -> Any:
    """Import `package.module`, or load `path/to/file.py` directly (independent of sys.path order)."""
    if module_name.endswith(".py"):
        path = os.path.abspath(module_name)
        if not os.path.isfile(path):
            raise ConfigError(f"agent {agent!r}: no such file {path!r}")
        name = "agentgraphs_user_" + os.path.splitext(os.path.basename(path))[0]
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
            return sys.modules[name]
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None:
            raise ConfigError(f"agent {agent!r}: cannot load {path!r} as a Python module")
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = module
        file_spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {module_name!r} for agent {agent!r}: {exc}") from exc


def load_spec(name_or_path: str) -> AgentSpec:
    """A registered name (`memagent`), a `package.module:attr` path, or `path/to/file.py:attr`.

    >>> load_spec("memagent").name
    'memagent'
    """
    if not name_or_path:
        raise ConfigError("no agent given: set `agentgraph` (a registered name or 'pkg.module:attr')")
    if name_or_path not in _REGISTRY and ":" not in name_or_path:
        _discover(name_or_path)
    target = _REGISTRY.get(name_or_path, name_or_path)
    if isinstance(target, AgentSpec):
        return target
    if ":" not in target:
        raise ConfigError(
            f"unknown agent {name_or_path!r}: use one of {registered_names()} or a 'package.module:attr' path"
        )
    module_name, _, attr = target.rpartition(":")
    module = _load_module(module_name, name_or_path)
    spec = getattr(module, attr, None)
    if callable(spec) and not isinstance(spec, AgentSpec):
        spec = spec()
    if not isinstance(spec, AgentSpec):
        raise ConfigError(f"{target!r} is not an AgentSpec (got {type(spec).__name__})")
    return spec

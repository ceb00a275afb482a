"""Per-process setup for the slime hooks: agent spec, engines and tokenizer, built once, checked early.

Everything comes from slime's `args` (extra keys arrive through `--custom-config-path` YAML):

    agentgraph: memagent                  # or a 'package.module:attr' path; env AGENTGRAPH as fallback
    agentgraph_options: {max_chunks: 8}   # the method's options (AgentSpec.options)
    agentgraph_engines: {judge: "sglang:http://127.0.0.1:30001"}   # helper models, never trained
    agentgraph_tokenizers: {judge: /models/judge}   # a token helper of another model family: its tokenizer
    agentgraph_return_list: false         # true: one Sample per training sequence (slime >= 0.3)
    agentgraph_template_kwargs: {enable_thinking: false}
    agentgraph_max_time_s: 900            # per rollout (default: none)
    agentgraph_max_llm_calls: 2000        # per rollout: guards against graphs that never stop
    agentgraph_recursion_limit: 5000      # per rollout: LangGraph steps (a graph looping without LLM calls)
    agentgraph_eval_max_time_s / agentgraph_eval_max_llm_calls / agentgraph_eval_recursion_limit
                                          # the same for evaluation (unset: training's)
    agentgraph_reward_timeout_s: 300      # per reward / eval_metrics call: past it the sample is FAILED
    agentgraph_request_timeout_s: 600     # per HTTP request of the policy and of every helper engine
    agentgraph_max_retries: 3             # the same
    agentgraph_eval_dir: eval_logs        # where rl_bridge.eval_log writes its JSON (default: <save>/eval_logs)
    agentgraph_group_by: trajectory       # rl_bridge.convert: or "sequence" (Flow-GRPO's grouping)
    agentgraph_failed_in_group_stats: false   # rl_bridge.convert: count FAILED trajectories in group mean/std
    agentgraph_slime_version: "0.3"       # rl_bridge.convert: force the v0.3 output keys (else detected)
    agentgraph_on_sampling_mismatch: refuse   # a trainable turn sampled unlike --rollout-temperature/top-p/top-k:
                                          # refuse (raise, the default) or mask (train nothing from it)

Refused up front (ConfigError, before any rollout): --apply-chat-template; multi-sequence trajectories
without --custom-convert-samples-to-train-data-path (slime would train only the first sequence);
agentgraph_return_list with --partial-rollout, --group-rm or --dynamic-sampling-filter-path, or on slime
0.2.x (a Sample without rollout_id / group_id); --use-rollout-routing-replay; --rollout-top-p below 1; a
labelled agent without --label-key; a `judge` option naming an engine that agentgraph_engines does not give.
rl_bridge.convert refuses the batch layouts slime cannot take with multi-row trajectories
(agentgraphs.train_data).
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentgraphs.chat import check_template_kwargs
from agentgraphs.context import AgentContext, Limits, LoopCache, running_loop, shared_tokenizer
from agentgraphs.engines import Engine, SamplingParams, make_engine
from agentgraphs.errors import ConfigError, validation_message
from agentgraphs.spec import AgentSpec, MethodOptions, load_spec

logger = logging.getLogger(__name__)


class BridgeSettings(BaseModel):
    """The `agentgraph_*` keys of slime's args (from the --custom-config-path YAML), typed and checked."""

    model_config = ConfigDict(extra="ignore", strict=True)

    agentgraph: str = Field("", description="a registered agent name or 'package.module:attr'")
    agentgraph_options: dict[str, Any] = Field(default_factory=dict, description="the method's options")
    agentgraph_engines: dict[str, str] = Field(default_factory=dict, description="helper engines by name")
    agentgraph_tokenizers: dict[str, str] = Field(
        default_factory=dict, description="tokenizer directories of token helper engines from another model family, "
        "by engine name (default: the engine's own, else --hf-checkpoint's)")
    agentgraph_return_list: bool = Field(False, description="one Sample per training sequence")
    agentgraph_template_kwargs: dict[str, Any] = Field(default_factory=dict, description="apply_chat_template kwargs")
    agentgraph_max_time_s: Optional[float] = Field(None, gt=0, description="per training rollout")
    agentgraph_max_llm_calls: int = Field(Limits.max_llm_calls, ge=1, description="per training rollout")
    agentgraph_eval_max_time_s: Optional[float] = Field(None, gt=0, description="per evaluation rollout")
    agentgraph_eval_max_llm_calls: Optional[int] = Field(None, ge=1, description="per evaluation rollout")
    agentgraph_recursion_limit: int = Field(
        Limits.recursion_limit, ge=1, description="per training rollout: LangGraph steps (Limits.recursion_limit)")
    agentgraph_eval_recursion_limit: Optional[int] = Field(None, ge=1, description="per evaluation rollout")
    agentgraph_reward_timeout_s: float = Field(
        Limits.reward_timeout_s, gt=0, description="per reward / eval_metrics call: past it the sample is FAILED")
    agentgraph_request_timeout_s: float = Field(600.0, gt=0, description="per request, policy and helper engines")
    agentgraph_max_retries: int = Field(3, ge=0, description="per request, policy and helper engines")
    agentgraph_eval_dir: Optional[str] = Field(None, description="where rl_bridge.eval_log writes")
    agentgraph_group_by: Literal["trajectory", "sequence"] = Field("trajectory", description="rl_bridge.convert")
    agentgraph_failed_in_group_stats: bool = Field(False, description="rl_bridge.convert")
    agentgraph_slime_version: Optional[str] = Field(None, description="force v0.3 output keys in convert")
    agentgraph_on_sampling_mismatch: Literal["refuse", "mask"] = Field(
        "refuse", description="a trainable turn sampled with another temperature/top_p/top_k/min_p than slime's "
        "rollout settings: refuse (raise SamplingMismatchError) or mask (mask 0, log-prob 0.0, reason in metadata)")

    @classmethod
    def from_args(cls, args: Any) -> "BridgeSettings":
        """The settings on slime's `args`; an `agentgraph_*` key that is not one of them is refused (a typo in
        the YAML would otherwise leave its setting at the default without a word)."""
        refuse_unknown_keys(args, set(cls.model_fields))
        # a mapping setting present but null: in YAML, `agentgraph_options:` whose entries are not indented under
        # it (they land on args as stray keys); leaving it at its default would drop them without a word
        empty = sorted(name for name, info in cls.model_fields.items() if info.annotation is not None
                       and getattr(info.annotation, "__origin__", None) is dict and hasattr(args, name)
                       and getattr(args, name) is None)
        if empty:
            raise ConfigError(f"{', '.join(f'args.{name}' for name in empty)} is empty (null): in the "
                              "--custom-config-path YAML, indent its entries under it (two spaces), give {} for "
                              "none, or remove the key")
        values = {name: getattr(args, name) for name in cls.model_fields
                  if getattr(args, name, None) is not None}
        if not values.get("agentgraph"):
            values["agentgraph"] = os.environ.get("AGENTGRAPH", "")
        if values.get("agentgraph_slime_version") is not None:
            values["agentgraph_slime_version"] = str(values["agentgraph_slime_version"])
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError(validation_message(exc, label=lambda key: f"args.{key}")) from None


def refuse_unknown_keys(args: Any, known: set[str]) -> None:
    """ConfigError naming every `agentgraph_*` attribute of `args` that is not in `known`, and every
    `agentgraphs` / `agentgraphs_*` one (the package's name for the setting's), with the closest known name.
    Every `agentgraph_*` key read anywhere (rl_bridge.hooks, agentgraphs.train_data's
    TrainDataSettings.from_args) is a BridgeSettings field, so the fields are the whole list."""
    names = set(dir(args))
    # the package's own name spelt in (agentgraphs_options, agentgraphs: memagent) is the same setting misspelt
    plural = sorted(n for n in names if n == "agentgraphs" or n.startswith("agentgraphs_"))
    unknown = sorted(n for n in names if n.startswith("agentgraph_") and n not in known)
    if not unknown and not plural:
        return
    settings = sorted(k for k in known if k.startswith("agentgraph_"))
    prefix = len("agentgraph_")  # compared without the prefix every key shares, which would make any name "close"
    hints = [f"args.{name} (did you mean {name.replace('agentgraphs', 'agentgraph', 1)}?)" for name in plural]
    lost = False
    for name in unknown:
        close = difflib.get_close_matches(name[prefix:], [k[prefix:] for k in settings], n=1, cutoff=0.6)
        lost = lost or not close
        hints.append(f"args.{name}" + (f" (did you mean agentgraph_{close[0]}?)" if close else ""))
    listing = f"; the settings are: {', '.join(settings)}" if lost else ""
    raise ConfigError(f"unknown agentgraph setting(s): {'; '.join(hints)}. Fix the key in the --custom-config-path "
                      f"YAML (unknown keys would be ignored, leaving their setting at its default){listing}")


@dataclass
class BridgeSetup:
    spec: AgentSpec
    options: MethodOptions
    policy: Engine
    tokenizer: Any
    engines: dict[str, Engine] = field(default_factory=dict)
    tokenizers: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    eval_limits: Limits = field(default_factory=Limits)
    return_list: bool = False
    on_sampling_mismatch: Literal["refuse", "mask"] = "refuse"

    def context(self, sampling: SamplingParams, *, evaluation: bool) -> AgentContext:
        return AgentContext(
            policy=self.policy,
            tokenizer=self.tokenizer,
            sampling=sampling,
            engines=self.engines,
            tokenizers=self.tokenizers,
            template_kwargs=self.template_kwargs,
            limits=self.eval_limits if evaluation else self.limits,
            evaluation=evaluation,
        )


_SETUPS: LoopCache[tuple[Any, ...], BridgeSetup] = LoopCache()  # per event loop: engines are loop-bound


def agent_name(settings: BridgeSettings) -> str:
    if not settings.agentgraph:
        raise ConfigError(
            "no agent selected: set `agentgraph: <name or pkg.module:attr>` in the --custom-config-path "
            "YAML, or the AGENTGRAPH environment variable on the Ray workers"
        )
    return settings.agentgraph


def router_url(args: Any) -> str:
    ip = getattr(args, "sglang_router_ip", None)
    port = getattr(args, "sglang_router_port", None)
    if not ip or not port:
        raise ConfigError(
            "args.sglang_router_ip / args.sglang_router_port are not set: rl_bridge.generate must run "
            "inside slime's rollout (or set them on args)"
        )
    host = f"[{ip}]" if ":" in str(ip) and not str(ip).startswith("[") else str(ip)
    return f"http://{host}:{port}"


def slime_concurrency(args: Any) -> int | None:
    """How many requests slime's own HTTP client keeps in flight to the router (`slime.utils.http_utils.
    init_http_client`: --sglang-server-concurrency x the rollout engines, which are `args.rollout_num_engines`
    where slime >= 0.3.1 sets it, else rollout GPUs / GPUs per engine); None without those args.

    >>> from types import SimpleNamespace
    >>> slime_concurrency(SimpleNamespace(sglang_server_concurrency=512, rollout_num_gpus=8,
    ...                                   rollout_num_gpus_per_engine=2))
    2048
    >>> slime_concurrency(SimpleNamespace(sglang_server_concurrency=512, rollout_num_engines=3, rollout_num_gpus=8))
    1536
    """
    per_server = getattr(args, "sglang_server_concurrency", None)
    if not isinstance(per_server, int) or per_server < 1:
        return None
    engines = getattr(args, "rollout_num_engines", None)
    if not (isinstance(engines, int) and engines >= 1):
        gpus, per_engine = getattr(args, "rollout_num_gpus", None), getattr(args, "rollout_num_gpus_per_engine", None)
        if not isinstance(gpus, int) or gpus < 1:
            return None
        engines = max(1, gpus // (per_engine or 1))
    return per_server * engines


def load_tokenizer(path: str) -> Any:
    """The tokenizer of `--hf-checkpoint`, loaded once per process (agentgraphs.context.shared_tokenizer)."""
    try:
        return shared_tokenizer(path, trust_remote_code=True)  # as slime loads --hf-checkpoint
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"cannot load the tokenizer from hf_checkpoint={path!r}: {exc}") from exc


def get_setup(args: Any) -> BridgeSetup:
    """The cached setup for these args in this process and event loop (engines are loop-bound)."""
    settings = BridgeSettings.from_args(args)
    name = agent_name(settings)
    hf_checkpoint = getattr(args, "hf_checkpoint", None)
    if not hf_checkpoint:
        raise ConfigError("args.hf_checkpoint is not set: pass --hf-checkpoint (the tokenizer is read from it)")
    url = router_url(args)
    # every agentgraph_* setting, and every slime flag the setup is checked or sized by, is part of the key:
    # changing one must not reuse a setup built (and checked) for other args
    key = (name, url, hf_checkpoint, settings.model_dump_json(), slime_args_key(args))
    return _SETUPS.get(key, lambda: _build_setup(args, settings, name, url, str(hf_checkpoint)), running_loop())


# the slime flags `check_slime_args` and `slime_concurrency` read (set or not, and their values)
SETUP_SLIME_ARGS = (
    "apply_chat_template", "custom_convert_samples_to_train_data_path", "partial_rollout", "group_rm",
    "dynamic_sampling_filter_path", "use_rollout_routing_replay", "rollout_top_p", "label_key",
    "sglang_server_concurrency", "rollout_num_engines", "rollout_num_gpus", "rollout_num_gpus_per_engine",
    "reward_key", "eval_reward_key",
)


def slime_args_key(args: Any) -> tuple[tuple[str, bool, str], ...]:
    """What a setup depends on among slime's flags (SETUP_SLIME_ARGS): part of its cache key.

    >>> from types import SimpleNamespace
    >>> slime_args_key(SimpleNamespace(rollout_top_p=1.0)) == slime_args_key(SimpleNamespace(rollout_top_p=0.9))
    False
    """
    return tuple((name, hasattr(args, name), repr(getattr(args, name, None))) for name in SETUP_SLIME_ARGS)


def check_slime_args(args: Any, spec: AgentSpec, settings: BridgeSettings) -> None:
    """slime flags that would silently break an agent graph: refused before any rollout.

    Only flags slime actually set are checked (attributes missing from `args` mean "not slime").
    """
    return_list = settings.agentgraph_return_list
    converter = getattr(args, "custom_convert_samples_to_train_data_path", None)
    if getattr(args, "apply_chat_template", False):
        raise ConfigError(
            "--apply-chat-template is set: every agent graph renders its own prompts, so slime's templated "
            "string would be templated twice. Drop --apply-chat-template (the question goes under --input-key "
            "as plain text)"
        )
    if hasattr(args, "custom_convert_samples_to_train_data_path") and not return_list and not converter:
        raise ConfigError(
            "--custom-convert-samples-to-train-data-path is not set: slime's default converter would train only "
            "the FIRST sequence of each trajectory. Pass --custom-convert-samples-to-train-data-path "
            "rl_bridge.convert, or set agentgraph_return_list: true (one Sample per sequence, slime >= 0.3)"
        )
    if return_list and (getattr(args, "partial_rollout", False) or getattr(args, "group_rm", False)):
        raise ConfigError(
            "agentgraph_return_list: true cannot be combined with --partial-rollout or --group-rm (slime "
            "expects one Sample per prompt there); use the default single-Sample layout with rl_bridge.convert"
        )
    if return_list and getattr(args, "dynamic_sampling_filter_path", None):
        raise ConfigError(
            "agentgraph_return_list: true cannot be combined with --dynamic-sampling-filter-path: slime's filter "
            "reads one Sample per group member, and list mode hands it a list per member. Use the default "
            "single-Sample layout with rl_bridge.convert")
    if getattr(args, "use_rollout_routing_replay", False):
        raise ConfigError(
            "--use-rollout-routing-replay needs the routed experts SGLang returns for every sampled token "
            "(rollout_routed_experts), and agent graphs do not record them: slime's actor would stop at its first "
            "training step. Drop --use-rollout-routing-replay")
    top_p = getattr(args, "rollout_top_p", None)
    if top_p is not None and float(top_p) < 1.0:
        raise ConfigError(
            f"--rollout-top-p {top_p}: slime >= 0.3.1 trains top-p < 1 against the top-p token sets SGLang "
            "returns for every sampled token (custom_params; its converter and policy loss require them), and "
            "agent graphs do not record them, so training would fail at its first step. Use --rollout-top-p 1.0 "
            "(temperature and top-k are fine)"
        )
    if return_list and hasattr(args, "custom_convert_samples_to_train_data_path") and not converter:
        logger.warning(
            "agentgraph_return_list without --custom-convert-samples-to-train-data-path rl_bridge.convert: slime's "
            "default converter groups rewards per n_samples_per_prompt rows only when the row count is exactly "
            "n_samples_per_prompt x rollout_batch_size; a trajectory yields several rows, so it normalises the "
            "whole batch as one group (prompts mixed). Pass rl_bridge.convert to keep per-prompt groups")
    for flag in ("reward_key", "eval_reward_key"):
        check_reward_key(args, spec, flag)
    if spec.requires_label and hasattr(args, "label_key") and not getattr(args, "label_key", None):
        raise ConfigError(f"agent {spec.name!r} scores against a label, but --label-key is not set: pass "
                          "--label-key (e.g. label)")


def check_reward_key(args: Any, spec: AgentSpec, flag: str) -> None:
    """slime reads a reward as `sample.reward[args.<flag>]` when the flag is set and as the reward itself when not
    (Sample.get_reward_value: its dynamic-sampling filters, its default reward normalisation, its eval logging), so
    the flag must name the spec's `reward_key` for a dict reward and be unset for a float one. `--eval-reward-key`
    unset falls back to `--reward-key`, so it is checked only when set.
    """
    if not hasattr(args, flag):
        return
    key, option = getattr(args, flag), "--" + flag.replace("_", "-")
    if spec.dict_reward and flag == "reward_key" and key != spec.reward_key:
        raise ConfigError(
            f"agent {spec.name!r} returns a dict reward whose scalar is under {spec.reward_key!r}, but {option} is "
            f"{key!r}: slime would read {'the whole dict' if not key else repr(key)} as the reward. Pass {option} "
            f"{spec.reward_key} (or set AgentSpec(reward_key=...) to the key slime should train on)")
    if spec.dict_reward and key and key != spec.reward_key:
        raise ConfigError(
            f"agent {spec.name!r} returns a dict reward whose scalar is under {spec.reward_key!r}, but {option} is "
            f"{key!r}: pass {option} {spec.reward_key}, or leave it unset (it falls back to --reward-key)")
    if not spec.dict_reward and key:
        raise ConfigError(
            f"agent {spec.name!r} returns a float reward, but {option} is {key!r}: slime would index the float "
            f"(sample.reward[{key!r}]) and stop with a TypeError. Drop {option} (it selects the scalar of a dict "
            "reward; a seed launch script's `--reward-key score` does not apply)")


def _build_setup(args: Any, settings: BridgeSettings, name: str, url: str, hf_checkpoint: str) -> BridgeSetup:
    spec = load_spec(name)
    check_slime_args(args, spec, settings)
    options = spec.resolve_options(settings.agentgraph_options)
    spec.check_engines(options, settings.agentgraph_engines)  # a judge the options name must be an engine here
    try:
        spec.graph(options)  # compile once here: a broken graph is a configuration error, not N failures
    except Exception as exc:
        raise ConfigError(f"agent {spec.name!r}: building its graph failed: {type(exc).__name__}: {exc}") from exc
    tokenizer = load_tokenizer(hf_checkpoint)
    # the policy and every helper (judges, experts, AgentFlow's roles) time out and retry alike
    timeout, retries = settings.agentgraph_request_timeout_s, settings.agentgraph_max_retries
    slots = slime_concurrency(args)  # as many /generate requests in flight as slime's own client allows
    policy = make_engine(f"sglang:{url}", request_timeout_s=timeout, max_retries=retries,
                         **({"max_connections": slots} if slots else {}))
    engines = {k: make_engine(v, request_timeout_s=timeout, max_retries=retries)
               for k, v in settings.agentgraph_engines.items()}
    unknown = sorted(set(settings.agentgraph_tokenizers) - set(engines))
    if unknown:
        raise ConfigError(f"args.agentgraph_tokenizers names {unknown}, which are not in agentgraph_engines "
                          f"({sorted(engines)}): give a tokenizer for a helper engine you configured")
    tokenizers = {k: load_tokenizer(v) for k, v in settings.agentgraph_tokenizers.items()}
    # a template kwarg the policy's chat template never reads (a typo) is refused here, before any rollout
    check_template_kwargs(getattr(tokenizer, "chat_template", None), settings.agentgraph_template_kwargs)
    return BridgeSetup(
        spec=spec,
        options=options,
        policy=policy,
        tokenizer=tokenizer,
        engines=engines,
        tokenizers=tokenizers,
        template_kwargs=options.template_kwargs(getattr(tokenizer, "chat_template", None),
                                                settings.agentgraph_template_kwargs),
        limits=bridge_limits(settings),
        eval_limits=bridge_limits(settings, evaluation=True),
        return_list=settings.agentgraph_return_list,
        on_sampling_mismatch=settings.agentgraph_on_sampling_mismatch,
    )


# the Limits fields slime sets as agentgraph_<name>, and those evaluation may set apart as agentgraph_eval_<name>
LIMIT_SETTINGS = ("max_llm_calls", "max_time_s", "recursion_limit", "reward_timeout_s")
EVAL_LIMIT_SETTINGS = ("max_llm_calls", "max_time_s", "recursion_limit")


def bridge_limits(settings: BridgeSettings, *, evaluation: bool = False) -> Limits:
    """The Limits of the contexts rl_bridge builds. Evaluation reads whole documents (MemAgent: no chunk cap), so
    it gets its own: each `agentgraph_eval_<name>` that is set replaces `agentgraph_<name>`; unset, training's holds.

    >>> s = BridgeSettings(agentgraph_recursion_limit=40, agentgraph_eval_recursion_limit=400)
    >>> bridge_limits(s).recursion_limit, bridge_limits(s, evaluation=True).recursion_limit
    (40, 400)
    >>> bridge_limits(BridgeSettings(agentgraph_max_llm_calls=9), evaluation=True).max_llm_calls
    9
    """
    values = {name: getattr(settings, f"agentgraph_{name}") for name in LIMIT_SETTINGS}
    if evaluation:
        values.update({name: value for name in EVAL_LIMIT_SETTINGS
                       if (value := getattr(settings, f"agentgraph_eval_{name}")) is not None})
    return Limits(**values)


def clear_cache() -> None:
    """Forget cached setups (tests; or after changing args in one process)."""
    _SETUPS.clear()


async def aclose_all() -> None:
    """Close the engines of every setup built in the running event loop, and forget them.

    Engines hold HTTP connection pools bound to the loop that made them, so only this loop's
    setups can be closed here; setups of other (finished) loops are forgotten without closing.
    Call it at the end of a process's rollouts (tests, scripts) so no connection outlives it.
    """
    mine = _SETUPS.pop_loop(asyncio.get_running_loop())
    _SETUPS.clear()
    for setup in mine.values():
        for engine in {id(e): e for e in (setup.policy, *setup.engines.values())}.values():
            close = getattr(engine, "aclose", None)
            if close is not None:
                await close()

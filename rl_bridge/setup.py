"""Per-process setup for the slime hooks: agent spec, engines and tokenizer, built once, checked early.

Everything comes from slime's `args` (extra keys arrive through `--custom-config-path` YAML):

    agentgraph: memagent                  # or a 'package.module:attr' path; env AGENTGRAPH as fallback
    agentgraph_options: {max_chunks: 8}   # the method's options (AgentSpec.options)
    agentgraph_engines: {judge: "sglang:http://127.0.0.1:30001"}   # helper models, never trained
    agentgraph_return_list: false         # true: one Sample per training sequence (slime >= 0.3)
    agentgraph_template_kwargs: {enable_thinking: false}
    agentgraph_max_time_s: 900            # per rollout (default: none)
    agentgraph_max_llm_calls: 2000        # per rollout: guards against graphs that never stop
    agentgraph_eval_max_time_s / agentgraph_eval_max_llm_calls   # the same for evaluation
    agentgraph_request_timeout_s: 600
    agentgraph_max_retries: 3
    agentgraph_eval_dir: eval_logs        # where rl_bridge.eval_log writes its JSON (default: <save>/eval_logs)
    agentgraph_group_by: trajectory       # rl_bridge.convert: or "sequence" (Flow-GRPO's grouping)
    agentgraph_failed_in_group_stats: false   # rl_bridge.convert: count FAILED trajectories in group mean/std
    agentgraph_slime_version: "0.3"       # rl_bridge.convert: force the v0.3 output keys (else detected)

Refused up front (ConfigError, before any rollout): --apply-chat-template; multi-sequence trajectories
without --custom-convert-samples-to-train-data-path (slime would train only the first sequence);
agentgraph_return_list with --partial-rollout or --group-rm; a labelled agent without --label-key.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from agentgraphs.engine import Engine, SamplingParams, make_engine
from agentgraphs.errors import ConfigError
from agentgraphs.node import AgentContext, Limits, shared_tokenizer
from agentgraphs.spec import AgentSpec, load_spec


@dataclass
class BridgeSetup:
    spec: AgentSpec
    options: dict[str, Any]
    policy: Engine
    tokenizer: Any
    engines: dict[str, Engine] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    eval_limits: Limits = field(default_factory=Limits)
    return_list: bool = False

    def context(self, sampling: SamplingParams, *, evaluation: bool) -> AgentContext:
        return AgentContext(
            policy=self.policy,
            tokenizer=self.tokenizer,
            sampling=sampling,
            engines=self.engines,
            template_kwargs=self.template_kwargs,
            limits=self.eval_limits if evaluation else self.limits,
            evaluation=evaluation,
        )


_SETUPS: dict[tuple[Any, ...], BridgeSetup] = {}


def agent_name(args: Any) -> str:
    name = getattr(args, "agentgraph", None) or os.environ.get("AGENTGRAPH", "")
    if not name:
        raise ConfigError(
            "no agent selected: set `agentgraph: <name or pkg.module:attr>` in the --custom-config-path "
            "YAML, or the AGENTGRAPH environment variable on the Ray workers"
        )
    return str(name)


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


def load_tokenizer(path: str) -> Any:
    """The tokenizer of `--hf-checkpoint`, loaded once per process (agentgraphs.node.shared_tokenizer)."""
    try:
        return shared_tokenizer(path, trust_remote_code=True)  # as slime loads --hf-checkpoint
    except Exception as exc:
        raise ConfigError(f"cannot load the tokenizer from hf_checkpoint={path!r}: {exc}") from exc


def _mapping(args: Any, key: str) -> dict[str, Any]:
    value = getattr(args, key, None) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"args.{key} must be a mapping (YAML dict), got {type(value).__name__}")
    return dict(value)


def _number(args: Any, key: str, default: Any, kind: type, *, minimum: float, strict: bool = False) -> Any:
    """args.<key> as an int/float >= minimum (> when strict); None or absent gives the default."""
    value = getattr(args, key, None)
    if value is None:
        return default
    try:
        if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"args.{key} must be a{'n integer' if kind is int else ' number'}, "
                          f"got {value!r}") from None
    if number < minimum or (strict and number == minimum):
        raise ConfigError(f"args.{key} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return number


def get_setup(args: Any) -> BridgeSetup:
    """The cached setup for these args in this process and event loop (engines are loop-bound)."""
    name = agent_name(args)
    hf_checkpoint = getattr(args, "hf_checkpoint", None)
    if not hf_checkpoint:
        raise ConfigError("args.hf_checkpoint is not set: pass --hf-checkpoint (the tokenizer is read from it)")
    url = router_url(args)
    try:
        # the loop itself, not its id: a new loop may reuse a dead loop's id, and an engine bound
        # to the dead loop must not be handed out again
        loop: Any = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    # every agentgraph_* setting is part of the key: changing one must not reuse a stale setup
    settings = sorted((k, repr(v)) for k, v in vars(args).items() if k.startswith("agentgraph")) \
        if hasattr(args, "__dict__") else []
    key = (name, url, hf_checkpoint, loop, repr(settings))
    setup = _SETUPS.get(key)
    if setup is None:
        setup = _build_setup(args, name, url, str(hf_checkpoint))
        _SETUPS[key] = setup
    return setup


def check_slime_args(args: Any, spec: AgentSpec) -> None:
    """slime flags that would silently break an agent graph: refused before any rollout.

    Only flags slime actually set are checked (attributes missing from `args` mean "not slime").
    """
    return_list = bool(getattr(args, "agentgraph_return_list", False))
    if getattr(args, "apply_chat_template", False):
        raise ConfigError(
            "--apply-chat-template is set: every agent graph renders its own prompts, so slime's templated "
            "string would be templated twice. Drop --apply-chat-template (the question goes under --input-key "
            "as plain text)"
        )
    if hasattr(args, "custom_convert_samples_to_train_data_path") and not return_list \
            and not getattr(args, "custom_convert_samples_to_train_data_path", None):
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
    if spec.requires_label and hasattr(args, "label_key") and not getattr(args, "label_key", None):
        raise ConfigError(f"agent {spec.name!r} scores against a label, but --label-key is not set: pass "
                          "--label-key (e.g. label)")


def _build_setup(args: Any, name: str, url: str, hf_checkpoint: str) -> BridgeSetup:
    spec = load_spec(name)
    check_slime_args(args, spec)
    options = spec.resolve_options(_mapping(args, "agentgraph_options"))
    try:
        spec.graph(options)  # compile once here: a broken graph is a configuration error, not N failures
    except Exception as exc:
        raise ConfigError(f"agent {spec.name!r}: building its graph failed: {type(exc).__name__}: {exc}") from exc
    tokenizer = load_tokenizer(hf_checkpoint)
    engine_kwargs = {
        "timeout": _number(args, "agentgraph_request_timeout_s", 600.0, float, minimum=0.0, strict=True),
        "max_retries": _number(args, "agentgraph_max_retries", 3, int, minimum=0),
    }
    policy = make_engine(f"sglang:{url}", **engine_kwargs)
    engines = {k: make_engine(str(v)) for k, v in _mapping(args, "agentgraph_engines").items()}
    limits = Limits(
        max_llm_calls=_number(args, "agentgraph_max_llm_calls", Limits.max_llm_calls, int, minimum=1),
        max_time_s=_number(args, "agentgraph_max_time_s", None, float, minimum=0.0, strict=True),
    )
    # evaluation reads whole documents (MemAgent: no chunk cap), so it gets its own limits
    eval_limits = Limits(
        max_llm_calls=_number(args, "agentgraph_eval_max_llm_calls", limits.max_llm_calls, int, minimum=1),
        max_time_s=_number(args, "agentgraph_eval_max_time_s", limits.max_time_s, float, minimum=0.0,
                           strict=True),
    )
    return BridgeSetup(
        spec=spec,
        options=options,
        policy=policy,
        tokenizer=tokenizer,
        engines=engines,
        template_kwargs=_mapping(args, "agentgraph_template_kwargs"),
        limits=limits,
        eval_limits=eval_limits,
        return_list=bool(getattr(args, "agentgraph_return_list", False)),
    )


def clear_cache() -> None:
    """Forget cached setups (tests; or after changing args in one process)."""
    _SETUPS.clear()


async def aclose_all() -> None:
    """Close the engines of every setup built in the running event loop, and forget them.

    Engines hold HTTP connection pools bound to the loop that made them, so only this loop's
    setups can be closed here; setups of other (finished) loops are forgotten without closing.
    Call it at the end of a process's rollouts (tests, scripts) so no connection outlives it.
    """
    loop = asyncio.get_running_loop()
    for key in list(_SETUPS):
        setup = _SETUPS.pop(key)
        if key[3] is not loop:
            continue
        for engine in {id(e): e for e in (setup.policy, *setup.engines.values())}.values():
            close = getattr(engine, "aclose", None)
            if close is not None:
                await close()

"""AgentSpec: binds a graph to RL (input mapping, reward, sequence layout, reward split).

A spec is all rl_bridge and the CLI need to run an agent. A user's own agent is one graph plus one
AgentSpec (see examples/new_agent.py); slime finds it through `agentgraph: pkg.module:attr`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Mapping, TypedDict, Union

from .errors import ConfigError
from .node import AgentContext
from .trace import Layout

RewardSplit = Literal["broadcast", "divide"]
RewardValue = Union[float, dict[str, Any]]


class RolloutInput(TypedDict):
    """One input row, named as slime names a Sample's fields (prompt, label, metadata)."""

    prompt: Any
    label: Any
    metadata: dict[str, Any]
    index: int | None


class RewardInput(TypedDict):
    """What a reward function sees: enough to score without the graph (slime calls rm separately)."""

    answer: str
    label: Any
    metadata: dict[str, Any]
    status: str


RewardFn = Callable[[RewardInput, AgentContext | None], Union[RewardValue, Awaitable[RewardValue]]]
MetricsFn = Callable[[RewardInput], dict[str, float]]


@dataclass
class AgentSpec:
    """Everything needed to run a graph as an RL rollout.

    - `build_graph(options)` returns a compiled graph whose context schema is AgentContext;
    - `make_input(row, options)` maps a RolloutInput to the graph's input state (raise InputError on bad rows);
    - `answer(final_state)` extracts the final answer text (stored in sample metadata, fed to reward);
    - `reward(RewardInput, ctx)` scores it (sync or async; ctx is None when no engines are at hand);
    - `layout`: `per_turn` (each trainable turn its own sequence) or `concat` (merge where exact);
    - `reward_split`: `broadcast` the trajectory's reward to every sequence, or `divide` it among them;
    - `requires_label`: rows without a label are run but not scored (reward None) instead of failing;
    - `summarize(final_state)`: method facts for sample metadata (e.g. chunks read of chunks total);
    - `validate_options(options)`: raise ConfigError for bad option values, before any rollout;
    - `dict_reward`: the reward returns a dict whose scalar is under `reward_key` (slime --reward-key);
    - `options`: defaults for method settings, overridable from the CLI / slime YAML (`agentgraph_options`).

    >>> spec = AgentSpec(name="echo", build_graph=lambda o: None, make_input=lambda r, o: {},
    ...                  answer=lambda s: "", reward=lambda r, c: 0.0)
    >>> spec.layout
    'per_turn'
    """

    name: str
    build_graph: Callable[[Mapping[str, Any]], Any]
    make_input: Callable[[RolloutInput, Mapping[str, Any]], dict[str, Any]]
    answer: Callable[[Mapping[str, Any]], str]
    reward: RewardFn
    layout: Layout = "per_turn"
    reward_split: RewardSplit = "broadcast"
    eval_metrics: MetricsFn | None = None
    options: dict[str, Any] = field(default_factory=dict)
    reward_key: str = "reward"
    dict_reward: bool = False
    requires_label: bool = True
    summarize: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    validate_options: Callable[[Mapping[str, Any]], None] | None = None
    description: str = ""
    _graphs: dict[str, Any] = field(default_factory=dict, repr=False)

    def resolve_options(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults + overrides; an unknown key is an error (typos must not pass silently)."""
        merged = dict(self.options)
        for key, value in (overrides or {}).items():
            if key not in self.options:
                raise ConfigError(
                    f"unknown option {key!r} for agent {self.name!r}; known options: {sorted(self.options)}"
                )
            merged[key] = value
        if self.validate_options is not None:
            self.validate_options(merged)
        return merged

    def graph(self, options: Mapping[str, Any]) -> Any:
        """The compiled graph for these options, built once per process."""
        key = repr(sorted(options.items()))
        graph = self._graphs.get(key)
        if graph is None:
            graph = self.build_graph(options)
            self._graphs[key] = graph
        return graph


_REGISTRY: dict[str, str] = {
    "memagent": "agentgraphs.memagent:SPEC",
    "toolorchestra-tau2": "agentgraphs.toolorchestra.tau2:SPEC",
}


def register(name: str, target: str) -> None:
    """Register a short name for `load_spec` (target is 'package.module:attr')."""
    _REGISTRY[name] = target


def registered_names() -> list[str]:
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
    target = _REGISTRY.get(name_or_path, name_or_path)
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

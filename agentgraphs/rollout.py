"""Run one AgentSpec rollout: the graph, its training sequences, and its reward, computed once.

`run_rollout` never raises for a rollout's own failures: every input comes back with a status
(completed | truncated | aborted | failed) and a reason (DESIGN.md invariants 4 and 5). Only
cancellation propagates, so slime can abort a rollout batch.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from .context import AgentContext
from .errors import ConfigError, EngineError, InputError
from .node import LLMCallLimitExceeded, RolloutAborted
from .records import reward_input, sample_fields, trace_record, trace_summary  # noqa: F401 (re-exported)
from .spec import AgentSpec, MethodOptions, RewardInput, RewardValue, RolloutInput
from .trace import TrainSequence, Turn, build_sequences, check_sequence

Status = Literal["completed", "truncated", "aborted", "failed"]


@dataclass
class Rollout:
    """The result of one input: status, turns, training sequences, and the reward and metrics (once).

    FAILED rollouts train nothing: `agentgraphs.records.sample_fields` masks their sequences.
    """

    status: Status
    reason: str
    answer: str = ""
    # bulky fields stay out of repr(): asyncio.run() reprs its result when it restores the SIGINT
    # handler, and a 448K-token document made that a 15 MB string
    turns: list[Turn] = field(default_factory=list, repr=False)
    sequences: list[TrainSequence] = field(default_factory=list, repr=False)
    reward: RewardValue | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    time_s: float = 0.0
    error: str | None = None
    final_state: dict[str, Any] | None = field(default=None, repr=False)
    options: MethodOptions | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    reward_input: RewardInput | None = field(default=None, repr=False)
    path: list[str] = field(default_factory=list, repr=False)  # every graph node that ran, in order

    @property
    def retries(self) -> int:
        return sum(int(t.get("retries", 0)) for t in self.turns)


def rollout_input(prompt: Any, label: Any = None, metadata: Mapping[str, Any] | None = None,
                  index: int | None = None) -> RolloutInput:
    return RolloutInput(prompt=prompt, label=label, metadata=dict(metadata or {}), index=index)


async def run_rollout(
    spec: AgentSpec,
    inp: RolloutInput,
    ctx: AgentContext,
    *,
    options: Mapping[str, Any] | None = None,
    compute_reward: bool = True,
    config: Mapping[str, Any] | None = None,
    checkpointer: Any = None,
    resume: bool = False,
) -> Rollout:
    """Run the spec's graph on one input and return a Rollout with a status, never an exception.

    `options` are the method's options (a dict of overrides or a resolved MethodOptions); bad options
    raise ConfigError before anything runs. The reward and `eval_metrics` are computed here, once, from
    the one RewardInput (`agentgraphs.records.reward_input`); `compute_reward=False` skips the reward.
    `config` is passed to LangGraph (thread_id etc. when the graph has a checkpointer).
    `checkpointer` compiles the graph with that saver (`spec.graph(options, checkpointer=...)`), so every
    superstep is checkpointed under `config`'s thread; `resume=True` runs from the checkpoint `config` names
    (its `checkpoint_id`, else the thread's latest) instead of from `make_input(inp)`: a replay, or a fork
    after `update_state`. The rollout's turns are then the whole branch, the restored ones included.
    """
    opts = spec.resolve_options(options)
    if resume and checkpointer is None:
        raise ConfigError("run_rollout(resume=True) needs checkpointer= (the saver holding the thread)")
    rollout = await _run(spec, inp, ctx, opts, compute_reward, config, checkpointer, resume)
    rollout.options = opts
    return rollout


async def _run(
    spec: AgentSpec, inp: RolloutInput, ctx: AgentContext, opts: MethodOptions, compute_reward: bool,
    config: Mapping[str, Any] | None, checkpointer: Any = None, resume: bool = False,
) -> Rollout:
    started = time.monotonic()
    graph = spec.graph(opts, checkpointer=checkpointer)
    run_config = {"recursion_limit": ctx.limits.recursion_limit, **(config or {})}
    graph_input: dict[str, Any] | None
    if resume:
        graph_input = None
        last: dict[str, Any] = dict((await graph.aget_state(run_config)).values)
    else:
        try:
            graph_input = spec.make_input(inp, opts)
        except InputError as exc:
            return _failed(started, f"bad input: {exc}", exc)
        except Exception as exc:  # a user's make_input must not take the whole batch down
            return _failed(started, f"bad input: {spec.name}.make_input raised {type(exc).__name__}: {exc}", exc)
        # stream the state so a rollout that fails half-way still reports the turns it made
        last = dict(graph_input)

    path: list[str] = []  # the nodes that ran, in order (the viewer's timeline)

    async def drive() -> None:
        nonlocal last
        async for mode, chunk in graph.astream(graph_input, run_config, context=ctx,
                                               stream_mode=["updates", "values"]):
            if mode == "values":
                last = chunk
            else:
                path.extend(name for name in chunk if not name.startswith("__"))

    try:
        if ctx.limits.max_time_s is not None:
            await asyncio.wait_for(drive(), ctx.limits.max_time_s)
        else:
            await drive()
    except RolloutAborted as exc:
        turns = [*spec.collect_turns(last), exc.turn]
        return Rollout(status="aborted", reason=str(exc), turns=turns, time_s=time.monotonic() - started, path=path)
    except asyncio.TimeoutError as exc:
        failed = _failed(started, f"rollout exceeded max_time_s={ctx.limits.max_time_s}", exc, spec.collect_turns(last))
    except (EngineError, LLMCallLimitExceeded) as exc:
        failed = _failed(started, f"{type(exc).__name__}: {exc}", exc, spec.collect_turns(last))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug in a user's node must not escape into slime
        failed = _failed(started, f"graph raised {type(exc).__name__}: {exc}", exc, spec.collect_turns(last))
    else:
        rollout = await _finish(spec, inp, ctx, opts, dict(last), started, compute_reward)
        rollout.path = path
        return rollout
    failed.path = path
    return failed


async def _finish(
    spec: AgentSpec, inp: RolloutInput, ctx: AgentContext, opts: MethodOptions, final: dict[str, Any],
    started: float, compute_reward: bool,
) -> Rollout:
    turns: list[Turn] = spec.collect_turns(final)
    try:
        answer = spec.answer(final)
        sequences = build_sequences(turns, spec.layout)
        for seq in sequences:
            check_sequence(seq, turns)
        summary = trace_summary(turns)
        if spec.summarize is not None:
            summary.update(spec.summarize(final))
    except Exception as exc:
        return _failed(started, f"building training data failed: {type(exc).__name__}: {exc}", exc, turns)
    # the policy's turns decide: in evaluation (and for masked turns) nothing is trainable, yet a
    # policy turn cut by max_new_tokens still makes the rollout TRUNCATED
    truncated = [i for i, t in enumerate(turns) if t["finish_reason"] == "length" and t["engine"] == ctx.policy.name]
    status: Status = "truncated" if truncated else "completed"
    reason = f"turns {truncated} hit max_new_tokens" if truncated else "ok"
    rollout = Rollout(status=status, reason=reason, answer=answer, turns=turns, sequences=sequences,
                      final_state=final, summary=summary)
    rin = reward_input(answer=answer, prompt=inp["prompt"], label=inp["label"], row_metadata=inp["metadata"],
                       status=status, summary=summary, options=opts)
    rollout.reward_input = rin
    labelled = inp["label"] is not None or not spec.requires_label
    if compute_reward and labelled:
        try:
            rollout.reward = await score(spec, rin, ctx)
        except Exception as exc:
            return _failed(started, f"reward failed: {type(exc).__name__}: {exc}", exc, turns)
    elif compute_reward:
        rollout.reason += "; no label: not scored"
    if spec.eval_metrics is not None and labelled:
        try:
            metrics = spec.eval_metrics(rin)
            rollout.metrics = await metrics if inspect.isawaitable(metrics) else metrics
        except Exception as exc:
            return _failed(started, f"{spec.name}.eval_metrics raised {type(exc).__name__}: {exc}", exc, turns)
    rollout.time_s = time.monotonic() - started
    return rollout


async def rollout_from_state(
    spec: AgentSpec, inp: RolloutInput, ctx: AgentContext, final: Mapping[str, Any], *,
    options: Mapping[str, Any] | MethodOptions | None = None, compute_reward: bool = True,
) -> Rollout:
    """The Rollout (status, sequences, reward, metrics) of a graph state reached some other way: a step-by-
    step debugging session, or a checkpoint. Scored exactly as `run_rollout` scores a finished run.
    """
    opts = spec.resolve_options(options)
    rollout = await _finish(spec, inp, ctx, opts, dict(final), time.monotonic(), compute_reward)
    rollout.options = opts
    return rollout


async def score(spec: AgentSpec, rin: RewardInput, ctx: AgentContext | None) -> RewardValue:
    value = spec.reward(rin, ctx)
    if inspect.isawaitable(value):
        value = await value
    return value  # type: ignore[return-value]


def _failed(started: float, reason: str, exc: BaseException, turns: list[Turn] | None = None) -> Rollout:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    return Rollout(status="failed", reason=reason, turns=list(turns or []), error=tb,
                   time_s=time.monotonic() - started)

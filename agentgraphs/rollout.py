"""Run one AgentSpec rollout and turn it into slime Sample fields. The one conversion path.

`run_rollout` never raises for a rollout's own failures: every input comes back with a status
(completed | truncated | aborted | failed) and a reason (DESIGN.md invariants 4 and 5). Only
cancellation propagates, so slime can abort a rollout batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from .errors import EngineError, InputError
from .node import AgentContext, LLMCallLimitExceeded, RolloutAborted
from .spec import AgentSpec, RewardInput, RewardValue, RolloutInput
from .trace import TrainSequence, Turn, build_sequences, check_sequence, mask_out

Status = Literal["completed", "truncated", "aborted", "failed"]


@dataclass
class Rollout:
    """The result of one input. `sequences` are ready for training (FAILED ones fully masked)."""

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
    options: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

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
) -> Rollout:
    """Run the spec's graph on one input and return a Rollout with a status, never an exception.

    `config` is passed to LangGraph (thread_id etc. when the graph has a checkpointer).
    """
    opts = spec.resolve_options(options)
    ctx = dataclasses.replace(ctx, config={**opts, **ctx.config})
    rollout = await _run(spec, inp, ctx, opts, compute_reward, config)
    rollout.options = opts
    return rollout


async def _run(
    spec: AgentSpec, inp: RolloutInput, ctx: AgentContext, opts: dict[str, Any], compute_reward: bool,
    config: Mapping[str, Any] | None,
) -> Rollout:
    started = time.monotonic()
    try:
        graph_input = spec.make_input(inp, opts)
    except InputError as exc:
        return _failed(started, f"bad input: {exc}", exc)
    except Exception as exc:  # a user's make_input must not take the whole batch down
        return _failed(started, f"bad input: {spec.name}.make_input raised {type(exc).__name__}: {exc}", exc)
    graph = spec.graph(opts)
    run_config = {"recursion_limit": ctx.limits.recursion_limit, **(config or {})}
    # stream the state so a rollout that fails half-way still reports the turns it made
    last: dict[str, Any] = dict(graph_input)

    async def drive() -> None:
        nonlocal last
        async for values in graph.astream(graph_input, run_config, context=ctx, stream_mode="values"):
            last = values

    try:
        if ctx.limits.max_time_s is not None:
            await asyncio.wait_for(drive(), ctx.limits.max_time_s)
        else:
            await drive()
    except RolloutAborted as exc:
        turns = [*(last.get("turns") or []), exc.turn]
        return Rollout(status="aborted", reason=str(exc), turns=turns, time_s=time.monotonic() - started)
    except asyncio.TimeoutError as exc:
        return _failed(started, f"rollout exceeded max_time_s={ctx.limits.max_time_s}", exc, _turns(last))
    except (EngineError, LLMCallLimitExceeded) as exc:
        return _failed(started, f"{type(exc).__name__}: {exc}", exc, _turns(last))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug in a user's node must not escape into slime
        return _failed(started, f"graph raised {type(exc).__name__}: {exc}", exc, _turns(last))
    return await _finish(spec, inp, ctx, dict(last), started, compute_reward)


def _turns(state: Mapping[str, Any]) -> list[Turn]:
    return list(state.get("turns") or [])


async def _finish(
    spec: AgentSpec, inp: RolloutInput, ctx: AgentContext, final: dict[str, Any], started: float,
    compute_reward: bool,
) -> Rollout:
    turns: list[Turn] = _turns(final)
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
    rin = reward_input(rollout, inp)
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
            rollout.metrics = spec.eval_metrics(rin)
        except Exception as exc:
            return _failed(started, f"{spec.name}.eval_metrics raised {type(exc).__name__}: {exc}", exc, turns)
    rollout.time_s = time.monotonic() - started
    return rollout


def trace_summary(turns: list[Turn]) -> dict[str, Any]:
    """Counts a user reads first: calls per node, tokens generated and trained, truncations."""
    by_node: dict[str, int] = {}
    for t in turns:
        by_node[t["node"]] = by_node.get(t["node"], 0) + 1
    return {
        "turns_by_node": by_node,
        "output_tokens": sum(len(t["output_ids"]) for t in turns),
        "trained_tokens": sum(len(t["output_ids"]) for t in turns if t["trainable"]),
        "truncated_turns": sum(1 for t in turns if t["finish_reason"] == "length"),
    }


def reward_input(rollout: Rollout, inp: RolloutInput) -> RewardInput:
    return RewardInput(answer=rollout.answer, label=inp["label"], metadata=inp["metadata"], status=rollout.status)


async def score(spec: AgentSpec, rin: RewardInput, ctx: AgentContext | None) -> RewardValue:
    value = spec.reward(rin, ctx)
    if inspect.isawaitable(value):
        value = await value
    return value  # type: ignore[return-value]


def _failed(started: float, reason: str, exc: BaseException, turns: list[Turn] | None = None) -> Rollout:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    return Rollout(status="failed", reason=reason, turns=list(turns or []), error=tb,
                   time_s=time.monotonic() - started)


def scalar_reward(reward: RewardValue | None, key: str) -> float:
    if reward is None:
        return 0.0
    if isinstance(reward, dict):
        return float(reward.get(key, 0.0))
    return float(reward)


def sample_fields(rollout: Rollout, spec: AgentSpec, *, pad_id: int = 0) -> dict[str, Any]:
    """The slime Sample fields for a rollout (status as a lower-case string).

    The top-level tokens/loss_mask/rollout_log_probs hold the first training sequence, so slime's
    default path sees a valid sample; `train_metadata["turns"]` holds every sequence for
    rl_bridge.convert. A failed rollout trains nothing: all-zero masks and remove_sample=True.
    """
    sequences = [dict(s) for s in rollout.sequences]
    failed = rollout.status == "failed"
    if failed:
        for seq in sequences:
            mask_out(seq)
    if not sequences:
        # slime needs a non-empty prompt AND response (it reads the logits at position prompt_len-1):
        # two pad tokens, the second a masked placeholder response, never trained.
        sequences = [dict(TrainSequence(tokens=[pad_id, pad_id], response_length=1, loss_mask=[0],
                                        rollout_log_probs=[0.0], turn_indices=[]))]
    head = sequences[0]
    n = head["response_length"]
    train_metadata: dict[str, Any] = {
        "turns": [
            {k: s[k] for k in ("tokens", "response_length", "loss_mask", "rollout_log_probs")}
            for s in sequences
        ],
        "reward_split": rollout.options.get("reward_split", spec.reward_split),
        "layout": spec.layout,
    }
    if spec.reward_shaping is not None:
        shaping = spec.reward_shaping(rollout.options, rollout.summary or trace_summary(rollout.turns))
        if shaping:
            train_metadata["reward_shaping"] = shaping
    return {
        "tokens": list(head["tokens"]),
        "response_length": n,
        "loss_mask": list(head["loss_mask"]),
        "rollout_log_probs": list(head["rollout_log_probs"]),
        "response": rollout.answer,
        "status": rollout.status,
        "reward": rollout.reward,
        "remove_sample": failed,
        "weight_versions": sorted({str(t["weight_version"]) for t in rollout.turns if t.get("weight_version")}),
        "metadata": {
            "agentgraph": spec.name,
            "answer": rollout.answer,
            "status_reason": rollout.reason,
            "error": rollout.error,
            "llm_calls": len(rollout.turns),
            "retries": rollout.retries,
            "num_sequences": len(rollout.sequences),
            "rollout_time_s": round(rollout.time_s, 4),
            "metrics": rollout.metrics,
            "trace_summary": rollout.summary or trace_summary(rollout.turns),
        },
        "train_metadata": train_metadata,
    }


def trace_record(rollout: Rollout, inp: RolloutInput) -> dict[str, Any]:
    """A JSON line for traces.jsonl: the input's index, status and every Turn as recorded."""
    return {
        "index": inp.get("index"),
        "status": rollout.status,
        "reason": rollout.reason,
        "answer": rollout.answer,
        "reward": rollout.reward,
        "metrics": rollout.metrics,
        "summary": rollout.summary or trace_summary(rollout.turns),
        "time_s": round(rollout.time_s, 4),
        "turns": rollout.turns,
        "error": rollout.error,
    }

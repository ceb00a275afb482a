"""Run one AgentSpec rollout: the graph, its training sequences, and its reward, computed once.

`run_rollout` never raises for a rollout's own failures: every input comes back with a status
(completed | truncated | aborted | failed) and a reason (DESIGN.md invariants 4 and 5). Only
cancellation propagates, so slime can abort a rollout batch.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import threading
import time
import traceback
from typing import Any, Callable, Mapping

from langgraph.errors import GraphRecursionError

from .calls import CallLedger, DroppedCall, calls_made, dropped_calls, recording_calls, unrecorded_calls
from .context import AgentContext, Limits
from .errors import ConfigError, EngineError, InputError, RewardError
from .gc_tuning import rollouts_running
from .loop_guard import Watch, guarded, rollout_running
from .node import CAP_SOURCES, LLMCallLimitExceeded, RolloutAborted
from .records import RESULT_METADATA_KEYS, Rollout, Status, reward_input, trace_summary
from .spec import AgentSpec, MethodOptions, RewardInput, RewardValue, RolloutInput
from .sync_calls import cancelling_sync_calls
from .trace import Layout, Turn, build_sequences, check_sequence

logger = logging.getLogger(__name__)
_ROLLOUT_ENDED = "the rollout ended (its max_time_s deadline, a cancellation, or its end)"
_GRAPH_RAISED = "graph raised "  # the reason's start when the graph raised an exception (+ "<class name>: <message>")


def rollout_input(prompt: Any, label: Any = None, metadata: Mapping[str, Any] | None = None,
                  index: int | None = None) -> RolloutInput:
    """One input row. Metadata that is not a mapping is kept as given: `run_rollout` refuses it
    (`check_row_metadata`), so the row comes back FAILED naming the field instead of being reshaped."""
    meta: Any = {} if metadata is None else dict(metadata) if isinstance(metadata, Mapping) else metadata
    return RolloutInput(prompt=prompt, label=label, metadata=meta, index=index)


def check_row_metadata(metadata: Any, field: str = "metadata") -> None:
    """A row's metadata is a mapping (None is read as none, before this): anything else, "" and [] included,
    raises InputError naming `field`. The one rule for it: `run_rollout` (every path, slime's included) and
    the JSONL reader (`agentgraphs.rollout_inputs.parse_row`) both call it.

    >>> check_row_metadata({"context": "..."})
    >>> try:
    ...     check_row_metadata("Paris")
    ... except InputError as exc:
    ...     print(exc.field, exc.problem)
    metadata must be an object, got str 'Paris'
    """
    if not isinstance(metadata, Mapping):
        raise InputError(field, f"must be an object, got {type(metadata).__name__} {metadata!r:.40}",
                         "give each row's metadata as a JSON object (slime: the value under --metadata-key), e.g. "
                         '{"value": ...}')


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

    `options` are the method's options (a dict of overrides or a resolved MethodOptions); bad options, and
    options naming a judge engine `ctx` does not have (with `compute_reward`), raise ConfigError before
    anything runs. The reward and `eval_metrics` are computed here, once, from
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
    if compute_reward:  # a judge the options name but the context lacks: refused before the graph runs
        spec.check_engines(opts, ctx.engines)
    with rollouts_running():  # the collector's thresholds, raised while rollouts run (agentgraphs.gc_tuning)
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
            check_row_metadata(inp["metadata"])
            _refuse_result_keys(inp["metadata"])
            graph_input = spec.make_input(inp, opts)
            spec.check_row_engines(inp, opts, ctx.engines)  # a helper the row names: present before it generates
        except InputError as exc:
            return _failed(started, f"bad input: {exc}", exc)
        except Exception as exc:  # a user's make_input must not take the whole batch down
            return _failed(started, f"bad input: {spec.name}.make_input raised {type(exc).__name__}: {exc}", exc)
        # stream the state so a rollout that fails half-way still reports the turns it made
        last = dict(graph_input)

    path: list[str] = []  # the nodes that ran, in order (the viewer's timeline)
    path_rids: list[list[str] | None] = []  # per step, the engine calls it recorded

    async def drive() -> None:
        nonlocal last
        try:
            async for mode, chunk in graph.astream(graph_input, run_config, context=ctx,
                                                   stream_mode=["updates", "values"]):
                if mode == "values":
                    last = chunk
                    continue
                for name, update in chunk.items():
                    if not name.startswith("__"):
                        path.append(name)
                        path_rids.append(_step_rids(spec, update))
        except asyncio.TimeoutError as exc:  # the graph's own (a tool's wait_for): not the rollout's deadline
            raise _GraphTimeout(exc) from exc

    # every call the graph's nodes make lands in the ledger (agentgraphs.calls); the rollout's end, however it
    # came, cancels its `def` nodes' calls still in flight (agentgraphs.sync_calls)
    with recording_calls() as ledger, cancelling_sync_calls(_ROLLOUT_ENDED), \
            rollout_running(ctx.limits.max_time_s):  # a node blocking the loop past it is stopped (loop_guard)
        try:
            if ctx.limits.max_time_s is not None:
                await asyncio.wait_for(drive(), ctx.limits.max_time_s)
            else:
                await drive()
        except RolloutAborted as exc:
            turns = [*spec.collect_turns(last), exc.turn]
            return Rollout(status="aborted", reason=str(exc), turns=turns, time_s=time.monotonic() - started,
                           path=path, path_rids=path_rids, llm_calls=calls_made(ledger, turns))
        except _GraphTimeout as wrapped:
            exc = wrapped.exc
            failed = _failed(started, f"{_GRAPH_RAISED}{type(exc).__name__}: {exc}", exc, spec.collect_turns(last))
        except asyncio.TimeoutError as exc:  # only wait_for's deadline: drive() wraps the graph's own
            failed = _failed(started, f"rollout exceeded max_time_s={ctx.limits.max_time_s}", exc,
                             spec.collect_turns(last))
        except (EngineError, LLMCallLimitExceeded) as exc:
            failed = _failed(started, f"{type(exc).__name__}: {exc}", exc, spec.collect_turns(last))
        except asyncio.CancelledError:
            raise
        except GraphRecursionError as exc:  # LangGraph's advice names its config key; say which loop and our knob
            failed = _failed(started, recursion_reason(run_config["recursion_limit"]), exc, spec.collect_turns(last))
        except Exception as exc:  # a bug in a user's node must not escape into slime
            failed = _failed(started, f"{_GRAPH_RAISED}{type(exc).__name__}: {exc}", exc, spec.collect_turns(last))
        else:
            rollout = await _finish(spec, inp, ctx, opts, dict(last), started, compute_reward, ledger)
            rollout.path, rollout.path_rids = path, path_rids
            return rollout
    failed.path, failed.path_rids = path, path_rids
    failed.llm_calls = calls_made(ledger, failed.turns)
    return failed


def recursion_reason(limit: Any) -> str:
    """Why a rollout whose graph hit LangGraph's recursion limit failed, with what to do in agentgraphs' terms.

    >>> recursion_reason(25)[:80]
    'graph raised GraphRecursionError: the graph ran 25 steps (Limits.recursion_limit'
    """
    return (f"{_GRAPH_RAISED}GraphRecursionError: the graph ran {limit} steps (Limits.recursion_limit) without "
            "reaching END: a loop whose exit condition never holds is the usual cause (check the conditional edge "
            "that should route to END, e.g. on a step count kept in state); a graph that needs more steps: raise "
            "it (AgentContext(limits={'recursion_limit': N}), or run_rollout(..., config={'recursion_limit': N})). "
            "Under slime, set agentgraph_recursion_limit (agentgraph_eval_recursion_limit for evaluation) in the "
            "--custom-config-path YAML")


class _GraphTimeout(Exception):
    """A TimeoutError the graph raised itself (a node's or tool's own timeout), told apart from the rollout's
    max_time_s deadline, which asyncio reports as TimeoutError too."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _step_rids(spec: AgentSpec, update: Any) -> list[str] | None:
    """The request ids of the Turns one node's update added: which engine calls that step made."""
    if update is None:
        return []
    if not isinstance(update, Mapping):
        return None
    try:
        return [str(t.get("rid") or "") for t in spec.collect_turns(update)]
    except Exception:  # a turns_of that reads only whole states: the viewer falls back to node names
        return None


async def _finish(
    spec: AgentSpec, inp: RolloutInput, ctx: AgentContext, opts: MethodOptions, final: dict[str, Any],
    started: float, compute_reward: bool, ledger: CallLedger | None = None,
) -> Rollout:
    turns: list[Turn] = spec.collect_turns(final)
    llm_calls = calls_made(ledger, turns)
    untrained = dropped_calls(ledger, turns) + ([] if ctx.evaluation else unrecorded_calls(ledger, ctx.policy.name))
    if untrained:
        warn_untrained(spec.name, inp.get("index"), untrained)
    try:
        answer = spec.answer(final)
        sequences = build_sequences(turns, spec.layout)
        for seq in sequences:
            check_sequence(seq, turns)
        summary = trace_summary(turns)
        if spec.summarize is not None:
            summary.update(spec.summarize(final))
    except Exception as exc:
        failed = _failed(started, f"building training data failed: {type(exc).__name__}: {exc}", exc, turns)
        failed.llm_calls = llm_calls
        return failed
    # the policy's turns decide: in evaluation (and for masked turns) nothing is trainable, yet a policy turn
    # cut by max_new_tokens still makes the rollout TRUNCATED; so does a trainable one, whatever engine made
    # it (a replay or fork on another engine restores the earlier branch's turns, trained as they are)
    truncated = [i for i, t in enumerate(turns) if t["finish_reason"] == "length"
                 and (t["engine"] == ctx.policy.name or t.get("trainable"))]
    status: Status = "truncated" if truncated else "completed"
    reason = truncation_reason(turns, truncated, ctx) if truncated else "ok"
    if not ctx.evaluation and not any(t["trainable"] and t["output_ids"] for t in turns):
        reason += f"; {_NOTHING_TRAINABLE}"
        warn_nothing_trainable(spec.name, inp.get("index"), llm_calls, untrained)
    rollout = Rollout(status=status, reason=reason, answer=answer, turns=turns, sequences=sequences,
                      final_state=final, summary=summary, llm_calls=llm_calls, untrained_calls=untrained)
    rin = reward_input(answer=answer, prompt=inp["prompt"], label=inp["label"], row_metadata=inp["metadata"],
                       status=status, summary=summary, options=opts)
    rollout.reward_input = rin
    labelled = inp["label"] is not None or not spec.requires_label
    if compute_reward and labelled:
        try:
            rollout.reward = await score(spec, rin, ctx)
        except Exception as exc:
            failed = _failed(started, reward_failure(exc), exc, turns)
            failed.llm_calls = llm_calls
            return failed
    elif compute_reward:
        rollout.reason += "; no label: not scored"
    if spec.eval_metrics is not None and labelled:
        try:  # user code like the reward, so under the same deadline
            rollout.metrics = await call_bounded(spec.eval_metrics, (rin,), "eval_metrics function",
                                                 ctx.limits.reward_timeout_s)
        except RewardError as exc:
            failed = _failed(started, str(exc), exc, turns)
            failed.llm_calls = llm_calls
            return failed
        except Exception as exc:
            failed = _failed(started, f"{spec.name}.eval_metrics raised {type(exc).__name__}: {exc}", exc, turns)
            failed.llm_calls = llm_calls
            return failed
    rollout.time_s = time.monotonic() - started
    return rollout


def untrain_turns(rollout: Rollout, layout: Layout, reasons: Mapping[int, str]) -> None:
    """Train nothing from the turns `reasons` names (turn index -> why), after the fact.

    Each stays in the trace, now trainable=False, and the training sequences are rebuilt: in `concat` their
    tokens stay in their sequence with mask 0 and log-prob 0.0; in `per_turn` they leave no sequence. The
    reasons go to `rollout.masked_turns` (the sample's `metadata["masked_turns"]`).
    """
    if not reasons:
        return
    rollout.turns = [{**t, "trainable": False} if i in reasons else t  # type: ignore[misc]
                     for i, t in enumerate(rollout.turns)]
    rollout.sequences = build_sequences(rollout.turns, layout)
    for seq in rollout.sequences:
        check_sequence(seq, rollout.turns)
    rollout.summary.update(trace_summary(rollout.turns))
    rollout.masked_turns += [{"turn": i, "node": rollout.turns[i]["node"], "reason": why}
                             for i, why in sorted(reasons.items())]


_WARNED_UNTRAINED: set[tuple[str, frozenset[str]]] = set()
_WARNED_NOTHING_TRAINABLE: set[str] = set()
_NOTHING_TRAINABLE = "no trainable policy turn: nothing of this rollout trains"


def warn_nothing_trainable(agent: str, index: Any, llm_calls: int | None, untrained: list[DroppedCall]) -> None:
    """Say that a training rollout ended without a single trainable policy turn (its sample trains nothing, yet
    its reward counts in its GRPO group): a WARNING the first time per agent and process, DEBUG after that."""
    level = logging.DEBUG if agent in _WARNED_NOTHING_TRAINABLE else logging.WARNING
    _WARNED_NOTHING_TRAINABLE.add(agent)
    logger.log(level, "agentgraph %s: sample %s ended with %s (%s engine call(s) counted, %d trainable one(s) not "
               "trained: metadata['untrained_calls']). If the graph asks the policy, it must do so through call_llm "
               "or TracedChatModel: a chat model of its own (e.g. ChatOpenAI at the SGLang router) is invisible to "
               "training; a path that rightly asks no policy call trains nothing by design", agent, index,
               _NOTHING_TRAINABLE, llm_calls, len(untrained))


def warn_untrained(agent: str, index: Any, untrained: list[DroppedCall]) -> None:
    """Say which trainable calls a rollout made but will not train (the sample's metadata names them too).

    A warning the first time an agent drops calls of a given set of nodes in this process (every rollout of
    a graph usually drops the same ones), DEBUG after that; the metadata of every sample names them."""
    nodes: dict[str, int] = {}
    for call in untrained:
        nodes[call["node"]] = nodes.get(call["node"], 0) + 1
    key = (agent, frozenset(nodes))
    level = logging.DEBUG if key in _WARNED_UNTRAINED else logging.WARNING
    _WARNED_UNTRAINED.add(key)
    named = ", ".join(f"{node!r} x{n}" for node, n in nodes.items())
    logger.log(level, "agentgraph %s: sample %s: %d trainable LLM call(s) are not trained (%s): %s. They are "
               "listed in the sample's metadata['untrained_calls'] (further samples dropping calls of the same "
               "nodes: there only); README, 'Training an existing LangGraph agent', says which graph patterns "
               "keep calls", agent, index, len(untrained), named, untrained[0]["reason"])


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
    """The spec's reward of `rin`, sync or async, within `ctx.limits.reward_timeout_s`, checked.

    Raises RewardError (callers turn it into a FAILED sample: `reward_failure`) when the reward does not
    return in time, returns None, a number that is not finite, or a dict without the spec's `reward_key`:
    each would otherwise train on a made-up value (a NaN poisons its whole GRPO group).
    """
    timeout_s = (ctx.limits if ctx is not None else Limits()).reward_timeout_s
    value = await call_bounded(spec.reward, (rin, ctx), "reward function", timeout_s)
    return checked_reward(value, spec)


def checked_reward(value: Any, spec: AgentSpec) -> RewardValue:
    """`value` as a trainable reward of `spec`: a float, or, for a spec declaring `dict_reward`, a dict with a
    finite float under `reward_key`. The shape is the declared one: slime reads a dict reward through
    --reward-key and a float one without it (`rl_bridge.setup.check_reward_key` holds the flag to the spec), so
    the other shape would pass here and stop slime later, far from the reward that made it."""
    name = function_name(spec.reward)
    if value is None:
        raise RewardError(f"reward function {name} returned None: return a float (or a dict with the key "
                          f"{spec.reward_key!r}); a missing `return` statement is the usual cause")
    if isinstance(value, Mapping) and not spec.dict_reward:
        raise RewardError(
            f"reward function {name} returned a dict (keys: {sorted(map(str, value))}), but agent {spec.name!r} "
            "declares a float reward (AgentSpec(dict_reward=False)), which slime reads without --reward-key, so it "
            "would take the whole dict as the reward: return the float, or declare the dict: AgentSpec("
            f"dict_reward=True, reward_key=<the key of its scalar>) and pass slime --reward-key <that key>")
    if spec.dict_reward and not isinstance(value, Mapping):
        raise RewardError(
            f"reward function {name} returned {type(value).__name__} {value!r:.80}, but agent {spec.name!r} "
            f"declares a dict reward (AgentSpec(dict_reward=True)) with its scalar under {spec.reward_key!r}, "
            f"which slime reads as sample.reward[{spec.reward_key!r}]: return {{{spec.reward_key!r}: value, ...}}, "
            "or set AgentSpec(dict_reward=False) for a float reward")
    if isinstance(value, Mapping):
        if spec.reward_key not in value:
            raise RewardError(
                f"reward function {name} returned a dict without the spec's reward_key {spec.reward_key!r} (keys: "
                f"{sorted(map(str, value))}): put the scalar under {spec.reward_key!r}, or set "
                f"AgentSpec(reward_key=...) to the key that holds it")
        return {**value, spec.reward_key: _finite(value[spec.reward_key], f"{name}'s {spec.reward_key!r}")}
    return _finite(value, name)


def _finite(value: Any, name: str) -> float:
    try:
        if isinstance(value, (str, bytes)):  # float("1") would pass: a string reward is a bug, not a number
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise RewardError(f"reward function {name} returned {type(value).__name__} {value!r:.80}, not a number: "
                          "return a float") from None
    if not math.isfinite(number):
        raise RewardError(f"reward function {name} returned {number} (not finite): one NaN or infinite reward "
                          "makes every advantage of its GRPO group NaN; return a finite float")
    return number


def reward_failure(exc: BaseException) -> str:
    """The FAILED reason of a reward that raised `exc` (in `run_rollout` and in rl_bridge.reward_func)."""
    return f"reward failed: {exc}" if isinstance(exc, RewardError) else f"reward failed: {type(exc).__name__}: {exc}"


def function_name(fn: Any) -> str:
    """`module:qualname` of a user's function (or callable object, or functools.partial), for error messages.

    >>> function_name(function_name)
    'agentgraphs.rollout:function_name'
    """
    target = getattr(fn, "func", fn)  # functools.partial: the function it wraps
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    return f"{module}:{qualname}" if module else qualname


async def call_bounded(fn: Callable[..., Any], args: tuple[Any, ...], what: str, timeout_s: float) -> Any:
    """`fn(*args)` (sync or async) awaited for at most `timeout_s`; RewardError naming `fn` past it.

    A sync `fn` runs in a thread of its own, so a blocking one (time.sleep, a stuck socket) leaves the event
    loop, and every other rollout on it, running. An async `fn` runs on the loop: one that blocks the loop
    itself (a sync call inside `async def`) is stopped by `loop_guard`'s watchdog past `timeout_s` (Python
    code at once, a blocking C call when it returns), and fails with a RewardError saying so even when it
    swallows that and returns a value.
    """
    watches: list[Watch] = []

    async def call() -> Any:
        if not _is_async(fn):
            value = await _in_thread(fn, args)
            return await value if inspect.isawaitable(value) else value
        value = fn(*args)
        if not inspect.isawaitable(value):
            return value
        with guarded(value, fn, what, timeout_s) as watch:
            watches.append(watch)
            return await value

    task = asyncio.ensure_future(call())
    try:
        finished, _ = await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():
            # cancelled, never awaited: a coroutine that swallows the cancellation must not hold the rollout
            task.cancel()
            task.add_done_callback(_forget)
    if not finished:
        name = function_name(fn)
        logger.warning("%s %s did not return within %s s: its sample is FAILED (a sync one's thread cannot be "
                       "stopped and runs on in the background)", what, name, timeout_s)
        raise RewardError(f"{what} {name} did not return within {timeout_s} s (Limits.reward_timeout_s; slime: "
                          "agentgraph_reward_timeout_s): raise that setting if it is just slow, or make the function "
                          "time out on its own (agentgraphs.deadline runs a pure function in a killable worker)")
    if watches and watches[0].blocked:  # it blocked the loop past its timeout: whatever it returned is refused
        task.exception()  # retrieved: the LoopBlocked it raised, if it did, is this error
        raise RewardError(watches[0].error())
    return task.result()


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)  # async __call__


def _forget(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a late failure of an abandoned call is not worth an asyncio error log


async def _in_thread(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """`fn(*args)` in a daemon thread of its own, awaited without blocking the event loop.

    Not `asyncio.to_thread`: a thread cannot be killed, so a call that never returns would hold one of the
    loop's default-executor workers for good (starving every later to_thread call in the process) and make
    `asyncio.run` wait for it at exit. A daemon thread of its own is simply abandoned at the deadline.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    run = contextvars.copy_context().run  # as asyncio.to_thread: the caller's context variables

    def settle(ok: bool, value: Any) -> None:
        if not done.done():  # cancelled at the deadline: nobody waits for it any more
            done.set_result(value) if ok else done.set_exception(value)

    def work() -> None:
        try:
            value, ok = run(fn, *args), True
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            value, ok = exc, False
        except BaseException as exc:  # noqa: BLE001 - SystemExit in a reward fails its sample, not the process
            value, ok = RuntimeError(f"{type(exc).__name__}: {exc}"), False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop closed while this call ran past its deadline
            pass

    threading.Thread(target=work, name=f"agentgraphs-call-{function_name(fn)}", daemon=True).start()
    return await done


def _refuse_result_keys(metadata: Mapping[str, Any]) -> None:
    """A row whose metadata holds a key a result is written under (`answer`, `metrics`, ...) would lose it
    to the result, and a reward recomputed from the Sample (rl_bridge.reward_func) would read the result's."""
    taken = sorted(k for k in metadata if k in RESULT_METADATA_KEYS)
    if taken:
        raise InputError(f"metadata.{taken[0]}", f"{taken} are keys agentgraphs writes a rollout's result under "
                         "in the Sample's metadata, so the row's value would be overwritten",
                         "rename them in the dataset's metadata")


def raised_in_graph(rollout: Rollout, exc_name: str) -> bool:
    """Whether `rollout` failed because its graph raised an exception of class `exc_name` (e.g. torch's
    "OutOfMemoryError"), read from the reason `run_rollout` wrote, so that no caller matches its wording.

    >>> from agentgraphs.records import Rollout
    >>> raised_in_graph(Rollout(status="failed", reason="graph raised OutOfMemoryError: CUDA out of memory"),
    ...                 "OutOfMemoryError")
    True
    >>> raised_in_graph(Rollout(status="completed", reason="ok"), "OutOfMemoryError")
    False
    """
    return rollout.status == "failed" and rollout.reason.startswith(f"{_GRAPH_RAISED}{exc_name}:")


def truncation_reason(turns: list[Turn], truncated: list[int], ctx: AgentContext) -> str:
    """Why a rollout is TRUNCATED; a turn cut at the cap the run set says so, since a call that asked for more
    tokens (a method option) was lowered to it (`agentgraphs.node.call_params`)."""
    reason = f"turns {truncated} hit max_new_tokens"
    cap = ctx.sampling.max_new_tokens
    at_cap = [f"{i} ({turns[i]['node']})" for i in truncated if len(turns[i]["output_ids"]) == cap]
    if ctx.max_new_tokens_cap and at_cap:
        reason += (f"; turns {', '.join(at_cap)} stopped at the run's cap of {cap} ({CAP_SOURCES}), which lowers "
                   "a call's own larger max_new_tokens: raise it to run such calls as their method asks")
    return reason


def _failed(started: float, reason: str, exc: BaseException, turns: list[Turn] | None = None) -> Rollout:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    return Rollout(status="failed", reason=reason, turns=list(turns or []), error=tb,
                   time_s=time.monotonic() - started)

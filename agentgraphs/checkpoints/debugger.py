"""Step through an agent's run one superstep at a time, under the compact SQLite checkpointer.

A `DebugSession` drives the spec's graph with LangGraph's interrupts: `begin()` stores the input and
stops before the first node; each `step()` runs the next superstep (one node, or the nodes that run in
parallel) and stops after it; `run_to_end()` continues without stopping. Every stop is a checkpoint of
one thread in the database, so the session can `edit` the state (LangGraph's update_state), go back to
any checkpoint (`goto`: the next step starts a new branch there), and be resumed later, in another
process, with the same thread id. The terminal face is `agentgraphs debug` (agentgraphs.checkpoints.tui).

A step ends early when the task running it is cancelled (the caller's `asyncio.wait_for` timeout, Ctrl-C in
`agentgraphs debug`) or its session closes under it (then it raises `StepCancelled`). Either way it writes no
checkpoint, and its `def` nodes' `TracedChatModel.invoke()` calls still in flight are cancelled with it, as a
rollout's are (`agentgraphs.sync_calls`): the request is aborted (SGLang: by rid) and the node's thread is free.

    async with DebugSession.open("memagent", "debug.sqlite", row=row, engine="hf:tiny") as session:
        await session.step()                      # prepare
        await session.edit("memory", "No memory yet.")
        await session.run_to_end()
        rollout = await session.rollout()         # status, sequences, reward: as `run_rollout` computes them
"""

from __future__ import annotations

import asyncio
import dataclasses
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping

from ..context import AgentContext
from ..engines import Engine, SamplingParams
from ..errors import CheckpointError, ConfigError, StepCancelled
from ..records import Rollout
from ..rollout import rollout_from_state
from ..spec import AgentSpec, MethodOptions, RolloutInput, load_spec
from ..sync_calls import cancelling_sync_calls
from ..trace import Turn
from .replay import (
    CheckpointInfo,
    ThreadRecord,
    context_for,
    edit_checkpoint,
    graph_history,
    load_thread,
    new_thread_id,
    open_checkpoints,
    resolve_checkpoint,
    sampling_of,
    save_thread,
    thread_config,
    thread_options,
    thread_record,
)
from .savers import CompactAsyncSqliteSaver

__all__ = ["DebugSession", "OnUpdate", "StepResult", "resume_sampling"]

OnUpdate = Callable[[str, dict[str, Any]], None]  # (node, its state update), as each node finishes
_STEP_ENDED = "the debugger step ended (interrupted, timed out, or its session closed)"


@dataclass
class StepResult:
    """What one step (or a run to the end) did: each node's update in order, and where the run now stands."""

    updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    next: tuple[str, ...] = ()
    checkpoint_id: str | None = None

    @property
    def done(self) -> bool:
        """The run reached its end (nothing is scheduled at this checkpoint)."""
        return not self.next


class DebugSession:
    """One thread of a checkpoints database, stepped node by node (see the module doc).

    >>> import asyncio, os, tempfile
    >>> from agentgraphs.testing.agents import TWO_TURN
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> async def demo():
    ...     db = os.path.join(tempfile.mkdtemp(), "debug.sqlite")
    ...     row = {"prompt": "2+2?", "label": "4", "metadata": {}, "index": 0}
    ...     async with DebugSession.open(TWO_TURN, db, row=row, engine=f"hf:{ensure_tiny_model()}",
    ...                                  sampling=SamplingParams(max_new_tokens=4, temperature=0.0)) as s:
    ...         first = await s.step()
    ...         rest = await s.run_to_end()
    ...         return [n for n, _ in first.updates], [n for n, _ in rest.updates], rest.done
    >>> asyncio.run(demo())
    (['solve'], ['check'], True)
    """

    def __init__(self, spec: AgentSpec, saver: CompactAsyncSqliteSaver, ctx: AgentContext, options: MethodOptions,
                 record: ThreadRecord) -> None:
        self.spec = spec
        self.saver = saver
        self.context = ctx
        self.options = options
        self.record = record
        self.thread_id = record["thread_id"]
        self.graph = spec.graph(options, checkpointer=saver)
        self.config: dict[str, Any] = thread_config(self.thread_id)  # the thread's latest, or a goto target
        self.notes: list[str] = []  # what opening the session changed in the stored thread (`open`)
        self._running: set[asyncio.Task[Any]] = set()  # the tasks running a step of this session
        self._closed_under: set[asyncio.Task[Any]] = set()  # of those, the ones the session's end cancelled

    @classmethod
    @asynccontextmanager
    async def open(cls, agent: str | AgentSpec, db: str | Path, *, thread_id: str | None = None,
                   row: RolloutInput | None = None, engine: str | Engine | None = None,
                   context: AgentContext | None = None, options: Mapping[str, Any] | None = None,
                   sampling: SamplingParams | Mapping[str, Any] | None = None, tokenizer: Any = None,
                   engines: Mapping[str, str | Engine] | None = None) -> AsyncIterator["DebugSession"]:
        """A session on a new thread (give `row`) or on a stored one (`thread_id` of a thread in `db`).

        `sampling`: SamplingParams, or only the fields given (`{"temperature": 0.0}`; the rest default on a
        new thread). A stored thread keeps its agent's options, row and sampling (`resume_sampling`: a new
        max_new_tokens is stored with it and noted in `notes`; another temperature or sampling field is
        refused); the engine (not checkpointed) is `engine`/`context` when given, else the one the thread was
        started with. A new thread stops before its first node.
        """
        spec = agent if isinstance(agent, AgentSpec) else load_spec(agent)
        agent_name = agent if isinstance(agent, str) else spec.name
        given = _sampling_fields(sampling if sampling is not None or context is None else context.sampling)
        async with open_checkpoints(db) as saver:
            record = await load_thread(saver, thread_id) if thread_id else None
            fresh = record is None
            notes: list[str] = []
            if record is not None:
                if not _same_agent(record["agent"], spec):
                    raise ConfigError(f"thread {thread_id!r} was run by agent {record['agent']!r}, not {agent_name!r}")
                _check_row(str(thread_id), record, row)
                opts = thread_options(spec, record, options)
                if opts != thread_options(spec, record, None):
                    # the thread's later turns would run under other options than its stored record says, and a
                    # replay of it would use the stored ones: one trajectory, two configurations
                    raise ConfigError(f"thread {thread_id!r} was run with options {record['options']}; -o {options} "
                                      "changes them: a resumed thread keeps its options. Start a new thread (no "
                                      "--thread) to debug with other options")
                stored = sampling_of(record)
                params, notes = resume_sampling(str(thread_id), stored, given)
                if params != stored:
                    record = {**record, "sampling": dataclasses.asdict(params)}  # type: ignore[typeddict-item]
                    await save_thread(saver, record)
            else:
                if row is None:
                    raise ConfigError(f"thread {thread_id!r} is not in {db}: give an input row to start it"
                                      if thread_id else "give an input row (--input) to start a debug session")
                opts = spec.resolve_options(options)
                params = SamplingParams(**given)
                policy = engine if engine is not None else (context.policy if context is not None else "")
                helpers = engines if engines is not None else (context.engines if context is not None else {})
                record = thread_record(thread_id or new_thread_id("debug"), agent_name, opts, row, params, policy,
                                       engines=helpers, evaluation=bool(context is not None and context.evaluation))
            if context is not None and context.sampling != params:
                raise ConfigError(f"context.sampling {context.sampling} is not the session's sampling {params}: give "
                                  "one of them (sampling= or context=)")
            ctx = context if context is not None else context_for(engine, record, tokenizer=tokenizer,
                                                                  sampling=params, engines=engines)
            spec.check_engines(opts, ctx.engines)  # `rollout()` scores the run: its judge must be at hand
            session = cls(spec, saver, ctx, opts, record)
            session.notes = notes
            try:
                if fresh:
                    await save_thread(saver, record)
                    await session.begin()
                yield session
            finally:
                await session._cancel_running_steps()  # the database still open: a running step unwinds first

    async def begin(self) -> StepResult:
        """Store the graph input (from the spec's `make_input`) and stop before the first node."""
        graph_input = self.spec.make_input(self.record["row"], self.options)
        return await self._drive(graph_input, interrupt_before="*")

    async def step(self, on_update: OnUpdate | None = None) -> StepResult:
        """Run the next superstep and stop after it (a no-op at the end of the run). `on_update(node, update)` is
        called as each node finishes (the terminal UI prints them)."""
        if not (await self.state()).next:
            return await self._position(StepResult())
        return await self._drive(None, on_update, interrupt_after="*")

    async def run_to_end(self, on_update: OnUpdate | None = None) -> StepResult:
        """Run every remaining superstep (`on_update` as in `step`)."""
        if not (await self.state()).next:
            return await self._position(StepResult())
        return await self._drive(None, on_update)

    async def _cancel_running_steps(self) -> None:
        """The session ends: cancel its steps still running in other tasks and wait for them to unwind (their
        sync engine calls are aborted; each raises `StepCancelled`)."""
        running = self._running - {asyncio.current_task()}
        for task in running:
            self._closed_under.add(task)
            task.cancel()
        if running:
            await asyncio.wait(running)

    async def _drive(self, graph_input: Any, on_update: OnUpdate | None = None, **interrupts: Any) -> StepResult:
        result = StepResult()
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        try:
            # a cancelled step (however cancelled) cancels its `def` nodes' engine calls (agentgraphs.sync_calls)
            with cancelling_sync_calls(_STEP_ENDED):
                async for update in self.graph.astream(graph_input, self.config, context=self.context,
                                                       stream_mode="updates", **interrupts):
                    for node, value in update.items():
                        if node != "__interrupt__":
                            result.updates.append((node, dict(value or {})))
                            if on_update is not None:
                                on_update(node, dict(value or {}))
        except asyncio.CancelledError:
            if task is None or task not in self._closed_under:
                raise
            task.uncancel()  # the session closed under this step: say so, typed, instead of a bare cancel
            raise StepCancelled(f"a step of thread {self.thread_id!r} was still running when its session closed: "
                                "it was cancelled (its engine calls aborted) and wrote no checkpoint. Open the "
                                f"session again (thread_id={self.thread_id!r}, CLI --thread) and step again"
                                ) from None
        finally:
            if task is not None:
                self._running.discard(task)
                self._closed_under.discard(task)
        self.config = thread_config(self.thread_id)  # a step from an earlier checkpoint made a new latest one
        return await self._position(result)

    async def _position(self, result: StepResult) -> StepResult:
        snap = await self.state()
        result.next = tuple(snap.next)
        result.checkpoint_id = snap.config.get("configurable", {}).get("checkpoint_id")
        return result

    async def state(self) -> Any:
        """LangGraph's StateSnapshot at the session's position (`.values`, `.next`, `.config`)."""
        return await self.graph.aget_state(self.config)

    async def turns(self) -> list[Turn]:
        """The Turns of the state at the session's position (`AgentSpec.collect_turns`)."""
        return self.spec.collect_turns((await self.state()).values or {})

    async def edit(self, values: Mapping[str, Any], *, as_node: str | None = None) -> str:
        """Change state keys at the current position (through their reducers: `turns` appends); a new
        checkpoint, from which the next step continues. Returns its id.

        The edit counts as `as_node` (default: the node that wrote the current checkpoint, so what was to run
        next still runs; `replay.checkpoint_writer`)."""
        snap = await self.state()
        here = snap.config.get("configurable", {}).get("checkpoint_id")
        if not here:
            raise CheckpointError(f"thread {self.thread_id!r} has no checkpoint to edit")
        cid = await edit_checkpoint(self.graph, self.thread_id, str(here), values, as_node=as_node,
                                    context=self.context)
        self.config = thread_config(self.thread_id)
        return cid

    async def history(self) -> list[CheckpointInfo]:
        """The thread's checkpoints, oldest first (`replay.history`)."""
        return await graph_history(self.graph, self.thread_id, self.spec)

    async def goto(self, checkpoint: str | int) -> str:
        """Move to a checkpoint (an index into `history` or an id): the next step forks a new branch there."""
        cid = await resolve_checkpoint(self.graph, self.thread_id, checkpoint)
        self.config = thread_config(self.thread_id, cid)
        return cid

    async def rollout(self) -> Rollout:
        """The finished run as a Rollout (status, training sequences, reward), scored as `run_rollout` does."""
        snap = await self.state()
        if snap.next:
            raise CheckpointError(f"the run has not finished (next: {list(snap.next)}): continue it first")
        return await rollout_from_state(self.spec, self.record["row"], self.context, snap.values,
                                        options=self.options)


def _check_row(thread_id: str, record: ThreadRecord, row: RolloutInput | None) -> None:
    """ConfigError when a resumed thread is given an input row other than its own (its index aside)."""
    if row is None:
        return
    keys = ("prompt", "label", "metadata")
    if [row.get(k) for k in keys] != [record["row"].get(k) for k in keys]:
        raise ConfigError(f"thread {thread_id!r} was started from another input row: resume it without --input "
                          "(its row is stored), or start a new thread (another --thread)")


def _same_agent(stored: str, spec: AgentSpec) -> bool:
    if stored == spec.name:
        return True
    try:
        return load_spec(stored).name == spec.name
    except ConfigError:
        return False


# fields that change the distribution a token is drawn from: a trajectory must not mix two of them
_FIXED_ON_RESUME = ("temperature", "top_p", "top_k", "min_p")


def resume_sampling(thread_id: str, stored: SamplingParams,
                    given: Mapping[str, Any]) -> tuple[SamplingParams, list[str]]:
    """The sampling a resumed thread continues with: the stored one, with `given` fields applied.

    A new max_new_tokens (or stop, seed ...) becomes the thread's setting, with a note saying so. A field that
    changes the distribution (temperature, top_p, top_k, min_p) is refused: the thread's turns would mix two
    distributions in one training sequence, which the trace audit rejects.

    >>> resume_sampling("t", SamplingParams(temperature=0.0), {"max_new_tokens": 8})[1]
    ['thread t: max_new_tokens 1024 -> 8 (stored with the thread)']
    >>> resume_sampling("t", SamplingParams(temperature=0.0), {"temperature": 0.5})
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: thread 't' was sampled with temperature=0.0, not 0.5: ...
    """
    params = dataclasses.replace(stored, **given)
    notes: list[str] = []
    for name in given:
        old, new = getattr(stored, name), getattr(params, name)
        if old == new:
            continue
        if name in _FIXED_ON_RESUME:
            raise ConfigError(f"thread {thread_id!r} was sampled with {name}={old}, not {new}: a resumed thread keeps "
                              f"its sampling (one trajectory must not mix two); drop --{name.replace('_', '-')}, or "
                              "start a new thread with it (--input ROW, no --thread)")
        notes.append(f"thread {thread_id}: {name} {old} -> {new} (stored with the thread)")
    return params, notes


def _sampling_fields(sampling: SamplingParams | Mapping[str, Any] | None) -> dict[str, Any]:
    if sampling is None:
        return {}
    if isinstance(sampling, SamplingParams):
        return dataclasses.asdict(sampling)
    try:
        SamplingParams(**sampling)  # a wrong value raises ConfigError here, naming the field
    except TypeError as exc:
        raise ConfigError(f"sampling: {exc}; the fields are {[f.name for f in dataclasses.fields(SamplingParams)]}"
                          ) from None
    return dict(sampling)

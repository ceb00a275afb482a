"""Step through an agent's run one superstep at a time, under the compact SQLite checkpointer.

A `DebugSession` drives the spec's graph with LangGraph's interrupts: `begin()` stores the input and
stops before the first node; each `step()` runs the next superstep (one node, or the nodes that run in
parallel) and stops after it; `run_to_end()` continues without stopping. Every stop is a checkpoint of
one thread in the database, so the session can `edit` the state (LangGraph's update_state), go back to
any checkpoint (`goto`: the next step starts a new branch there), and be resumed later, in another
process, with the same thread id. The terminal face is `agentgraphs debug` (agentgraphs.checkpoints.tui).

    async with DebugSession.open("memagent", "debug.sqlite", row=row, engine="hf:tiny") as session:
        await session.step()                      # prepare
        await session.edit("memory", "No memory yet.")
        await session.run_to_end()
        rollout = await session.rollout()         # status, sequences, reward: as `run_rollout` computes them
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Mapping

from ..context import AgentContext
from ..engines import Engine, SamplingParams
from ..errors import CheckpointError, ConfigError
from ..records import Rollout
from ..rollout import rollout_from_state
from ..spec import AgentSpec, MethodOptions, RolloutInput, load_spec
from ..trace import Turn
from .replay import (
    CheckpointInfo,
    ThreadRecord,
    check_state_keys,
    context_for,
    graph_history,
    load_thread,
    new_thread_id,
    open_checkpoints,
    resolve_checkpoint,
    save_thread,
    thread_config,
    thread_options,
    thread_record,
)
from .savers import CompactAsyncSqliteSaver

__all__ = ["DebugSession", "StepResult"]


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

    @classmethod
    @asynccontextmanager
    async def open(cls, agent: str | AgentSpec, db: str | Path, *, thread_id: str | None = None,
                   row: RolloutInput | None = None, engine: str | Engine | None = None,
                   context: AgentContext | None = None, options: Mapping[str, Any] | None = None,
                   sampling: SamplingParams | None = None, tokenizer: Any = None,
                   engines: Mapping[str, str | Engine] | None = None) -> AsyncIterator["DebugSession"]:
        """A session on a new thread (give `row`) or on a stored one (`thread_id` of a thread in `db`).

        A stored thread keeps its agent's options, row and sampling; the engine (not checkpointed) is
        `engine`/`context` when given, else the one the thread was started with. A new thread stops before
        its first node.
        """
        spec = agent if isinstance(agent, AgentSpec) else load_spec(agent)
        agent_name = agent if isinstance(agent, str) else spec.name
        async with open_checkpoints(db) as saver:
            record = await load_thread(saver, thread_id) if thread_id else None
            fresh = record is None
            if record is not None:
                if not _same_agent(record["agent"], spec):
                    raise ConfigError(f"thread {thread_id!r} was run by agent {record['agent']!r}, not {agent_name!r}")
                opts = thread_options(spec, record, options)
                if sampling is not None:
                    record = {**record, "sampling": _sampling_dict(sampling)}  # type: ignore[typeddict-item]
            else:
                if row is None:
                    raise ConfigError(f"thread {thread_id!r} is not in {db}: give an input row to start it"
                                      if thread_id else "give an input row (--input) to start a debug session")
                opts = spec.resolve_options(options)
                policy = engine if engine is not None else (context.policy if context is not None else "")
                helpers = engines if engines is not None else (context.engines if context is not None else {})
                record = thread_record(thread_id or new_thread_id("debug"), agent_name, opts, row,
                                       sampling or SamplingParams(), policy, engines=helpers,
                                       evaluation=bool(context is not None and context.evaluation))
            ctx = context if context is not None else context_for(engine, record, tokenizer=tokenizer,
                                                                  sampling=sampling, engines=engines)
            session = cls(spec, saver, ctx, opts, record)
            if fresh:
                await save_thread(saver, record)
                await session.begin()
            yield session

    async def begin(self) -> StepResult:
        """Store the graph input (from the spec's `make_input`) and stop before the first node."""
        graph_input = self.spec.make_input(self.record["row"], self.options)
        return await self._drive(graph_input, interrupt_before="*")

    async def step(self) -> StepResult:
        """Run the next superstep and stop after it (a no-op at the end of the run)."""
        if not (await self.state()).next:
            return await self._position(StepResult())
        return await self._drive(None, interrupt_after="*")

    async def run_to_end(self) -> StepResult:
        """Run every remaining superstep."""
        if not (await self.state()).next:
            return await self._position(StepResult())
        return await self._drive(None)

    async def iter_run(self, *, one_step: bool) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Each node's update as it arrives, for one superstep or to the end (the terminal UI prints them)."""
        if not (await self.state()).next:
            return
        interrupts = {"interrupt_after": "*"} if one_step else {}
        async for update in self.graph.astream(None, self.config, context=self.context, stream_mode="updates",
                                               **interrupts):
            for node, value in update.items():
                if node != "__interrupt__":
                    yield node, dict(value or {})
        self.config = thread_config(self.thread_id)

    async def _drive(self, graph_input: Any, **interrupts: Any) -> StepResult:
        result = StepResult()
        async for update in self.graph.astream(graph_input, self.config, context=self.context,
                                               stream_mode="updates", **interrupts):
            for node, value in update.items():
                if node != "__interrupt__":
                    result.updates.append((node, dict(value or {})))
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
        checkpoint, from which the next step continues. Returns its id."""
        check_state_keys(self.graph, values)
        config = await self.graph.aupdate_state(self.config, dict(values), as_node=as_node)
        self.config = thread_config(self.thread_id)
        return str(config["configurable"]["checkpoint_id"])

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


def _same_agent(stored: str, spec: AgentSpec) -> bool:
    if stored == spec.name:
        return True
    try:
        return load_spec(stored).name == spec.name
    except ConfigError:
        return False


def _sampling_dict(sampling: SamplingParams) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(sampling)

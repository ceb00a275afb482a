"""Threads of a checkpoints database: list them, list a thread's checkpoints, replay or fork from any of them.

A checkpoints database is a compact SQLite file (`agentgraphs.checkpoints.savers`) written by `agentgraphs run
--checkpoints FILE`, `agentgraphs debug`, or your own graph compiled with `spec.graph(options,
checkpointer=saver)`. Next to LangGraph's tables it keeps one row per thread in `agentgraphs_threads`: the
agent, its resolved options, the input row (for the reward's label and metadata), the sampling settings and
the engine. Replaying needs nothing else but an engine, since the context is not checkpointed:

    from agentgraphs.checkpoints.replay import fork, history, replay, threads
    threads("runs.sqlite")                                    # [{'thread_id': 'run-...-0', ...}, ...]
    history("runs.sqlite", "run-...-0")                        # its checkpoints, oldest first
    result = replay("runs.sqlite", "run-...-0", 2, engine="hf:tiny")        # re-run from checkpoint 2
    result = fork("runs.sqlite", "run-...-0", 2, {"memory": "..."}, engine="sglang:http://...")

A replay or a fork continues in the SAME thread, as a new branch (LangGraph's model: the thread's latest
checkpoint is the new branch's head; the old branch stays in the history). Its turns are the whole branch:
the turns restored from the checkpoint, then the new ones, continuing each conversation append-only from
the turns in state, so `result.rollout` is a rollout like any other (sequences, reward, records).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
import uuid
import zlib
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, TypedDict

from langgraph.runtime import Runtime

from ..context import AgentContext
from ..engines import Engine, SamplingParams
from ..errors import CheckpointError, ConfigError
from ..records import Rollout
from ..rollout import rollout_input, run_rollout
from ..spec import AgentSpec, MethodOptions, RolloutInput, load_spec
from ..trace import record_problem
from .savers import CompactAsyncSqliteSaver, compact_async_sqlite_saver

# where LangGraph's own run puts the Runtime its nodes and edges read (Pregel.astream(context=...)); update_state
# takes no context, so an edit puts it there (LangGraph keeps the key private: a rename fails the edit tests)
_RUNTIME_KEY = "__pregel_runtime"

__all__ = [
    "AS_NODE_KEY",
    "THREADS_TABLE",
    "CheckpointInfo",
    "Replay",
    "RunCheckpoints",
    "ThreadInfo",
    "ThreadRecord",
    "afork",
    "ahistory",
    "areplay",
    "branch_path",
    "check_checkpoints_path",
    "check_state_keys",
    "checkpoint_writer",
    "context_for",
    "edit_checkpoint",
    "fork",
    "graph_history",
    "history",
    "load_thread",
    "new_thread_id",
    "open_checkpoints",
    "replay",
    "resolve_checkpoint",
    "sampling_of",
    "save_thread",
    "thread_config",
    "thread_options",
    "thread_record",
    "threads",
]

THREADS_TABLE = "agentgraphs_threads"
AS_NODE_KEY = "agentgraphs_as_node"  # an edit's checkpoint metadata: the node it counted as
_CREATE = (f"CREATE TABLE IF NOT EXISTS {THREADS_TABLE} (thread_id TEXT PRIMARY KEY, agent TEXT NOT NULL, "
           "record BLOB NOT NULL, created REAL NOT NULL)")


class ThreadRecord(TypedDict):
    """What a thread was started from (everything but the engines): enough to replay it.

    `agent` is what `load_spec` takes (a registered name or 'pkg.module:attr'); `row` is the input row
    (its prompt, label and metadata); `sampling` the SamplingParams fields; `engine` the engine it ran on
    and `engines` its helper engines by name (engine strings, as `make_engine` takes them); `evaluation`
    the context's evaluation flag.
    """

    thread_id: str
    agent: str
    options: dict[str, Any]
    row: RolloutInput
    sampling: dict[str, Any]
    engine: str
    engines: dict[str, str]
    evaluation: bool


class ThreadInfo(TypedDict):
    """One thread of a database: its record's agent (None when no record) and how many checkpoints it has."""

    thread_id: str
    agent: str | None
    checkpoints: int


class CheckpointInfo(TypedDict):
    """One checkpoint of a thread, as `history` lists it (index 0 = the oldest).

    `next`: the nodes that run from it (empty: the run ended there); `wrote`: the nodes whose update made
    it (`["input"]` for the input, `["update"]` for an edit, `["branch"]` for the copy of an earlier
    checkpoint a replay or a debugger step starts a new branch from); `turns`: the turns in its state;
    `head`: it is on the branch that ends at the thread's latest checkpoint.
    """

    index: int
    checkpoint_id: str
    parent_id: str | None
    step: int
    source: str
    next: list[str]
    wrote: list[str]
    turns: int
    head: bool


@dataclasses.dataclass
class Replay:
    """A replay or fork: the rollout of the new branch, where it started, and its last checkpoint.

    `row` is the thread's input row (the reward's label), `context` what the branch ran with (its engine).
    """

    rollout: Rollout
    spec: AgentSpec
    thread_id: str
    from_checkpoint: str
    head_checkpoint: str | None
    forked_checkpoint: str | None = None  # fork: the checkpoint holding the edited state
    row: RolloutInput | None = None
    context: AgentContext | None = None


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """LangGraph's config for a thread (its latest checkpoint) or one of its checkpoints.

    >>> thread_config("t1", "abc")
    {'configurable': {'thread_id': 't1', 'checkpoint_ns': '', 'checkpoint_id': 'abc'}}
    """
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id is not None:
        conf.update(checkpoint_ns="", checkpoint_id=checkpoint_id)
    return {"configurable": conf}


@asynccontextmanager
async def open_checkpoints(path: str | Path) -> AsyncIterator[CompactAsyncSqliteSaver]:
    """The compact async saver on `path`, with LangGraph's tables and the threads table created.

    >>> import asyncio, tempfile, os
    >>> async def demo():
    ...     async with open_checkpoints(os.path.join(tempfile.mkdtemp(), "c.sqlite")) as saver:
    ...         return await load_thread(saver, "nope")
    >>> asyncio.run(demo()) is None
    True

    A path that is a directory, or a non-empty file that is not a checkpoints database (another SQLite
    database, a JSONL file), is a CheckpointError, and the file is left as it was.
    """
    check_checkpoints_path(path)
    async with compact_async_sqlite_saver(str(path)) as saver:
        await saver.setup()
        async with saver.lock:
            await saver.conn.execute(_CREATE)
            await saver.conn.commit()
        yield saver


def check_checkpoints_path(path: str | Path) -> None:
    """CheckpointError when `path` cannot be a checkpoints database: a directory, or a non-empty file that is not
    one (another SQLite database, a JSONL file). A missing or empty file passes (it is created). `open_checkpoints`
    holds to it; `agentgraphs run --checkpoints` calls it before it writes anything."""
    where = Path(path)
    if where.is_dir():
        raise CheckpointError(f"{where}: is a directory; a checkpoints database is one SQLite file: give its path, "
                              f"e.g. {where / 'checkpoints.sqlite'}")
    if where.is_file() and where.stat().st_size > 0:
        _require_db(where)  # never add checkpoint tables to someone else's file


async def save_thread(saver: CompactAsyncSqliteSaver, record: ThreadRecord) -> None:
    """Store (or replace) a thread's record; the row is zlib-compressed JSON (a long document costs ~1/3)."""
    blob = zlib.compress(json.dumps(record, ensure_ascii=False).encode("utf-8"), 6)
    async with saver.lock:
        await saver.conn.execute(
            f"INSERT OR REPLACE INTO {THREADS_TABLE} (thread_id, agent, record, created) VALUES (?, ?, ?, ?)",
            (record["thread_id"], record["agent"], blob, time.time()))
        await saver.conn.commit()


async def load_thread(saver: CompactAsyncSqliteSaver, thread_id: str) -> ThreadRecord | None:
    """A thread's record, or None for a thread that was not started through agentgraphs."""
    async with saver.lock:
        async with saver.conn.execute(f"SELECT record FROM {THREADS_TABLE} WHERE thread_id = ?",
                                      (thread_id,)) as cur:
            row = await cur.fetchone()
    return None if row is None else json.loads(zlib.decompress(row[0]).decode("utf-8"))


def thread_record(thread_id: str, agent: str, options: MethodOptions, row: RolloutInput,
                  sampling: SamplingParams, engine: str | Engine, *,
                  engines: Mapping[str, str | Engine] | None = None, evaluation: bool = False) -> ThreadRecord:
    """A ThreadRecord from the values a run holds (engine objects are recorded by name)."""
    return ThreadRecord(thread_id=thread_id, agent=agent, options=options.model_dump(mode="json"),
                        row=dict(row), sampling=dataclasses.asdict(sampling), engine=_engine_name(engine),  # type: ignore[typeddict-item]
                        engines={k: _engine_name(v) for k, v in (engines or {}).items()}, evaluation=evaluation)


def _engine_name(engine: str | Engine) -> str:
    return engine if isinstance(engine, str) else engine.name


@dataclasses.dataclass
class RunCheckpoints:
    """Checkpoints for a batch run (`agentgraphs run --checkpoints FILE`): one thread per sample.

    Thread ids are `RUN_ID-N` (N: the sample's position in the run, bad rows included), so several runs can
    share one database; each thread's record is written before its rollout starts.
    """

    saver: CompactAsyncSqliteSaver
    agent: str
    sampling: SamplingParams
    engine: str | Engine
    run_id: str = dataclasses.field(default_factory=lambda: new_thread_id("run"))
    engines: Mapping[str, str | Engine] = dataclasses.field(default_factory=dict)
    evaluation: bool = False

    def thread_id(self, position: int) -> str:
        return f"{self.run_id}-{position}"

    async def start(self, position: int, row: RolloutInput, options: MethodOptions) -> dict[str, Any]:
        """Record the thread of the sample at `position`; returns the LangGraph config to run it under."""
        tid = self.thread_id(position)
        await save_thread(self.saver, thread_record(tid, self.agent, options, row, self.sampling, self.engine,
                                                    engines=self.engines, evaluation=self.evaluation))
        return thread_config(tid)


def new_thread_id(prefix: str) -> str:
    """A fresh, sortable id: PREFIX-YYYYmmddTHHMMSS-xxxxxx.

    >>> new_thread_id("debug").startswith("debug-")
    True
    """
    return f"{prefix}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def sampling_of(record: Mapping[str, Any]) -> SamplingParams:
    """The SamplingParams a record stores (JSON lists back to tuples)."""
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(record.get("sampling") or {}).items()}
    return SamplingParams(**fields)


def threads(path: str | Path) -> list[ThreadInfo]:
    """Every thread of a checkpoints database, in the order they were first written.

    >>> import tempfile, os
    >>> threads(os.path.join(tempfile.mkdtemp(), "none.sqlite"))
    Traceback (most recent call last):
    ...
    agentgraphs.errors.CheckpointError: no checkpoints database at ...none.sqlite: pass the file given to --checkpoints / --db
    """
    conn = _open_readonly(path)
    try:
        has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (THREADS_TABLE,)).fetchone()
        agents = dict(conn.execute(f"SELECT thread_id, agent FROM {THREADS_TABLE}").fetchall()) if has_table else {}
        rows = conn.execute("SELECT thread_id, COUNT(*), MIN(checkpoint_id) FROM checkpoints WHERE checkpoint_ns = '' "
                            "GROUP BY thread_id ORDER BY MIN(checkpoint_id)").fetchall()
    except sqlite3.DatabaseError as exc:
        raise CheckpointError(f"{path}: not a checkpoints database ({exc})") from None
    finally:
        conn.close()
    return [ThreadInfo(thread_id=t, agent=agents.get(t), checkpoints=n) for t, n, _ in rows]


def _open_readonly(path: str | Path) -> sqlite3.Connection:
    if not Path(path).is_file():
        raise CheckpointError(f"no checkpoints database at {path}: pass the file given to --checkpoints / --db")
    return sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)


async def _spec_and_record(saver: CompactAsyncSqliteSaver, path: str | Path, thread_id: str,
                           agent: str | AgentSpec | None) -> tuple[AgentSpec, ThreadRecord | None]:
    record = await load_thread(saver, thread_id)
    if record is None and not await _has_checkpoints(saver, thread_id):
        # a mistyped id: say so, rather than ask for an agent that would only lead to "no checkpoints"
        raise CheckpointError(f"no thread {thread_id!r} in {path}: `agentgraphs history {path}` lists its threads "
                              "(a run's ids are in samples.jsonl: metadata.checkpoint_thread)")
    if agent is None:
        if record is None:
            raise CheckpointError(f"thread {thread_id!r} has no agentgraphs record: name its agent "
                                  "(agent=... / --agent)")
        try:
            return load_spec(record["agent"]), record
        except ConfigError as exc:
            raise ConfigError(f"thread {thread_id!r} was run by agent {record['agent']!r}: {exc}; name it "
                              "(agent=... / --agent package.module:attr)") from None
    spec = agent if isinstance(agent, AgentSpec) else load_spec(agent)
    return spec, record


async def _has_checkpoints(saver: CompactAsyncSqliteSaver, thread_id: str) -> bool:
    async with saver.lock:
        async with saver.conn.execute("SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1", (thread_id,)) as cur:
            return await cur.fetchone() is not None


async def ahistory(path: str | Path, thread_id: str, *, agent: str | AgentSpec | None = None,
                   options: Mapping[str, Any] | None = None) -> list[CheckpointInfo]:
    """The checkpoints of a thread, oldest first (every branch; `head` marks the latest one's ancestry)."""
    _require_db(path)
    async with open_checkpoints(path) as saver:
        spec, record = await _spec_and_record(saver, path, thread_id, agent)
        graph = spec.graph(thread_options(spec, record, options), checkpointer=saver)
        return await graph_history(graph, thread_id, spec)


async def graph_history(graph: Any, thread_id: str, spec: AgentSpec | None = None) -> list[CheckpointInfo]:
    """`history` of a graph compiled with the thread's checkpointer (`spec` finds the turns in a state)."""
    snapshots = [s async for s in graph.aget_state_history(thread_config(thread_id))]
    if not snapshots:
        raise CheckpointError(f"no checkpoints for thread {thread_id!r}")
    snapshots.reverse()
    parents = {_cid(s.config): _cid(s.parent_config) if s.parent_config else None for s in snapshots}
    on_head: set[str] = set()
    cur: str | None = _cid(snapshots[-1].config)  # checkpoint ids grow with time: the last is the latest
    while cur is not None:
        on_head.add(cur)
        cur = parents.get(cur)
    by_id = {_cid(s.config): s for s in snapshots}
    out: list[CheckpointInfo] = []
    for i, snap in enumerate(snapshots):
        meta = snap.metadata or {}
        source = str(meta.get("source", ""))
        cid = _cid(snap.config)
        parent = by_id.get(parents[cid] or "")
        # the nodes that made a loop checkpoint are the tasks its parent scheduled; a "fork" is LangGraph's
        # copy of an earlier checkpoint that a run from it starts a new branch with
        wrote = ([t.name for t in parent.tasks] if source == "loop" and parent is not None
                 else ["branch"] if source == "fork" else [source])
        out.append(CheckpointInfo(index=i, checkpoint_id=cid, parent_id=parents[cid], step=int(meta.get("step", -1)),
                                  source=source, next=list(snap.next), wrote=wrote,
                                  turns=len(_turns_in(snap.values or {}, spec)), head=cid in on_head))
    return out


def _turns_in(values: Mapping[str, Any], spec: AgentSpec | None) -> list[Any]:
    return spec.collect_turns(values) if spec is not None else list(values.get("turns") or [])


def _cid(config: Mapping[str, Any]) -> str:
    return str(config["configurable"]["checkpoint_id"])


def history(path: str | Path, thread_id: str, *, agent: str | AgentSpec | None = None,
            options: Mapping[str, Any] | None = None) -> list[CheckpointInfo]:
    """`ahistory` for code without an event loop running (scripts, the CLI)."""
    return asyncio.run(ahistory(path, thread_id, agent=agent, options=options))


def thread_options(spec: AgentSpec, record: ThreadRecord | None, options: Mapping[str, Any] | None) -> MethodOptions:
    """The thread's stored options, overridden by `options`."""
    base = dict(record["options"]) if record else {}
    try:
        return spec.resolve_options({**base, **(options or {})})
    except ConfigError as exc:
        if not base:
            raise
        raise ConfigError(f"{exc} (the thread was run by agent {record['agent']!r} with options {base}: "  # type: ignore[index]
                          "replay it with that agent)") from None


async def resolve_checkpoint(graph: Any, thread_id: str, checkpoint: str | int | None) -> str:
    """A checkpoint id from an id, an index into `history` (negative counts from the end), or None (latest)."""
    if checkpoint is None:
        snap = await graph.aget_state(thread_config(thread_id))
        if not snap.config.get("configurable", {}).get("checkpoint_id"):
            raise CheckpointError(f"no checkpoints for thread {thread_id!r}")
        return _cid(snap.config)
    if isinstance(checkpoint, str) and not checkpoint.lstrip("-").isdigit():
        tup = await graph.checkpointer.aget_tuple(thread_config(thread_id, checkpoint))
        if tup is None:
            raise CheckpointError(f"thread {thread_id!r} has no checkpoint {checkpoint!r}: list them with "
                                  f"`agentgraphs history DB --thread {thread_id}`")
        return checkpoint
    items = await graph_history(graph, thread_id)
    i = int(checkpoint)
    if not -len(items) <= i < len(items):
        raise CheckpointError(f"thread {thread_id!r} has checkpoints 0..{len(items) - 1}, not {i}")
    return items[i]["checkpoint_id"]


def context_for(engine: str | Engine | None, record: ThreadRecord | None, *, tokenizer: Any = None,
                sampling: SamplingParams | None = None, engines: Mapping[str, str | Engine] | None = None,
                evaluation: bool | None = None) -> AgentContext:
    """A context to replay with: `engine` (else the record's), and the record's sampling, helper engines and
    evaluation flag unless given."""
    from ..engines import make_engine

    stored: Mapping[str, Any] = record or {}
    name = engine if engine is not None else stored.get("engine")
    if not name:
        raise ConfigError("no engine to replay with: pass engine= (e.g. 'hf:tiny', 'sglang:http://HOST:PORT')")
    eng = _make(make_engine, "engine", name)
    if sampling is None:
        sampling = sampling_of(stored) if record else SamplingParams()
    tok = tokenizer if tokenizer is not None else getattr(eng, "tokenizer", None)
    if tok is None:
        raise ConfigError(f"engine {eng.name!r} has no tokenizer: pass tokenizer= (the model's HF directory; "
                          "--tokenizer DIR on the command line)")
    helpers = {k: _make(make_engine, f"engines[{k!r}]", v)
               for k, v in (engines if engines is not None else stored.get("engines") or {}).items()}
    flag = evaluation if evaluation is not None else bool(stored.get("evaluation", False))
    return AgentContext(policy=eng, tokenizer=tok, sampling=sampling, engines=helpers, evaluation=flag)


def _make(make_engine: Any, what: str, value: str | Engine) -> Engine:
    if not isinstance(value, str):
        return value
    try:
        return make_engine(value)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{what} {value!r}: {exc}; pass the engine again (engine= / engines=, CLI --engine / "
                          "--helper)") from exc


async def areplay(path: str | Path, thread_id: str, checkpoint: str | int | None = None, *,
                  agent: str | AgentSpec | None = None, engine: str | Engine | None = None,
                  context: AgentContext | None = None, options: Mapping[str, Any] | None = None,
                  tokenizer: Any = None, engines: Mapping[str, str | Engine] | None = None,
                  compute_reward: bool = True) -> Replay:
    """Re-run a thread from one of its checkpoints (an id, an index into `history`, or None: the latest).

    The run continues from the checkpoint's state with `context` (or a context on `engine`, with the
    thread's sampling settings): the same engine regenerates the same branch at temperature 0; another
    engine continues the same conversations with its own tokens.
    """
    async with _open_thread(path, thread_id, checkpoint, agent, options) as (saver, spec, record, opts, graph, start):
        return await _resume(spec, saver, graph, record, opts, thread_id, start, engine, context,
                             compute_reward, tokenizer=tokenizer, engines=engines)


@asynccontextmanager
async def _open_thread(path: str | Path, thread_id: str, checkpoint: str | int | None,
                       agent: str | AgentSpec | None, options: Mapping[str, Any] | None,
                       ) -> AsyncIterator[tuple[CompactAsyncSqliteSaver, AgentSpec, ThreadRecord | None, MethodOptions,
                                                Any, str]]:
    """The open database, the thread's spec, record and options, its graph, and the checkpoint id to start from."""
    _require_db(path)
    async with open_checkpoints(path) as saver:
        spec, record = await _spec_and_record(saver, path, thread_id, agent)
        opts = thread_options(spec, record, options)
        graph = spec.graph(opts, checkpointer=saver)
        start = await resolve_checkpoint(graph, thread_id, checkpoint)
        yield saver, spec, record, opts, graph, start


async def _resume(spec: AgentSpec, saver: CompactAsyncSqliteSaver, graph: Any, record: ThreadRecord | None,
                  opts: MethodOptions, thread_id: str, start: str, engine: str | Engine | None,
                  context: AgentContext | None, compute_reward: bool, forked: str | None = None,
                  tokenizer: Any = None, engines: Mapping[str, str | Engine] | None = None) -> Replay:
    ctx = context if context is not None else context_for(engine, record, tokenizer=tokenizer, engines=engines)
    row = record["row"] if record else rollout_input(None)
    path, path_rids = await branch_path(graph, spec, thread_id, forked or start)
    rollout = await run_rollout(spec, row, ctx, options=opts, compute_reward=compute_reward, checkpointer=saver,
                                config=thread_config(thread_id, forked or start), resume=True)
    rollout.path, rollout.path_rids = path + rollout.path, path_rids + rollout.path_rids  # the whole branch
    head = await graph.aget_state(thread_config(thread_id))
    head_id = head.config.get("configurable", {}).get("checkpoint_id")
    return Replay(rollout=rollout, spec=spec, thread_id=thread_id, from_checkpoint=start, head_checkpoint=head_id,
                  forked_checkpoint=forked, row=row, context=ctx)


async def branch_path(graph: Any, spec: AgentSpec, thread_id: str,
                      checkpoint_id: str) -> tuple[list[str], list[list[str] | None]]:
    """The nodes that ran on the branch up to a checkpoint, in order, and the request ids of the Turns each
    added (None where its update is not stored): what `run_rollout` records as `path` / `path_rids`."""
    snapshots = {_cid(s.config): s async for s in graph.aget_state_history(thread_config(thread_id))}
    chain: list[Any] = []
    cur: Any = snapshots.get(checkpoint_id)
    while cur is not None:
        chain.append(cur)
        cur = snapshots.get(_cid(cur.parent_config)) if cur.parent_config else None
    path: list[str] = []
    rids: list[list[str] | None] = []
    for parent, snap in zip(chain[:0:-1], chain[-2::-1]):  # (parent, child) pairs, oldest first
        if (snap.metadata or {}).get("source") != "loop":
            continue  # an input, an edit or a branch's copy: no node ran
        for task in parent.tasks:
            if not task.name.startswith("__"):
                path.append(task.name)
                rids.append(_task_rids(spec, task.result))
    return path, rids


def _task_rids(spec: AgentSpec, update: Any) -> list[str] | None:
    if not isinstance(update, Mapping):
        return None
    try:
        return [str(t.get("rid") or "") for t in spec.collect_turns(update)]
    except Exception:  # noqa: BLE001 (a turns_of that reads only whole states: the viewer shows node names)
        return None


async def afork(path: str | Path, thread_id: str, checkpoint: str | int | None, values: Mapping[str, Any], *,
                as_node: str | None = None, agent: str | AgentSpec | None = None,
                engine: str | Engine | None = None, context: AgentContext | None = None,
                options: Mapping[str, Any] | None = None, tokenizer: Any = None,
                engines: Mapping[str, str | Engine] | None = None, compute_reward: bool = True) -> Replay:
    """Edit the state at a checkpoint (LangGraph's update_state) and run the new branch to its end.

    `values` go through the state's reducers, as a node's update would: `{"memory": "..."}` replaces a
    plain key, while `{"turns": [turn]}` APPENDS to the trace. `as_node` is the node the edit counts as
    (default: the one that wrote the checkpoint, `checkpoint_writer`), which decides what runs next.
    """
    async with _open_thread(path, thread_id, checkpoint, agent, options) as (saver, spec, record, opts, graph, start):
        ctx = context if context is not None else context_for(engine, record, tokenizer=tokenizer, engines=engines)
        forked = await edit_checkpoint(graph, thread_id, start, values, as_node=as_node, context=ctx)
        return await _resume(spec, saver, graph, record, opts, thread_id, start, engine, ctx,
                             compute_reward, forked=forked, tokenizer=tokenizer, engines=engines)


async def edit_checkpoint(graph: Any, thread_id: str, checkpoint_id: str, values: Mapping[str, Any], *,
                          as_node: str | None = None, context: AgentContext | None = None) -> str:
    """LangGraph's update_state at a checkpoint, counted as `as_node` (default: the node that wrote the
    checkpoint); the node is kept in the new checkpoint's metadata. Returns the new checkpoint's id.

    update_state runs the node's conditional edge to tell what runs next; a route that reads the run's context
    (`runtime: Runtime[AgentContext]`: ToolOrchestra's turn cap, AgentFlow's step limit, both by evaluation)
    gets `context` as its runtime, as the run's own steps do (without it LangGraph raises "Missing required
    config key")."""
    check_state_keys(graph, values)
    _check_turns_edit(values)
    node = as_node if as_node is not None else await checkpoint_writer(graph, thread_id, checkpoint_id)
    if node not in graph.nodes:
        raise ConfigError(f"as_node {node!r} is no node of the graph; its nodes are {_node_names(graph)}")
    config = thread_config(thread_id, checkpoint_id)
    config["metadata"] = {AS_NODE_KEY: node}  # LangGraph's savers keep a config's metadata with the checkpoint
    if context is not None:
        config["configurable"][_RUNTIME_KEY] = Runtime(context=context)
    try:
        new_config = await graph.aupdate_state(config, dict(values), as_node=node)
    except (TypeError, ValueError) as exc:  # a state reducer refused a value of the user's edit (turns=5)
        raise ConfigError(f"the edit of {sorted(values)} does not fit the state: {exc}. Fix: give each key a value "
                          "of its type; a key with a reducer takes what a node's update would (turns: a list of "
                          "Turns, appended)") from exc
    return _cid(new_config)


def _check_turns_edit(values: Mapping[str, Any]) -> None:
    """ConfigError when an edit's `turns` list holds something other than Turn records (`turns=[5]`): the reducer
    would append it, and the rollout then fails reading it as an engine call."""
    turns = values.get("turns")
    if not isinstance(turns, list):
        return  # absent, or not a list: the reducer says so (edit_checkpoint names the key)
    for i, item in enumerate(turns):
        problem = record_problem(item)
        if problem is not None:
            raise ConfigError(f"the edit of 'turns': item {i} ({str(item)[:80]}) is {problem}. Fix: 'turns' holds the "
                              "Turns engine calls recorded (agentgraphs.trace.Turn) and an edit appends to it; to "
                              "change what the graph does next, edit another state key (`agentgraphs history DB "
                              "--thread T` shows them), or append a whole Turn")


async def checkpoint_writer(graph: Any, thread_id: str, checkpoint_id: str) -> str:
    """The node whose update made a checkpoint: the one task its parent ran, the node an edit counted as,
    or, for a branch's copy, the writer of the checkpoint it copies. ConfigError when it cannot be told
    (the input checkpoint, nodes that ran in parallel, an edit made outside agentgraphs)."""
    snap = await graph.aget_state(thread_config(thread_id, checkpoint_id))
    meta = snap.metadata or {}
    source = meta.get("source")
    why = f"it holds the {source or 'unknown'} of the run"
    if source == "update":
        if meta.get(AS_NODE_KEY):
            return str(meta[AS_NODE_KEY])
        why = "it is an edit that does not record the node it counted as"
    elif source in ("loop", "fork") and snap.parent_config:
        if source == "fork":
            return await checkpoint_writer(graph, thread_id, _cid(snap.parent_config))
        names = sorted({t.name for t in (await graph.aget_state(snap.parent_config)).tasks})
        if len(names) == 1:
            return names[0]
        why = f"nodes {names} wrote it together"
    raise ConfigError(f"cannot tell which node wrote checkpoint {checkpoint_id} of thread {thread_id!r} ({why}): "
                      f"name the node the edit counts as (as_node= / --as-node NODE / edit --as NODE; "
                      f"nodes: {_node_names(graph)}); it decides what runs next")


def _node_names(graph: Any) -> list[str]:
    return sorted(n for n in graph.nodes if not n.startswith("__"))


def check_state_keys(graph: Any, values: Mapping[str, Any]) -> None:
    """ConfigError naming the first key of `values` that is not a key of the graph's state."""
    known = sorted(k for k in graph.channels if not k.startswith("__") and not k.startswith("branch:"))
    unknown = [k for k in values if k not in known]
    if unknown:
        raise ConfigError(f"state has no key {unknown[0]!r}; its keys are {known}")


def replay(path: str | Path, thread_id: str, checkpoint: str | int | None = None, **kwargs: Any) -> Replay:
    """`areplay` for code without an event loop running (scripts, the CLI).

    >>> replay("/nonexistent.sqlite", "t")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agentgraphs.errors.CheckpointError: no checkpoints database at /nonexistent.sqlite: ...
    """
    return asyncio.run(areplay(path, thread_id, checkpoint, **kwargs))


def fork(path: str | Path, thread_id: str, checkpoint: str | int | None, values: Mapping[str, Any],
         **kwargs: Any) -> Replay:
    """`afork` for code without an event loop running (scripts, the CLI)."""
    return asyncio.run(afork(path, thread_id, checkpoint, values, **kwargs))


def _require_db(path: str | Path) -> None:
    """`path` is a checkpoints database: a file holding LangGraph's checkpoints table. Checked read-only, so an
    empty or foreign SQLite file is refused, never given checkpoint tables by the saver that opens it next."""
    conn = _open_readonly(path)
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise CheckpointError(f"{path}: not a checkpoints database ({exc})") from None
    finally:
        conn.close()
    if found is None:
        raise CheckpointError(f"{path}: not a checkpoints database (no checkpoints table): pass the file given to "
                              "--checkpoints / --db")

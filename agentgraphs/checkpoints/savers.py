"""Compact SQLite checkpoints for agent graphs: every Turn stored once, conversation prompts as deltas.

LangGraph's SQLite savers store all channel values inline in every checkpoint, so an append reducer's
list is re-stored whole at every step: turn 1 of a 64-turn run is written 64 times. Worse, in an
append-only conversation prompt k holds prompt k-1 + output k-1, so the stored bytes grow with the
CUBE of the number of turns (64 turns of ~150 new ids each: 22 MB instead of ~0.2 MB).

These savers are drop-in subclasses of LangGraph's (same tables, same API, get_state / history /
replay / update_state unchanged) that move bulky values into one content-addressed side table,
`agentgraphs_entries` (key: 16-byte BLAKE2b of the entry):

- a Turn is stored once. When its prompt extends an earlier turn of the same conversation (that turn's
  prompt + output ids are a prefix of it), only the extra ids are stored, with the earlier turn's key;
- a list of turns is a chain of nodes (previous node, turn): a checkpoint keeps ONE key for the whole
  list, so a list that grew by one turn costs one 32-byte node;
- a list of >= 256 ints (a document's ids) is stored once, 4 bytes per id, and a string of >= 4096
  characters (a document given as input, which LangGraph stores in the input write and the first two
  checkpoints) once, as UTF-8;
- token ids are 4-byte ints and log-probs 8-byte doubles, so values come back bit-exact;
- a list of LangChain messages (a messages graph's state, and the copies of it that `Send` carries, as
  `create_react_agent`'s tool calls do) is a chain too: each message stored once, and the Turn that
  `TracedChatModel` puts in an AIMessage's response_metadata stored as a turn entry (a delta, as above);
- entries zlib can shrink by a tenth are stored compressed.

Checkpoint and write blobs keep LangGraph's own format; a moved value leaves a small marker dict
({"__agentgraphs__": "turns" | "ids" | "text", "ref": key, "n": length}) that loading replaces with an
identical value. Opt in by using these classes where you would use LangGraph's:

    from agentgraphs.checkpoints.savers import compact_async_sqlite_saver
    async with compact_async_sqlite_saver("runs.sqlite") as saver:
        graph = build_graph(checkpointer=saver)          # ainvoke / aget_state / aget_state_history

    with compact_sqlite_saver("runs.sqlite") as saver:   # the sync API (invoke / get_state)

The encoding itself (no I/O, shared by both savers) is agentgraphs.checkpoints.codec.

Limits: entries are shared between threads (content-addressed), so `delete_thread` leaves them in
place; Turns are immutable records (do not edit a Turn in place once it is in state, nor one that was
loaded: the saver remembers turns by identity, and loads share them); a message in state is remembered by
identity too: giving one of its fields a new value is seen (it is stored again), editing a field's list or
dict in place is not. The async saver sets SQLite's `synchronous=NORMAL` (WAL mode: durable against a
crash of the process, not of the machine; `synchronous="FULL"` to wait for the disk at every commit) and
commits its entries with the checkpoint they belong to: one commit per put. A list of ids may be changed in
place (the saver checks its content against what it stored), and every load returns a fresh list.
Entries are written before the checkpoint that refers to them; one whose write failed is written again
by the next put that needs it.
"""

from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator, Sequence

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from .codec import (
    CREATE,
    ENTRIES_TABLE,
    INSERT,
    Codec,
    Fetch,
    Row,
    decode_history,
    queries,
    run_async,
    run_sync,
    scope_of,
)

_SYNCHRONOUS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})

__all__ = [
    "CompactSqliteSaver",
    "CompactAsyncSqliteSaver",
    "compact_sqlite_saver",
    "compact_async_sqlite_saver",
    "ENTRIES_TABLE",
]


class CompactSqliteSaver(SqliteSaver):
    """SqliteSaver that stores each Turn once and conversation prompts as deltas (see the module doc).

    >>> import tempfile, os
    >>> with CompactSqliteSaver.from_conn_string(os.path.join(tempfile.mkdtemp(), "c.sqlite")) as saver:
    ...     saver.setup()
    """

    def __init__(self, conn: Any, *, serde: Any = None) -> None:
        super().__init__(conn, serde=serde)
        self._codec = Codec(self.serde)

    def setup(self) -> None:
        if self.is_setup:
            return
        super().setup()
        self.conn.execute(CREATE)
        self.conn.commit()

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        encoded, rows = self._codec.encode_checkpoint(config, checkpoint)
        self._write(rows)
        return super().put(config, encoded, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        encoded, rows = self._codec.encode_writes(config, writes)
        self._write(rows)
        super().put_writes(config, encoded, task_id, task_path)

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        tup = super().get_tuple(config)
        return None if tup is None else run_sync(self._codec.decode_tuple(tup), self._fetch, self._codec.lock)

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        # read the rows first: SqliteSaver.list holds its lock while it yields
        for tup in list(super().list(config, filter=filter, before=before, limit=limit)):
            yield run_sync(self._codec.decode_tuple(tup), self._fetch, self._codec.lock)

    def get_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Any:
        history = super().get_delta_channel_history(config=config, channels=channels)
        return run_sync(decode_history(self._codec, history, scope_of(config)), self._fetch, self._codec.lock)

    def _write(self, rows: list[Row]) -> None:
        if rows:
            with self.cursor() as cur:
                cur.executemany(INSERT, rows)
            self._codec.mark_written(rows)

    def _fetch(self, request: Fetch) -> list[Row]:
        out: list[Row] = []
        with self.cursor(transaction=False) as cur:
            for sql, params in queries(request):
                out.extend(cur.execute(sql, params).fetchall())
        return out


class CompactAsyncSqliteSaver(AsyncSqliteSaver):
    """AsyncSqliteSaver that stores each Turn once and conversation prompts as deltas (see the module doc).

    `synchronous` is SQLite's setting for this connection: "NORMAL" (default) in WAL mode makes a commit durable
    against a crash of the process but not of the machine, and does not wait for the disk at every commit
    (1,024 rollouts checkpointing through one connection commit thousands of times a second); "FULL" waits."""

    def __init__(self, conn: Any, *, serde: Any = None, synchronous: str | None = "NORMAL") -> None:
        super().__init__(conn, serde=serde)
        self._codec = Codec(self.serde)
        self._entries_ready = False
        if synchronous is not None and synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous={synchronous!r}: use one of {sorted(_SYNCHRONOUS)} or None (SQLite's)")
        self._synchronous = synchronous

    async def setup(self) -> None:
        if self._entries_ready:
            return
        await super().setup()
        async with self.lock:
            if not self._entries_ready:
                if self._synchronous is not None:
                    await self.conn.execute(f"PRAGMA synchronous={self._synchronous.upper()}")
                await self.conn.execute(CREATE)
                await self.conn.commit()
                self._entries_ready = True

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        encoded, rows = self._codec.encode_checkpoint(config, checkpoint)
        await self._write(rows)
        out = await super().aput(config, encoded, metadata, new_versions)  # its commit commits the entries too
        self._codec.mark_written(rows)
        return out

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        encoded, rows = self._codec.encode_writes(config, writes)
        await self._write(rows)
        await super().aput_writes(config, encoded, task_id, task_path)
        self._codec.mark_written(rows)

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        tup = await super().aget_tuple(config)
        return None if tup is None else await run_async(self._codec.decode_tuple(tup), self._fetch, self._codec.lock)

    async def alist(self, config: Any, *, filter: Any = None, before: Any = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        # read the rows first: AsyncSqliteSaver.alist holds its lock while it yields
        tuples = [t async for t in super().alist(config, filter=filter, before=before, limit=limit)]
        for tup in tuples:
            yield await run_async(self._codec.decode_tuple(tup), self._fetch, self._codec.lock)

    async def aget_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Any:
        history = await super().aget_delta_channel_history(config=config, channels=channels)
        return await run_async(decode_history(self._codec, history, scope_of(config)), self._fetch, self._codec.lock)

    async def _write(self, rows: list[Row]) -> None:
        """Insert the entries; the checkpoint (or writes) insert that follows commits them in its transaction,
        and only then are they marked written (a failure leaves them to be emitted again)."""
        if rows:
            await self.setup()
            async with self.lock:
                await self.conn.executemany(INSERT, rows)

    async def _fetch(self, request: Fetch) -> list[Row]:
        await self.setup()
        out: list[Row] = []
        async with self.lock:
            for sql, params in queries(request):
                async with self.conn.execute(sql, params) as cur:
                    out.extend(await cur.fetchall())
        return out


@contextmanager
def compact_sqlite_saver(path: str, *, serde: Any = None) -> Iterator[CompactSqliteSaver]:
    """A CompactSqliteSaver on the SQLite file `path` (":memory:" for none), for the sync graph API."""
    import sqlite3

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield CompactSqliteSaver(conn, serde=serde)
    finally:
        conn.close()


@asynccontextmanager
async def compact_async_sqlite_saver(path: str, *, serde: Any = None, synchronous: str | None = "NORMAL"
                                     ) -> AsyncIterator[CompactAsyncSqliteSaver]:
    """A CompactAsyncSqliteSaver on the SQLite file `path`, for ainvoke / aget_state / aget_state_history.
    `synchronous`: see CompactAsyncSqliteSaver."""
    import aiosqlite

    async with aiosqlite.connect(path) as conn:
        yield CompactAsyncSqliteSaver(conn, serde=serde, synchronous=synchronous)

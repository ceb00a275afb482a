"""The encoding behind agentgraphs.checkpoints.savers: bulky checkpoint values out to content-addressed entries,
and back. No I/O here: encoding returns the rows to write; decoding is a generator that yields `Fetch`
requests and receives the rows, so the sync and the async saver share every line of it.

Entries already written are found again by the identity of the value (nothing is encoded twice for a list that
grew by one item). Turns (plain dicts) are remembered by id with a fingerprint of their fields (list fields by
identity) and no reference, messages by weak reference, and the last turn of each conversation by its key,
length and a digest of its ids: the caches keep nothing alive, so 1,024 threads checkpointing at once do not
evict each other's working sets.

Entry kinds (key = 16-byte BLAKE2b of kind, serde type and data):
  't' a Turn: {"k": key order or None, "f": other fields, "b": base turn key or None,
      "p": prompt ids after the base's prompt + output (4-byte LE ints), "o": output ids, "l": log-probs
      (8-byte LE doubles)}; a list that cannot be packed exactly (an int log-prob, an id >= 2**32) is
      stored as a list;
  'n' a list node: previous node key (or nothing) + item key (a turn's, or a message's);
  'm' a LangChain message (serde-typed) whose Turn, if it carries one in its response_metadata (as
      `TracedChatModel`'s AIMessages do), is a 't' entry it refers to: {"__agentgraphs__": "turn", "ref": key,
      "order": the dict's key order, "extra": its keys besides the Turn's};
  'i' a list of ints, 4-byte LE;  's' a string, UTF-8 (surrogates passed through).
An entry of at least 256 bytes that zlib (level 1) shrinks by a tenth or more is stored compressed, under its
kind's capital letter ('T', 'M', 'I', 'S'); its key is that of the uncompressed entry.
"""

from __future__ import annotations

import array
import hashlib
import sys
import threading
import weakref
import zlib
from collections import OrderedDict
from typing import Any, Generator, Iterator, Sequence

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import Send

from ..trace import Turn, conversation_tail, extends

ENTRIES_TABLE = "agentgraphs_entries"
MARKER = "__agentgraphs__"
MIN_IDS = 256  # int lists at least this long are stored once, by content
MIN_TEXT = 4096  # and strings this long (a graph's input document is checkpointed up to three times)
_KEY = 16  # bytes of a BLAKE2b key
_TURN_ORDER = list(Turn.__annotations__)  # the order make_turn builds a Turn in
_TURN_KEYS = frozenset(_TURN_ORDER)
_ARRAY_KEYS = ("prompt_ids", "output_ids", "output_logprobs")
_FIELD_ORDER = [k for k in _TURN_ORDER if k not in _ARRAY_KEYS]
_ID_TYPE = next(t for t in ("I", "L") if array.array(t).itemsize == 4)
_SWAP = sys.byteorder == "big"  # entries are little-endian on disk
CREATE = (f"CREATE TABLE IF NOT EXISTS {ENTRIES_TABLE} "
           "(key BLOB PRIMARY KEY, kind TEXT NOT NULL, type TEXT, data BLOB NOT NULL)")
INSERT = f"INSERT OR IGNORE INTO {ENTRIES_TABLE} (key, kind, type, data) VALUES (?, ?, ?, ?)"
_SELECT = f"SELECT key, kind, type, data FROM {ENTRIES_TABLE} WHERE key IN "
_CHAIN = (  # a node and all its predecessors in one query (node data = previous key + turn key)
    f"WITH RECURSIVE chain(key, kind, type, data) AS ("
    f"SELECT key, kind, type, data FROM {ENTRIES_TABLE} WHERE key = ? "
    f"UNION ALL SELECT e.key, e.kind, e.type, e.data FROM chain c JOIN {ENTRIES_TABLE} e "
    f"ON e.key = substr(c.data, 1, {_KEY}) WHERE length(c.data) = {2 * _KEY}) "
    f"SELECT key, kind, type, data FROM chain"
)
_MAX_DEPTH = 2  # how deep into plain dicts values are looked for
_COMPRESS_MIN = 256  # bytes: smaller entries are stored as they are
_BATCH = 500  # keys per IN (...) query, under SQLite's variable limit

Row = tuple[bytes, str, "str | None", bytes]  # key, kind ('t' turn, 'n' node, 'i' ids, 's' text), serde type, data


class _Rows(list):  # type: ignore[type-arg]
    """The rows one encode call emits, with their keys (to emit each once)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: set[bytes] = set()

    def add(self, row: Row) -> None:
        self.append(row)
        self.keys.add(row[0])


class Fetch:
    """A request from the decoder to the driver: entries by key, and node chains by head key."""

    def __init__(self, keys: Sequence[bytes] = (), chains: Sequence[bytes] = ()) -> None:
        self.keys, self.chains = list(keys), list(chains)


class _LRU(OrderedDict):  # type: ignore[type-arg]
    """A dict that forgets its least recently used entries beyond `size` entries or `cost` units."""

    def __init__(self, size: int, max_cost: int | None = None) -> None:
        super().__init__()
        self.size, self.max_cost, self.cost = size, max_cost, 0
        self._costs: dict[Any, int] = {}

    def get_fresh(self, key: Any) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: Any, value: Any, cost: int = 0) -> None:
        if key in self:
            self.cost -= self._costs.pop(key, 0)
        self[key] = value
        self.move_to_end(key)
        self._costs[key] = cost
        self.cost += cost
        while len(self) > self.size or (self.max_cost is not None and self.cost > self.max_cost and len(self) > 1):
            old, _ = self.popitem(last=False)
            self.cost -= self._costs.pop(old, 0)

    def discard(self, key: Any) -> None:
        if key in self:
            del self[key]
            self.cost -= self._costs.pop(key, 0)


def _key(kind: str, type_: str | None, data: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=_KEY)
    h.update(f"{kind}:{type_ or ''}:".encode())
    h.update(data)
    return h.digest()


def _is_turn(value: Any) -> bool:
    return type(value) is dict and value.keys() == _TURN_KEYS


def _is_turn_list(value: Any) -> bool:
    return type(value) is list and bool(value) and all(_is_turn(t) for t in value)


def _message_class() -> Any:
    from langchain_core.messages import BaseMessage

    return BaseMessage


def _is_message_list(value: Any) -> bool:
    if type(value) is not list or not value:
        return False
    base = _message_class()
    return all(isinstance(m, base) for m in value)


def _guard(message: Any) -> tuple[int, ...]:
    """The identities of a message's fields: a field given a new value (`m.content = ...`,
    `m.response_metadata = {...}`) changes it; a container edited in place does not (see the module doc)."""
    return tuple(map(id, message.__dict__.values()))


def _carried_turn(message: Any) -> tuple[str, dict[str, Any]] | None:
    """(response_metadata key, value) of the Turn a message carries: a dict holding every Turn key."""
    meta = getattr(message, "response_metadata", None)
    if type(meta) is not dict:
        return None
    return next(((k, v) for k, v in meta.items() if type(v) is dict and _TURN_KEYS <= v.keys()), None)


def _pack_ids(ids: Any) -> bytes | None:
    """4-byte little-endian ids, or None when the list holds anything but ints in [0, 2**32)."""
    if type(ids) is not list or not all(type(x) is int for x in ids):
        return None
    try:
        arr = array.array(_ID_TYPE, ids)
    except OverflowError:
        return None
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _unpack_ids(data: bytes) -> list[int]:
    arr = array.array(_ID_TYPE)
    arr.frombytes(data)
    if _SWAP:
        arr.byteswap()
    return arr.tolist()


def _pack_floats(values: Any) -> bytes | None:
    if type(values) is not list or not all(type(x) is float for x in values):
        return None
    arr = array.array("d", values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _unpack_floats(data: bytes) -> list[float]:
    arr = array.array("d")
    arr.frombytes(data)
    if _SWAP:
        arr.byteswap()
    return arr.tolist()


def _fingerprint(turn: Turn) -> tuple[Any, ...]:
    """A turn's fields: scalars by value, lists (and any other container) by identity. Turns are immutable
    records (the module doc), so a dict at the same address with the same fingerprint is the same turn."""
    return tuple((k, v) if v is None or type(v) in (str, int, float, bool) else (k, id(v)) for k, v in turn.items())


def _ids_digest(prompt: Sequence[int], output: Sequence[int]) -> bytes | None:
    """BLAKE2b of prompt + output as 4-byte ids (None when an id does not fit): a conversation's last turn,
    remembered without keeping its lists alive."""
    h = hashlib.blake2b(digest_size=_KEY)
    try:
        h.update(array.array(_ID_TYPE, prompt))
        h.update(array.array(_ID_TYPE, output))
    except (OverflowError, TypeError):
        return None
    return h.digest()


def _marker(kind: str, ref: bytes, n: int) -> dict[str, Any]:
    return {MARKER: kind, "ref": ref, "n": n}


def _as_marker(value: Any) -> tuple[str, bytes, int] | None:
    if type(value) is dict and len(value) == 3 and value.get(MARKER) in ("turns", "messages", "ids", "text"):
        ref = value.get("ref")
        if isinstance(ref, bytes) and len(ref) == _KEY:
            return value[MARKER], ref, int(value["n"])
    return None


class Codec:
    """Moves turn lists and long id lists out of checkpoint values, and back. No I/O of its own:
    encoding returns the entries to write; decoding is a generator that yields `Fetch` requests."""

    def __init__(self, serde: Any) -> None:
        self.serde = serde
        self.lock = threading.RLock()  # sync savers put from background threads
        # object identity -> (object, key[, snapshot]); holds the object so its id cannot be reused meanwhile.
        # An identity hit is trusted only if the entry is committed (or re-emitted): see _ensure.
        self._stored = _LRU(65536, max_cost=4_000_000)  # id lists and long strings
        # id(turn) -> (fingerprint, key): no reference to the turn; the fingerprint (its scalar fields, its
        # lists by identity) tells a turn from a later dict at the same address
        self._turn_ids = _LRU(262_144)
        # id(message) -> (weak reference, key, field identities, the Turn as stored); gone with the message
        self._message_ids: dict[int, tuple[Any, bytes, tuple[int, ...], Turn | None]] = {}
        self._decoded = _LRU(65536, max_cost=4_000_000)  # key -> turn dict, id list or message
        self._nodes = _LRU(262_144)  # node key -> (previous node key | None, item key)
        self._links = _LRU(262_144)  # previous node key + item key -> node key
        # (thread, ns, conversation) -> (key, ids it covers, digest of those ids) of the last turn stored/loaded
        self._tails = _LRU(65_536)
        self._written: set[bytes] = set()  # keys known to be in the database (written or loaded)
        # rows emitted but not (yet) known to be committed, with the keys they need: key -> (row, deps).
        # A write can fail (or still be in flight for a concurrent put): later puts re-emit these.
        self._pending = _LRU(65536, max_cost=4_000_000)

    # -- encoding ------------------------------------------------------------------------------

    def encode_checkpoint(self, config: Any, checkpoint: dict[str, Any]) -> tuple[dict[str, Any], list[Row]]:
        rows = _Rows()
        values = checkpoint.get("channel_values") or {}
        with self.lock:
            scope = scope_of(config)
            out = {ch: self._encode_value(v, rows, scope) for ch, v in values.items()}
        if all(out[ch] is values[ch] for ch in values):
            return checkpoint, rows
        return {**checkpoint, "channel_values": out}, rows

    def encode_writes(self, config: Any, writes: Sequence[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], list[Row]]:
        rows = _Rows()
        with self.lock:
            scope = scope_of(config)
            return [(ch, self._encode_value(v, rows, scope)) for ch, v in writes], rows

    def mark_written(self, rows: Sequence[Row]) -> None:
        """Call once `rows` are committed: only then do later puts rely on them without re-emitting."""
        self._mark_loaded([r[0] for r in rows])

    def _encode_value(self, value: Any, rows: _Rows, scope: tuple[str, str], depth: int = 0) -> Any:
        if type(value) is Send:  # a pushed task's argument: often a copy of the state (create_react_agent's
            arg = self._encode_value(value.arg, rows, scope)  # tool calls carry every message)
            return value if arg is value.arg else Send(value.node, arg, timeout=value.timeout)
        if type(value) is list and value and type(value[0]) is Send:
            sends = [self._encode_value(v, rows, scope, depth) for v in value]
            return value if all(a is b for a, b in zip(sends, value)) else sends
        if type(value) is dict and depth < _MAX_DEPTH and not _is_turn(value) and _as_marker(value) is None:
            # e.g. the graph input under __start__: a dict of the state's fields
            out = {k: self._encode_value(v, rows, scope, depth + 1) for k, v in value.items()}
            return value if all(out[k] is value[k] for k in value) else out
        if type(value) is str and len(value) >= MIN_TEXT:
            return _marker("text", self._encode_text(value, rows), len(value))
        if type(value) is not list or not value:
            return value
        if _is_turn(value[0]) and _is_turn_list(value):
            return _marker("turns", self._encode_turns(value, rows, scope), len(value))
        if not isinstance(value[0], (int, str, float, dict, list)) and _is_message_list(value):
            return _marker("messages", self._encode_messages(value, rows, scope), len(value))
        if len(value) >= MIN_IDS and type(value[0]) is int:
            key = self._encode_ids(value, rows)
            return value if key is None else _marker("ids", key, len(value))
        return value

    def _encode_ids(self, ids: list[int], rows: _Rows) -> bytes | None:
        hit = self._stored.get_fresh(id(ids))
        # a list can change in place between checkpoints: the identity hit also needs the content it had
        # then (a snapshot: == compares the shared items by identity first, so this costs little)
        if hit is not None and hit[0] is ids and hit[2] == ids and self._ensure(rows, hit[1]):
            return hit[1]
        data = _pack_ids(ids)
        if data is None:
            return None
        key = _key("i", None, data)
        self._emit(rows, key, "i", None, data)
        self._stored.put(id(ids), (ids, key, list(ids)), 2 * len(ids))
        return key

    def _encode_text(self, text: str, rows: _Rows) -> bytes:
        hit = self._stored.get_fresh(id(text))
        if hit is not None and hit[0] is text and self._ensure(rows, hit[1]):  # a str cannot change
            return hit[1]
        data = text.encode("utf-8", "surrogatepass")  # any str round-trips, lone surrogates included
        key = _key("s", None, data)
        self._emit(rows, key, "s", None, data)
        self._stored.put(id(text), (text, key), len(data) // 4)
        return key

    def _encode_turns(self, turns: list[Turn], rows: _Rows, scope: tuple[str, str]) -> bytes:
        node: bytes | None = None
        for i, turn in enumerate(turns):
            node = self._link(node, self._turn_key(turn, rows, scope, turns, i), rows)
        assert node is not None
        return node

    def _link(self, node: bytes | None, item: bytes, rows: _Rows) -> bytes:
        """The node after `node` (None: the list's first) holding `item`; emitted unless known written. A put
        re-links every item of its lists, so known links are looked up, not hashed again."""
        data = (node or b"") + item
        known = self._links.get(data)
        if known is None:
            known = _key("n", None, data)
            self._links.put(data, known)
            self._nodes.put(known, (node, item))
        if known not in self._written:
            self._emit(rows, known, "n", None, data)
        return known

    def _encode_messages(self, messages: list[Any], rows: _Rows, scope: tuple[str, str]) -> bytes:
        """A chain of nodes over the messages, like a turn list: each message stored once, its Turn (prompt as
        a delta against the conversation's previous turn) once."""
        node: bytes | None = None
        turns: list[Turn] = []  # the Turns carried so far, for the next one's base
        for message in messages:
            mkey, turn = self._message_key(message, rows, scope, turns)
            if turn is not None:
                turns.append(turn)
            node = self._link(node, mkey, rows)
        assert node is not None
        return node

    def _message_key(self, message: Any, rows: _Rows, scope: tuple[str, str], turns: list[Turn]
                     ) -> tuple[bytes, Turn | None]:
        """The key of a message (and the Turn it carries, as stored), encoding it if it is not known yet."""
        guard = _guard(message)
        hit = self._message_ids.get(id(message))
        if hit is not None and hit[0]() is message and hit[2] == guard and self._ensure(rows, hit[1]):
            return hit[1], hit[3]
        carried = _carried_turn(message)
        turn: Turn | None = None
        stored, deps = message, ()
        if carried is not None:
            name, full = carried
            turn = {k: full[k] for k in _TURN_ORDER}  # type: ignore[assignment]
            tkey = self._turn_key(turn, rows, scope, turns, len(turns))
            ref = {MARKER: "turn", "ref": tkey, "order": list(full), "extra": {k: v for k, v in full.items()
                                                                                 if k not in _TURN_KEYS}}
            stored = message.model_copy(update={"response_metadata": {**message.response_metadata, name: ref}})
            deps = (tkey,)
        type_, data = self.serde.dumps_typed(stored)
        key = _key("m", type_, data)
        self._emit(rows, key, "m", type_, data, deps=deps)
        self._remember_message(message, key, guard, turn)
        return key, turn

    def _remember_message(self, message: Any, key: bytes, guard: tuple[int, ...],
                          turn: Turn | None) -> None:
        at = id(message)

        def forget(ref: Any) -> None:  # the message is gone: so is its entry (not a newer one at its address)
            entry = self._message_ids.get(at)
            if entry is not None and entry[0] is ref:
                del self._message_ids[at]

        self._message_ids[at] = (weakref.ref(message, forget), key, guard, turn)

    def _turn_key(self, turn: Turn, rows: _Rows, scope: tuple[str, str], turns: list[Turn], at: int) -> bytes:
        """The key of `turns[at]`, encoding it (prompt as a delta where it can) if it is not known yet."""
        fingerprint = _fingerprint(turn)
        hit = self._turn_ids.get_fresh(id(turn))
        if hit is not None and hit[0] == fingerprint and self._ensure(rows, hit[1]):
            return hit[1]
        covered, base_key = self._find_base(turn, scope, turns, at, rows)
        prompt = turn["prompt_ids"]
        extra = prompt[covered:]
        order = list(turn.keys())
        obj = {
            # the usual key order is implied; only an unusual one is spelled out
            "k": None if order == _TURN_ORDER else order,
            "f": [turn[k] for k in _FIELD_ORDER],
            "b": base_key,
            "p": _packed_or_list(_pack_ids(list(extra)), extra),
            "o": _packed_or_list(_pack_ids(turn["output_ids"]), turn["output_ids"]),
            "l": _packed_or_list(_pack_floats(turn["output_logprobs"]), turn["output_logprobs"]),
        }
        type_, data = self.serde.dumps_typed(obj)
        key = _key("t", type_, data)
        self._emit(rows, key, "t", type_, data, deps=() if base_key is None else (base_key,))
        self._turn_ids.put(id(turn), (fingerprint, key))
        self._set_tail(scope, turn, key)
        return key

    def _set_tail(self, scope: tuple[str, str], turn: Turn, key: bytes) -> None:
        if turn["conversation"]:
            digest = _ids_digest(turn["prompt_ids"], turn["output_ids"])
            if digest is not None:
                self._tails.put((*scope, turn["conversation"]),
                                (key, len(turn["prompt_ids"]) + len(turn["output_ids"]), digest))

    def _find_base(self, turn: Turn, scope: tuple[str, str], turns: list[Turn], at: int,
                   rows: _Rows) -> tuple[int, bytes | None]:
        """(how many of the prompt's ids the base covers, the base's key): the conversation's previous turn in
        the same list if this one extends it, else the last one stored or loaded for this thread (a write
        arrives before the checkpoint that lists it), checked by its ids' digest; (0, None) for none."""
        conv = turn["conversation"]
        if not conv:
            return 0, None
        at_earlier = conversation_tail(turns, conv, at)
        earlier = turns[at_earlier] if at_earlier is not None else None
        if earlier is not None:
            hit = self._turn_ids.get(id(earlier))
            if hit is not None and hit[0] == _fingerprint(earlier) and extends(turn, earlier) \
                    and self._ensure(rows, hit[1]):
                return len(earlier["prompt_ids"]) + len(earlier["output_ids"]), hit[1]
        tail = self._tails.get((*scope, conv))
        if tail is not None:
            key, n, digest = tail
            prompt = turn["prompt_ids"]
            if len(prompt) >= n and _ids_digest(prompt[:n], ()) == digest and self._ensure(rows, key):
                return n, key
        return 0, None

    def _emit(self, rows: _Rows, key: bytes, kind: str, type_: str | None, data: bytes,
              deps: Sequence[bytes] = ()) -> None:
        if key in self._written or key in rows.keys:
            return
        row = (key, kind, type_, data)
        if kind != "n" and len(data) >= _COMPRESS_MIN:
            packed = zlib.compress(data, 1)
            if len(packed) <= 0.9 * len(data):
                row = (key, kind.upper(), type_, packed)
        rows.add(row)
        if kind != "n":  # nodes are rebuilt by every put; entries are found by identity and re-emitted
            self._pending.put(key, (row, tuple(deps)), len(data) // 4)

    def _ensure(self, rows: _Rows, key: bytes) -> bool:
        """Whether entry `key` and the entries it needs (a turn's base turns) are committed or in `rows`,
        re-emitting those emitted before but not known to be committed (a failed or concurrent write).
        False when one of them is neither: the caller encodes the value again."""
        need, todo = [], [key]
        while todo:
            k = todo.pop()
            if k in self._written or k in rows.keys:
                continue
            got = self._pending.get(k)
            if got is None:
                return False
            need.append(got[0])
            todo.extend(got[1])
        for row in need:
            if row[0] not in rows.keys:
                rows.add(row)
        return True

    # -- decoding (sans I/O) -------------------------------------------------------------------

    def decode_tuple(self, tup: CheckpointTuple) -> Generator[Fetch, list[Row], CheckpointTuple]:
        scope = scope_of(tup.config)
        values = tup.checkpoint.get("channel_values") or {}
        new_values = dict(values)
        for ch, v in values.items():
            new_values[ch] = yield from self.decode_value(v, scope, register=True)
        writes = []
        for task_id, ch, v in tup.pending_writes or []:
            writes.append((task_id, ch, (yield from self.decode_value(v, scope))))
        checkpoint = {**tup.checkpoint, "channel_values": new_values}
        return tup._replace(checkpoint=checkpoint, pending_writes=writes if tup.pending_writes is not None else None)

    def decode_value(self, value: Any, scope: tuple[str, str], register: bool = False,
                     depth: int = 0) -> Generator[Fetch, list[Row], Any]:
        marker = _as_marker(value)
        if marker is None:
            if type(value) is Send:
                arg = yield from self.decode_value(value.arg, scope, register)
                return value if arg is value.arg else Send(value.node, arg, timeout=value.timeout)
            if type(value) is list and value and type(value[0]) is Send:
                sends = []
                for v in value:
                    sends.append((yield from self.decode_value(v, scope, register, depth)))
                return value if all(a is b for a, b in zip(sends, value)) else sends
            if type(value) is dict and depth < _MAX_DEPTH and not _is_turn(value):
                out = {}
                for k, v in value.items():
                    out[k] = yield from self.decode_value(v, scope, register, depth + 1)
                return value if all(out[k] is value[k] for k in value) else out
            return value
        kind, ref, n = marker
        if kind in ("ids", "text"):
            value = self._decoded.get_fresh(ref)
            if value is None:
                self._absorb((yield Fetch(keys=[ref])))
                value = self._decoded.get_fresh(ref)
                if value is None:
                    raise LookupError(f"checkpoint entry {ref.hex()} ({kind}) is missing from {ENTRIES_TABLE}")
            if len(value) != n:
                raise LookupError(f"checkpoint entry {ref.hex()} holds {len(value)} items, the marker says {n}")
            return list(value) if kind == "ids" else value  # a caller may edit its list: not the cached one
        keys = yield from self._turn_keys(ref)
        if len(keys) != n:
            raise LookupError(f"{kind[:-1]} list {ref.hex()} has {len(keys)} items, the marker says {n}")
        if kind == "messages":
            return (yield from self._messages(keys, scope, register))
        turns = yield from self._turns(keys)
        if register:
            self._register(turns, keys, scope)
        return turns

    def _register(self, turns: list[Turn], keys: list[bytes], scope: tuple[str, str]) -> None:
        """Loaded turns are known entries: a later put refers to them, and the conversations continue."""
        with self.lock:
            last: dict[str, tuple[Turn, bytes]] = {}
            for turn, key in zip(turns, keys):
                self._turn_ids.put(id(turn), (_fingerprint(turn), key))
                if turn["conversation"]:
                    last[turn["conversation"]] = (turn, key)
            for turn, key in last.values():
                self._set_tail(scope, turn, key)

    def _turn_keys(self, head: bytes) -> Generator[Fetch, list[Row], list[bytes]]:
        keys: list[bytes] = []
        node: bytes | None = head
        while node is not None:
            entry = self._nodes.get(node)
            if entry is None:
                self._absorb((yield Fetch(chains=[node])))
                entry = self._nodes.get(node)
                if entry is None:
                    raise LookupError(f"turn-list node {node.hex()} is missing from {ENTRIES_TABLE}")
            node, tkey = entry
            keys.append(tkey)
        keys.reverse()
        return keys

    def _turns(self, keys: list[bytes]) -> Generator[Fetch, list[Row], list[Turn]]:
        local: dict[bytes, Turn] = {}  # decoded here: immune to cache eviction while this list is built
        for k in keys:
            hit = self._decoded.get_fresh(k)
            if hit is not None:
                local[k] = hit
        raw: dict[bytes, dict[str, Any]] = {}
        fetch = [k for k in dict.fromkeys(keys) if k not in local]
        while fetch:  # the turns, then any bases outside this list, then theirs
            got = {row[0]: self.serde.loads_typed((row[2], data)) for row in (yield Fetch(keys=fetch))
                   for kind, data in [_unpacked(row)] if kind == "t"}
            lost = [k for k in fetch if k not in got]
            if lost:
                raise LookupError(f"turn entry {lost[0].hex()} is missing from {ENTRIES_TABLE}")
            self._mark_loaded(fetch)
            raw.update(got)
            for obj in got.values():  # a base that is already decoded is needed locally too
                b = obj["b"]
                if b is not None and b not in local and b not in raw and (hit := self._decoded.get(b)) is not None:
                    local[b] = hit
            fetch = list({obj["b"] for obj in got.values()
                          if obj["b"] is not None and obj["b"] not in raw and obj["b"] not in local})
        for key in _dependency_order(raw):
            local[key] = self._decode_turn(key, raw[key], local)
        return [local[k] for k in keys]

    def _messages(self, keys: list[bytes], scope: tuple[str, str], register: bool
                  ) -> Generator[Fetch, list[Row], list[Any]]:
        """Fresh message objects for `keys` (copies of the cached ones), their Turns put back in place."""
        protos: dict[bytes, tuple[Any, str | None, bytes | None]] = {}  # key -> (message, turn field, turn key)
        for k in keys:
            hit = self._decoded.get_fresh(k)
            if hit is not None:
                protos[k] = hit
        fetch = [k for k in dict.fromkeys(keys) if k not in protos]
        if fetch:
            got = {row[0]: (row[0], kind, row[2], data) for row in (yield Fetch(keys=fetch))
                   for kind, data in [_unpacked(row)] if kind == "m"}
            lost = [k for k in fetch if k not in got]
            if lost:
                raise LookupError(f"message entry {lost[0].hex()} is missing from {ENTRIES_TABLE}")
            self._mark_loaded(fetch)
            for k in fetch:
                message = self.serde.loads_typed((got[k][2], got[k][3]))
                field = next((f for f, v in (message.response_metadata or {}).items()
                              if type(v) is dict and v.get(MARKER) == "turn"), None)
                ref = message.response_metadata[field]["ref"] if field is not None else None
                protos[k] = (message, field, ref)
                self._decoded.put(k, protos[k], len(got[k][3]) // 4)
        turn_keys = [ref for _, _, ref in protos.values() if ref is not None]
        turns = dict(zip(turn_keys, (yield from self._turns(turn_keys)))) if turn_keys else {}
        out = []
        for k in keys:
            proto, field, ref = protos[k]
            message = proto.model_copy()  # a caller may edit what it loads: never the cached object
            turn = None
            if field is not None and ref is not None:
                turn = turns[ref]
                spec = proto.response_metadata[field]
                full = {**turn, **spec["extra"]}
                message.response_metadata = {**proto.response_metadata,
                                             field: {name: full[name] for name in spec["order"]}}
            if register:
                with self.lock:
                    self._remember_message(message, k, _guard(message), turn)
            out.append(message)
        if register and turn_keys:
            self._register([turns[r] for r in turn_keys], turn_keys, scope)
        return out

    def _decode_turn(self, key: bytes, obj: dict[str, Any], local: dict[bytes, Turn]) -> Turn:
        extra = _unpacked_ids(obj["p"])
        if obj["b"] is not None:
            base = local[obj["b"]]
            prompt = base["prompt_ids"] + base["output_ids"] + extra
        else:
            prompt = extra
        arrays = {
            "prompt_ids": prompt,
            "output_ids": _unpacked_ids(obj["o"]),
            "output_logprobs": _unpack_floats(obj["l"]) if isinstance(obj["l"], bytes) else list(obj["l"]),
        }
        fields = dict(zip(_FIELD_ORDER, obj["f"]))
        turn: Turn = {k: arrays[k] if k in arrays else fields[k] for k in obj["k"] or _TURN_ORDER}  # type: ignore[assignment]
        self._decoded.put(key, turn, len(prompt) + len(arrays["output_ids"]))
        return turn

    def _absorb(self, rows: list[Row]) -> None:
        for row in rows:
            if row[1].lower() not in ("n", "i", "s"):
                continue
            key, (kind, data) = row[0], _unpacked(row)
            if kind == "n":
                self._nodes.put(key, (data[:-_KEY] or None, data[-_KEY:]))
            elif kind == "i":
                self._decoded.put(key, _unpack_ids(data), len(data) // 4)
            elif kind == "s":
                self._decoded.put(key, data.decode("utf-8", "surrogatepass"), len(data) // 4)
        self._mark_loaded([r[0] for r in rows])

    def _mark_loaded(self, keys: Sequence[bytes]) -> None:
        with self.lock:
            if len(self._written) > 2_000_000:
                self._written.clear()
            self._written.update(keys)
            for k in keys:
                self._pending.discard(k)


def _unpacked(row: Row) -> tuple[str, bytes]:
    """(kind, data) of a stored entry, decompressed (a capital kind letter marks a compressed entry)."""
    kind, data = row[1], row[3]
    if kind.isupper():
        return kind.lower(), zlib.decompress(data)
    return kind, data


def _dependency_order(raw: dict[bytes, dict[str, Any]]) -> list[bytes]:
    """Keys of `raw` so that every turn comes after its base (bases outside `raw` are decoded)."""
    order: list[bytes] = []
    done: set[bytes] = set()
    for start in raw:
        chain = []
        key: bytes | None = start
        while key is not None and key in raw and key not in done:
            chain.append(key)
            key = raw[key]["b"]
        for k in reversed(chain):
            done.add(k)
            order.append(k)
    return order


def _packed_or_list(packed: bytes | None, values: Any) -> Any:
    return packed if packed is not None else list(values)


def _unpacked_ids(value: Any) -> list[int]:
    return _unpack_ids(value) if isinstance(value, bytes) else list(value)


def scope_of(config: Any) -> tuple[str, str]:
    conf = (config or {}).get("configurable", {})
    return str(conf.get("thread_id", "")), str(conf.get("checkpoint_ns", ""))


def run_sync(gen: Generator[Fetch, list[Row], Any], fetch: Any, lock: Any) -> Any:
    """Drive a decoder with a blocking `fetch(Fetch) -> rows`; the codec's caches change under `lock`."""
    try:
        with lock:
            request = next(gen)
        while True:
            rows = fetch(request)
            with lock:
                request = gen.send(rows)
    except StopIteration as stop:
        return stop.value


async def run_async(gen: Generator[Fetch, list[Row], Any], fetch: Any, lock: Any) -> Any:
    """Drive a decoder with an async `fetch`; the lock is never held across an await."""
    try:
        with lock:
            request = next(gen)
        while True:
            rows = await fetch(request)
            with lock:
                request = gen.send(rows)
    except StopIteration as stop:
        return stop.value


def queries(request: Fetch) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The SQL for a Fetch: one recursive query per node chain, then entries by key in batches."""
    for head in request.chains:
        yield _CHAIN, (head,)
    keys = list(dict.fromkeys(request.keys))
    for i in range(0, len(keys), _BATCH):
        part = keys[i:i + _BATCH]
        yield _SELECT + "(" + ",".join("?" * len(part)) + ")", tuple(part)


def decode_history(codec: Codec, history: Any, scope: tuple[str, str]) -> Generator[Fetch, list[Row], Any]:
    """Markers in a get_delta_channel_history result (write values and seeds) back to values."""
    out = {}
    for ch, entry in history.items():
        entry = dict(entry)
        writes = []
        for task_id, channel, value in entry.get("writes", []):
            writes.append((task_id, channel, (yield from codec.decode_value(value, scope))))
        entry["writes"] = writes
        if "seed" in entry:
            entry["seed"] = yield from codec.decode_value(entry["seed"], scope)
        out[ch] = entry
    return out

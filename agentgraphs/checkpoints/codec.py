"""The encoding behind agentgraphs.checkpoints.savers: bulky checkpoint values out to content-addressed entries,
and back. No I/O here: encoding returns the rows to write; decoding is a generator that yields `Fetch`
requests and receives the rows, so the sync and the async saver share every line of it.

Entry kinds (key = 16-byte BLAKE2b of kind, serde type and data):
  't' a Turn: {"k": key order or None, "f": other fields, "b": base turn key or None,
      "p": prompt ids after the base's prompt + output (4-byte LE ints), "o": output ids, "l": log-probs
      (8-byte LE doubles)}; a list that cannot be packed exactly (an int log-prob, an id >= 2**32) is
      stored as a list;
  'n' a turn-list node: previous node key (or nothing) + turn key;
  'i' a list of ints, 4-byte LE;  's' a string, UTF-8 (surrogates passed through).
"""

from __future__ import annotations

import array
import hashlib
import sys
import threading
from collections import OrderedDict
from typing import Any, Generator, Iterator, Sequence

from langgraph.checkpoint.base import CheckpointTuple

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


def _marker(kind: str, ref: bytes, n: int) -> dict[str, Any]:
    return {MARKER: kind, "ref": ref, "n": n}


def _as_marker(value: Any) -> tuple[str, bytes, int] | None:
    if type(value) is dict and len(value) == 3 and value.get(MARKER) in ("turns", "ids", "text"):
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
        self._stored = _LRU(65536, max_cost=4_000_000)
        self._decoded = _LRU(65536, max_cost=4_000_000)  # key -> turn dict or id list
        self._nodes = _LRU(200_000)  # node key -> (previous node key | None, turn key)
        self._tails = _LRU(1024)  # (thread, ns, conversation) -> last turn stored or loaded
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
        last_of: dict[str, Turn] = {}
        for i, turn in enumerate(turns):
            tkey = self._turn_key(turn, rows, scope, turns, i)
            data = (node or b"") + tkey
            node = _key("n", None, data)
            self._nodes.put(node, (data[:-_KEY] or None, tkey))
            self._emit(rows, node, "n", None, data)
            if turn["conversation"]:
                last_of[turn["conversation"]] = turn
        for conv, turn in last_of.items():
            self._tails.put((*scope, conv), turn)
        assert node is not None
        return node

    def _turn_key(self, turn: Turn, rows: _Rows, scope: tuple[str, str], turns: list[Turn], at: int) -> bytes:
        """The key of `turns[at]`, encoding it (prompt as a delta where it can) if it is not known yet."""
        hit = self._stored.get_fresh(id(turn))
        if hit is not None and hit[0] is turn and self._ensure(rows, hit[1]):
            return hit[1]
        base, base_key = self._find_base(turn, scope, turns, at, rows)
        prompt = turn["prompt_ids"]
        extra = prompt[len(base["prompt_ids"]) + len(base["output_ids"]):] if base is not None else prompt
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
        self._stored.put(id(turn), (turn, key), len(prompt) + len(turn["output_ids"]))
        if turn["conversation"]:
            self._tails.put((*scope, turn["conversation"]), turn)
        return key

    def _find_base(self, turn: Turn, scope: tuple[str, str], turns: list[Turn], at: int,
                   rows: _Rows) -> tuple[Turn | None, bytes | None]:
        """The turn this one's prompt extends: the conversation's previous turn in the same list, else the
        last one stored or loaded for this thread (a write arrives before the checkpoint that lists it)."""
        conv = turn["conversation"]
        if not conv:
            return None, None
        earlier = conversation_tail(turns, conv, at)
        candidates = [turns[earlier]] if earlier is not None else []
        tail = self._tails.get(((*scope, conv)))
        if tail is not None:
            candidates.append(tail)
        for cand in candidates:
            hit = self._stored.get(id(cand))
            if hit is not None and hit[0] is cand and extends(turn, cand) and self._ensure(rows, hit[1]):
                return cand, hit[1]
        return None, None

    def _emit(self, rows: _Rows, key: bytes, kind: str, type_: str | None, data: bytes,
              deps: Sequence[bytes] = ()) -> None:
        if key in self._written or key in rows.keys:
            return
        row = (key, kind, type_, data)
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
            raise LookupError(f"turn list {ref.hex()} has {len(keys)} turns, the marker says {n}")
        turns = yield from self._turns(keys)
        if register:
            with self.lock:
                for turn, key in zip(turns, keys):
                    self._stored.put(id(turn), (turn, key), len(turn["prompt_ids"]) + len(turn["output_ids"]))
                    if turn["conversation"]:
                        self._tails.put((*scope, turn["conversation"]), turn)
        return turns

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
            got = {row[0]: self.serde.loads_typed((row[2], row[3])) for row in (yield Fetch(keys=fetch))
                   if row[1] == "t"}
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
        for key, kind, _type, data in rows:
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

"""The digest of a chat history that `TracedChatModel` stores on each AIMessage, in O(new messages) per call.

The digest is the sha256 of `json.dumps([messages, tools], sort_keys=True, ensure_ascii=False, default=str)` (the
format AIMessages in existing checkpoints carry). JSON writes a list as "[" + ", ".join(items) + "]", so the hash
runs over the messages one at a time, and the hash state after each message is kept with the message object (for
as long as it lives): the next call on a history that grew hashes only the messages it has not seen. A kept state
is used only when the message gives an equal template dict now (strings compared by identity first, so an unchanged
message costs O(its keys)) and follows the same kept state, so an edit, a removal or a reordering anywhere hashes
again from there on; a message that cannot be kept (no weak reference) is hashed every time.

>>> from langchain_core.messages import HumanMessage
>>> msgs = [HumanMessage("Hi"), HumanMessage("And then?")]
>>> dicts = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "And then?"}]
>>> history_digests(dicts, None, 1, msgs) == history_digests(dicts, None, 1)  # kept or not, the same digests
True
>>> history_digests(dicts, None, None)[0] == digest([dicts, None])
True
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["digest", "dumps", "history_digests", "kept_messages"]

_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)
_HEAD = hashlib.sha256(b"[[")  # the state before the first message (copied, never updated)
_START = object()  # the chain token before the first message
_MAX_LINKS = 4  # predecessors remembered per message (a message object shared by a few histories)


def dumps(obj: Any) -> str:
    """`json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)`, with one encoder for the process."""
    return _ENCODER.encode(obj)


def digest(obj: Any) -> str:
    """The sha256 hex digest of `dumps(obj)` (UTF-8)."""
    return hashlib.sha256(dumps(obj).encode("utf-8")).hexdigest()


class _Kept:
    """What is kept for one message object: the template dict it gave (its `shape`) and, per chain token before it,
    the token and hash state after it."""

    __slots__ = ("ref", "shape", "links")

    def __init__(self, ref: weakref.ref[Any], shape: object) -> None:
        self.ref = ref
        self.shape = shape
        self.links: dict[object, tuple[object, Any]] = {}


_KEPT: dict[int, _Kept] = {}


def kept_messages() -> int:
    """How many message objects have a kept hash state now (they are dropped with their messages)."""
    return len(_KEPT)


def _forget(key: int, ref: weakref.ref[Any]) -> None:
    kept = _KEPT.get(key)
    if kept is not None and kept.ref is ref:
        del _KEPT[key]


def _shape(d: Mapping[str, Any]) -> object:
    """What a template dict is compared by: its items when every value is a string (immutable, compared by identity
    first), else its JSON (computed each time: a value that is a list or dict may have been edited in place)."""
    items = tuple(d.items())
    if all(type(v) is str for _, v in items):
        return items
    return dumps(d)


def _kept(message: Any, d: Mapping[str, Any]) -> _Kept | None:
    shape = _shape(d)
    key = id(message)
    kept = _KEPT.get(key)
    if kept is not None and kept.ref() is message:
        if kept.shape != shape:  # the message was edited: nothing kept for it holds any more
            kept.shape, kept.links = shape, {}
        return kept
    try:
        ref = weakref.ref(message, lambda r, key=key: _forget(key, r))
    except TypeError:  # an object without weak references: hashed every time
        return None
    kept = _KEPT[key] = _Kept(ref, shape)
    return kept


def history_digests(dicts: Sequence[Mapping[str, Any]], tools: Any, k: int | None,
                    messages: Sequence[Any] | None = None) -> tuple[str, str | None]:
    """(`digest([dicts, tools])`, `digest([dicts[:k], tools])` or None without k), in one pass. With `messages`
    (the objects `dicts` were made from, one each) the hash state after each message is kept and reused, so a
    history seen before up to some message is hashed only from there on."""
    tail = ("], " + dumps(tools) + "]").encode("utf-8")
    state, token = _HEAD, _START
    before: str | None = None
    for i, d in enumerate(dicts):
        if i == k:
            before = _finish(state, tail)
        kept = _kept(messages[i], d) if messages is not None else None
        link = kept.links.get(token) if kept is not None else None
        if link is None:
            piece = kept.shape if kept is not None and isinstance(kept.shape, str) else dumps(d)
            after = state.copy()
            after.update(((", " if i else "") + piece).encode("utf-8"))
            link = (object(), after)
            if kept is not None:
                if len(kept.links) >= _MAX_LINKS:
                    kept.links.clear()
                kept.links[token] = link
        token, state = link
    if k is not None and k >= len(dicts):
        before = _finish(state, tail)
    return _finish(state, tail), before


def _finish(state: Any, tail: bytes) -> str:
    done = state.copy()
    done.update(tail)
    return done.hexdigest()

"""history_digests with kept hash states gives exactly the digest of the whole history written out, whatever happens
to the messages between calls: appended, replaced, edited in place, removed, reordered, one object at two places."""

from __future__ import annotations

import gc
import hashlib
import json
import random
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agentgraphs import history_digest
from agentgraphs.chat_model import to_template_messages
from agentgraphs.history_digest import history_digests, kept_messages

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
SHARED = SystemMessage("You are exact.")  # one object in many histories (create_react_agent's prompt= does this)


def _reference(dicts: list[dict[str, Any]], tools: Any) -> str:  # the stored format, written out independently
    blob = json.dumps([dicts, tools], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _message(rng: random.Random, n: int) -> BaseMessage:
    text = "".join(rng.choice('ab\u00e9\u2063"\\ {}\U0001f686') for _ in range(rng.randint(0, 12))) + str(n)
    kind = rng.randrange(4)
    if kind == 0:
        return HumanMessage(text)
    if kind == 1:
        return ToolMessage(text, tool_call_id=f"call_{n}", name=rng.choice([None, "lookup"]))
    if kind == 2:  # not made by TracedChatModel: rendered with its tool calls (a list value, editable in place)
        return AIMessage(text, tool_calls=[{"name": "lookup", "args": {"q": text, "n": n}, "id": f"c{n}"}])
    return SHARED


def _edit(rng: random.Random, messages: list[BaseMessage], n: int) -> None:
    op = rng.randrange(7)
    i = rng.randrange(len(messages)) if messages else 0
    if op <= 2 or not messages:
        messages.append(_message(rng, n))
    elif op == 3:
        messages[i] = _message(rng, n)
    elif op == 4:
        m = messages[i]
        if isinstance(m, AIMessage) and m.tool_calls:
            m.tool_calls[0]["args"]["n"] = n  # in place: the same objects, another JSON
        elif m is not SHARED:
            m.content = f"edited {n}"
    elif op == 5:
        del messages[i]
    else:
        j = rng.randrange(len(messages))
        messages[i], messages[j] = messages[j], messages[i]


def test_kept_digests_equal_the_whole_history_written_out() -> None:
    rng = random.Random(1)
    for history in range(40):
        messages: list[BaseMessage] = [SHARED] if history % 2 else []
        for step in range(25):
            _edit(rng, messages, 100 * history + step)
            dicts = to_template_messages(messages)
            tools = rng.choice([None, TOOLS])
            k = rng.choice([None, *range(len(dicts) + 1)])
            full, before = history_digests(dicts, tools, k, messages)
            assert full == _reference(dicts, tools), (history, step)
            assert before == (None if k is None else _reference(dicts[:k], tools)), (history, step, k)


def test_a_growing_history_hashes_only_its_new_messages(monkeypatch: Any) -> None:
    hashed: list[str] = []
    dumps = history_digest.dumps

    def counting(obj: Any) -> str:
        if isinstance(obj, dict):
            hashed.append(obj["content"])
        return dumps(obj)

    monkeypatch.setattr(history_digest, "dumps", counting)
    messages: list[BaseMessage] = [SHARED, HumanMessage("Question?")]
    for turn in range(30):
        hashed.clear()
        dicts = to_template_messages(messages)
        full, before = history_digests(dicts, TOOLS, len(dicts) - 2 if turn else None, messages)
        assert full == _reference(dicts, TOOLS)
        # each call JSON-encodes the two messages the last one added, not the history; a message with a list
        # value (an AIMessage's tool calls, editable in place) is encoded again each time (every 5th here)
        foreign = [d["content"] for d in dicts[:-2] if "tool_calls" in d]
        assert sorted(hashed) == sorted(foreign + [d["content"] for d in dicts[-2:]]), (turn, hashed)
        calls = [{"name": "lookup", "args": {"t": turn}, "id": f"c{turn}"}] if turn % 5 == 0 else []
        messages += [AIMessage(f"call {turn}", tool_calls=calls), ToolMessage(f"result {turn} " * 50, tool_call_id=f"c{turn}")]
    # what is kept for a message goes with it
    before = kept_messages()
    del messages, dicts
    gc.collect()
    assert kept_messages() <= before - 59  # all but SHARED (alive: a module constant)

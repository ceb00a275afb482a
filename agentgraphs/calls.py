"""Every engine call a rollout made, and the trainable ones whose Turn never reached the final state.

A graph may drop a call's Turn without meaning to: a map-reduce branch that stores only `reply.content`,
a summarise-then-`RemoveMessage` step, a node that forgets `**out.update`. The training data would then
silently miss that call. So `run_rollout` opens a `CallLedger` for the rollout (a context variable, which
LangGraph hands on to every node, sync or async) and both recorded call paths, `call_llm` and
`TracedChatModel`, enter each answered call in it. At the end, the ledger is compared with the Turns the
spec collects from the final state: `llm_calls` is every call answered, and `dropped_calls` names the
trainable calls that will not be trained. Plain Python: no LangGraph.

A node may also bypass both paths and call an engine itself (`runtime.context.policy.generate(...)`): no Turn
is made, so nothing of it could ever be trained. The engines that sample token ids (SGLangEngine, HFEngine) say
each answered call here (`note_engine_call`); one made outside a recorded call is entered as `unrecorded`, and
`unrecorded_calls` names the policy's among the calls that will not be trained.

The rollout's sync calls still in flight at its end are cancelled by another owner, `agentgraphs.sync_calls`,
which the debugger's steps share.

>>> ledger = CallLedger()
>>> ledger.record({"rid": "a", "node": "map", "prompt_ids": [1], "output_ids": [2], "trainable": True}, "call_llm")
>>> [c["node"] for c in dropped_calls(ledger, [])]
['map']
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping, Sequence, TypedDict

Source = Literal["call_llm", "chat_model"]
UNRECORDED_REASON = ("the node called the engine itself (engine.generate), outside call_llm / TracedChatModel, so no "
                     "Turn recorded its tokens: make the call through call_llm(state, runtime, ...) or TracedChatModel "
                     "to train it, or through call_llm(..., trainable=False) if it is not meant to be trained")

_REASONS: dict[str, str] = {
    "call_llm": "its Turn is not in the final state: the node did not return it (return `**out.update`), "
                "or a later node replaced the turns",
    "chat_model": "its AIMessage is not in the final state's messages: the graph kept only its content (or a "
                  "parsed object), or removed it (RemoveMessage); store the AIMessage itself in `messages` to "
                  "train the call, or make it trainable=False",
}


class DroppedCall(TypedDict):
    """A trainable engine call whose Turn did not reach the final state, so it is not trained."""

    node: str
    output_tokens: int
    reason: str


@dataclass
class CallLedger:
    """The engine calls answered during one rollout, in the order they were answered."""

    turns: list[Mapping[str, Any]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    started: int = 0  # calls let through the call limit (answered or still in flight)
    unrecorded: list[tuple[str, str, int]] = field(default_factory=list)  # (engine, node, output tokens): no Turn

    def record(self, turn: Mapping[str, Any], source: Source) -> None:
        self.turns.append(turn)
        self.sources.append(source)

    def __len__(self) -> int:
        return len(self.turns)


_LEDGER: contextvars.ContextVar[CallLedger | None] = contextvars.ContextVar("agentgraphs_call_ledger", default=None)


@contextlib.contextmanager
def recording_calls() -> Iterator[CallLedger]:
    """Open a ledger for the code run inside (one rollout); nested rollouts get their own."""
    ledger = CallLedger()
    token = _LEDGER.set(ledger)
    try:
        yield ledger
    finally:
        _LEDGER.reset(token)


def current_ledger() -> CallLedger | None:
    """The ledger of the rollout running here (None outside `run_rollout`)."""
    return _LEDGER.get()


_IN_RECORDED_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("agentgraphs_in_recorded_call",
                                                                         default=False)


@contextlib.contextmanager
def making_recorded_call() -> Iterator[None]:
    """Mark the engine call made inside as one that records its Turn (`agentgraphs.node.recorded_call`)."""
    token = _IN_RECORDED_CALL.set(True)
    try:
        yield
    finally:
        _IN_RECORDED_CALL.reset(token)


def note_engine_call(engine: str, output_tokens: int) -> None:
    """An engine answered a call (SGLangEngine, HFEngine call this): inside a rollout and outside a recorded call,
    it is entered in the ledger as unrecorded, with the graph node it was made in where LangGraph says so."""
    ledger = _LEDGER.get()
    if ledger is None or _IN_RECORDED_CALL.get():
        return
    ledger.unrecorded.append((engine, _running_node(), output_tokens))


def _running_node() -> str:
    """The graph node running here, read from LangChain's runnable config when LangGraph is loaded (never
    imported here: this module stays plain Python)."""
    config_module = sys.modules.get("langchain_core.runnables.config")
    config = getattr(getattr(config_module, "var_child_runnable_config", None), "get", lambda: None)()
    metadata = (config or {}).get("metadata") if isinstance(config, Mapping) else None
    return str((metadata or {}).get("langgraph_node") or "?")


def unrecorded_calls(ledger: CallLedger | None, policy: str) -> list[DroppedCall]:
    """The calls to the engine named `policy` that a node made itself (`note_engine_call`): never trained."""
    if ledger is None:
        return []
    return sorted((DroppedCall(node=node, output_tokens=n, reason=UNRECORDED_REASON)
                   for engine, node, n in ledger.unrecorded if engine == policy and n),
                  key=lambda c: (c["node"], c["output_tokens"]))


def record_call(turn: Mapping[str, Any], source: Source, ledger: CallLedger | None = None) -> None:
    """Enter one answered call in `ledger` (default: the running rollout's); a no-op outside a rollout."""
    target = ledger if ledger is not None else _LEDGER.get()
    if target is not None:
        target.record(turn, source)


def calls_made(ledger: CallLedger | None, turns: Sequence[Mapping[str, Any]]) -> int:
    """The engine calls a rollout accounts for: those answered in it plus restored Turns answered before
    (a replay or fork resumes from a checkpoint). Without a ledger, the Turns themselves."""
    if ledger is None:
        return len(turns)
    answered = {_key(t) for t in ledger.turns}
    return len(ledger) + len(ledger.unrecorded) + sum(1 for t in turns if _key(t) not in answered)


def dropped_calls(ledger: CallLedger | None, turns: Sequence[Mapping[str, Any]]) -> list[DroppedCall]:
    """Trainable calls (with output to train) answered in the rollout whose Turn is not among `turns`,
    ordered by node and size (not by the order they happened to be answered in, which concurrency varies)."""
    if ledger is None:
        return []
    kept: dict[tuple[Any, ...], int] = {}
    for t in turns:
        kept[_key(t)] = kept.get(_key(t), 0) + 1
    out: list[DroppedCall] = []
    for turn, source in zip(ledger.turns, ledger.sources):
        key = _key(turn)
        if kept.get(key, 0) > 0:
            kept[key] -= 1
            continue
        if turn.get("trainable") and turn.get("output_ids"):
            out.append(DroppedCall(node=str(turn.get("node", "")), output_tokens=len(turn.get("output_ids") or []),
                                   reason=_REASONS[source]))
    return sorted(out, key=lambda c: (c["node"], c["output_tokens"], c["reason"]))


def _key(turn: Mapping[str, Any]) -> tuple[Any, ...]:
    # by content, not identity (a Turn that went through a checkpoint is a copy): the engine's request id
    # where it gave one, and what the call was; calls alike in all of it are counted, not told apart
    return (str(turn.get("rid", "")), str(turn.get("node", "")), len(turn.get("prompt_ids") or []),
            tuple(turn.get("output_ids") or ()))


__all__ = ["UNRECORDED_REASON", "CallLedger", "DroppedCall", "calls_made", "current_ledger", "dropped_calls",
           "making_recorded_call", "note_engine_call", "record_call", "recording_calls", "unrecorded_calls"]

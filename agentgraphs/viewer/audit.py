"""The invariant audit of one rollout: which engine call produced each trained token, and every breach.

`agentgraphs check` (which adds re-scoring) and `agentgraphs view` (which outlines each breach in red) both
call `audit_record`, so the audit and the report never disagree about a rollout.

Which turns a training sequence carries: the turns the run's own function (`agentgraphs.trace.build_sequences`)
puts there, rebuilt from traces.jsonl and the recorded layout, plus any other turn whose output sits in the
sequence's response at its own prompt length (so a turn that a broken prefix split off is still found where
it trains, and the break is reported at its first differing token, with that turn's node). The comparison
itself is position by position against the turns' own ids and log-probs.

>>> from agentgraphs.testing.runs import synthetic_records
>>> audit = audit_record(synthetic_records(1, 600, [100, 200], long_turns=3)[0])
>>> audit.breaches, [s.members for s in audit.sequences]
([], [[0], [1], [2]])
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, TypedDict, Union

from ..trace import (
    BreachKind as SequenceBreachKind,
    SequenceAudit,
    TrainSequence,
    Turn,
    audit_sequence,
    build_sequences,
    conversation_tail,
    first_difference,
    head_index,
    output_in_place,
)
from ..records import SEQUENCE_KEYS, STATUSES
from .run_data import RunRecord

BreachKind = Union[SequenceBreachKind, Literal["sequence_count", "top_level", "trace_turns", "status"]]
TOP_LEVEL_KEYS = SEQUENCE_KEYS  # what slime trains by default: a sequence's fields, at the top level


class Breach(TypedDict):
    """One invariant breach: where (rollout line/index, sequence, node, turn, token position) and what."""

    line: int
    index: int | None
    sequence: int
    node: str | None
    turn: int | None
    position: int | None  # absolute position in the sequence's tokens
    kind: BreachKind
    detail: str


BreachFn = Callable[..., None]  # breach(sequence, kind, detail, *, turn=None, position=None)


@dataclass
class RecordAudit:
    """The audit of one rollout: per recorded training sequence (`agentgraphs.trace.SequenceAudit`: its
    turns, and which engine call produced each response position), then every breach found."""

    sequences: list[SequenceAudit]
    breaches: list[Breach]


def audit_record(rec: RunRecord) -> RecordAudit:
    """Check every invariant of one rollout (samples.jsonl line against traces.jsonl line); no model needed.

    Each training sequence goes through the rollout's own checker (`agentgraphs.trace.audit_sequence`);
    what only a written run can get wrong (the number of sequences, the top-level fields) is checked here.
    """
    turns, seqs = rec.turns, rec.sequences
    layout = (rec.sample.get("train_metadata") or {}).get("layout") or "per_turn"
    status = str(rec.sample.get("status") or "")
    breaches: list[Breach] = []

    def breach(s: int, kind: BreachKind, detail: str, *, turn: int | None = None,
               position: int | None = None) -> None:
        breaches.append(Breach(line=rec.line, index=rec.index, sequence=s,
                               node=turns[turn]["node"] if turn is not None else None, turn=turn,
                               position=position, kind=kind, detail=detail))

    if status not in STATUSES:  # slime and the summary would count it as none of them
        breach(-1, "status", f"samples.jsonl line {rec.line}: status {status!r} is no known status "
                             f"({', '.join(STATUSES)}): write the run with `agentgraphs run` or rl_bridge, or "
                             "mend the line")
    _audit_trace_turns(rec.trace, turns, breach)
    try:
        expected = build_sequences(turns, layout) if turns else []
    except Exception as exc:  # a damaged trace: say so, check what can be checked
        breach(-1, "sequence_count", f"cannot rebuild training sequences from the trace: {exc}")
        expected = []
    if not seqs:
        breach(-1, "sequence_count", "samples.jsonl has no train_metadata.turns (the training sequences): "
                                     "write the run with `agentgraphs run` or rl_bridge")
    # a rollout with nothing to train carries one placeholder sequence (records.sample_fields): a failed or
    # aborted one whatever its turns made, any other only when its turns make no sequence
    placeholder = len(seqs) == 1 and is_placeholder(seqs[0]) and (not expected or status in ("failed", "aborted"))
    if len(expected) != len(seqs) and seqs and not placeholder:
        breach(-1, "sequence_count", f"{len(seqs)} training sequences recorded but the trace's turns make "
                                     f"{len(expected)} ({layout} layout)"
                                     f"{_split_note(turns, expected) if layout == 'concat' else ''}")
    audits: list[SequenceAudit] = []
    for s, (seq, members) in enumerate(zip(seqs, _members(turns, seqs, expected, placeholder))):
        audit = audit_sequence(seq, turns, members, failed=status == "failed")
        for b in audit.breaches:
            breach(s, b["kind"], b["message"], turn=b["turn"], position=b["position"])
        audits.append(audit)
    if seqs:
        head = head_index(seqs)
        _audit_top_level(rec.sample, seqs[head], audits[head], head, breach)
    return RecordAudit(audits, breaches)


def is_placeholder(seq: Mapping[str, Any]) -> bool:
    """The two-token, all-masked sequence a rollout with nothing to train carries (slime needs one)."""
    return (len(seq.get("tokens") or []) == 2 and seq.get("response_length") == 1
            and not any(seq.get("loss_mask") or []) and not any(seq.get("rollout_log_probs") or []))


def _members(turns: Sequence[Turn], seqs: Sequence[Mapping[str, Any]], expected: Sequence[TrainSequence],
             placeholder: bool) -> list[list[int]]:
    """Per recorded sequence: the turns the trace puts there (in order), then any other turn found there.

    Each turn is claimed by one sequence, best match first: a turn whose prompt and output the sequence holds
    (the one the trace puts there before any other), then a turn whose output sits there after a broken prompt
    (`output_in_place`). A turn the trace puts in a sequence that claims nothing stays there (its breaches are
    reported there) unless another sequence claimed it. So a turn missing from traces.jsonl, which shifts every
    later turn's index, leaves only its own tokens without an engine call."""
    rebuilt = [list(expected[s]["turn_indices"]) if s < len(expected) and not placeholder else []
               for s in range(len(seqs))]
    spans = [(list(seq.get("tokens") or []), len(seq.get("tokens") or []) - int(seq.get("response_length") or 0))
             for seq in seqs]
    claims: list[list[int]] = [[] for _ in seqs]
    taken: set[int] = set()

    def claim(s: int, candidates: Iterable[int], whole: bool) -> None:
        tokens, start = spans[s]
        for i in candidates:
            turn = turns[i]
            if i not in taken and output_in_place(turn, tokens, start) and (
                    not whole or tokens[:len(turn["prompt_ids"])] == list(turn["prompt_ids"])):
                claims[s].append(i)
                taken.add(i)

    for s, members in enumerate(rebuilt):
        claim(s, members, True)
    for whole in (True, False):
        for s in range(len(seqs)):
            claim(s, range(len(turns)), whole)
    return [[i for i in members if i in mine or i not in taken] + [i for i in mine if i not in members]
            for members, mine in zip(rebuilt, claims)]


def _audit_trace_turns(trace: Mapping[str, Any], turns: Sequence[Turn], breach: BreachFn) -> None:
    """The trace's own records of its engine calls (summary.turns_by_node, llm_calls with untrained_calls,
    path_turns) must agree with its turns: a turn removed from (or added to) traces.jsonl after the run shows
    here, also one that no training sequence carries. Keys an older trace lacks are not checked."""
    n = len(turns)
    calls, dropped = trace.get("llm_calls"), trace.get("untrained_calls") or []
    said = f"llm_calls {calls}, {n} turns, {len(dropped)} dropped trainable calls (untrained_calls)"
    fix = "traces.jsonl is not what the rollout recorded: rewrite the run, or check the copy that was edited"
    by_node = (trace.get("summary") or {}).get("turns_by_node")
    if isinstance(by_node, Mapping):
        counts = Counter(str(t.get("node")) for t in turns)
        diff = [f"{node!r} {by_node.get(node, 0)} recorded, {counts.get(node, 0)} in turns"
                for node in sorted(set(by_node) | set(counts)) if by_node.get(node, 0) != counts.get(node, 0)]
        if diff:
            breach(-1, "trace_turns", f"the trace's turns disagree with its own summary.turns_by_node "
                                      f"({'; '.join(diff)}; {said}): {fix}")
    steps = trace.get("path_turns")
    named = [i for step in steps if isinstance(step, list) for i in step] if isinstance(steps, list) else []
    out_of_range = list(dict.fromkeys(repr(i) for i in named if i is not None and not (
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n)))
    if out_of_range:
        breach(-1, "trace_turns", f"path_turns names turn(s) [{', '.join(out_of_range[:10])}] but the trace has "
                                  f"{n} turns ({said}): {fix}")
    # every turn, and every trainable call the graph dropped (untrained_calls), is one engine call; llm_calls may
    # count more (a helper call whose turn never reached the state is listed nowhere else)
    if isinstance(calls, int) and not isinstance(calls, bool) and calls < n + len(dropped):
        breach(-1, "trace_turns", f"the trace counts fewer engine calls than it records ({said}): {fix}")


def _split_note(turns: Sequence[Turn], expected: Sequence[TrainSequence]) -> str:
    """Where the trace breaks a conversation's prefix (concat: a turn that does not extend the one before it)."""
    notes = []
    for seq in expected:
        i = seq["turn_indices"][0]
        conv = turns[i]["conversation"]
        prev = conversation_tail(turns, conv, i)
        if prev is None:
            continue
        head = list(turns[prev]["prompt_ids"]) + list(turns[prev]["output_ids"])
        k = first_difference(head, turns[i]["prompt_ids"])
        if k == len(head):
            continue
        notes.append(f"turn {i} ({turns[i]['node']!r}) does not extend turn {prev} ({turns[prev]['node']!r}) of "
                     f"conversation {conv!r}: its prompt differs at position {k}")
    return ": " + "; ".join(notes) if notes else ""


def _audit_top_level(sample: Mapping[str, Any], head: Mapping[str, Any], audit: SequenceAudit, s: int,
                     breach: BreachFn) -> None:
    """slime trains the top-level fields when rl_bridge.convert is not used: they must be sequence `s`, the
    first that trains a token (`agentgraphs.trace.head_index`), as rl_bridge.generate writes them."""
    for key in TOP_LEVEL_KEYS:
        if key not in sample:
            breach(s, "top_level", f"the sample has no top-level {key!r}: slime trains the top-level fields "
                                   f"unless rl_bridge.convert is used; they must equal train_metadata.turns[{s}]")
            continue
        got, want = sample[key], head.get(key)
        if got == want:
            continue
        if key == "response_length":
            breach(s, "top_level", f"top-level response_length {got!r} but training sequence {s} has {want!r}: "
                                   "slime would train another split of prompt and response")
            continue
        got_l, want_l = list(got or []), list(want or [])
        k = first_difference(got_l, want_l)
        position = k if key == "tokens" else audit.start + k
        owner = audit.produced.get(position)
        here = (f"{got_l[k]!r} where sequence {s} has {want_l[k]!r}" if k < min(len(got_l), len(want_l))
                else f"{len(got_l)} entries where sequence {s} has {len(want_l)}")
        breach(s, "top_level", f"top-level {key} differs from training sequence {s} ({here}): what slime trains "
                               "without rl_bridge.convert is not the audited sequence",
               turn=owner[0] if owner else None, position=position)

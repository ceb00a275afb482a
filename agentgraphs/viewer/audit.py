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

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence, TypedDict

from ..trace import TrainSequence, Turn, build_sequences
from .run_data import RunRecord

BreachKind = Literal["length", "prompt", "untraced_token", "token_mismatch", "logprob_mismatch",
                     "masked_logprob", "lost_mask", "failed_trains", "sequence_count", "top_level"]
TOP_LEVEL_KEYS = ("tokens", "response_length", "loss_mask", "rollout_log_probs")  # what slime trains by default


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
class SequenceAudit:
    """One training sequence as audited: its turns, and which engine call produced each response position."""

    members: list[int]  # indices of the turns whose outputs this sequence carries
    start: int  # where the response starts (len(tokens) - response_length)
    trained: list[int] = field(default_factory=list)  # absolute positions with loss mask 1
    produced: dict[int, tuple[int, int]] = field(default_factory=dict)  # position -> (turn, output offset)


@dataclass
class RecordAudit:
    """The audit of one rollout: per recorded training sequence, then every breach found."""

    sequences: list[SequenceAudit]
    breaches: list[Breach]


def audit_record(rec: RunRecord) -> RecordAudit:
    """Check every invariant of one rollout (samples.jsonl line against traces.jsonl line); no model needed."""
    turns, seqs = rec.turns, rec.sequences
    layout = (rec.sample.get("train_metadata") or {}).get("layout") or "per_turn"
    status = str(rec.sample.get("status") or "")
    breaches: list[Breach] = []

    def breach(s: int, kind: BreachKind, detail: str, *, turn: int | None = None,
               position: int | None = None) -> None:
        breaches.append(Breach(line=rec.line, index=rec.index, sequence=s,
                               node=turns[turn]["node"] if turn is not None else None, turn=turn,
                               position=position, kind=kind, detail=detail))

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
    audits = [_audit_sequence(s, seq, turns, members, status, breach)
              for s, (seq, members) in enumerate(zip(seqs, _members(turns, seqs, expected, placeholder)))]
    if seqs:
        _audit_top_level(rec.sample, seqs[0], audits[0], breach)
    return RecordAudit(audits, breaches)


def is_placeholder(seq: Mapping[str, Any]) -> bool:
    """The two-token, all-masked sequence a rollout with nothing to train carries (slime needs one)."""
    return (len(seq.get("tokens") or []) == 2 and seq.get("response_length") == 1
            and not any(seq.get("loss_mask") or []) and not any(seq.get("rollout_log_probs") or []))


def _output_at_its_place(turn: Turn, tokens: Sequence[int], start: int) -> bool:
    a, o = len(turn["prompt_ids"]), turn["output_ids"]
    return bool(o) and a >= start and a + len(o) <= len(tokens) and list(tokens[a:a + len(o)]) == list(o)


def _members(turns: Sequence[Turn], seqs: Sequence[Mapping[str, Any]], expected: Sequence[TrainSequence],
             placeholder: bool) -> list[list[int]]:
    """Per recorded sequence: the turns the trace puts there (in order), then any other turn found there."""
    rebuilt = [list(expected[s]["turn_indices"]) if s < len(expected) and not placeholder else []
               for s in range(len(seqs))]
    taken = {i for members in rebuilt for i in members}
    out: list[list[int]] = []
    for members, seq in zip(rebuilt, seqs):
        tokens = seq.get("tokens") or []
        start = len(tokens) - int(seq.get("response_length") or 0)
        found = [i for i, turn in enumerate(turns) if i not in taken and _output_at_its_place(turn, tokens, start)]
        taken.update(found)
        out.append(members + found)
    return out


def _split_note(turns: Sequence[Turn], expected: Sequence[TrainSequence]) -> str:
    """Where the trace breaks a conversation's prefix (concat: a turn that does not extend the one before it)."""
    notes = []
    for seq in expected:
        i = seq["turn_indices"][0]
        conv = turns[i]["conversation"]
        prev = next((j for j in range(i - 1, -1, -1) if conv and turns[j]["conversation"] == conv), None)
        if prev is None:
            continue
        head = list(turns[prev]["prompt_ids"]) + list(turns[prev]["output_ids"])
        k = _first_difference(head, turns[i]["prompt_ids"])
        if k == len(head):
            continue
        notes.append(f"turn {i} ({turns[i]['node']!r}) does not extend turn {prev} ({turns[prev]['node']!r}) of "
                     f"conversation {conv!r}: its prompt differs at position {k}")
    return ": " + "; ".join(notes) if notes else ""


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _audit_sequence(s: int, seq: Mapping[str, Any], turns: Sequence[Turn], members: list[int], status: str,
                    breach: BreachFn) -> SequenceAudit:
    tokens = [int(t) for t in seq.get("tokens") or []]
    n = int(seq.get("response_length") or 0)
    mask = list(seq.get("loss_mask") or [])
    lps = [float(x) for x in seq.get("rollout_log_probs") or []]
    start = len(tokens) - n
    out = SequenceAudit(members=members, start=start)
    if not 0 < n < len(tokens):
        breach(s, "length", f"response_length {n} must be in 1..{len(tokens) - 1} (len(tokens) {len(tokens)})")
        return out
    if len(mask) != n or len(lps) != n:
        breach(s, "length", f"response_length {n} but {len(mask)} loss-mask entries and {len(lps)} log-probs")
        n = min(n, len(mask), len(lps))
    out.trained = [start + r for r in range(n) if mask[r]]
    produced = out.produced
    for t in members:
        _claim(s, t, turns[t], tokens, start, status, produced, breach)
    untraced: list[int] = []
    for k in range(start, start + n):
        r = k - start
        owner = produced.get(k)
        if mask[r]:
            if status == "failed":
                breach(s, "failed_trains", "a FAILED rollout trains this position (invariant 4)",
                       turn=owner[0] if owner else None, position=k)
            if owner is None:
                untraced.append(k)
                continue
            t, j = owner
            turn = turns[t]
            if not turn["trainable"]:
                breach(s, "untraced_token", "trained token comes from a turn recorded as not trainable",
                       turn=t, position=k)
            if tokens[k] != turn["output_ids"][j]:
                breach(s, "token_mismatch", f"trained token {tokens[k]} but the engine returned "
                                            f"{turn['output_ids'][j]} here (output offset {j}): a re-tokenised or "
                                            "edited span", turn=t, position=k)
            elif lps[r] != turn["output_logprobs"][j]:
                breach(s, "logprob_mismatch", f"trained log-prob {lps[r]!r} but the engine returned "
                                              f"{turn['output_logprobs'][j]!r} (delta "
                                              f"{lps[r] - turn['output_logprobs'][j]:.3g})", turn=t, position=k)
        else:
            if lps[r] != 0.0:
                breach(s, "masked_logprob", f"masked position carries log-prob {lps[r]!r} (must be 0.0)",
                       turn=owner[0] if owner else None, position=k)
            if (owner is not None and status != "failed" and turns[owner[0]]["trainable"]
                    and tokens[k] == turns[owner[0]]["output_ids"][owner[1]]):
                breach(s, "lost_mask", "the engine produced this token for a trainable turn but it is masked",
                       turn=owner[0], position=k)
    for first, last in _runs(untraced):
        what = f"trained token {tokens[first]}" if first == last else f"{last - first + 1} trained tokens (to {last})"
        before = next((produced[k][0] for k in range(first - 1, start - 1, -1) if k in produced), None)
        where = f" (after the output of turn {before})" if before is not None else ""
        breach(s, "untraced_token", f"{what}{where} produced by no engine call: glue, an observation, or a "
                                    "re-tokenised span", turn=before, position=first)
    return out


def _claim(s: int, t: int, turn: Turn, tokens: list[int], start: int, status: str,
           produced: dict[int, tuple[int, int]], breach: BreachFn) -> None:
    """Record which positions turn `t` produced in this sequence; a prompt it did not see is a breach."""
    p, o = turn["prompt_ids"], turn["output_ids"]
    a = len(p)
    if tokens[:a] != list(p):
        k = _first_difference(tokens, p)
        got = tokens[k] if k < len(tokens) else "end of sequence"
        want = p[k] if k < len(p) else "end of prompt"
        breach(s, "prompt", f"the sequence is not the prompt this turn's engine saw: token {got} where the "
                            f"engine saw {want} (prompt of {a} tokens, sequence of {len(tokens)})", turn=t, position=k)
        if not _output_at_its_place(turn, tokens, start):
            return  # its output is not where it would be either: those positions are nobody's
    for j in range(len(o)):
        produced.setdefault(a + j, (t, j))  # the trace's own members first: a look-alike never takes over
    if a < start and turn["trainable"] and o and status != "failed":
        breach(s, "lost_mask", f"the turn's output starts at position {a}, inside the prompt part "
                               f"(the response starts at {start}): it is never trained", turn=t, position=a)


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last) pairs."""
    out: list[tuple[int, int]] = []
    for k in positions:
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def _audit_top_level(sample: Mapping[str, Any], head: Mapping[str, Any], audit: SequenceAudit,
                     breach: BreachFn) -> None:
    """slime trains the top-level fields when rl_bridge.convert is not used: they must be sequence 0."""
    for key in TOP_LEVEL_KEYS:
        if key not in sample:
            breach(0, "top_level", f"the sample has no top-level {key!r}: slime trains the top-level fields "
                                   "unless rl_bridge.convert is used; they must equal train_metadata.turns[0]")
            continue
        got, want = sample[key], head.get(key)
        if got == want:
            continue
        if key == "response_length":
            breach(0, "top_level", f"top-level response_length {got!r} but training sequence 0 has {want!r}: "
                                   "slime would train another split of prompt and response")
            continue
        got_l, want_l = list(got or []), list(want or [])
        k = _first_difference(got_l, want_l)
        position = k if key == "tokens" else audit.start + k
        owner = audit.produced.get(position)
        here = (f"{got_l[k]!r} where sequence 0 has {want_l[k]!r}" if k < min(len(got_l), len(want_l))
                else f"{len(got_l)} entries where sequence 0 has {len(want_l)}")
        breach(0, "top_level", f"top-level {key} differs from training sequence 0 ({here}): what slime trains "
                               "without rl_bridge.convert is not the audited sequence",
               turn=owner[0] if owner else None, position=position)

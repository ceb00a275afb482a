"""The trace record (`Turn`), training sequences built from turns, and invariant checks.

A Turn is JSON-primitive so it can live in LangGraph state: checkpoints, replay, `langgraph dev`
and the viewer all see exactly what the engine returned. This module is plain Python: no LangGraph.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Collection, Literal, Mapping, Sequence, TypedDict

from .engines.base import MAX_LOGPROB, Completion, SamplingParams
from .errors import TraceError

Layout = Literal["per_turn", "concat"]
# how a trajectory's reward reaches its sequences: every one gets it whole, or it is divided among them
RewardSplit = Literal["broadcast", "divide"]

# The sampling settings that change a sampled token's distribution or its recorded log-prob. Each Turn
# records them (same names as SamplingParams and SGLang); a training sequence never mixes two of them.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


class Turn(TypedDict):
    """One engine call, exactly as it happened.

    `prompt_ids` is the full prompt the engine was given; `output_ids`/`output_logprobs` are what it
    returned, untouched. `conversation` names the append-only conversation the call extended
    ("" for a one-off prompt). `temperature`, `top_p`, `top_k` and `min_p` are the sampling the call was
    made with (SGLang's names and conventions: top_k -1 and min_p 0.0 mean off); None where an untrained
    call to a text server left the setting to the server's defaults (`call_llm(..., sampling_base="server")`);
    traces written before top_p/top_k/min_p were recorded have `temperature` only (`turn_sampling` reads both).
    """

    node: str
    conversation: str
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    trainable: bool
    finish_reason: str
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    engine: str
    weight_version: str | None
    rid: str
    text: str
    retries: int


class TrainSequence(TypedDict):
    """One training sequence in slime's shape: the response is the last `response_length` tokens."""

    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float]
    turn_indices: list[int]
    # the sampling its trained tokens were generated with (SAMPLING_KEYS); None when it trains nothing
    sampling: dict[str, Any] | None


def sampling_record(params: SamplingParams, sent: Collection[str] | None = None) -> dict[str, Any]:
    """The SAMPLING_KEYS of `params`, as a Turn records them (pass as `make_turn(..., **record)`). `sent`: the
    fields a text request carried (None: all); one left to the server's defaults is recorded as None, what
    the server chose being unknown here (such a call is never trained).

    >>> sampling_record(SamplingParams(temperature=0.5))
    {'temperature': 0.5, 'top_p': 1.0, 'top_k': -1, 'min_p': 0.0}
    >>> sampling_record(SamplingParams(temperature=0.5), sent={"temperature", "max_new_tokens"})
    {'temperature': 0.5, 'top_p': None, 'top_k': None, 'min_p': None}
    """
    record = {"temperature": float(params.temperature), "top_p": float(params.top_p), "top_k": int(params.top_k),
              "min_p": float(params.min_p)}
    return record if sent is None else {k: (v if k in sent else None) for k, v in record.items()}


def turn_sampling(turn: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling a turn was generated with; a key an older trace did not record is None.

    >>> turn_sampling({"temperature": 0.7})
    {'temperature': 0.7, 'top_p': None, 'top_k': None, 'min_p': None}
    """
    return {k: turn.get(k) for k in SAMPLING_KEYS}


class SamplingMismatch(TypedDict):
    """A trainable turn sampled with another setting than the trainer's (`sampling_mismatches`)."""

    turn: int
    node: str
    key: str
    recorded: Any
    expected: Any


def sampling_mismatches(turns: Sequence[Mapping[str, Any]], expected: Mapping[str, Any]) -> list[SamplingMismatch]:
    """Trainable turns (with output) whose sampling differs from `expected` (a subset of SAMPLING_KEYS);
    one entry per turn: its first differing key.

    >>> sampling_mismatches([{"node": "draft", "trainable": True, "output_ids": [1], "temperature": 0.5}],
    ...                     {"temperature": 1.0})
    [{'turn': 0, 'node': 'draft', 'key': 'temperature', 'recorded': 0.5, 'expected': 1.0}]
    """
    out: list[SamplingMismatch] = []
    for i, turn in enumerate(turns):
        if not turn.get("trainable") or not turn.get("output_ids"):
            continue
        recorded = turn_sampling(turn)
        for key, want in expected.items():
            if recorded[key] != want:
                out.append(SamplingMismatch(turn=i, node=str(turn.get("node", "")), key=key, recorded=recorded[key],
                                            expected=want))
                break
    return out


def make_turn(
    completion: Completion,
    *,
    node: str,
    prompt_ids: Sequence[int],
    trainable: bool,
    temperature: float | None,
    engine: str,
    conversation: str = "",
    top_p: float | None = 1.0,
    top_k: int | None = -1,
    min_p: float | None = 0.0,
) -> Turn:
    """Record a completion as a Turn (copies into plain lists; never re-tokenizes).

    Engine calls pass their whole sampling: `make_turn(..., **sampling_record(params))`. A setting left to a
    text server's defaults is None, and only an untrained turn may have one (TraceError otherwise).
    """
    unknown = [k for k, v in zip(SAMPLING_KEYS, (temperature, top_p, top_k, min_p)) if v is None]
    if trainable and unknown:
        raise TraceError(f"turn {node!r}: a trainable turn must record its whole sampling; {unknown} are None "
                         "(left to the server's defaults)")
    return Turn(
        node=node,
        conversation=conversation,
        prompt_ids=list(prompt_ids),
        output_ids=list(completion.token_ids),
        output_logprobs=[float(x) for x in completion.logprobs],
        trainable=trainable,
        finish_reason=completion.finish_reason,
        temperature=_maybe(float, temperature),
        top_p=_maybe(float, top_p),
        top_k=_maybe(int, top_k),
        min_p=_maybe(float, min_p),
        engine=engine,
        weight_version=completion.weight_version,
        rid=completion.rid,
        text=completion.text,
        retries=completion.retries,
    )


def _maybe(kind: type, value: Any) -> Any:
    return None if value is None else kind(value)


# -- which turn extends which ----------------------------------------------------------------------------
def extends(turn: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    """Whether `turn`'s prompt starts with `base`'s prompt + output ids: it continues `base` append-only.

    >>> extends({"prompt_ids": [1, 2, 3, 9]}, {"prompt_ids": [1, 2], "output_ids": [3]})
    True
    >>> extends({"prompt_ids": [1, 2, 4]}, {"prompt_ids": [1, 2], "output_ids": [3]})
    False
    """
    prompt, head, out = turn["prompt_ids"], base["prompt_ids"], base["output_ids"]
    a, b = len(head), len(out)
    return len(prompt) >= a + b and _ids(prompt[:a]) == _ids(head) and _ids(prompt[a:a + b]) == _ids(out)


def _ids(ids: Sequence[int]) -> list[int]:
    return ids if isinstance(ids, list) else list(ids)  # a list compares with a list only


def conversation_tail(turns: Sequence[Mapping[str, Any]], conversation: str, end: int | None = None) -> int | None:
    """The index of the last turn of `conversation` among `turns[:end]`; None when there is none or the
    conversation is "" (a one-off prompt belongs to no conversation).

    >>> conversation_tail([{"conversation": "a"}, {"conversation": "b"}, {"conversation": "a"}], "a", 2)
    0
    """
    if not conversation:
        return None
    for j in range(len(turns) if end is None else end, 0, -1):
        if turns[j - 1].get("conversation") == conversation:
            return j - 1
    return None


def extended_turn(turns: Sequence[Mapping[str, Any]], index: int) -> int | None:
    """The earlier turn `turns[index]` extends, or None (a fresh prompt): the last earlier turn of its
    conversation, when this turn's prompt starts with that turn's prompt + output ids (`extends`). A prefix
    break starts afresh. The one rule: `concat` sequences, the checkpoint codec's deltas, the viewer's
    chains and the debugger's glue all come from it.

    >>> a = {"conversation": "c", "prompt_ids": [1, 2], "output_ids": [3]}
    >>> b = {"conversation": "c", "prompt_ids": [1, 2, 3, 4], "output_ids": [5]}
    >>> extended_turn([a, b], 1), extended_turn([a, {**b, "prompt_ids": [1, 9]}], 1), extended_turn([a, b], 0)
    (0, None, None)
    """
    turn = turns[index]
    base = conversation_tail(turns, str(turn.get("conversation") or ""), index)
    return base if base is not None and extends(turn, turns[base]) else None


# -- training sequences ------------------------------------------------------------------------------------
def per_turn_sequences(turns: Sequence[Turn]) -> list[TrainSequence]:
    """Each trainable turn is its own sequence: prompt masked, response = the output ids."""
    out: list[TrainSequence] = []
    for i, turn in enumerate(turns):
        n = len(turn["output_ids"])
        if not turn["trainable"] or n == 0 or not turn["prompt_ids"]:
            continue  # nothing to train (slime reads an empty response as the whole sequence)
        out.append(
            TrainSequence(
                tokens=list(turn["prompt_ids"]) + list(turn["output_ids"]),
                response_length=n,
                loss_mask=[1] * n,
                rollout_log_probs=list(turn["output_logprobs"]),
                turn_indices=[i],
                sampling=turn_sampling(turn),
            )
        )
    return out


def concat_sequences(turns: Sequence[Turn]) -> list[TrainSequence]:
    """Merge turns of one conversation into one sequence wherever invariant 3 allows it.

    A turn joins the sequence of the turn it extends (`extended_turn`). Anything in between two outputs
    (template glue, tool observations) is masked with log-prob 0.0. A prefix break starts a new sequence;
    so does a trainable turn sampled differently (`turn_sampling`) from the trained turns of the sequence
    it would extend: one sequence is trained at one temperature. Sequences with no trainable token are
    dropped.
    """
    run_of: dict[int, list[int]] = {}  # turn -> the run (list of turn indices) it is in
    runs: list[list[int]] = []
    trained_sampling: dict[int, dict[str, Any]] = {}  # run (by its first turn) -> its trained turns' sampling
    for i, turn in enumerate(turns):
        mine = turn_sampling(turn) if turn["trainable"] else None
        base = extended_turn(turns, i)
        if base is not None:
            run = run_of[base]
            theirs = trained_sampling.get(run[0])
            if mine is None or theirs is None or mine == theirs:
                run.append(i)
                run_of[i] = run
                if mine is not None:
                    trained_sampling[run[0]] = mine
                continue
        run = [i]
        runs.append(run)
        run_of[i] = run
        if mine is not None:
            trained_sampling[i] = mine
    out = [_merge_run(turns, run) for run in runs]
    return [s for s in out if any(s["loss_mask"])]


def _merge_run(turns: Sequence[Turn], run: list[int]) -> TrainSequence:
    first = turns[run[0]]
    last = turns[run[-1]]
    tokens = list(last["prompt_ids"]) + list(last["output_ids"])
    start = len(first["prompt_ids"])
    n = len(tokens) - start
    mask = [0] * n
    logprobs = [0.0] * n
    for i in run:
        turn = turns[i]
        if not turn["trainable"]:
            continue
        a = len(turn["prompt_ids"]) - start
        for j, lp in enumerate(turn["output_logprobs"]):
            mask[a + j] = 1
            logprobs[a + j] = float(lp)
    trained = [turns[i] for i in run if turns[i]["trainable"]]
    return TrainSequence(
        tokens=tokens, response_length=n, loss_mask=mask, rollout_log_probs=logprobs, turn_indices=list(run),
        sampling=turn_sampling(trained[0]) if trained else None,
    )


def head_index(sequences: Sequence[Mapping[str, Any]]) -> int:
    """The sequence a Sample's top-level fields hold: the first that trains a token, else the first. So a
    top-level mask of all zeros means "train nothing" (rl_bridge.convert honours slime's zeroing of it).

    >>> head_index([{"loss_mask": [0, 0]}, {"loss_mask": [0, 1]}]), head_index([{"loss_mask": [0]}])
    (1, 0)
    """
    return next((k for k, seq in enumerate(sequences) if any(seq.get("loss_mask") or ())), 0)


def build_sequences(turns: Sequence[Turn], layout: Layout) -> list[TrainSequence]:
    """Turns -> training sequences. `per_turn`: one per trainable turn. `concat`: merged per conversation."""
    if layout == "per_turn":
        return per_turn_sequences(turns)
    if layout == "concat":
        return concat_sequences(turns)
    raise ValueError(f"layout must be 'per_turn' or 'concat', got {layout!r}")


# -- the invariant checker ---------------------------------------------------------------------------------
BreachKind = Literal["length", "turn", "sampling", "prompt", "untraced_token", "token_mismatch",
                     "logprob_mismatch", "masked_logprob", "lost_mask", "failed_trains", "mask_value"]


class SequenceBreach(TypedDict):
    """One breach of invariants 1-4 in a training sequence: what, where (absolute token position), whose."""

    kind: BreachKind
    position: int | None
    turn: int | None
    node: str | None
    message: str


class SequenceAudit:
    """One training sequence as checked (`audit_sequence`): the turns it carries, where each engine call's
    output sits in it (`spans`, and `produced` by position), and every breach found."""

    def __init__(self, members: Sequence[int], start: int, loss_mask: Sequence[int] = (), response: int = 0) -> None:
        self.members = members  # indices of the turns whose outputs this sequence carries
        self.start = start  # where the response starts (len(tokens) - response_length)
        self.spans: list[tuple[int, int, int]] = []  # (turn, a, b): the turn's output is at tokens[a:b]
        self.breaches: list[SequenceBreach] = []
        self._mask = loss_mask
        self._response = response  # response positions checked (fewer when the lengths disagree)

    def add(self, kind: BreachKind, message: str, *, turn: int | None = None, node: str | None = None,
            position: int | None = None) -> None:
        self.breaches.append(SequenceBreach(kind=kind, position=position, turn=turn, node=node, message=message))

    @functools.cached_property
    def produced(self) -> dict[int, tuple[int, int]]:
        """Absolute position -> (turn, output offset) of the engine call that produced it (a member turn
        first: a later look-alike never takes a position over)."""
        out: dict[int, tuple[int, int]] = {}
        for t, a, b in self.spans:
            for j in range(b - a):
                out.setdefault(a + j, (t, j))
        return out

    @functools.cached_property
    def trained(self) -> list[int]:
        """Absolute positions with loss mask 1."""
        return [self.start + r for r in range(self._response) if self._mask[r]]


def turn_problem(turn: Mapping[str, Any]) -> str | None:
    """What is wrong with a Turn record on its own (None: nothing): lengths, and log-probs that are not
    finite non-positive numbers (up to MAX_LOGPROB's rounding slack).

    >>> turn_problem({"output_ids": [1, 2], "output_logprobs": [-0.5]})
    '2 output ids but 1 log-probs'
    """
    n = len(turn["output_ids"])
    lps = turn["output_logprobs"]
    if len(lps) != n:
        return f"{n} output ids but {len(lps)} log-probs"
    if not lps or (all(map(math.isfinite, lps)) and max(lps) <= MAX_LOGPROB):
        return None  # the common case, checked in C; the loop below names the culprit
    for lp in lps:
        if not (lp <= MAX_LOGPROB and lp == lp and lp != float("-inf")):
            return f"log-prob {lp!r} is not a finite value <= {MAX_LOGPROB} (a log-prob)"
    return None


# what every reader of a Turn (the run's own checks, the viewer, the audit, a fork's edit) needs a record to hold;
# fields added later (top_p, ...) are read with defaults
TURN_RECORD_FIELDS: dict[str, type] = {"node": str, "prompt_ids": list, "output_ids": list, "output_logprobs": list,
                                       "trainable": bool}


def record_problem(obj: Any) -> str | None:
    """What keeps `obj` from being a Turn record (None: nothing): not an object, a field of TURN_RECORD_FIELDS
    missing or of another type, then `turn_problem`.

    >>> record_problem(5)
    "an int, not a Turn (an object with 'node', 'prompt_ids', 'output_ids', 'output_logprobs', 'trainable')"
    """
    if not isinstance(obj, Mapping):
        return (f"a{'n' if type(obj).__name__[0] in 'aeiou' else ''} {type(obj).__name__}, not a Turn (an object "
                f"with {', '.join(map(repr, TURN_RECORD_FIELDS))})")
    wrong = record_field_problem(obj)
    if wrong is not None:
        key, kind = wrong
        if kind is None:
            return f"a Turn without {key!r}"
        return f"a Turn whose {key!r} is a {type(obj[key]).__name__}, not a {kind.__name__}"
    return turn_problem(obj)


def record_field_problem(obj: Mapping[str, Any]) -> tuple[str, type | None] | None:
    """The first field of TURN_RECORD_FIELDS that `obj` lacks, as (key, None), or holds with another type, as
    (key, its type); None when every one is there. Each reader words it in its own terms (`record_problem`, the
    viewer's trace reader).

    >>> record_field_problem({"node": "n"}), record_field_problem({"node": 1})
    (('prompt_ids', None), ('node', <class 'str'>))
    """
    for key, kind in TURN_RECORD_FIELDS.items():
        if key not in obj:
            return key, None
        if not isinstance(obj[key], kind):
            return key, kind
    return None


def check_turn(turn: Turn) -> None:
    """Lengths agree and every log-prob is a finite non-positive number (TraceError otherwise)."""
    problem = turn_problem(turn)
    if problem is not None:
        raise TraceError(f"turn {turn['node']!r}: {problem}")


def audit_sequence(seq: Mapping[str, Any], turns: Sequence[Mapping[str, Any]], members: Sequence[int] | None = None,
                   *, failed: bool = False) -> SequenceAudit:
    """Every breach of invariants 2 and 3 in one training sequence, with its place; the one checker of the
    rollout (`check_sequence`), `agentgraphs check` and the viewer.

    `members` are the turns the sequence carries (default: its `turn_indices`); `failed` says the rollout
    FAILED, so nothing may be trained (invariant 4). Checked: the lengths (2); every member's record
    (`turn_problem`), that the sequence starts with the prompt the member's engine saw and holds its output
    ids right after it (3); each response position: a loss mask that is the int 0 or 1 (`mask_value_problem`),
    trained exactly where a trainable member's output sits,
    with exactly its token and log-prob, masked elsewhere with log-prob 0.0; and one sampling: the trained
    members were generated with one `turn_sampling`, the one the sequence's `sampling` names (when it has
    that key). A valid sequence is checked with list comparisons only; positions are walked one by one
    where something differs, to say where.

    >>> turns = [make_turn(Completion([5, 6], [-0.5, -1.5], "stop"), node="solve", prompt_ids=[1, 2],
    ...                    trainable=True, temperature=1.0, engine="e")]
    >>> [seq] = build_sequences(turns, "per_turn")
    >>> audit_sequence(seq, turns).breaches
    []
    >>> bad = {**seq, "loss_mask": [1, 0], "rollout_log_probs": [-0.5, 0.0]}
    >>> [(b["kind"], b["position"], b["node"]) for b in audit_sequence(bad, turns).breaches]
    [('lost_mask', 3, 'solve')]
    """
    tokens = _ids(seq.get("tokens") or [])
    n = int(seq.get("response_length") or 0)
    mask, lps = seq.get("loss_mask") or [], seq.get("rollout_log_probs") or []
    members = (seq.get("turn_indices") or []) if members is None else members
    start = len(tokens) - n
    if not 0 < n < len(tokens):
        audit = SequenceAudit(members, start)
        audit.add("length", f"response_length {n} must be in 1..{len(tokens) - 1} (len(tokens) {len(tokens)}): "
                            "slime needs a non-empty prompt and a non-empty response")
        return audit
    whole = len(mask) == n and len(lps) == n
    audit = SequenceAudit(members, start, mask, n if whole else min(n, len(mask), len(lps)))
    if not whole:
        audit.add("length", f"response_length {n} but {len(mask)} loss-mask entries and {len(lps)} log-probs")
    _audit_sampling(seq, turns, members, audit)
    for t in members:
        _claim(t, turns[t], tokens, start, failed, audit)
    if not (whole and _mask_types_hold(mask) and _positions_hold(tokens, start, n, mask, lps, turns, audit.spans,
                                                                  failed)):
        _audit_positions(tokens, start, audit._response, mask, lps, turns, audit, failed)
    return audit


def check_sequence(seq: TrainSequence, turns: Sequence[Turn]) -> None:
    """Invariants 2 and 3 for one sequence, against the turns it claims to carry: TraceError naming the
    first breach `audit_sequence` finds.

    2: len(tokens) = prompt_len + response_length; mask and log-probs have response_length entries;
       masked positions carry 0.0.
    3: every trained span [a, b) from turn c has tokens[:a] == c.prompt_ids, tokens[a:b] == c.output_ids,
       and exactly c's log-probs.
    And one sampling: every trained turn of the sequence was generated with the same `turn_sampling`,
    the one the sequence's `sampling` names (when it has that key).
    """
    breaches = audit_sequence(seq, turns).breaches
    if breaches:
        raise TraceError(breaches[0]["message"])


def _node(turns: Sequence[Mapping[str, Any]], turn: int | None) -> str | None:
    return str(turns[turn].get("node", "")) if turn is not None else None


def _audit_sampling(seq: Mapping[str, Any], turns: Sequence[Mapping[str, Any]], members: Sequence[int],
                    audit: SequenceAudit) -> None:
    first: tuple[int, dict[str, Any]] | None = None
    for i in members:
        if not turns[i]["trainable"]:
            continue
        sampling = turn_sampling(turns[i])
        if first is None:
            first = (i, sampling)
        elif sampling != first[1]:
            audit.add("sampling", f"one training sequence mixes samplings: turn {first[0]} "
                                  f"({turns[first[0]]['node']!r}) {first[1]} and turn {i} ({turns[i]['node']!r}) "
                                  f"{sampling}", turn=i, node=_node(turns, i))
    trained = first[1] if first else None
    if "sampling" in seq and seq["sampling"] != trained:
        t = first[0] if first else None
        audit.add("sampling", f"sequence says it was sampled with {seq['sampling']}, its trained turns with "
                              f"{trained}", turn=t, node=_node(turns, t))


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The first position where two id lists differ (the shorter one's length when one starts the other).

    >>> first_difference([1, 2, 3], [1, 5]), first_difference([1, 2], [1, 2, 3])
    (1, 2)
    """
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def prompt_differences(tokens: Sequence[int], prompt: Sequence[int]) -> int:
    """How many positions of `prompt` the sequence `tokens` does not hold (another id, or past its end).

    >>> prompt_differences([1, 9, 3, 8], [1, 2, 3, 4]), prompt_differences([1, 2], [1, 2, 3, 4])
    (2, 2)
    """
    return sum(map(operator.ne, tokens[:len(prompt)], prompt)) + max(0, len(prompt) - len(tokens))


def output_in_place(turn: Mapping[str, Any], tokens: Sequence[int], start: int) -> bool:
    """Whether `turn`'s (non-empty) output ids sit in `tokens` right after its prompt length, in the response
    part (from `start`): where the turn trains when the sequence carries it."""
    a, o = len(turn["prompt_ids"]), turn["output_ids"]
    return bool(o) and a >= start and a + len(o) <= len(tokens) and _ids(tokens[a:a + len(o)]) == _ids(o)


def _claim(t: int, turn: Mapping[str, Any], tokens: list[int], start: int, failed: bool, audit: SequenceAudit) -> None:
    """Check one member's record and prompt, and record where its output sits in the sequence."""
    problem = turn_problem(turn)
    if problem is not None:
        audit.add("turn", f"turn {t} ({turn['node']!r}): {problem}", turn=t, node=str(turn["node"]))
    p, o = turn["prompt_ids"], turn["output_ids"]
    a = len(p)
    if tokens[:a] != _ids(p):
        k = first_difference(tokens, p)
        got = tokens[k] if k < len(tokens) else "end of sequence"
        want = p[k] if k < len(p) else "end of prompt"
        more = prompt_differences(tokens, p) - 1
        audit.add("prompt", f"the sequence is not the prompt this turn's engine saw: token {got} where the engine "
                            f"saw {want} (prompt of {a} tokens, sequence of {len(tokens)})"
                            f"{f'; {more} more of its positions differ' if more else ''}", turn=t,
                  node=str(turn["node"]), position=k)
        if not output_in_place(turn, tokens, start):
            return  # its output is not where it would be either: those positions are nobody's
    audit.spans.append((t, a, min(a + len(o), len(tokens))))
    if not turn["trainable"] or not o or failed:
        return
    if a < start:
        audit.add("lost_mask", f"the turn's output starts at position {a}, inside the prompt part (the response "
                               f"starts at {start}): it is never trained", turn=t, node=str(turn["node"]), position=a)
    if a + len(o) > len(tokens):
        audit.add("lost_mask", f"the turn's output runs to position {a + len(o)}, past the end of the sequence "
                               f"({len(tokens)} tokens): its last {a + len(o) - len(tokens)} tokens are never "
                               "trained", turn=t, node=str(turn["node"]))


def _mask_types_hold(mask: Sequence[Any]) -> bool:
    """Whether every loss-mask entry is a Python int (a bool or a float such as 1.0 or 0.5 is not): with that,
    `_positions_hold`'s list comparison admits exactly 0 and 1."""
    return set(map(type, mask)) <= {int}


def mask_value_problem(value: Any) -> str | None:
    """What is wrong with one loss-mask entry (None: it is the int 0 or 1).

    >>> mask_value_problem(1), mask_value_problem(0.5), mask_value_problem(True)
    (None, 'loss mask 0.5 (float) is not the int 0 or 1', 'loss mask True (bool) is not the int 0 or 1')
    """
    if type(value) is int and value in (0, 1):
        return None
    return f"loss mask {value!r} ({type(value).__name__}) is not the int 0 or 1"


def _positions_hold(tokens: list[int], start: int, n: int, mask: Sequence[int], lps: Sequence[float],
                    turns: Sequence[Mapping[str, Any]], spans: list[tuple[int, int, int]], failed: bool) -> bool:
    """Whether every response position is exactly as the members' outputs say (list comparisons only)."""
    want_mask, want_lps = [0] * n, [0.0] * n
    end = start
    for t, a, b in spans if all(spans[i][1] <= spans[i + 1][1] for i in range(len(spans) - 1)) else sorted(
            spans, key=lambda s: s[1]):
        if a < end or b > start + n:
            return False  # overlapping outputs, or one outside the response: let the walk say where
        end = b
        turn = turns[t]
        if failed or not turn["trainable"]:
            continue
        out = turn["output_ids"]
        if b - a != len(out) or tokens[a:b] != _ids(out):
            return False
        want_mask[a - start:b - start] = [1] * (b - a)
        want_lps[a - start:b - start] = turn["output_logprobs"]
    return _ids(mask) == want_mask and _ids(lps) == want_lps


def _audit_positions(tokens: list[int], start: int, n: int, mask: Sequence[int], lps: Sequence[float],
                     turns: Sequence[Mapping[str, Any]], audit: SequenceAudit, failed: bool) -> None:
    """Walk the response position by position: every breach, where it is."""
    produced = audit.produced
    untraced: list[int] = []
    for k in range(start, start + n):
        r = k - start
        owner = produced.get(k)
        t = owner[0] if owner else None
        problem = mask_value_problem(mask[r])
        if problem is not None:
            audit.add("mask_value", f"{problem}: slime multiplies this token's loss by it; a loss mask holds 0 "
                                    "(not trained) or 1 (trained) only", turn=t, node=_node(turns, t), position=k)
        if mask[r]:
            if failed:
                audit.add("failed_trains", "a FAILED rollout trains this position (invariant 4)", turn=t,
                          node=_node(turns, t), position=k)
            if owner is None:
                untraced.append(k)
                continue
            j = owner[1]
            turn = turns[owner[0]]
            if not turn["trainable"]:
                audit.add("untraced_token", "trained token comes from a turn recorded as not trainable", turn=t,
                          node=_node(turns, t), position=k)
            if tokens[k] != turn["output_ids"][j]:
                audit.add("token_mismatch", f"trained token {tokens[k]} but the engine returned "
                                            f"{turn['output_ids'][j]} here (output offset {j}): a re-tokenised or "
                                            "edited span", turn=t, node=_node(turns, t), position=k)
            elif lps[r] != turn["output_logprobs"][j]:
                audit.add("logprob_mismatch", f"trained log-prob {lps[r]!r} but the engine returned "
                                              f"{turn['output_logprobs'][j]!r} (delta "
                                              f"{lps[r] - turn['output_logprobs'][j]:.3g})", turn=t,
                          node=_node(turns, t), position=k)
            continue
        if lps[r] != 0.0:
            audit.add("masked_logprob", f"masked position carries log-prob {lps[r]!r} (must be 0.0)", turn=t,
                      node=_node(turns, t), position=k)
        if owner is not None and not failed and turns[owner[0]]["trainable"]:
            j = owner[1]
            engine_token = turns[owner[0]]["output_ids"][j]
            if tokens[k] == engine_token:
                audit.add("lost_mask", "the engine produced this token for a trainable turn but it is masked",
                          turn=t, node=_node(turns, t), position=k)
            else:
                audit.add("token_mismatch", f"masked token {tokens[k]} where the engine returned {engine_token} "
                                            f"for a trainable turn (output offset {j})", turn=t,
                          node=_node(turns, t), position=k)
    for first, last in _runs(untraced):
        what = f"trained token {tokens[first]}" if first == last else f"{last - first + 1} trained tokens (to {last})"
        before = next((produced[k][0] for k in range(first - 1, start - 1, -1) if k in produced), None)
        where = f" (after the output of turn {before})" if before is not None else ""
        audit.add("untraced_token", f"{what}{where} produced by no engine call: glue, an observation, or a "
                                    "re-tokenised span", turn=before, node=_node(turns, before), position=first)


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last) pairs."""
    out: list[tuple[int, int]] = []
    for k in positions:
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def check_trace(turns: Sequence[Turn], layout: Layout = "per_turn") -> list[TrainSequence]:
    """Build the sequences of a finished run and check invariants 1-3 on each; returns them.

    >>> check_trace([], "per_turn")
    []
    """
    for turn in turns:
        check_turn(turn)
    seqs = build_sequences(turns, layout)
    for seq in seqs:
        check_sequence(seq, turns)
    trained = {i for s in seqs for i in s["turn_indices"] if turns[i]["trainable"]}
    missing = [i for i, t in enumerate(turns) if t["trainable"] and t["output_ids"] and i not in trained]
    if missing:
        raise TraceError(f"trainable turns {missing} ended up in no training sequence")
    return seqs

"""The trace record (`Turn`), training sequences built from turns, and invariant checks.

A Turn is JSON-primitive so it can live in LangGraph state: checkpoints, replay, `langgraph dev`
and the viewer all see exactly what the engine returned. This module is plain Python: no LangGraph.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping, Sequence, TypedDict

from .engines.base import MAX_LOGPROB, Completion, SamplingParams
from .errors import TraceError

Layout = Literal["per_turn", "concat"]

# The sampling settings that change a sampled token's distribution or its recorded log-prob. Each Turn
# records them (same names as SamplingParams and SGLang); a training sequence never mixes two of them.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


class Turn(TypedDict):
    """One engine call, exactly as it happened.

    `prompt_ids` is the full prompt the engine was given; `output_ids`/`output_logprobs` are what it
    returned, untouched. `conversation` names the append-only conversation the call extended
    ("" for a one-off prompt). `temperature`, `top_p`, `top_k` and `min_p` are the sampling the call was
    made with (SGLang's names and conventions: top_k -1 and min_p 0.0 mean off); traces written before
    top_p/top_k/min_p were recorded have `temperature` only (`turn_sampling` reads both).
    """

    node: str
    conversation: str
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    trainable: bool
    finish_reason: str
    temperature: float
    top_p: float
    top_k: int
    min_p: float
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


def sampling_record(params: SamplingParams) -> dict[str, Any]:
    """The SAMPLING_KEYS of `params`, as a Turn records them (pass as `make_turn(..., **record)`).

    >>> sampling_record(SamplingParams(temperature=0.5))
    {'temperature': 0.5, 'top_p': 1.0, 'top_k': -1, 'min_p': 0.0}
    """
    return {"temperature": float(params.temperature), "top_p": float(params.top_p), "top_k": int(params.top_k),
            "min_p": float(params.min_p)}


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
    temperature: float,
    engine: str,
    conversation: str = "",
    top_p: float = 1.0,
    top_k: int = -1,
    min_p: float = 0.0,
) -> Turn:
    """Record a completion as a Turn (copies into plain lists; never re-tokenizes).

    Engine calls pass their whole sampling: `make_turn(..., **sampling_record(params))`.
    """
    return Turn(
        node=node,
        conversation=conversation,
        prompt_ids=list(prompt_ids),
        output_ids=list(completion.token_ids),
        output_logprobs=[float(x) for x in completion.logprobs],
        trainable=trainable,
        finish_reason=completion.finish_reason,
        temperature=float(temperature),
        top_p=float(top_p),
        top_k=int(top_k),
        min_p=float(min_p),
        engine=engine,
        weight_version=completion.weight_version,
        rid=completion.rid,
        text=completion.text,
        retries=completion.retries,
    )


def _is_prefix(prefix: Sequence[int], seq: Sequence[int]) -> bool:
    return len(prefix) <= len(seq) and list(seq[: len(prefix)]) == list(prefix)


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

    Turn k+1 joins the sequence of turn k only if its prompt starts with everything the sequence
    holds so far (prompt + outputs + glue). Anything in between two outputs (template glue, tool
    observations) is masked with log-prob 0.0. A prefix break starts a new sequence; so does a
    trainable turn sampled differently (`turn_sampling`) from the trained turns of the sequence it would
    extend: one sequence is trained at one temperature. Sequences with no trainable token are dropped.
    """
    open_runs: dict[str, list[int]] = {}
    runs: list[list[int]] = []
    trained_sampling: dict[int, dict[str, Any]] = {}  # run (by its first turn) -> its trained turns' sampling
    for i, turn in enumerate(turns):
        key = turn["conversation"]
        run = open_runs.get(key) if key else None
        if run is not None:
            last = turns[run[-1]]
            mine = turn_sampling(turn) if turn["trainable"] else None
            theirs = trained_sampling.get(run[0])
            if (_is_prefix(list(last["prompt_ids"]) + list(last["output_ids"]), turn["prompt_ids"])
                    and (mine is None or theirs is None or mine == theirs)):
                run.append(i)
                if mine is not None:
                    trained_sampling[run[0]] = mine
                continue
        run = [i]
        runs.append(run)
        if turn["trainable"]:
            trained_sampling[i] = turn_sampling(turn)
        if key:
            open_runs[key] = run
    runs.sort(key=lambda r: r[0])
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


def build_sequences(turns: Sequence[Turn], layout: Layout) -> list[TrainSequence]:
    """Turns -> training sequences. `per_turn`: one per trainable turn. `concat`: merged per conversation."""
    if layout == "per_turn":
        return per_turn_sequences(turns)
    if layout == "concat":
        return concat_sequences(turns)
    raise ValueError(f"layout must be 'per_turn' or 'concat', got {layout!r}")


def check_turn(turn: Turn) -> None:
    """Lengths agree and every log-prob is a finite non-positive number."""
    n = len(turn["output_ids"])
    if len(turn["output_logprobs"]) != n:
        raise TraceError(f"turn {turn['node']!r}: {n} output ids but {len(turn['output_logprobs'])} log-probs")
    lps = turn["output_logprobs"]
    if lps and all(map(math.isfinite, lps)) and max(lps) <= MAX_LOGPROB:
        return  # the common case, checked in C; the loop below names the culprit
    for lp in lps:
        if not (lp <= MAX_LOGPROB and lp == lp and lp != float("-inf")):
            raise TraceError(f"turn {turn['node']!r}: log-prob {lp!r} is not a finite value <= {MAX_LOGPROB} (a log-prob)")


def check_sequence(seq: TrainSequence, turns: Sequence[Turn]) -> None:
    """Invariants 2 and 3 for one sequence, against the turns it claims to carry.

    2: len(tokens) = prompt_len + response_length; mask and log-probs have response_length entries;
       masked positions carry 0.0.
    3: every trained span [a, b) from turn c has tokens[:a] == c.prompt_ids, tokens[a:b] == c.output_ids,
       and exactly c's log-probs.
    And one sampling: every trained turn of the sequence was generated with the same `turn_sampling`,
    the one the sequence's `sampling` names (when it has that key).
    """
    n = seq["response_length"]
    tokens = seq["tokens"]
    if not 0 < n < len(tokens):
        raise TraceError(f"response_length {n} must be in 1..{len(tokens) - 1}: slime needs a non-empty prompt "
                         "and a non-empty response")
    if len(seq["loss_mask"]) != n or len(seq["rollout_log_probs"]) != n:
        raise TraceError(
            f"response_length {n} but {len(seq['loss_mask'])} mask entries and "
            f"{len(seq['rollout_log_probs'])} log-probs"
        )
    start = len(tokens) - n
    mask, seq_lps = seq["loss_mask"], seq["rollout_log_probs"]
    _check_one_sampling(seq, turns)
    spans: list[tuple[int, int]] = []
    for i in seq["turn_indices"]:
        turn = turns[i]
        check_turn(turn)
        if not turn["trainable"]:
            continue
        a = len(turn["prompt_ids"])
        b = a + len(turn["output_ids"])
        if tokens[:a] != list(turn["prompt_ids"]):
            raise TraceError(f"turn {i} ({turn['node']!r}): sequence prefix differs from the prompt it was generated from")
        if tokens[a:b] != list(turn["output_ids"]):
            raise TraceError(f"turn {i} ({turn['node']!r}): trained span differs from the engine's output ids")
        if a < start:
            raise TraceError(f"turn {i} ({turn['node']!r}): output starts inside the masked prompt")
        s, e = a - start, b - start
        spans.append((s, e))
        if mask[s:e] == [1] * (e - s) and seq_lps[s:e] == list(turn["output_logprobs"]):
            continue  # the common case, compared in C; the loop names the first bad position
        for j, lp in enumerate(turn["output_logprobs"]):
            k = s + j
            if mask[k] != 1 or seq_lps[k] != lp:
                raise TraceError(f"turn {i}: position {k} lost its mask or its exact log-prob")
    cursor = 0
    for s, e in sorted(spans) + [(n, n)]:  # outside the trained spans: mask 0 and log-prob 0.0
        if s > cursor and (any(mask[cursor:s]) or any(seq_lps[cursor:s])):
            for k in range(cursor, s):
                if mask[k]:
                    raise TraceError(f"position {k} is trained but no engine output produced it")
                if seq_lps[k] != 0.0:
                    raise TraceError(f"position {k} is masked but carries log-prob {seq_lps[k]}")
        cursor = max(cursor, e)


def _check_one_sampling(seq: Mapping[str, Any], turns: Sequence[Turn]) -> None:
    first: tuple[int, dict[str, Any]] | None = None
    for i in seq["turn_indices"]:
        if not turns[i]["trainable"]:
            continue
        sampling = turn_sampling(turns[i])
        if first is None:
            first = (i, sampling)
        elif sampling != first[1]:
            raise TraceError(f"one training sequence mixes samplings: turn {first[0]} ({turns[first[0]]['node']!r}) "
                             f"{first[1]} and turn {i} ({turns[i]['node']!r}) {sampling}")
    if "sampling" in seq and seq["sampling"] != (first[1] if first else None):
        raise TraceError(f"sequence says it was sampled with {seq['sampling']}, its trained turns with "
                         f"{first[1] if first else None}")


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

"""Turns -> training sequences, and the invariant checks any user can run on a finished trace."""

from __future__ import annotations

import copy

import pytest

from agentgraphs.errors import TraceError
from agentgraphs.trace import Turn, audit_sequence, build_sequences, check_sequence, check_trace, extended_turn


def turn(prompt: list[int], out: list[int], *, conv: str = "c", trainable: bool = True,
         lp: float = -0.5, finish: str = "stop", node: str = "n") -> Turn:
    return Turn(node=node, conversation=conv, prompt_ids=prompt, output_ids=out,
                output_logprobs=[lp - 0.01 * i for i in range(len(out))], trainable=trainable,
                finish_reason=finish, temperature=1.0, engine="test", weight_version=None, rid="r",
                text="", retries=0)


def conversation() -> list[Turn]:
    t1 = turn([1, 2, 3], [10, 11, 99])
    t2 = turn([1, 2, 3, 10, 11, 99, 50, 51], [12, 99])  # glue [50, 51]
    t3 = turn([1, 2, 3, 10, 11, 99, 50, 51, 12, 99, 60], [13, 14, 99])
    return [t1, t2, t3]


def test_per_turn_one_sequence_per_trainable_turn() -> None:
    turns = conversation()
    turns[1]["trainable"] = False
    seqs = check_trace(turns, "per_turn")
    assert [s["turn_indices"] for s in seqs] == [[0], [2]]
    s = seqs[1]
    assert s["tokens"] == turns[2]["prompt_ids"] + turns[2]["output_ids"]
    assert s["response_length"] == 3 and s["loss_mask"] == [1, 1, 1]
    assert s["rollout_log_probs"] == turns[2]["output_logprobs"]


def test_concat_merges_exact_prefixes_and_masks_glue() -> None:
    turns = conversation()
    [seq] = check_trace(turns, "concat")
    assert seq["tokens"] == turns[2]["prompt_ids"] + turns[2]["output_ids"]
    assert seq["response_length"] == len(seq["tokens"]) - 3
    #            10 11 99 50 51 12 99 60 13 14 99
    assert seq["loss_mask"] == [1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1]
    glue_lps = [seq["rollout_log_probs"][i] for i in (3, 4, 7)]
    assert glue_lps == [0.0, 0.0, 0.0]
    assert seq["rollout_log_probs"][5:7] == turns[1]["output_logprobs"]


def test_concat_masks_untrainable_turn_inside_the_sequence() -> None:
    turns = conversation()
    turns[1]["trainable"] = False
    [seq] = check_trace(turns, "concat")
    assert seq["loss_mask"][5:7] == [0, 0] and seq["rollout_log_probs"][5:7] == [0.0, 0.0]


def test_concat_splits_where_the_prefix_breaks() -> None:
    turns = conversation()
    turns[2]["prompt_ids"] = [1, 2, 3, 10, 11, 98, 50, 51, 12, 99, 60]  # history was re-rendered
    seqs = check_trace(turns, "concat")
    assert [s["turn_indices"] for s in seqs] == [[0, 1], [2]]


def test_concat_keeps_separate_conversations_apart() -> None:
    a = turn([1], [2, 99], conv="a")
    b = turn([5], [6, 99], conv="b")
    a2 = turn([1, 2, 99, 7], [8, 99], conv="a")
    seqs = check_trace([a, b, a2], "concat")
    assert [s["turn_indices"] for s in seqs] == [[0, 2], [1]]


def test_sequence_without_trainable_tokens_is_dropped() -> None:
    t = turn([1], [2], trainable=False)
    assert build_sequences([t], "concat") == [] and build_sequences([t], "per_turn") == []


@pytest.mark.parametrize("tamper", ["token", "logprob", "mask", "glue_logprob", "length"])
def test_check_sequence_catches_tampering(tamper: str) -> None:
    turns = conversation()
    [seq] = build_sequences(turns, "concat")
    bad = copy.deepcopy(seq)
    if tamper == "token":
        bad["tokens"][4] = 12345  # inside the first output
    elif tamper == "logprob":
        bad["rollout_log_probs"][0] += 1e-3
    elif tamper == "mask":
        bad["loss_mask"][3] = 1  # glue claimed as trained
    elif tamper == "glue_logprob":
        bad["rollout_log_probs"][3] = -0.1
    else:
        bad["loss_mask"].append(0)
    with pytest.raises(TraceError):
        check_sequence(bad, turns)


def test_bad_layout_and_bad_logprobs() -> None:
    with pytest.raises(ValueError):
        build_sequences([], "zigzag")  # type: ignore[arg-type]
    t = turn([1], [2, 3])
    t["output_logprobs"] = [-0.1]
    with pytest.raises(TraceError):
        check_trace([t])
    t["output_logprobs"] = [float("nan"), -0.1]
    with pytest.raises(TraceError):
        check_trace([t])


def test_empty_outputs_make_no_sequence_and_prompts_must_not_be_empty() -> None:
    t = turn([1, 2], [])
    assert build_sequences([t], "per_turn") == [] and build_sequences([t], "concat") == []
    seq = {"tokens": [5, 6], "response_length": 2, "loss_mask": [1, 1], "rollout_log_probs": [-0.1, -0.2],
           "turn_indices": []}
    with pytest.raises(TraceError, match="non-empty prompt"):
        check_sequence(seq, [])  # type: ignore[arg-type]


def test_extended_turn_is_the_last_turn_of_the_conversation_when_its_prompt_starts_with_it() -> None:
    turns = conversation()
    other = turn([1, 2, 3, 10, 11, 99, 70], [71], conv="x")  # the same ids, another conversation: a fresh prompt
    once = turn([1, 2, 3, 10, 11, 99], [5], conv="")  # a one-off prompt extends nothing
    broken = turn([1, 2, 3, 10, 11, 98], [6])  # "c" again, but the prefix breaks: starts afresh
    after = turn([1, 2, 3, 10, 11, 98, 6, 7], [8])  # extends the broken one, the last turn of "c"
    trace = [*turns, other, once, broken, after]
    assert [extended_turn(trace, i) for i in range(len(trace))] == [None, 0, 1, None, None, None, 5]
    assert [s["turn_indices"] for s in build_sequences(trace, "concat")] == [[0, 1, 2], [3], [4], [5, 6]]


def _breaches(seq: dict, turns: list[Turn], **kw: object) -> list[tuple[str, int | None, int | None]]:
    return [(b["kind"], b["position"], b["turn"]) for b in audit_sequence(seq, turns, **kw).breaches]  # type: ignore[arg-type]


def test_audit_sequence_names_every_breach_and_its_position() -> None:
    turns = conversation()
    [seq] = build_sequences(turns, "concat")
    assert _breaches(seq, turns) == []
    # tokens: 1 2 3 | 10 11 99 50 51 12 99 60 13 14 99  (positions 3.. are the response)
    bad = copy.deepcopy(seq)
    bad["loss_mask"][3] = 1  # glue claimed as trained: no engine produced position 6
    bad["rollout_log_probs"][0] += 1e-3  # position 3: not the engine's log-prob
    bad["loss_mask"][9] = 0  # position 12 (turn 2's second token): generated for a trainable turn, masked
    bad["rollout_log_probs"][9] = 0.0
    bad["rollout_log_probs"][4] = -0.25  # position 7 (glue): masked, yet a log-prob
    assert _breaches(bad, turns) == [("logprob_mismatch", 3, 0), ("masked_logprob", 7, None), ("lost_mask", 12, 2),
                                     ("untraced_token", 6, 0)]  # runs of untraced tokens come last
    with pytest.raises(TraceError, match="trained log-prob"):  # the rollout's check raises the first one
        check_sequence(bad, turns)
    failed = _breaches({**seq, "loss_mask": [0] * 11, "rollout_log_probs": [0.0] * 11}, turns, failed=True)
    assert failed == []  # a FAILED rollout's all-zero sequence holds (invariant 4) ...
    assert _breaches(seq, turns, failed=True)[0] == ("failed_trains", 3, 0)  # ... a trained one does not


def test_audit_sequence_checks_the_prompt_and_the_sampling() -> None:
    turns = conversation()
    [seq] = build_sequences(turns, "concat")
    moved = {**seq, "tokens": [1, 5, 3, *seq["tokens"][3:]]}  # not the prompt turn 0 saw, from position 1
    assert [(k, p, t) for k, p, t in _breaches(moved, turns) if k == "prompt"] == [("prompt", 1, 0), ("prompt", 1, 1),
                                                                                     ("prompt", 1, 2)]
    hotter = {**seq, "sampling": {**seq["sampling"], "temperature": 0.7}}
    assert _breaches(hotter, turns) == [("sampling", None, 0)]
    mixed = copy.deepcopy(turns)
    mixed[2]["temperature"] = 0.5
    assert ("sampling", None, 2) in _breaches(seq, mixed)


@pytest.mark.parametrize("value", [2, 0.5, True, 1.0, -1])
def test_a_loss_mask_is_the_int_0_or_1(value: object) -> None:
    """slime multiplies each token's loss by its mask: a 2 or a 0.5 is no trained token (and a bool or a 1.0 is
    not what the library writes): each is a breach at its position, and the rollout's check raises."""
    turns = conversation()
    [seq] = build_sequences(turns, "concat")
    bad = copy.deepcopy(seq)
    bad["loss_mask"][1] = value  # position 4: turn 0's second output token
    assert ("mask_value", 4, 0) in _breaches(bad, turns)
    with pytest.raises(TraceError, match=f"loss mask {value!r} .* is not the int 0 or 1"):
        check_sequence(bad, turns)


def test_a_prompt_breach_counts_every_differing_position() -> None:
    turns = conversation()
    [seq] = build_sequences(turns, "concat")
    moved = {**seq, "tokens": [1, 5, 6, *seq["tokens"][3:]]}  # positions 1 and 2 differ
    [first, *_] = audit_sequence(moved, turns).breaches
    assert (first["kind"], first["position"]) == ("prompt", 1) and "1 more of its positions differ" in first["message"]

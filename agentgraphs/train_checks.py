"""The checks a batch of trajectory Samples passes before it becomes training rows (agentgraphs.train_data):
invariant 2 on every sequence, a trainable reward, slime's own changes to a Sample after generate, and which
slime made it. Each failure is a ValueError naming the sample (its position and index) and the fix.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any, NoReturn

import numpy as np

from .trace import head_index, mask_value_problem

__all__ = ["check_lengths", "check_masks", "masked_after_generate", "reward_of", "sample_name", "sample_status",
           "slime_v03"]


def slime_v03(sample: Any, version: Any = None) -> bool:
    """Whether slime >= 0.3 made this Sample: `version` (agentgraph_slime_version) when given, else the
    Sample's own fields (rollout_id, or v0.3.0's group_id).

    >>> slime_v03(object(), "0.3.1"), slime_v03(object())
    (True, False)
    """
    if version:
        return _version_tuple(version) >= (0, 3)
    # v0.3.0's Sample raises AttributeError on reading rollout_id (it became group_id): hasattr is safe.
    return hasattr(sample, "rollout_id") or hasattr(sample, "group_id")


def _version_tuple(version: Any) -> tuple[int, ...]:
    parts = re.findall(r"\d+", str(version).lstrip("vV").split("+")[0])[:3]
    if not parts:
        raise ValueError(f"agentgraph_slime_version {version!r} is not a version like '0.3.1'")
    return tuple(int(p) for p in parts)


def reward_of(sample, reward_key: str | None, pos: int) -> float:
    reward = getattr(sample, "reward", None)
    if isinstance(reward, dict):
        if not reward_key:
            raise ValueError(
                f"sample {sample_name(pos, sample)}: reward is a dict {sorted(reward)}; select one with --reward-key"
            )
        if reward_key not in reward:
            raise ValueError(
                f"sample {sample_name(pos, sample)}: reward dict has no key {reward_key!r} (--reward-key); "
                f"keys: {sorted(reward)}"
            )
        reward = reward[reward_key]
    if reward is None:
        raise ValueError(
            f"sample {sample_name(pos, sample)} has no reward: every sample passed to training must be rewarded "
            "(slime's reward model runs on all non-aborted samples)"
        )
    try:
        value = float(reward)
    except (TypeError, ValueError):
        raise ValueError(f"sample {sample_name(pos, sample)}: reward {reward!r} is not a number") from None
    if not np.isfinite(value):  # rl_bridge.generate refuses these; a second wall for rewards set elsewhere
        raise ValueError(f"sample {sample_name(pos, sample)}: reward {value} is not finite: one NaN or infinite "
                         "reward makes every advantage of its group NaN. Make the reward function return a finite "
                         "float")
    return value


def masked_after_generate(pos: int, sample, seqs) -> bool:
    """True when the Sample's top-level loss_mask was zeroed after generate set it: slime's
    --partial-rollout --mask-offpolicy-in-partial-rollout does so to a sample carried over from an earlier
    rollout (its tokens are off-policy), and a whole-sample mask of zeros means "train nothing".
    generate sets the top level to the first sequence that trains a token (trace.head_index), so any
    other change to it is not ours to guess about: ValueError."""
    top = getattr(sample, "loss_mask", None)
    head = seqs[head_index(seqs)] if seqs else None
    if top is None or head is None or list(top) == list(head.get("loss_mask") or ()):
        return False
    if not any(top):
        return True
    raise ValueError(
        f"sample {sample_name(pos, sample)}: its top-level loss_mask was changed after rl_bridge.generate set it "
        "(it no longer matches its first trained sequence), but training reads train_metadata['turns']. "
        "Change masks through the graph (trainable=False) or zero the whole top-level mask to train nothing")


def check_lengths(pos, sample, k, toks, n, mask, lps) -> None:
    """Invariant 2, the length part (the masked-log-prob part runs in bulk in `check_masks`)."""
    if not isinstance(n, (int, np.integer)) or not 0 < n < len(toks):
        # slime reads the response's log-probs from the logits at prompt_len-1 .. len-2: both the
        # prompt and the response must be non-empty
        problem = f"response_length {n!r} must be in 1..len(tokens)-1={len(toks) - 1}"
    elif mask is not None and len(mask) != n:
        problem = f"len(loss_mask)={len(mask)} != response_length={n}"
    elif lps is not None and len(lps) != n:
        problem = f"len(rollout_log_probs)={len(lps)} != response_length={n}"
    else:
        return
    raise ValueError(f"sample {sample_name(pos, sample)}, sequence {k}: {problem}")


def check_masks(samples, masks, owner, to_check) -> None:
    """Masks hold only the ints 0 and 1 (a bool, or a float such as 1.0 or 0.5, is refused: slime multiplies
    each token's loss by its mask); masked positions carry log-prob 0.0. One pass over all tokens."""
    kinds = set(map(type, chain.from_iterable(masks)))
    if not all(issubclass(k, (int, np.integer)) and not issubclass(k, (bool, np.bool_)) for k in kinds):
        _refuse_mask_value(samples, masks, owner)
    total = sum(len(m) for m in masks)
    try:
        flat = np.fromiter(chain.from_iterable(masks), dtype=np.int64, count=total)  # exact: every entry is an int
    except OverflowError:
        _refuse_mask_value(samples, masks, owner)
    if ((flat != 0) & (flat != 1)).any():
        _refuse_mask_value(samples, masks, owner)
    if not to_check:
        return
    sizes = [len(m) for _, _, m, _ in to_check]
    n = sum(sizes)
    # a zeroed sample's own mask is not checked above: float64 keeps a 0.5 from reading as 0
    m = np.fromiter(chain.from_iterable(t[2] for t in to_check), dtype=np.float64, count=n)
    lp = np.fromiter(chain.from_iterable(t[3] for t in to_check), dtype=np.float64, count=n)
    bad = np.flatnonzero((m == 0) & (lp != 0.0))
    if bad.size:
        ends = np.cumsum(sizes)
        i = int(np.searchsorted(ends, bad[0], side="right"))
        pos, k, _, _ = to_check[i]
        slot = int(bad[0] - (ends[i] - sizes[i]))
        raise ValueError(
            f"sample {sample_name(pos, samples[pos])}, sequence {k}: masked response position {slot} carries "
            f"log-prob {float(lp[bad[0]])!r}, must be 0.0"
        )


def _refuse_mask_value(samples, masks, owner) -> NoReturn:
    """ValueError naming the first loss-mask entry that is not the int 0 or 1 (`trace.mask_value_problem`, a
    numpy integer read as its int): its sample, sequence and slot."""
    for row, mask in enumerate(masks):
        for slot, value in enumerate(mask):
            problem = mask_value_problem(int(value) if isinstance(value, np.integer) else value)
            if problem is None:
                continue
            pos = owner[row]
            k = row - owner.index(pos)
            raise ValueError(
                f"sample {sample_name(pos, samples[pos])}, sequence {k}: loss_mask holds {value!r} "
                f"({type(value).__name__}) at response position {slot}, not 0/1: a loss mask is the int 0 (not "
                "trained) or 1 (trained); write the sequences with rl_bridge.generate, or mask turns through the "
                "graph (trainable=False)")
    raise ValueError("a loss_mask holds a value other than 0/1")  # not reached: the loop names it


def sample_status(sample) -> str:
    status = getattr(sample, "status", None)
    return str(getattr(status, "value", status) or "").lower()


def sample_name(pos: int, sample) -> str:
    return f"#{pos} (index={getattr(sample, 'index', None)})"

"""Trajectories -> GRPO training rows: group normalisation and expansion into sequences. The one path.

`rl_bridge.convert` (slime's `--custom-convert-samples-to-train-data-path` hook) is a thin adapter over
`to_train_data`; the learning check (`agentgraphs.testing.grpo`) trains on the same rows. A custom
converter replaces slime's own `_convert_samples_to_train_data` *and* its reward normalisation
(`_post_process_rewards`), so both live here. Pure Python + numpy: slime is never imported; samples are
duck-typed (any object with slime's `Sample` attributes works). Settings come from slime's args through
`TrainDataSettings.from_args` (field names below are the settings' names; the slime flag is in brackets).

Trajectories and sequences
    A trajectory Sample carries its training sequences in `sample.train_metadata["turns"]`, a list
    of dicts in `TrainSequence` shape ({tokens, response_length, loss_mask, rollout_log_probs}, extra
    keys ignored). Without `train_metadata["turns"]` the Sample itself is one sequence.
    `train_metadata["reward_split"]` is "broadcast" (default: every sequence gets the trajectory's
    reward, as in the MemAgent and AgentFlow papers) or "divide" (each gets reward / n_sequences).

Reward normalisation (only for the estimators slime normalises, and only with
`rewards_normalization` [--disable-rewards-normalization], slime's default)
    grpo, gspo, cispo:             (r - mean) / (std + 1e-6), std only with grpo_std_normalization
    reinforce_plus_plus_baseline:  r - mean
    anything else (ppo, ...):      raw rewards
    std is the unbiased (n - 1) standard deviation, as `torch.Tensor.std`. A group of one gets 0.0
    where torch would give NaN. Groups follow `sample.group_index` (slime's prompt id); samples with
    group_index None fall back to consecutive blocks of n_samples_per_prompt, when every sample has none
    and they make whole blocks (else ValueError: a partial or mixed group would be made up). (slime itself
    reshapes to (-1, n_samples_per_prompt) only when the batch is exactly n * rollout_batch_size
    samples, else normalises the whole batch as one group.) Computed in float64; slime uses float32.

    group_by [agentgraph_group_by] selects what one group member is:
      "trajectory" (default): one value per trajectory (its raw reward) is normalised within its
          prompt group, then broadcast or divided over the trajectory's sequences.
      "sequence" (Flow-GRPO): every sequence of every rollout of a prompt is one member, carrying its
          trajectory's reward (already divided when reward_split is "divide"); a trajectory with more
          sequences weighs more in the mean.

Named reward shapings (agentgraphs.shaping)
    A trajectory whose `train_metadata["reward_shaping"]` is {"name", "weights", "features"} (set by its
    spec's `reward_shaping`, e.g. ToolOrchestra's "cost_aware") has its group shaped instead of
    GRPO-normalised; every member of such a group must carry the same shaping. A shaped group without
    signal is dropped: advantage 0 and all-zero loss masks (counted in agentgraph_dropped_trajectories).
    A member whose shaping says "train": false (ToolOrchestra's seed variant: a rollout that never
    answered) keeps its place in the group's statistics and its value on its rows, with all-zero loss
    masks (counted in agentgraph_untrained_trajectories). Without rewards normalisation the shaped scores
    are used unstandardised.

Failed trajectories
    status FAILED or remove_sample=True: sequences keep their tokens, get an all-zero loss mask and
    0.0 log-probs (invariant 4: never train garbage). So does a trajectory whose top-level loss_mask was
    zeroed after generate set it (slime's --mask-offpolicy-in-partial-rollout on a sample carried over
    from an earlier rollout; counted in agentgraph_offpolicy_masked_trajectories); any other change to
    the top-level mask is a ValueError, since training reads train_metadata["turns"]. A FAILED
    trajectory (an infrastructure or graph failure, not a wrong answer) is also left out of its group's
    mean/std and gets reward 0, so a timeout does not shift the baseline of the others;
    `failed_in_group_stats: true` [agentgraph_failed_in_group_stats] counts it with its reward, as
    slime does with removed samples. An ABORTED trajectory (slime drops those of its own end-of-rollout
    abort, or re-queues them with --partial-rollout; one aborted elsewhere reaches the converter) is
    treated as FAILED whatever that setting says, warned about and counted in
    agentgraph_aborted_trajectories. A sample without a reward must not reach training: ValueError.

Output keys
    v0.2.x: tokens, response_lengths, rewards (normalised), raw_reward (the trajectory's raw reward,
    unsplit), truncated, sample_indices (the trajectory's sample.index), loss_masks, and
    rollout_log_probs when every sequence has them (some without: ValueError). One entry per sequence.
    slime >= 0.3 (samples have `rollout_id` or `group_id`, or slime_version [agentgraph_slime_version] >= "0.3")
    ALSO: rollout_ids + rollout_mask_sums (v0.3.1+) and group_ids + group_mask_sums (v0.3.0's names
    for the same thing; each version copies only the keys it knows). Every sequence of a trajectory
    shares one id (the sample's rollout_id/group_id, else its index, else a fresh unused integer);
    the mask sum is the loss-mask total of all sequences with that id.
    agentgraph_trimmed_sequences: rows dropped by trimming (slime copies only the keys it knows, so
    it ignores this one).

Trimming (v0.2.x only)
    slime v0.2.x trims *samples* to a multiple of global_batch_size before calling the converter;
    the trainer then counts each *row* as a batch member (steps = rows // global_batch_size per
    rank). Expanding trajectories breaks that multiple, so rows are trimmed again here, from the end,
    unless disable_rollout_trim_samples, use_dynamic_global_batch_size or debug_rollout_only is set.
    Normalisation happens before trimming, over whole groups.
    slime >= 0.3 counts global_batch_size in rollouts and drops trailing rollouts itself
    (slime/utils/dp_schedule.py), keeping a rollout's rows together, so nothing is trimmed here.

Batch layouts refused (ValueError at the first step that has a trajectory of several rows)
    slime 0.2.x with use_dynamic_global_batch_size [--use-dynamic-global-batch-size]: slime sizes the
    batch from the trajectory count, so ranks would get different step counts from the rows.
    slime >= 0.3 with static_micro_batches (no --use-dynamic-batch-size): its fixed-size micro-batches
    need a step's row count to be a multiple of dp_size x micro_batch_size, and that count varies.

Known incompatibility: --log-passrate reshapes raw_reward to (rollout_batch_size, n_samples_per_prompt)
and asserts its length, which fails once a trajectory yields more than one row.
"""

from __future__ import annotations

import logging
from itertools import chain
from typing import Any, Iterable, Literal, Optional, Sequence, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import validation_message
from .trace import RewardSplit
from .train_checks import (
    check_lengths,
    check_masks,
    masked_after_generate,
    reward_of,
    sample_name,
    sample_status,
    slime_v03,
)

__all__ = [
    "TrainDataSettings",
    "to_train_data",
    "normalize_by_group",
    "MEAN_CENTERED_ESTIMATORS",
    "STD_NORMALIZED_ESTIMATORS",
    "REWARD_SPLITS",
    "GROUP_BY",
]

logger = logging.getLogger(__name__)

# slime/ray/rollout.py::_post_process_rewards (v0.2.2: without cispo; v0.3.1 adds it).
MEAN_CENTERED_ESTIMATORS = frozenset({"grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"})
STD_NORMALIZED_ESTIMATORS = frozenset({"grpo", "gspo", "cispo"})
REWARD_SPLITS: tuple[RewardSplit, ...] = get_args(RewardSplit)
GROUP_BY = ("trajectory", "sequence")
EPS = 1e-6


class TrainDataSettings(BaseModel):
    """How trajectories become training rows; `from_args` reads them from slime's args.

    >>> TrainDataSettings(n_samples_per_prompt=4).group_by
    'trajectory'
    """

    model_config = ConfigDict(extra="forbid")

    advantage_estimator: str = Field("grpo", description="slime --advantage-estimator")
    rewards_normalization: bool = Field(True, description="False with slime --disable-rewards-normalization")
    grpo_std_normalization: bool = Field(True, description="False with --disable-grpo-std-normalization")
    n_samples_per_prompt: int = Field(1, ge=1, description="group size where samples carry no group_index")
    reward_key: Optional[str] = Field(None, description="--reward-key: the scalar of a dict reward")
    group_by: Literal["trajectory", "sequence"] = Field(
        "trajectory", description="agentgraph_group_by: one group member per trajectory or per sequence")
    failed_in_group_stats: bool = Field(False, description="agentgraph_failed_in_group_stats")
    slime_version: Optional[str] = Field(None, description="agentgraph_slime_version: force v0.3 keys")
    static_micro_batches: bool = Field(False, description="slime without --use-dynamic-batch-size")
    dynamic_global_batch_size: bool = Field(False, description="slime --use-dynamic-global-batch-size")
    global_batch_size: Optional[int] = Field(None, ge=1, description="v0.2.x trims rows to a multiple")
    trim: bool = Field(True, description="False when slime does not trim (dynamic batch, debug, disabled)")

    @classmethod
    def from_args(cls, args: Any) -> "TrainDataSettings":
        """Read slime's args (argparse namespace plus the YAML's agentgraph_* keys); errors name the key."""
        def get(name: str, default: Any) -> Any:
            value = getattr(args, name, None)
            return default if value is None else value

        values = {
            "advantage_estimator": get("advantage_estimator", "grpo"),
            "rewards_normalization": bool(get("rewards_normalization", True)),
            "grpo_std_normalization": bool(get("grpo_std_normalization", True)),
            "n_samples_per_prompt": max(int(get("n_samples_per_prompt", 1) or 1), 1),
            "reward_key": getattr(args, "reward_key", None),
            "group_by": get("agentgraph_group_by", "trajectory"),
            "failed_in_group_stats": bool(get("agentgraph_failed_in_group_stats", False)),
            "slime_version": None if getattr(args, "agentgraph_slime_version", None) is None
            else str(args.agentgraph_slime_version),
            "global_batch_size": getattr(args, "global_batch_size", None) or None,
            # only flags slime set count (an attribute missing from args means "not slime")
            "static_micro_batches": hasattr(args, "use_dynamic_batch_size") and not args.use_dynamic_batch_size,
            "dynamic_global_batch_size": bool(get("use_dynamic_global_batch_size", False)),
            "trim": not (get("disable_rollout_trim_samples", False) or get("use_dynamic_global_batch_size", False)
                         or get("debug_rollout_only", False)),
        }
        try:
            return cls(**values)
        except ValidationError as exc:
            args = {"group_by": "agentgraph_group_by"}  # the settings slime's YAML names otherwise
            raise ValueError(validation_message(exc, label=lambda key: args.get(key, key or "settings"))) from None


def to_train_data(samples: Sequence[Any], settings: TrainDataSettings) -> dict[str, Any]:
    """Flat list of (trajectory) Samples -> train-data dict, one row per training sequence."""
    samples = _flatten(samples)
    if not samples:
        raise ValueError("convert: got no samples")
    group_by = settings.group_by
    reward_key = settings.reward_key

    tokens: list[Any] = []
    response_lengths: list[int] = []
    loss_masks: list[list[int]] = []
    log_probs: list[Any] = []
    owner: list[int] = []  # row -> sample position
    raw = np.empty(len(samples), dtype=np.float64)
    n_seqs = np.zeros(len(samples), dtype=np.int64)
    divide = np.zeros(len(samples), dtype=bool)
    truncated_of: list[int] = []
    to_check: list[tuple[int, int, list[int], Any]] = []  # (pos, seq, mask, log-probs) with masked slots
    masked_after = 0  # trajectories whose top-level mask slime zeroed after generate (off-policy)
    aborted = 0

    for pos, sample in enumerate(samples):
        status = sample_status(sample)
        # slime drops the ABORTED results of its own end-of-rollout abort (re-queues them with
        # --partial-rollout); one aborted elsewhere reaches us: it trains nothing, like a FAILED one
        aborted += status == "aborted"
        raw[pos] = 0.0 if status == "aborted" else reward_of(sample, reward_key, pos)
        meta = getattr(sample, "train_metadata", None) or {}
        split = meta.get("reward_split") or "broadcast"
        if split not in REWARD_SPLITS:
            raise ValueError(f"sample {sample_name(pos, sample)}: reward_split must be one of {REWARD_SPLITS}, "
                             f"got {split!r}")
        divide[pos] = split == "divide"
        zero = bool(getattr(sample, "remove_sample", False)) or status in ("failed", "aborted")
        truncated_of.append(1 if status == "truncated" else 0)
        seqs = meta.get("turns")
        if seqs is None:
            seqs = [_as_sequence(sample)]
        elif not zero and masked_after_generate(pos, sample, seqs):
            zero = True
            masked_after += 1
        n_seqs[pos] = len(seqs)
        for k, seq in enumerate(seqs):
            toks, n, mask, lps = seq["tokens"], seq["response_length"], seq.get("loss_mask"), seq.get("rollout_log_probs")
            check_lengths(pos, sample, k, toks, n, mask, lps)
            if mask is None:
                mask = [1] * n
            elif lps is not None and 0 in mask:
                to_check.append((pos, k, mask, lps))
            if zero:
                mask = [0] * n
                lps = None if lps is None else [0.0] * n
            tokens.append(toks)
            response_lengths.append(n)
            loss_masks.append(mask)
            log_probs.append(lps)
            owner.append(pos)

    check_masks(samples, loss_masks, owner, to_check)
    _check_layout(settings, samples, n_seqs)
    if aborted:
        logger.warning("convert: %d ABORTED trajectories reached training (an abort slime did not make): they "
                       "train nothing and stay out of their groups' statistics", aborted)
    if masked_after:
        logger.info("convert: %d trajectories trained nothing: their top-level loss_mask was zeroed after "
                    "generate (slime's --mask-offpolicy-in-partial-rollout)", masked_after)

    rows = np.asarray(owner, dtype=np.int64)
    rewards, dropped, untrained = _rewards(settings, samples, raw, n_seqs, divide, rows, group_by)
    for row, pos in enumerate(owner):  # a shaped group without signal, or a member it does not train
        if pos in dropped or pos in untrained:
            loss_masks[row] = [0] * response_lengths[row]
            if log_probs[row] is not None:
                log_probs[row] = [0.0] * response_lengths[row]
    data: dict[str, Any] = {
        "tokens": tokens,
        "response_lengths": response_lengths,
        "rewards": rewards.tolist(),
        "raw_reward": raw[rows].tolist(),
        "truncated": [truncated_of[p] for p in owner],
        "sample_indices": [getattr(samples[p], "index", None) for p in owner],
        "loss_masks": loss_masks,
    }
    if any((getattr(x, "train_metadata", None) or {}).get("reward_shaping") for x in samples):
        data["agentgraph_dropped_trajectories"] = len(dropped)
        data["agentgraph_untrained_trajectories"] = len(untrained - dropped)
    if masked_after:
        data["agentgraph_offpolicy_masked_trajectories"] = masked_after
    if aborted:
        data["agentgraph_aborted_trajectories"] = aborted
    missing = [row for row, lp in enumerate(log_probs) if lp is None]
    if missing and len(missing) < len(log_probs):  # slime forwards them all or none (it reads the first sample)
        pos = owner[missing[0]]
        raise ValueError(f"sample {sample_name(pos, samples[pos])}: a sequence without rollout_log_probs in a batch "
                         f"whose other sequences carry them ({len(missing)} of {len(log_probs)} lack them): training "
                         "would either drop every sequence's or read None; make every sample with "
                         "rl_bridge.generate (which records them all), or none with them")
    if not missing:
        data["rollout_log_probs"] = log_probs

    if _is_v03(settings, samples):
        ids_of = _rollout_ids(samples)
        ids = [ids_of[p] for p in owner]
        total: dict[int, int] = {}
        for rid, mask in zip(ids, loss_masks):
            total[rid] = total.get(rid, 0) + sum(mask)
        sums = [total[rid] for rid in ids]
        data["rollout_ids"], data["group_ids"] = ids, list(ids)
        data["rollout_mask_sums"], data["group_mask_sums"] = sums, list(sums)
        data["agentgraph_trimmed_sequences"] = 0
    else:
        data["agentgraph_trimmed_sequences"] = _trim(settings, data)
    return data


def normalize_by_group(values: Iterable[float], groups: Iterable[int], *, std: bool, eps: float = EPS) -> np.ndarray:
    """Per-group `v - mean`, divided by `(unbiased std + eps)` when `std`. Singleton groups give 0.0.

    >>> normalize_by_group([1.0, 0.0, 5.0], [0, 0, 1], std=False).tolist()
    [0.5, -0.5, 0.0]
    """
    v = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)
    _, inv = np.unique(np.asarray(list(groups) if not isinstance(groups, np.ndarray) else groups), return_inverse=True)
    inv = inv.reshape(-1)
    if v.size == 0:
        return v
    counts = np.bincount(inv).astype(np.float64)
    centered = v - (np.bincount(inv, weights=v) / counts)[inv]
    if std:
        ss = np.bincount(inv, weights=centered * centered)
        var = np.divide(ss, counts - 1, out=np.zeros_like(ss), where=counts > 1)
        centered = centered / (np.sqrt(var)[inv] + eps)
    return centered


def _rewards(settings: TrainDataSettings, samples, raw, n_seqs, divide, owner, group_by
             ) -> tuple[np.ndarray, set[int], set[int]]:
    """Per-row rewards; the sample positions of dropped shaped groups, and of shaped members not trained."""
    estimator = settings.advantage_estimator
    normalise = settings.rewards_normalization and estimator in MEAN_CENTERED_ESTIMATORS
    use_std = settings.grpo_std_normalization and estimator in STD_NORMALIZED_ESTIMATORS
    share = np.where(divide, 1.0 / np.maximum(n_seqs, 1), 1.0)  # per sample: multiplier of its reward per row
    if owner.size == 0:
        return np.zeros(0), set(), set()
    groups = _groups(settings, samples)
    # A FAILED trajectory is an infrastructure failure, not a bad answer: by default it stays out of its
    # group's mean/std (else three correct answers would be "rewarded" because a fourth timed out) and
    # gets advantage 0. agentgraph_failed_in_group_stats: true keeps slime's behaviour (reward 0 counted).
    left_out = ("aborted",) if settings.failed_in_group_stats else ("failed", "aborted")
    keep = np.array([sample_status(x) not in left_out for x in samples], dtype=bool)
    shaped, dropped, untrained = _shaped(samples, raw, groups, keep, standardise=normalise)
    out = _normalised(raw, share, owner, groups, keep, normalise, use_std, group_by)
    for row, pos in enumerate(owner.tolist()):
        if pos in shaped:
            out[row] = shaped[pos] * share[pos]
    return out, dropped, untrained


def _shaped(samples, raw, groups, keep, *, standardise: bool) -> tuple[dict[int, float], set[int], set[int]]:
    """Named group shapings (agentgraphs.shaping): sample position -> value, the positions of dropped groups
    (value 0, masked), and the positions masked with their value kept (members the shaping does not train)."""
    specs = [(getattr(x, "train_metadata", None) or {}).get("reward_shaping") for x in samples]
    values: dict[int, float] = {}
    dropped: set[int] = set()
    untrained: set[int] = set()
    if not any(specs):
        return values, dropped, untrained
    from .shaping import shape_group

    for g in np.unique(groups):
        members = [int(p) for p in np.flatnonzero(groups == g) if keep[p]]
        named = {specs[p]["name"] for p in members if specs[p]}
        if not named:
            continue
        if len(named) > 1 or any(not specs[p] for p in members):
            raise ValueError(f"group of samples {members}: every member must use the same reward shaping, got "
                             f"{[specs[p] and specs[p]['name'] for p in members]}")
        shaped = shape_group(named.pop(), raw[members], [specs[p] for p in members], standardise=standardise)
        values.update(zip(members, shaped.values.tolist()))
        if shaped.dropped:
            dropped.update(members)
        untrained.update(p for p, t in zip(members, shaped.trained.tolist()) if not t)
    return values, dropped, untrained


def _normalised(raw, share, owner, groups, keep, normalise, use_std, group_by) -> np.ndarray:
    if not normalise:
        return (raw * share)[owner]
    if group_by == "trajectory":
        out = np.zeros(len(raw))
        out[keep] = normalize_by_group(raw[keep], groups[keep], std=use_std)
        return (out * share)[owner]
    rows_keep = keep[owner]
    out = np.zeros(owner.size)
    out[rows_keep] = normalize_by_group((raw * share)[owner][rows_keep], groups[owner][rows_keep], std=use_std)
    return out


def _groups(settings: TrainDataSettings, samples) -> np.ndarray:
    """Prompt group per sample: group_index, else consecutive blocks of n_samples_per_prompt (every sample
    without one, and a whole number of blocks: a partial block or a mixed batch would be a group made up)."""
    n = settings.n_samples_per_prompt
    indexed = [getattr(sample, "group_index", None) for sample in samples]
    missing = sum(gi is None for gi in indexed)
    if missing and missing < len(samples):
        raise ValueError(f"group_index: {missing} of {len(samples)} samples carry none while the others do, so "
                         "their prompt groups cannot be told: give every sample its group_index (slime's prompt "
                         "id; rl_bridge.generate keeps the one slime set) or none")
    if missing and len(samples) % n:
        raise ValueError(f"group_index: no sample carries one, and {len(samples)} samples are not whole blocks of "
                         f"n_samples_per_prompt={n} (the last group would have {len(samples) % n}): give the "
                         "samples their group_index, or pass whole groups with --n-samples-per-prompt set to their "
                         "size")
    keys: dict[tuple[str, int], int] = {}
    out = np.empty(len(samples), dtype=np.int64)
    for pos, gi in enumerate(indexed):
        key = ("g", gi) if gi is not None else ("b", pos // n)
        out[pos] = keys.setdefault(key, len(keys))
    return out


def _trim(settings: TrainDataSettings, data: dict[str, Any]) -> int:
    """v0.2.x: drop rows from the end to a multiple of global_batch_size; returns how many."""
    gbs = settings.global_batch_size
    if not gbs or not settings.trim:
        return 0
    n = len(data["tokens"])
    keep = (n // gbs) * gbs
    if keep == n:
        return 0
    if keep == 0:
        raise ValueError(f"Not enough training sequences {n} for global_batch_size {gbs}")
    for key in ("tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices",
                "loss_masks", "rollout_log_probs"):
        if key in data:
            del data[key][keep:]
    logger.info("agentgraphs convert: trimmed training sequences from %d to %d (global_batch_size %d)", n, keep, gbs)
    return n - keep


def _is_v03(settings: TrainDataSettings, samples) -> bool:
    return slime_v03(samples[0], settings.slime_version)


def _rollout_ids(samples) -> list[int]:
    """One id per sample: its rollout_id/group_id, else its index, else the smallest unused integer."""
    own = [_own_id(s) for s in samples]
    used = {rid for rid in own if rid is not None}
    out: list[int] = []
    fresh = 0
    for sample, rid in zip(samples, own):
        if rid is None:
            index = getattr(sample, "index", None)
            if index is not None and index not in used:
                rid = index
            else:
                while fresh in used:
                    fresh += 1
                rid = fresh
            used.add(rid)
        out.append(rid)
    return out


def _own_id(sample) -> Any:
    for attr in ("rollout_id", "group_id"):
        value = getattr(sample, attr, None)
        if value is not None:
            return value
    return None


def _as_sequence(sample) -> dict[str, Any]:
    return {
        "tokens": sample.tokens,
        "response_length": sample.response_length,
        "loss_mask": sample.loss_mask,
        "rollout_log_probs": sample.rollout_log_probs,
    }


def _check_layout(settings: TrainDataSettings, samples, n_seqs) -> None:
    """slime batch layouts that cannot take a trajectory of several rows: refused at the first step."""
    if not (n_seqs > 1).any():
        return
    if _is_v03(settings, samples) and settings.static_micro_batches:
        raise ValueError(
            "convert: a trajectory yields several training rows, so a step's row count varies, and slime >= 0.3's "
            "fixed-size micro-batches (no --use-dynamic-batch-size) need it to be a multiple of dp_size x "
            "micro_batch_size (slime/utils/dp_schedule.py asserts it mid-run). Pass --use-dynamic-batch-size "
            "--max-tokens-per-gpu N, as the examples' launch scripts do")
    if not _is_v03(settings, samples) and settings.dynamic_global_batch_size:
        raise ValueError(
            "convert: --use-dynamic-global-batch-size on slime 0.2.x sizes the batch from the trajectory count, "
            "but a trajectory yields several training rows: data-parallel ranks would get different step counts "
            "(a hang) or --balance-data's equal split would fail. Drop --use-dynamic-global-batch-size, or use "
            "slime >= 0.3, which counts the global batch in rollouts")


def _flatten(samples) -> list[Any]:
    out = list(samples)
    while out and isinstance(out[0], list):
        out = list(chain.from_iterable(out))
    return out

"""rl_bridge.convert: slime's converter hook, checked against hand-computed GRPO values.

The fixture: two prompt groups with unequal turn counts (12 training sequences in all).
    group 0: A (3 sequences, reward 1.0), B (1 sequence, reward 0.0)
    group 1: C (2 sequences, reward 1.0), D (2 sequences, reward 0.0), E (4 sequences, reward 0.5)
Rows come out in sample order: A A A B C C D D E E E E.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from agentgraphs.testing.slime_sample import Sample, SampleV03
from rl_bridge.convert import convert, normalize_by_group

Status = Sample.Status


def seq(n: int = 3, prompt: int = 4, *, masked: tuple[int, ...] = (), start: int = 100) -> dict:
    """A TrainSequence-shaped dict; `masked` response positions carry mask 0 and log-prob 0.0."""
    mask = [0 if i in masked else 1 for i in range(n)]
    return {
        "tokens": list(range(start, start + prompt + n)),
        "response_length": n,
        "loss_mask": mask,
        "rollout_log_probs": [0.0 if m == 0 else -0.25 - 0.01 * i for i, m in enumerate(mask)],
        "turn_indices": [0],
    }


def traj(group: int | None, index: int, n_seqs: int, reward, *, split: str | None = None, cls=Sample, **kw):
    meta = {"turns": [seq(2 + k, masked=(1,) if k == 1 else (), start=10 * index + k) for k in range(n_seqs)]}
    if split:
        meta["reward_split"] = split
    kw.setdefault("status", Status.COMPLETED)
    return cls(group_index=group, index=index, reward=reward, train_metadata=meta, **kw)


def batch(split: str | None = None, cls=Sample) -> list:
    return [
        traj(0, 0, 3, 1.0, split=split, cls=cls),  # A
        traj(0, 1, 1, 0.0, split=split, cls=cls),  # B
        traj(1, 2, 2, 1.0, split=split, cls=cls),  # C
        traj(1, 3, 2, 0.0, split=split, cls=cls),  # D
        traj(1, 4, 4, 0.5, split=split, cls=cls),  # E
    ]


def make_args(**kw) -> SimpleNamespace:
    base = dict(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=2,
        rollout_batch_size=2,
        global_batch_size=None,
        reward_key=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def rows(a, b, c, d, e) -> list[float]:
    """Expand one value per trajectory to the 12 rows A A A B C C D D E E E E."""
    return [a] * 3 + [b] + [c] * 2 + [d] * 2 + [e] * 4


# --- GRPO values, worked by hand -------------------------------------------------------------------
# Trajectory grouping. group 0 rewards (1, 0): mean 0.5, centred +-0.5, unbiased std sqrt(0.5) = 0.7071067811865476,
#   0.5 / (0.7071067811865476 + 1e-6) = 0.7071057811879616.
# group 1 rewards (1, 0, 0.5): mean 0.5, centred (0.5, -0.5, 0), unbiased std sqrt(0.5 / 2) = 0.5,
#   0.5 / (0.5 + 1e-6) = 0.999998000004.
G0 = 0.7071057811879616
G1 = 0.999998000004
TRAJ_STD_BROADCAST = rows(G0, -G0, G1, -G1, 0.0)
TRAJ_STD_DIVIDE = rows(0.23570192706265387, -G0, 0.499999000002, -0.499999000002, 0.0)  # A: G0 / 3, C, D: / 2
TRAJ_MEAN_BROADCAST = rows(0.5, -0.5, 0.5, -0.5, 0.0)
TRAJ_MEAN_DIVIDE = rows(0.5 / 3, -0.5, 0.25, -0.25, 0.0)
# Sequence grouping (Flow-GRPO), broadcast. group 0 rows (1, 1, 1, 0): mean 0.75, centred (0.25 x3, -0.75),
#   unbiased std sqrt(0.75 / 3) = 0.5 -> 0.25 / 0.500001 = 0.499999000002, -0.75 / 0.500001 = -1.499997000006.
# group 1 rows (1, 1, 0, 0, 0.5 x4): mean 0.5, centred (0.5 x2, -0.5 x2, 0 x4), unbiased std sqrt(1 / 7) =
#   0.3779644730092272 -> 0.5 / 0.3779654730092272 = 1.3228721555415557.
SEQ_STD_BROADCAST = rows(0.499999000002, -1.499997000006, 1.3228721555415557, -1.3228721555415557, 0.0)
SEQ_MEAN_BROADCAST = rows(0.25, -0.75, 0.5, -0.5, 0.0)
# Sequence grouping, divide. group 0 rows (1/3 x3, 0): mean 0.25 -> A 1/12, B -0.25.
# group 1 rows (0.5 x2, 0 x2, 0.125 x4): mean 1.5 / 8 = 0.1875 -> C 0.3125, D -0.1875, E -0.0625.
SEQ_MEAN_DIVIDE = rows(1 / 12, -0.25, 0.3125, -0.1875, -0.0625)


@pytest.mark.parametrize(
    ("split", "std", "group_by", "expected"),
    [
        (None, True, None, TRAJ_STD_BROADCAST),
        ("broadcast", True, "trajectory", TRAJ_STD_BROADCAST),
        ("divide", True, "trajectory", TRAJ_STD_DIVIDE),
        ("broadcast", False, "trajectory", TRAJ_MEAN_BROADCAST),
        ("divide", False, "trajectory", TRAJ_MEAN_DIVIDE),
        ("broadcast", True, "sequence", SEQ_STD_BROADCAST),
        ("broadcast", False, "sequence", SEQ_MEAN_BROADCAST),
        ("divide", False, "sequence", SEQ_MEAN_DIVIDE),
    ],
)
def test_grpo_rewards_match_hand_computed(split, std, group_by, expected):
    args = make_args(grpo_std_normalization=std, agentgraph_group_by=group_by)
    data = convert(args, batch(split))
    assert data["rewards"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert data["raw_reward"] == rows(1.0, 0.0, 1.0, 0.0, 0.5)  # unsplit, unnormalised


def test_keys_and_per_row_fields():
    data = convert(make_args(), batch())
    assert set(data) == {
        "tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "loss_masks",
        "rollout_log_probs", "agentgraph_trimmed_sequences",
    }
    assert data["sample_indices"] == rows(0, 1, 2, 3, 4)
    assert data["truncated"] == [0] * 12
    assert data["response_lengths"] == [2, 3, 4, 2, 2, 3, 2, 3, 2, 3, 4, 5]
    first = batch()[0].train_metadata["turns"]
    assert data["tokens"][:3] == [t["tokens"] for t in first]
    assert data["loss_masks"][1] == [1, 0, 1]
    assert data["rollout_log_probs"][1] == [-0.25, 0.0, -0.27]
    assert data["agentgraph_trimmed_sequences"] == 0


def test_rewards_normalization_disabled_and_other_estimators():
    raw_b = rows(1.0, 0.0, 1.0, 0.0, 0.5)
    raw_d = rows(1 / 3, 0.0, 0.5, 0.0, 0.125)
    assert convert(make_args(rewards_normalization=False), batch())["rewards"] == pytest.approx(raw_b)
    assert convert(make_args(rewards_normalization=False), batch("divide"))["rewards"] == pytest.approx(raw_d)
    # slime: ppo / reinforce_plus_plus / on_policy_distillation are not group-normalised
    assert convert(make_args(advantage_estimator="ppo"), batch())["rewards"] == pytest.approx(raw_b)
    assert convert(make_args(advantage_estimator="reinforce_plus_plus"), batch())["rewards"] == pytest.approx(raw_b)
    # slime: reinforce_plus_plus_baseline is mean-centred, never std-divided
    rpb = convert(make_args(advantage_estimator="reinforce_plus_plus_baseline"), batch())
    assert rpb["rewards"] == pytest.approx(TRAJ_MEAN_BROADCAST)
    for estimator in ("gspo", "cispo"):
        out = convert(make_args(advantage_estimator=estimator), batch())
        assert out["rewards"] == pytest.approx(TRAJ_STD_BROADCAST, rel=1e-9)


def test_missing_optional_args_use_slime_defaults():
    data = convert(SimpleNamespace(), batch())  # grpo, normalisation and std on, group_index grouping
    assert data["rewards"] == pytest.approx(TRAJ_STD_BROADCAST, rel=1e-9)


def test_group_index_none_falls_back_to_blocks_of_n_samples_per_prompt():
    samples = batch()[:4]
    for s in samples:
        s.group_index = None
    # blocks of 2: {A, B}, {C, D}
    data = convert(make_args(n_samples_per_prompt=2, grpo_std_normalization=False), samples)
    assert data["rewards"] == pytest.approx(rows(0.5, -0.5, 0.5, -0.5, 0.0)[:8])
    # blocks of 4: one group {A, B, C, D}, mean 0.5
    data = convert(make_args(n_samples_per_prompt=4, grpo_std_normalization=False), samples)
    assert data["rewards"] == pytest.approx(rows(0.5, -0.5, 0.5, -0.5, 0.0)[:8])


def test_a_partial_block_or_a_mixed_batch_without_group_index_is_refused():
    """Blocks of n_samples_per_prompt stand in for group_index only where they are whole and every sample lacks
    one: a last block of 1 was silently its own group (advantage 0 with std, its raw reward centred to 0), and
    a batch where some carry group_index mixed position blocks with prompt ids."""
    samples = batch()
    for s in samples:
        s.group_index = None
    with pytest.raises(ValueError, match=r"group_index: no sample carries one, and 5 samples are not whole blocks "
                                         r"of n_samples_per_prompt=2 \(the last group would have 1\)"):
        convert(make_args(n_samples_per_prompt=2), samples)
    mixed = batch()
    mixed[4].group_index = None
    with pytest.raises(ValueError, match="group_index: 1 of 5 samples carry none while the others do"):
        convert(make_args(), mixed)


def test_groups_need_not_be_contiguous():
    a, b, c, d, e = batch()
    data = convert(make_args(), [a, c, b, d, e])
    assert data["rewards"][:3] == pytest.approx([G0] * 3, rel=1e-9)
    assert data["rewards"][5] == pytest.approx(-G0, rel=1e-9)


def test_dict_reward_with_reward_key():
    samples = batch()
    for s in samples:
        s.reward = {"acc": s.reward, "format": 0.3}
    samples[1].reward = 0.0  # a plain float is accepted as is (e.g. a failed trajectory's 0.0)
    data = convert(make_args(reward_key="acc"), samples)
    assert data["rewards"] == pytest.approx(TRAJ_STD_BROADCAST, rel=1e-9)
    assert data["raw_reward"] == rows(1.0, 0.0, 1.0, 0.0, 0.5)
    with pytest.raises(ValueError, match="--reward-key"):
        convert(make_args(), samples)
    with pytest.raises(ValueError, match="--reward-key"):
        convert(make_args(reward_key="missing"), samples)


def test_failed_trajectories_leave_the_group_statistics_by_default():
    samples = batch()
    samples[1].status = Status.FAILED  # B: group 0 is left with A alone
    data = convert(make_args(), samples)
    # group 0: A is the only counted member -> 0.0 for its 3 rows; B (failed) -> 0.0; group 1 unchanged
    assert data["rewards"][:4] == [0.0, 0.0, 0.0, 0.0]
    assert data["rewards"][4:] == pytest.approx(TRAJ_STD_BROADCAST[4:], rel=1e-9)
    assert data["loss_masks"][3] == [0] * samples[1].train_metadata["turns"][0]["response_length"]


def test_failed_and_removed_trajectories_get_zero_masks_but_stay_in_the_group():
    samples = batch()
    samples[1].status = Status.FAILED  # B
    samples[3].remove_sample = True  # D
    samples[4].status = Status.TRUNCATED  # E
    data = convert(make_args(agentgraph_failed_in_group_stats=True), samples)
    assert data["rewards"] == pytest.approx(TRAJ_STD_BROADCAST, rel=1e-9)  # same statistics as before
    for row, turn in ((3, samples[1].train_metadata["turns"][0]), (6, samples[3].train_metadata["turns"][0]),
                      (7, samples[3].train_metadata["turns"][1])):
        assert data["tokens"][row] == turn["tokens"]  # tokens kept
        assert data["loss_masks"][row] == [0] * turn["response_length"]
        assert data["rollout_log_probs"][row] == [0.0] * turn["response_length"]
    assert data["loss_masks"][0] == [1, 1]
    assert data["truncated"] == rows(0, 0, 0, 0, 1)


def test_plain_sample_is_one_sequence_and_mask_none_means_all_ones():
    s = Sample(group_index=0, index=7, tokens=[1, 2, 3, 4, 5], response_length=2, reward=1.0,
               rollout_log_probs=[-0.1, -0.2], status=Status.COMPLETED)
    t = Sample(group_index=0, index=8, tokens=[1, 2, 3, 9], response_length=1, reward=0.0,
               rollout_log_probs=[-0.3], train_metadata={"other": 1}, status=Status.COMPLETED)
    data = convert(make_args(), [s, t])
    assert data["tokens"] == [[1, 2, 3, 4, 5], [1, 2, 3, 9]]
    assert data["loss_masks"] == [[1, 1], [1]]
    assert data["rollout_log_probs"] == [[-0.1, -0.2], [-0.3]]
    assert data["rewards"] == pytest.approx([G0, -G0], rel=1e-9)


def test_rollout_log_probs_only_when_every_sequence_has_them():
    """All or none, as slime forwards them: none -> no key; some without -> refused (they were all dropped
    without a word, so a run asking for rollout log-probs trained on recomputed ones)."""
    samples = batch()
    for sample in samples:
        for seq_ in sample.train_metadata["turns"]:
            seq_["rollout_log_probs"] = None
    assert "rollout_log_probs" not in convert(make_args(), samples)
    samples = batch()
    samples[2].train_metadata["turns"][1]["rollout_log_probs"] = None
    with pytest.raises(ValueError, match=r"a sequence without rollout_log_probs in a batch whose other sequences "
                                         r"carry them \(1 of 12 lack them\)"):
        convert(make_args(), samples)


def test_trajectory_without_sequences_still_counts_in_its_group():
    samples = batch()
    samples[1].train_metadata["turns"] = []  # B produced no trainable turn
    data = convert(make_args(), samples)
    assert len(data["tokens"]) == 11
    assert data["rewards"][:3] == pytest.approx([G0] * 3, rel=1e-9)


# --- slime >= 0.3 keys ------------------------------------------------------------------------------


def test_v03_keys_detected_from_sample_class():
    samples = batch(cls=SampleV03)
    samples[0].rollout_id = 40
    samples[1].rollout_id = 40  # siblings of one rollout share its id
    samples[3].index = 40  # would collide with the explicit id 40: gets a fresh one
    samples[3].status = Status.FAILED
    data = convert(make_args(global_batch_size=5), samples)
    # ids: A, B -> 40; C -> its index 2; D -> fresh 0; E -> its index 4
    assert data["rollout_ids"] == rows(40, 40, 2, 0, 4)
    # mask sums: per row of the fixture, sequence k has 2 + k positions, sequence 1 masks one of them
    #   A: 2 + 2 + 4 = 8 plus B: 2 -> 10; C: 2 + 2 = 4; D: failed -> 0; E: 2 + 2 + 4 + 5 = 13
    assert data["rollout_mask_sums"] == rows(10, 10, 4, 0, 13)
    assert data["group_ids"] == data["rollout_ids"]  # v0.3.0's names
    assert data["group_mask_sums"] == data["rollout_mask_sums"]
    assert len(data["tokens"]) == 12  # v0.3 slime trims by rollouts itself: nothing trimmed here
    assert data["agentgraph_trimmed_sequences"] == 0


def test_v03_forced_by_args_and_v02_forced_over_sample_class():
    data = convert(make_args(agentgraph_slime_version="0.3"), batch())
    assert data["rollout_ids"] == rows(0, 1, 2, 3, 4)
    assert "rollout_ids" not in convert(make_args(agentgraph_slime_version="0.2.2"), batch(cls=SampleV03))
    assert "rollout_ids" not in convert(make_args(), batch())


# --- trimming (v0.2.x) ------------------------------------------------------------------------------


def test_trimming_to_a_multiple_of_global_batch_size(caplog):
    with caplog.at_level(logging.INFO, logger="agentgraphs.train_data"):
        data = convert(make_args(global_batch_size=5), batch())
    assert data["agentgraph_trimmed_sequences"] == 2
    assert "from 12 to 10" in caplog.text
    for key in ("tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices",
                "loss_masks", "rollout_log_probs"):
        assert len(data[key]) == 10, key
    assert data["rewards"] == pytest.approx(TRAJ_STD_BROADCAST[:10], rel=1e-9)  # normalised before trimming
    assert data["sample_indices"][-2:] == [4, 4]

    assert convert(make_args(global_batch_size=4), batch())["agentgraph_trimmed_sequences"] == 0
    for flag in ("disable_rollout_trim_samples", "debug_rollout_only"):
        out = convert(make_args(global_batch_size=5, **{flag: True}), batch())
        assert len(out["tokens"]) == 12 and out["agentgraph_trimmed_sequences"] == 0, flag
    with pytest.raises(ValueError, match="Not enough training sequences 12 for global_batch_size 16"):
        convert(make_args(global_batch_size=16), batch())


# --- validation -------------------------------------------------------------------------------------


def _broken(mutate) -> list:
    samples = batch()
    mutate(samples[2].train_metadata["turns"][1])
    return samples


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.update(loss_mask=[1]), r"len\(loss_mask\)=1 != response_length=3"),
        (lambda t: t.update(rollout_log_probs=[-0.1]), r"len\(rollout_log_probs\)=1 != response_length=3"),
        (lambda t: t.update(response_length=99), "response_length 99 must be in 1..len"),
        (lambda t: t["rollout_log_probs"].__setitem__(1, -0.5), "masked response position 1 carries log-prob -0.5"),
        (lambda t: t["loss_mask"].__setitem__(0, 2), "loss_mask holds 2"),
    ],
)
def test_validation_names_sample_and_sequence(mutate, message):
    with pytest.raises(ValueError, match=message) as err:
        convert(make_args(), _broken(mutate))
    assert r"sample #2 (index=2), sequence 1" in str(err.value)


def test_unrewarded_and_bad_split_are_rejected():
    samples = batch()
    samples[3].reward = None
    with pytest.raises(ValueError, match=r"sample #3 \(index=3\) has no reward"):
        convert(make_args(), samples)
    samples = batch()
    samples[0].train_metadata["reward_split"] = "share"
    with pytest.raises(ValueError, match="reward_split"):
        convert(make_args(), samples)
    with pytest.raises(ValueError, match="agentgraph_group_by"):
        convert(make_args(agentgraph_group_by="prompt"), batch())


def test_normalize_by_group_matches_torch_std():
    torch = pytest.importorskip("torch")
    values = [0.3, 1.0, 0.0, 0.7, 0.2, 0.9]
    t = torch.tensor(values, dtype=torch.float64).reshape(-1, 3)
    t = t - t.mean(dim=-1, keepdim=True)
    expected = (t / (t.std(dim=-1, keepdim=True) + 1e-6)).flatten().tolist()
    assert normalize_by_group(values, [0, 0, 0, 1, 1, 1], std=True).tolist() == pytest.approx(expected, rel=1e-12)


def test_ten_thousand_sequences():
    samples = [
        Sample(
            group_index=i // 8,
            index=i,
            reward=float(i % 3 == 0),
            status=Status.COMPLETED,
            train_metadata={"turns": [seq(32, prompt=64, masked=(5, 6) if k % 2 else ()) for k in range(10)]},
        )
        for i in range(1000)
    ]
    data = convert(make_args(n_samples_per_prompt=8, global_batch_size=256), samples)
    assert len(data["tokens"]) == 9984 and data["agentgraph_trimmed_sequences"] == 16
    assert all(abs(r) < 10 for r in data["rewards"])


# --- slime's own changes after generate, and batch layouts slime cannot take ------------------------------


def _as_generated(sample):
    """The top level as rl_bridge.generate sets it: the first sequence that trains a token."""
    head = next(q for q in sample.train_metadata["turns"] if any(q["loss_mask"]))
    for key in ("tokens", "response_length", "loss_mask", "rollout_log_probs"):
        setattr(sample, key, list(head[key]) if isinstance(head[key], list) else head[key])
    return sample


def test_a_top_level_mask_zeroed_after_generate_trains_nothing(caplog):
    samples = [_as_generated(s) for s in batch()]
    first = samples[2].train_metadata["turns"][0]  # C's first sequence trains nothing: the top level is its second
    first["loss_mask"], first["rollout_log_probs"] = [0, 0], [0.0, 0.0]
    samples[2] = _as_generated(samples[2])
    assert samples[2].response_length == 3
    for s in (samples[0], samples[2]):  # slime's generate_and_rm with --partial-rollout
        s.loss_mask = [0] * s.response_length  # --mask-offpolicy-in-partial-rollout, on carried-over samples
    with caplog.at_level(logging.INFO, logger="agentgraphs.train_data"):
        data = convert(make_args(partial_rollout=True, mask_offpolicy_in_partial_rollout=True), samples)
    assert data["agentgraph_offpolicy_masked_trajectories"] == 2
    assert "2 trajectories trained nothing" in caplog.text
    masks = data["loss_masks"]
    assert masks[0:3] == [[0] * 2, [0] * 3, [0] * 4] and masks[4:6] == [[0] * 2, [0] * 3]  # A and C
    assert all(v == 0.0 for lp in data["rollout_log_probs"][0:3] + data["rollout_log_probs"][4:6] for v in lp)
    assert masks[3] == [1, 1] and masks[6] == [1, 1]  # B and D train as before
    # their rewards still count in the group statistics, as slime's own loss mask leaves them
    assert data["rewards"] == convert(make_args(), [_as_generated(s) for s in batch()])["rewards"]


def test_any_other_change_to_the_top_level_mask_is_refused():
    samples = [_as_generated(s) for s in batch()]
    samples[1].loss_mask = [1, 0]
    with pytest.raises(ValueError, match=r"sample #1 \(index=1\): its top-level loss_mask was changed"):
        convert(make_args(), samples)


def test_batch_layouts_slime_cannot_take_are_refused():
    with pytest.raises(ValueError, match="--use-dynamic-batch-size --max-tokens-per-gpu"):
        convert(make_args(use_dynamic_batch_size=False), batch(cls=SampleV03))
    assert len(convert(make_args(use_dynamic_batch_size=True), batch(cls=SampleV03))["tokens"]) == 12
    assert len(convert(make_args(use_dynamic_batch_size=False), batch())["tokens"]) == 12  # 0.2.x: trimmed rows
    with pytest.raises(ValueError, match="Drop --use-dynamic-global-batch-size"):
        convert(make_args(use_dynamic_global_batch_size=True, global_batch_size=5), batch())
    data = convert(make_args(use_dynamic_global_batch_size=True, global_batch_size=5), batch(cls=SampleV03))
    assert len(data["tokens"]) == 12
    one_row = [traj(0, i, 1, float(i % 2)) for i in range(4)]  # one row a trajectory: every layout takes it
    assert len(convert(make_args(use_dynamic_global_batch_size=True), one_row)["tokens"]) == 4
    one_row = [traj(0, i, 1, float(i % 2), cls=SampleV03) for i in range(4)]
    assert len(convert(make_args(use_dynamic_batch_size=False), one_row)["tokens"]) == 4


def test_an_aborted_trajectory_trains_nothing_like_a_failed_one(caplog):
    aborted, failed = batch(), batch()
    aborted[4].status, aborted[4].reward = Status.ABORTED, None  # slime scores no aborted sample
    failed[4].status = Status.FAILED
    with caplog.at_level(logging.WARNING, logger="agentgraphs.train_data"):
        data = convert(make_args(agentgraph_failed_in_group_stats=True), aborted)
    assert "1 ABORTED trajectories reached training" in caplog.text
    assert data["agentgraph_aborted_trajectories"] == 1
    assert data["loss_masks"][8:] == [[0] * 2, [0] * 3, [0] * 4, [0] * 5]
    assert data["rewards"] == convert(make_args(), failed)["rewards"]  # out of C and D's group, as FAILED


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"reward": float("-inf")}])
def test_a_non_finite_reward_is_refused_naming_the_sample(bad):
    """The second wall behind rl_bridge.generate's: one NaN would make its whole group's advantages NaN."""
    samples = batch()
    samples[3].reward = bad  # D, index 3
    with pytest.raises(ValueError, match=r"sample #3 \(index=3\): reward -?(nan|inf) is not finite"):
        convert(make_args(reward_key="reward"), samples)


@pytest.mark.parametrize("value", [0.5, 2, True, 1.0])
def test_a_loss_mask_value_other_than_the_int_0_or_1_is_refused(value):
    """A 0.5 once passed (the check cast masks to int64 first): slime would weight that token's loss by it."""
    with pytest.raises(ValueError, match=rf"sample #2 \(index=2\), sequence 1: loss_mask holds {value!r} .* at "
                                         r"response position 0, not 0/1") as err:
        convert(make_args(), _broken(lambda t: t["loss_mask"].__setitem__(0, value)))
    assert "int 0 (not trained) or 1 (trained)" in str(err.value)

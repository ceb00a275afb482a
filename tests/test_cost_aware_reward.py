"""ToolOrchestra's cost-aware group reward through the converter, against values computed by hand.

Weights: accuracy 1.0, cost 0.5, latency 0.5 (cost and latency: lower is better).
group 0, four rollouts:            correct  cost  latency
    a                                 1       2      1
    b                                 1       4      1
    c                                 0       1      2
    d                                 1       3      3
  -cost min-max over the group ([-2,-4,-1,-3], range 3): a 2/3, b 0, c 1, d 1/3
  -latency min-max ([-1,-1,-2,-3], range 2):              a 1,   b 1, c 1/2, d 0
  accuracy min-max:                                       a 1,   b 1, c 0,   d 1
  scores (incorrect -> 0): a = 1 + 1/3 + 1/2 = 11/6, b = 1 + 0 + 1/2 = 3/2, c = 0, d = 1 + 1/6 + 0 = 7/6
  mean 9/8; unbiased std sqrt(((17/24)^2 + (3/8)^2 + (9/8)^2 + (1/24)^2) / 3) = 0.7978559...
  advantages: a 0.887795, b 0.470009, c -1.410031, d 0.052227
group 1, four correct rollouts, costs 1, 1.3, 1, 1, same latency: accuracy and latency are constant
  (normalise to 0); -cost gives a 1, b 0, c 1, d 1 -> scores 0.5, 0, 0.5, 0.5: std 0.25.
  With cost weight 0.1 instead (group 1 of the second batch) the scores are 0.1, 0, 0.1, 0.1: std 0.05 < 0.1,
  so the group is dropped: advantage 0 and no trained token.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agentgraphs.errors import ConfigError
from agentgraphs.shaping import cost_aware_scores, shape_group, standardise_group
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.convert import convert

WEIGHTS = {"accuracy": 1.0, "cost": 0.5, "latency": 0.5}


def traj(group: int, index: int, correct: int, cost: float, latency: float, weights=WEIGHTS, n_seqs: int = 1):
    seqs = [{"tokens": list(range(10 * index + k, 10 * index + k + 6)), "response_length": 2,
             "loss_mask": [1, 1], "rollout_log_probs": [-0.5, -0.25]} for k in range(n_seqs)]
    shaping = {"name": "cost_aware", "weights": dict(weights),
               "features": {"cost": cost, "latency": latency, "tool:search": 1.0}}
    return Sample(group_index=group, index=index, reward=float(correct), status=Sample.Status.COMPLETED,
                  train_metadata={"turns": seqs, "reward_shaping": shaping})


def args(**kw) -> SimpleNamespace:
    base = dict(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
                n_samples_per_prompt=4, global_batch_size=None, reward_key=None)
    return SimpleNamespace(**{**base, **kw})


GROUP0 = [(1, 2, 1), (1, 4, 1), (0, 1, 2), (1, 3, 3)]
EXPECTED0 = [0.887795, 0.470009, -1.410031, 0.052227]


def test_two_groups_hand_computed_one_dropped_for_low_variance() -> None:
    low = {"accuracy": 1.0, "cost": 0.1, "latency": 0.5}
    samples = ([traj(0, i, *f, n_seqs=2 if i == 0 else 1) for i, f in enumerate(GROUP0)]
               + [traj(1, 4 + i, 1, c, 1.0, weights=low) for i, c in enumerate([1.0, 1.3, 1.0, 1.0])])
    data = convert(args(), samples)
    # rows: a a b c d | four of group 1; every orchestrator turn of a rollout gets its value
    np.testing.assert_allclose(data["rewards"][:5], [EXPECTED0[0]] * 2 + EXPECTED0[1:], atol=1e-5)
    assert data["rewards"][5:] == [0.0] * 4
    assert data["loss_masks"][:5] == [[1, 1]] * 5 and data["loss_masks"][5:] == [[0, 0]] * 4
    assert data["rollout_log_probs"][5:] == [[0.0, 0.0]] * 4
    assert data["raw_reward"] == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert data["agentgraph_dropped_trajectories"] == 4


def test_group_with_enough_variance_is_kept_and_scores_follow_cost() -> None:
    samples = [traj(0, i, 1, c, 1.0) for i, c in enumerate([1.0, 1.3, 1.0, 1.0])]
    data = convert(args(), samples)
    # scores 0.5, 0, 0.5, 0.5: mean 0.375, std 0.25 -> 0.5, -1.5, 0.5, 0.5
    np.testing.assert_allclose(data["rewards"], [0.5, -1.5, 0.5, 0.5], atol=1e-4)
    assert data["agentgraph_dropped_trajectories"] == 0


def test_standardisation_is_clipped_at_three() -> None:
    scores = np.array([1.0] + [0.0] * 15)  # z of the one correct rollout: 15 / 4 = 3.75
    adv, dropped = standardise_group(scores)
    assert not dropped and adv[0] == 3.0 and adv[1] == pytest.approx(-0.25, abs=1e-5)


def test_without_normalisation_the_scores_are_used_as_they_are() -> None:
    data = convert(args(rewards_normalization=False), [traj(0, i, *f) for i, f in enumerate(GROUP0)])
    np.testing.assert_allclose(data["rewards"], [11 / 6, 3 / 2, 0.0, 7 / 6], atol=1e-9)


def test_scores_and_mixing_errors() -> None:
    np.testing.assert_allclose(cost_aware_scores([1, 1, 0, 1], [{"cost": c, "latency": t} for _, c, t in GROUP0],
                                                 WEIGHTS), [11 / 6, 3 / 2, 0.0, 7 / 6])
    with pytest.raises(ConfigError, match="'tool:answer' has no feature"):
        shape_group("cost_aware", [1, 0], [{"weights": {"tool:answer": 1.0}, "features": {"cost": 1.0}}] * 2)
    with pytest.raises(ConfigError, match="unknown reward shaping"):
        shape_group("nope", [1, 0], [{}, {}])
    plain = Sample(group_index=0, index=9, reward=1.0, status=Sample.Status.COMPLETED,
                   train_metadata={"turns": [{"tokens": [1, 2, 3], "response_length": 1, "loss_mask": [1],
                                              "rollout_log_probs": [-0.1]}]})
    with pytest.raises(ValueError, match="same reward shaping"):
        convert(args(), [traj(0, 0, 1, 1.0, 1.0), plain])

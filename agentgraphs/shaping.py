"""Named group reward shapings, applied where rewards are normalised with the whole group in view.

A spec selects a shaping per rollout (`train_metadata["reward_shaping"] = {"name", "weights",
"features"}`, optionally "std", "drop_at_min_std" and "train": see 3-5 below); the converter
(rl_bridge.convert) applies it to every prompt group whose members carry one, instead of plain GRPO
normalisation.

`cost_aware` (ToolOrchestra): per group,
  1. every feature column (accuracy = the raw reward, cost, latency, call counts "tool:NAME" and
     "expert:NAME") is min-max normalised over the group's rollouts; lower is better for cost and
     latency, so those are negated first; a constant column normalises to 0 (it tells the rollouts apart
     in nothing);
  2. a correct rollout (raw reward > 0) scores sum_k weight_k * normalised_k; an incorrect one scores 0;
  3. the scores are standardised per group, (s - mean) / (std + 1e-6), and clipped to +-3; std is the
     sample std (/ (n - 1), as torch.std, slime's GRPO) or, with "std": "population", the population std
     (/ n, the seed's custom_convert);
  4. a group whose scores have std < 0.1 is dropped: advantage 0 and no trained token; with
     "drop_at_min_std": true a group with std exactly 0.1 is dropped too (the seed keeps std > 0.1);
  5. a member with "train": false (ToolOrchestra's seed variant: a rollout that never answered) keeps its
     value and its place in the group's statistics, but its rows are masked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConfigError

__all__ = ["SHAPINGS", "ShapedGroup", "cost_aware_scores", "shape_group", "standardise_group"]

LOWER_IS_BETTER = frozenset({"cost", "latency"})
CLIP = 3.0
MIN_STD = 0.1
EPS = 1e-6
SHAPINGS = ("cost_aware",)


def cost_aware_scores(raw: Sequence[float], features: Sequence[Mapping[str, float]],
                      weights: Mapping[str, float]) -> np.ndarray:
    """Step 1-2: the preference-weighted min-max score of each rollout of one group (incorrect: 0).

    >>> cost_aware_scores([1, 1, 0], [{"cost": 1.0}, {"cost": 3.0}, {"cost": 0.5}],
    ...                   {"accuracy": 1.0, "cost": 1.0}).round(4).tolist()
    [1.8, 1.0, 0.0]
    """
    r = np.asarray(raw, dtype=np.float64)
    total = np.zeros_like(r)
    for key, weight in weights.items():
        if not weight:
            continue
        if key == "accuracy":
            column = r.copy()
        else:
            try:
                column = np.array([float(f[key]) for f in features], dtype=np.float64)
            except KeyError:
                raise ConfigError(f"cost-aware reward: weight {key!r} has no feature in some rollout; features "
                                  f"are {sorted(features[0]) if features else []} (set its weight to 0)") from None
        if key in LOWER_IS_BETTER:
            column = -column
        lo, hi = float(column.min()), float(column.max())
        if hi > lo:
            total += float(weight) * (column - lo) / (hi - lo)
    return np.where(r > 0, total, 0.0)


def standardise_group(scores: np.ndarray, *, clip: float = CLIP, min_std: float = MIN_STD, ddof: int = 1,
                      drop_at_min_std: bool = False) -> tuple[np.ndarray, bool]:
    """Step 3-4: (advantages, dropped). A group of one, or one with std < min_std (std <= min_std with
    `drop_at_min_std`), is dropped. `ddof` 1: the sample std (torch.std); 0: the population std.

    >>> standardise_group(np.array([1.0, 0.0]))[0].round(4).tolist(), standardise_group(np.zeros(3))[1]
    ([0.7071, -0.7071], True)
    >>> standardise_group(np.array([1.0, 0.0]), ddof=0)[0].round(4).tolist()
    [1.0, -1.0]
    """
    if scores.size < 2:
        return np.zeros_like(scores), True
    std = float(scores.std(ddof=ddof))
    if std < min_std or (drop_at_min_std and std <= min_std):
        return np.zeros_like(scores), True
    return np.clip((scores - scores.mean()) / (std + EPS), -clip, clip), False


@dataclass(frozen=True)
class ShapedGroup:
    """One group's shaping: a value per member; `dropped` (no signal: every member's value is 0 and nothing
    trains); `trained` per member (False: the member's rows are masked but keep their value)."""

    values: np.ndarray
    dropped: bool
    trained: np.ndarray


GROUP_RULES = {"std": ("sample", "population"), "drop_at_min_std": (False, True)}


def shape_group(name: str, raw: Sequence[float], specs: Sequence[Mapping[str, Any]], *, standardise: bool = True
                ) -> ShapedGroup:
    """Apply the named shaping to one group: `specs[i]` is member i's {"weights", "features"} and, optionally,
    the group rules "std" ("sample", default, or "population") and "drop_at_min_std" (default False); every
    member must agree on the weights and the rules (else ConfigError naming the field), and "train" (default
    True: False masks the member's rows).

    >>> specs = [{"weights": {"accuracy": 1.0}, "std": "population", "train": t} for t in (True, True, False)]
    >>> g = shape_group("cost_aware", [1.0, 0.0, 0.0], specs)
    >>> g.values.round(4).tolist(), g.dropped, g.trained.tolist()
    ([1.4142, -0.7071, -0.7071], False, [True, True, False])
    """
    if name != "cost_aware":
        raise ConfigError(f"unknown reward shaping {name!r}; known: {list(SHAPINGS)}")
    rules = {}
    for key, allowed in GROUP_RULES.items():
        seen = {s.get(key, allowed[0]) for s in specs}
        if len(seen) > 1 or not seen <= set(allowed):
            raise ConfigError(f"reward shaping {name!r}: the members of one group disagree on {key!r} or give an "
                              f"unknown value ({sorted(map(str, seen))}; allowed {list(allowed)}): every rollout of "
                              "a prompt must be made with the same options")
        rules[key] = seen.pop()
    weights = specs[0].get("weights") or {}
    differing = [i for i, s in enumerate(specs) if dict(s.get("weights") or {}) != dict(weights)]
    if differing:
        raise ConfigError(f"reward shaping {name!r}: the members of one group disagree on 'weights' (member 0: "
                          f"{dict(weights)}, member {differing[0]}: {dict(specs[differing[0]].get('weights') or {})})"
                          ": every rollout of a prompt must be made with the same preference weights (ToolOrchestra's"
                          " `preference` option)")
    scores = cost_aware_scores(raw, [s.get("features") or {} for s in specs], weights)
    trained = np.array([bool(s.get("train", True)) for s in specs], dtype=bool)
    if not standardise:
        return ShapedGroup(scores, False, trained)
    values, dropped = standardise_group(scores, ddof=0 if rules["std"] == "population" else 1,
                                        drop_at_min_std=bool(rules["drop_at_min_std"]))
    return ShapedGroup(values, dropped, trained & (not dropped))

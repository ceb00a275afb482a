"""slime's `--custom-convert-samples-to-train-data-path` hook: a thin adapter over agentgraphs.train_data.

    --custom-convert-samples-to-train-data-path rl_bridge.convert

slime calls `convert(args, samples)` with its flat list of rollout samples and trains on the dict it
returns. The conversion itself (group normalisation, expansion of trajectories into their training
sequences, failed-trajectory masking, v0.2 / v0.3 output keys) is `agentgraphs.train_data.to_train_data`;
its docstring documents every rule and setting.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentgraphs.train_data import TrainDataSettings, normalize_by_group, to_train_data

__all__ = ["convert", "normalize_by_group"]


def convert(args: Any, samples: Sequence[Any]) -> dict[str, Any]:
    """slime converter hook: flat list of (trajectory) Samples -> train-data dict, one row per sequence."""
    return to_train_data(samples, TrainDataSettings.from_args(args))

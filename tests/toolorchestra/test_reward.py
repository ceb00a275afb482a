"""ToolOrchestra's reward from a RewardInput as slime's reward hook rebuilds it (`reward_input_of_sample`):
the options it carries are resolved like any other options, defaults and variant presets included."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgraphs.errors import ConfigError
from agentgraphs.spec import RewardInput
from agentgraphs.toolorchestra import SPEC


def rin(answer: str, options: dict[str, Any]) -> RewardInput:
    return RewardInput(answer=answer, prompt="Who wrote it?", label=["Ilse Marrow"], metadata={},
                       status="completed", trace_summary={}, options=options)


def score(answer: str, options: dict[str, Any]) -> float:
    return asyncio.run(SPEC.reward(rin(answer, options), None))


def test_the_correctness_rule_is_the_resolved_options_whatever_the_reward_input_carries() -> None:
    said = "It was Ilse Marrow."  # right by the seed's `contains` rule, wrong by SQuAD exact match
    resolved = SPEC.default_options().model_dump()
    assert resolved["correctness"] == "contains" and score(said, resolved) == 1.0
    # no options (a sample whose metadata lost them) or only the variant: the same defaults, not another rule
    assert score(said, {}) == 1.0
    assert score(said, {"variant": "seed"}) == 1.0
    assert score(said, {"variant": "original"}) == 0.0
    assert score(said, {"correctness": "exact"}) == 0.0
    with pytest.raises(ConfigError, match="correctness"):  # a rule that does not exist is refused, not "exact"
        score(said, {"correctness": "fuzzy"})

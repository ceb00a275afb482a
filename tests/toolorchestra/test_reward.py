"""ToolOrchestra's reward from a RewardInput as slime's reward hook rebuilds it (`reward_input_of_sample`):
the options it carries are resolved like any other options, defaults and variant presets included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines.hf import HFEngine
from agentgraphs.errors import ConfigError, RewardError
from agentgraphs.spec import RewardInput
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.tiny_model import ensure_tiny_model
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


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


def judged(scorer: HFEngine, verdict: str) -> tuple[float, ScriptedPolicy]:
    judge = ScriptedPolicy(scorer, [verdict], name="judge")
    ctx = AgentContext(policy=judge, tokenizer=scorer.tokenizer, engines={"judge": judge})
    return asyncio.run(SPEC.reward(rin("Marrow, Ilse", {"judge": "judge"}), ctx)), judge


def test_a_reasoning_judge_is_read_after_its_reasoning(scorer: HFEngine) -> None:
    """Qwen3 as the judge thinks first: its verdict is what follows </think> (it was read as 'think ...',
    never 'yes': every answer the rule missed scored 0)."""
    value, judge = judged(scorer, "<think>\nThe response names the same person, surname first.\n</think>\n\nYes")
    assert value == 1.0 and "Reference answer: Ilse Marrow" in judge.calls[0].prompt_text
    assert judged(scorer, "<think>\nA different person.\n</think>\n\nno")[0] == 0.0
    assert judged(scorer, "No.")[0] == 0.0


def test_a_judge_verdict_that_is_neither_yes_nor_no_is_refused_not_scored_0(scorer: HFEngine) -> None:
    for verdict in ("Correct, it matches.", "yesterday's answer", "<think>\nThe response names"):
        with pytest.raises(RewardError, match="judge") as err:
            judged(scorer, verdict)
        assert "yes" in str(err.value) and "no" in str(err.value)

"""An outside audit of `variant: seed` against the seed (Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/): what
the orchestrator is asked to generate and how an unanswered rollout is scored. The orchestrator and the answer
expert are scripted over the tiny Qwen3-template model; every number below is the seed's, written out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines.base import SamplingParams
from agentgraphs.engines.hf import HFEngine
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.tiny_model import ensure_tiny_model
from agentgraphs.toolorchestra import SPEC
from tests.toolorchestra.test_experts import call

EXPERTS = {"search": ["answerer"], "enhance_reasoning": ["answerer"], "answer": ["answerer"]}


class Recording(ScriptedPolicy):
    """A scripted engine that keeps the max_new_tokens of every call it is asked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[int] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        self.asked.append(params.max_new_tokens)
        return await super().generate(prompt_ids, params)


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


def orchestrator_asks(scorer: HFEngine, sampling: Any, **options: Any) -> tuple[list[int], Any]:
    policy = Recording(scorer, [call("answer", "answerer")], name="orchestrator")
    expert = ScriptedPolicy(scorer, ["<answer>\\boxed{4322}</answer>"], name="answerer")
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines={"answerer": expert}, sampling=sampling)
    rollout = asyncio.run(run_rollout(SPEC, rollout_input("2+4320?", "4322", {}, 0), ctx,
                                      options={"experts": EXPERTS, **options}))
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    return policy.asked, rollout


def test_a_seed_orchestrator_turn_may_run_to_the_runs_whole_response_length(scorer: HFEngine) -> None:
    """The seed sends slime's sampling params unchanged to each orchestrator turn (orchestra_solver.py:362-364):
    its max_new_tokens is --rollout-max-response-len (16384 in train_orchestra.sh:72), never a cap of the
    method's own (this project's 2048 cut a Qwen3 turn's thinking at an eighth of the seed's room)."""
    assert orchestrator_asks(scorer, SamplingParams(temperature=1.0, max_new_tokens=16384))[0] == [16384]
    assert orchestrator_asks(scorer, SamplingParams(temperature=1.0, max_new_tokens=3000))[0] == [3000]
    # a run that sets no cap (`agentgraphs run` without --max-new-tokens) gets the seed's launch value
    assert orchestrator_asks(scorer, None)[0] == [16384]


def test_the_original_and_an_explicit_option_keep_their_own_cap_under_the_runs(scorer: HFEngine) -> None:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16384)
    assert orchestrator_asks(scorer, sampling, variant="original")[0] == [2048]
    assert orchestrator_asks(scorer, sampling, orchestrator_max_new_tokens=5000)[0] == [5000]
    with pytest.warns(UserWarning, match="max_new_tokens=5000; the run's cap is 1000"):
        asked, _ = orchestrator_asks(scorer, SamplingParams(temperature=1.0, max_new_tokens=1000),
                                     orchestrator_max_new_tokens=5000)
    assert asked == [1000]

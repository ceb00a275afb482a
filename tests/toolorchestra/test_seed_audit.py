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


class Retrieval:
    """`ctx.tools["retrieval"]`: one passage that names the gold."""

    async def search(self, query: str, topk: int = 3, **_: Any) -> list[dict[str, Any]]:
        return [{"document": {"id": "1", "contents": "It was set by Ilse Marrow of Vienna, Austria."}, "score": 2.0}]


def unanswered(scorer: HFEngine, label: str, **options: Any) -> Any:
    """A search, then a turn with no tool call: the episode ends unanswered (invalid_call end, the seed)."""
    policy = ScriptedPolicy(scorer, [call("search", "answerer"), "<think>done</think>\nNo tool."], name="orchestrator")
    expert = ScriptedPolicy(scorer, ["<query>who set the code</query>"], name="answerer")
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines={"answerer": expert},
                       tools={"retrieval": Retrieval()}, sampling=SamplingParams(temperature=1.0, max_new_tokens=4096))
    rollout = asyncio.run(run_rollout(SPEC, rollout_input("Who set the code?", label, {}, 0), ctx,
                                      options={"experts": EXPERTS, **options}))
    assert rollout.status == "completed" and rollout.answer == "" and not rollout.summary["answered"], rollout.reason
    return rollout


# the seed's response text of that rollout (orchestra_solver.py:729-758), written out
TRANSCRIPT = ('=== Turn 0 [Orchestrator] ===\n<tool_call>\n{"name": "search", "arguments": {"model": "answerer"}}\n'
              '</tool_call><|im_end|>\n\n--- Tool/Env Result [search(answerer)] ---\n[Doc 1] (score=2.0000)\n'
              'It was set by Ilse Marrow of Vienna, Austria.\n\n=== Turn 1 [Orchestrator] ===\nNo tool.<|im_end|>')


def test_an_unanswered_seed_rollout_is_scored_on_its_transcript(scorer: HFEngine) -> None:
    """The seed scores `metadata.final_output or sample.response` (reward.py:386): a rollout without an answer
    is scored on the transcript its solver wrote as the response, tools' results included, so a gold of more
    than 3 words that a retrieved document holds scores 1.0. It still never trains (custom_convert.py:234-238
    masks it), but that score is in its group's mean and std, which every other rollout's value is cut from."""
    rollout = unanswered(scorer, "Ilse Marrow of Vienna Austria")
    assert rollout.summary["seed_transcript"] == TRANSCRIPT
    assert rollout.reward == 1.0
    # a gold of at most 3 words in a transcript over 10 times as long is wrong by the same rule
    assert unanswered(scorer, "Ilse Marrow").reward == 0.0
    # the original scores no answer 0
    assert unanswered(scorer, "Ilse Marrow of Vienna Austria", variant="original", tool_protocol="seed",
                      invalid_call="end").reward == 0.0
    assert unanswered(scorer, "Ilse Marrow of Vienna Austria", unanswered_reward="zero").reward == 0.0


def test_its_score_moves_its_groups_statistics_as_in_the_seed(scorer: HFEngine) -> None:
    """A group of two: one rollout answers right at once, the other never answers but its transcript holds the
    gold. The seed scores both 1 (accuracy weighted alone: min == max, no spread), so the group's std is 0 and
    nothing trains (custom_convert.py:95-111, 141); scored 0, the answered rollout would train with +1."""
    from types import SimpleNamespace

    from agentgraphs.records import sample_fields
    from agentgraphs.testing.slime_sample import Sample
    from rl_bridge.convert import convert

    gold = "Ilse Marrow of Vienna Austria"
    policy = ScriptedPolicy(scorer, [call("answer", "answerer")], name="orchestrator")
    expert = ScriptedPolicy(scorer, [f"<answer>{gold}</answer>"], name="answerer")
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines={"answerer": expert},
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=4096))
    answered = asyncio.run(run_rollout(SPEC, rollout_input("Who set the code?", gold, {}, 0), ctx,
                                       options={"experts": EXPERTS}))
    samples = []
    for i, rollout in enumerate([answered, unanswered(scorer, gold)]):
        fields = sample_fields(rollout, SPEC)
        samples.append(Sample(group_index=0, index=i, reward=fields["reward"], status=Sample.Status.COMPLETED,
                              train_metadata=fields["train_metadata"]))
    assert [s.reward for s in samples] == [1.0, 1.0]
    data = convert(SimpleNamespace(advantage_estimator="grpo", n_samples_per_prompt=2), samples)
    assert data["sample_indices"] == [0, 1, 1]  # every orchestrator turn is a row
    assert data["rewards"] == [0.0, 0.0, 0.0] and not any(any(m) for m in data["loss_masks"])


def test_a_problem_with_surrounding_whitespace_is_written_into_the_prompts_as_the_row_gives_it(
        scorer: HFEngine) -> None:
    """The seed formats `str(sample.prompt)` as it is (rollout.py:60, prompt_builder.py:106; 17 of the 200 QA rows
    of its data/eval_combined.jsonl end in spaces or a newline): the orchestrator's user message and the
    experts' prompts keep that whitespace, so the trained prompt ids are the seed's."""
    from agentgraphs.toolorchestra.prompts import tool_schemas

    problem = "  Who set the code?   \n"
    policy = ScriptedPolicy(scorer, [call("answer", "answerer")], name="orchestrator")
    expert = ScriptedPolicy(scorer, ["<answer>Ilse</answer>"], name="answerer")
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines={"answerer": expert},
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=4096))
    rollout = asyncio.run(run_rollout(SPEC, rollout_input(problem, "Ilse", {}, 0), ctx, options={"experts": EXPERTS}))
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    messages = [{"role": "system", "content": "You are an orchestrator. You must ALWAYS call the appropriate tool to "
                 "handle user requests. Never answer directly without using a tool."},
                {"role": "user", "content": "Problem:   Who set the code?   \n\n\nChoose an appropriate tool."}]
    assert policy.calls[0].prompt_text == scorer.tokenizer.apply_chat_template(
        messages, tools=tool_schemas(EXPERTS), tokenize=False, add_generation_prompt=True)
    # the answer expert gets the bare problem as given (no context parts yet) and the seed's ask after it
    asked = "<|im_start|>user\n  Who set the code?   \n\n\nBased on all the information above"
    assert asked in expert.calls[0].prompt_text


def test_slimes_reward_hook_scores_the_transcript_too(scorer: HFEngine) -> None:
    """rl_bridge.reward_func rescores from the Sample rl_bridge.generate filled: the transcript rides in its
    metadata's trace_summary, so slime's path gives the score run_rollout gives."""
    from agentgraphs.records import reward_input_of_sample, sample_fields
    from agentgraphs.testing.slime_sample import Sample
    from agentgraphs.toolorchestra.reward import reward

    rollout = unanswered(scorer, "Ilse Marrow of Vienna Austria")
    fields = sample_fields(rollout, SPEC)
    sample = Sample(prompt="Who set the code?", label="Ilse Marrow of Vienna Austria", metadata=fields["metadata"])
    assert asyncio.run(reward(reward_input_of_sample(sample), None)) == 1.0


def test_the_example_config_fails_a_rollout_past_the_seeds_360_seconds() -> None:
    """The seed waits 360 s for a rollout, then marks it FAILED (rollout.py:26, 77-80, 102-106), in evaluation
    too (the same generate); the launch example for `variant: seed` sets the same deadline."""
    import yaml

    cfg = yaml.safe_load((Path(__file__).parents[2] / "examples" / "toolorchestra" / "toolorchestra.yaml")
                         .read_text(encoding="utf-8"))
    assert cfg["agentgraph_options"].get("variant", "seed") == "seed"
    assert (cfg["agentgraph_max_time_s"], cfg["agentgraph_eval_max_time_s"]) == (360, 360)

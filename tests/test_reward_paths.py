"""One reward, one RewardInput: what a reward function sees is the same through `agentgraphs run` /
`run_rollout` and through slime's hooks; list mode scores once per trajectory; slime flags that would
break training are refused up front."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import rl_bridge
from agentgraphs.batch import run_file
from agentgraphs.errors import ConfigError
from agentgraphs.records import sample_fields
from agentgraphs.records import Rollout
from agentgraphs.spec import RewardInput
from agentgraphs.testing.agents import TWO_TURN, TWO_TURN_PER_TURN
from agentgraphs.testing.slime_sample import Sample, SampleV03
from tests.test_bridge import generate, make_args, sample, server  # noqa: F401 (fixture)

SEEN: list[RewardInput] = []


def recording_reward(rin: RewardInput, ctx: Any) -> float:
    SEEN.append(json.loads(json.dumps(rin)))  # a deep copy, as JSON: what any reward could read
    return 1.0 if "42" in rin["answer"] else 0.0


RECORDING = replace(TWO_TURN_PER_TURN, name="recording", reward=recording_reward, _graphs={},
                    options={"greeting": "hi", "attempts": 2})


def test_reward_sees_the_same_input_through_run_and_through_slime(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                                   tmp_path: Path, monkeypatch: Any) -> None:
    import tests.test_reward_paths as me

    monkeypatch.setattr(me, "RECORDING", RECORDING)
    agent = "tests.test_reward_paths:RECORDING"
    options = {"attempts": 3}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"input": "What is 6 * 7?", "label": "42", "metadata": {"source": "t"}}) + "\n")
    SEEN.clear()
    summary = run_file(agent, rows, f"sglang:{server.url}", tmp_path / "out", tokenizer=str(tiny_model_dir),
                       options=options, max_new_tokens=16)
    assert summary["results"] == 1 and len(SEEN) == 1  # scored once
    local = SEEN.pop()

    args = make_args(server.url, tiny_model_dir, agent, agentgraph_options=options)
    s = generate(args, sample())
    assert len(SEEN) == 1 and s.reward is not None  # scored once, in generate
    in_generate = SEEN.pop()
    s.reward = None  # a slime path where the rm runs (e.g. the reward was dropped): recomputed alike
    asyncio.run(rl_bridge.reward_func(args, s))
    in_rm = SEEN.pop()

    for seen in (local, in_generate, in_rm):
        assert seen["metadata"] == {"source": "t"}  # the row's own metadata, nothing agentgraphs added
        assert seen["options"] == {"greeting": "hi", "attempts": 3}
        assert seen["label"] == "42" and seen["status"] in ("completed", "truncated")
        assert seen["prompt"] == "What is 6 * 7?"
        assert set(seen["trace_summary"]) == {"turns_by_node", "output_tokens", "trained_tokens", "truncated_turns"}
        assert seen["trace_summary"]["turns_by_node"] == {"solve": 1, "check": 1}
    assert in_generate == in_rm
    assert set(local) == set(in_generate) == set(RewardInput.__annotations__)


def test_list_mode_scores_each_trajectory_once_and_shares_it(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                            monkeypatch: Any) -> None:
    import tests.test_reward_paths as me

    monkeypatch.setattr(me, "RECORDING", RECORDING)
    args = make_args(server.url, tiny_model_dir, "tests.test_reward_paths:RECORDING", agentgraph_return_list=True)
    SEEN.clear()
    sibs = generate(args, sample(3, SampleV03))
    assert len(sibs) == 2 and len(SEEN) == 1 and sibs[0].reward == sibs[1].reward
    for s in sibs:
        s.reward = None
    rewards = asyncio.run(rl_bridge.reward_func(args, sibs))
    assert len(SEEN) == 2 and rewards[0] == rewards[1]  # one more call for the whole trajectory
    assert sibs[0].metadata["trajectory_id"] == sibs[1].metadata["trajectory_id"]


def test_list_mode_divides_a_shared_reward_when_asked(server: Any, tiny_model_dir: Path) -> None:  # noqa: F811
    args = make_args(server.url, tiny_model_dir, "memagent", agentgraph_return_list=True,
                     agentgraph_options={"chunk_tokens": 64, "memory_max_new_tokens": 4, "final_max_new_tokens": 4,
                                         "reward_split": "divide"})
    s = SampleV03(group_index=0, index=0, prompt="What is the code?", label="1234",
               metadata={"context": "The code is 1234. " * 30})
    sibs = generate(args, s)
    assert len(sibs) > 1
    assert sibs[0].reward == 0.0  # a random model does not answer; the split of 0 is 0, one value for all
    assert len({x.metadata["trajectory_id"] for x in sibs}) == 1


def test_list_mode_returns_a_list_for_an_aborted_trajectory(server: Any, tiny_model_dir: Path) -> None:  # noqa: F811
    server.faults.schedule("abort", 1)
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN", agentgraph_return_list=True)
    out = generate(args, sample(0, SampleV03))
    assert isinstance(out, list) and len(out) == 1 and out[0].status == SampleV03.Status.ABORTED


def test_top_p_below_one_is_refused_before_any_rollout(server: Any, tiny_model_dir: Path) -> None:  # noqa: F811
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN", rollout_top_p=0.9)
    with pytest.raises(ConfigError, match="--rollout-top-p 0.9: slime >= 0.3.1"):
        generate(args, sample())
    assert server.stats.generate_requests == 0


def test_list_mode_without_the_converter_warns(server: Any, tiny_model_dir: Path, caplog: Any) -> None:  # noqa: F811
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN", agentgraph_return_list=True,
                     custom_convert_samples_to_train_data_path=None)
    with caplog.at_level(logging.WARNING, logger="rl_bridge.setup"):
        generate(args, sample(0, SampleV03))
    assert "normalises the whole batch as one group" in caplog.text


def test_a_trained_sequence_ending_in_token_zero_is_reported(caplog: Any) -> None:
    seq = {"tokens": [5, 6, 7, 0], "response_length": 2, "loss_mask": [1, 1], "rollout_log_probs": [-0.1, -0.2],
           "turn_indices": [0]}
    rollout = Rollout(status="completed", reason="ok", sequences=[seq], reward=1.0)
    spec = replace(TWO_TURN, name="ends_in_bang", _graphs={})
    with caplog.at_level(logging.WARNING, logger="agentgraphs.records"):
        fields = sample_fields(rollout, spec)
    assert "ends in token id 0" in caplog.text and fields["tokens"][-1] == 0


def test_a_helper_engine_of_another_family_renders_with_its_own_tokenizer(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                                        qwen3: Any) -> None:
    from agentgraphs.engines import SamplingParams
    from agentgraphs.testing.tiny_model import ensure_tiny_model
    from rl_bridge.setup import get_setup

    qwen3_dir = str(ensure_tiny_model(template="qwen3"))
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN",
                     agentgraph_engines={"judge": f"sglang:{server.url}"}, agentgraph_tokenizers={"judge": qwen3_dir})
    ctx = get_setup(args).context(SamplingParams(), evaluation=False)
    judge_ids = ctx.template("judge").render([{"role": "user", "content": "hi"}])
    text = qwen3.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert judge_ids == qwen3.encode(text, add_special_tokens=False)  # Qwen3's template: no default system prompt
    assert ctx.template("judge").tokenizer.name_or_path == qwen3_dir
    assert ctx.template("policy").tokenizer.name_or_path == str(tiny_model_dir)
    bad = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN",
                    agentgraph_tokenizers={"critic": qwen3_dir})
    with pytest.raises(ConfigError, match="agentgraph_tokenizers names \\['critic'\\]"):
        generate(bad, sample())

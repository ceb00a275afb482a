"""One reward, one RewardInput: what a reward function sees is the same through `agentgraphs run` /
`run_rollout` and through slime's hooks; list mode scores once per trajectory; slime flags that would
break training are refused up front."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import rl_bridge
from agentgraphs.batch import run_file
from agentgraphs.context import Limits
from agentgraphs.errors import ConfigError
from agentgraphs.records import sample_fields
from agentgraphs.records import Rollout
from agentgraphs.spec import RewardInput
from agentgraphs.testing.agents import TWO_TURN, TWO_TURN_PER_TURN
from agentgraphs.testing.slime_sample import Sample, SampleV03
from tests.test_bridge import SLIME_SAMPLING, generate, make_args, sample

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


# --- rewards that cannot be trained on: every one comes back FAILED, masked, with a reason; none hangs -----------

DEFECTS = replace(TWO_TURN, name="reward_defects", _graphs={})  # each test below patches in its reward
RELEASE = threading.Event()  # lets the blocking sync reward's abandoned thread finish once its test is done
BLOCKED_AT: list[float] = []


async def hanging_reward(rin: RewardInput, ctx: Any) -> float:
    await asyncio.sleep(3600)
    return 1.0


def blocking_reward(rin: RewardInput, ctx: Any) -> float:
    BLOCKED_AT.append(time.monotonic())
    RELEASE.wait(60)  # time.sleep(3600), but released at the end of the test
    return 1.0


def forgot_return(rin: RewardInput, ctx: Any) -> float:
    1.0 if "42" in rin["answer"] else 0.0  # the bug under test: no `return`


def defects_args(server: Any, model_dir: Path, **extra: Any) -> Any:  # noqa: F811
    return make_args(server.url, model_dir, "tests.test_reward_paths:DEFECTS", agentgraph_max_time_s=20,
                     agentgraph_reward_timeout_s=0.5, **extra)


def bounded_generate(args: Any, s: Any, limit_s: float = 30.0) -> Any:
    """rl_bridge.generate, failing the test (not hanging it) if it does not return within `limit_s`."""
    return asyncio.run(asyncio.wait_for(rl_bridge.generate(args, s, dict(SLIME_SAMPLING)), limit_s))


def assert_failed(s: Any, *reason_parts: str, reward: Any = 0.0) -> None:
    """FAILED and trains nothing; `reward`: what generate set (reward_func returns it and slime sets it)."""
    assert s.status == Sample.Status.FAILED and s.remove_sample and s.reward == reward
    assert not any(s.loss_mask) and not any(s.rollout_log_probs)
    assert all(not any(seq["loss_mask"]) for seq in s.train_metadata["turns"])
    for part in reason_parts:
        assert part in s.metadata["status_reason"], (part, s.metadata["status_reason"])


def test_a_hanging_async_reward_fails_its_sample_instead_of_hanging_generate(server: Any,  # noqa: F811
                                                                              tiny_model_dir: Path,
                                                                              monkeypatch: Any) -> None:
    monkeypatch.setattr(DEFECTS, "reward", hanging_reward)
    started = time.monotonic()
    s = bounded_generate(defects_args(server, tiny_model_dir), sample())
    assert time.monotonic() - started < 15
    assert_failed(s, "reward function tests.test_reward_paths:hanging_reward did not return within 0.5 s",
                  "agentgraph_reward_timeout_s")


def test_a_blocking_sync_reward_neither_hangs_generate_nor_blocks_the_event_loop(server: Any,  # noqa: F811
                                                                                  tiny_model_dir: Path,
                                                                                  monkeypatch: Any) -> None:
    monkeypatch.setattr(DEFECTS, "reward", blocking_reward)
    BLOCKED_AT.clear()
    RELEASE.clear()
    ticks: list[float] = []

    async def run() -> Any:
        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.02)

        ticker = asyncio.ensure_future(tick())
        try:
            return await asyncio.wait_for(rl_bridge.generate(defects_args(server, tiny_model_dir), sample(),
                                                             dict(SLIME_SAMPLING)), 30)
        finally:
            ticker.cancel()

    try:
        s = asyncio.run(run())
    finally:
        RELEASE.set()
    assert_failed(s, "reward function tests.test_reward_paths:blocking_reward did not return within 0.5 s")
    assert len(BLOCKED_AT) == 1
    assert sum(1 for t in ticks if t > BLOCKED_AT[0]) >= 5  # the loop kept running while the reward blocked


async def busy_async_reward(rin: RewardInput, ctx: Any) -> float:
    BLOCKED_AT.append(time.monotonic())
    until = time.monotonic() + 8  # Python code that never awaits: the event loop stands still for 8 s
    while time.monotonic() < until:
        pass
    return 1.0


async def sleeping_async_reward(rin: RewardInput, ctx: Any) -> float:
    BLOCKED_AT.append(time.monotonic())
    try:
        time.sleep(2)  # a blocking C call inside `async def`; it swallows what stops it and answers anyway
    except Exception:  # noqa: BLE001 - the user's bug under test
        pass
    return 1.0


@pytest.mark.parametrize("reward, stuck_at", [(busy_async_reward, "while time.monotonic() < until"),
                                              (sleeping_async_reward, "time.sleep(2)")])
def test_an_async_reward_that_blocks_the_event_loop_is_stopped_and_fails_its_sample(
        server: Any, tiny_model_dir: Path, monkeypatch: Any, caplog: Any, reward: Any, stuck_at: str) -> None:  # noqa: F811
    """An `async def` reward that blocks the loop holds the timeout that bounds it (a callback on that loop):
    before loop_guard, the busy one ran its 8 s and its 1.0 was trained on, the sleeping one's too."""
    monkeypatch.setattr(DEFECTS, "reward", reward)
    BLOCKED_AT.clear()
    with caplog.at_level(logging.ERROR, logger="agentgraphs.loop_guard"):
        s = bounded_generate(defects_args(server, tiny_model_dir), sample())
    took = time.monotonic() - BLOCKED_AT[0]
    assert took < (4 if reward is busy_async_reward else 3.5), took  # stopped at 0.5 s (+ grace), or at its return
    name = f"tests.test_reward_paths:{reward.__name__}"
    assert_failed(s, f"reward function {name} blocked the event loop past its 0.5 s (at ",
                  "test_reward_paths.py:", "agentgraph_reward_timeout_s", "make it a plain `def`")
    (record,) = [r for r in caplog.records if r.name == "agentgraphs.loop_guard"]  # logged once, with its stack
    assert name in record.getMessage() and stuck_at in record.getMessage()


def test_reward_func_bounds_a_hanging_reward_too(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                 monkeypatch: Any) -> None:
    args = defects_args(server, tiny_model_dir)
    s = bounded_generate(args, sample())
    assert s.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    s.reward = None
    monkeypatch.setattr(DEFECTS, "reward", hanging_reward)
    started = time.monotonic()
    assert asyncio.run(asyncio.wait_for(rl_bridge.reward_func(args, s), 10)) == 0.0
    assert time.monotonic() - started < 5
    assert_failed(s, "did not return within 0.5 s", "hanging_reward", reward=None)


def test_a_hanging_eval_metrics_fails_its_sample(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                 monkeypatch: Any) -> None:
    async def metrics(rin: RewardInput) -> dict[str, float]:
        await asyncio.sleep(3600)
        return {}

    monkeypatch.setattr(DEFECTS, "eval_metrics", metrics)
    s = bounded_generate(defects_args(server, tiny_model_dir), sample())
    assert_failed(s, "eval_metrics function", "did not return within 0.5 s")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_reward_fails_its_sample(server: Any, tiny_model_dir: Path, monkeypatch: Any,  # noqa: F811
                                              value: float) -> None:
    monkeypatch.setattr(DEFECTS, "reward", lambda rin, ctx: value)
    s = bounded_generate(defects_args(server, tiny_model_dir), sample())
    assert_failed(s, f"reward function tests.test_reward_paths:{test_a_non_finite_reward_fails_its_sample.__name__}"
                     f".<locals>.<lambda> returned {value} (not finite)")


def test_reward_func_refuses_a_non_finite_reward(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                 monkeypatch: Any) -> None:
    args = defects_args(server, tiny_model_dir)
    s = bounded_generate(args, sample())
    s.reward = None
    monkeypatch.setattr(DEFECTS, "reward", lambda rin, ctx: float("nan"))
    assert asyncio.run(rl_bridge.reward_func(args, s)) == 0.0
    assert_failed(s, "returned nan (not finite)", reward=None)


def test_a_reward_that_returns_none_fails_its_sample(server: Any, tiny_model_dir: Path, tmp_path: Path,  # noqa: F811
                                                     monkeypatch: Any) -> None:
    monkeypatch.setattr(DEFECTS, "reward", forgot_return)
    s = bounded_generate(defects_args(server, tiny_model_dir), sample())
    assert_failed(s, "reward function tests.test_reward_paths:forgot_return returned None")
    rows = tmp_path / "rows.jsonl"  # `agentgraphs run` says so too, instead of a mean reward of 0.0
    rows.write_text(json.dumps({"input": "What is 6 * 7?", "label": "42"}) + "\n")
    summary = run_file("tests.test_reward_paths:DEFECTS", rows, f"sglang:{server.url}", tmp_path / "out",
                       tokenizer=str(tiny_model_dir), max_new_tokens=8)
    assert summary["by_status"] == {"failed": 1}
    trace = json.loads((tmp_path / "out" / "traces.jsonl").read_text().splitlines()[0])
    assert "forgot_return returned None" in trace["reason"] and trace["reward"] is None


def test_a_dict_reward_without_the_reward_key_fails_its_sample(server: Any, tiny_model_dir: Path,  # noqa: F811
                                                                monkeypatch: Any) -> None:
    monkeypatch.setattr(DEFECTS, "dict_reward", True)
    monkeypatch.setattr(DEFECTS, "reward", lambda rin, ctx: {"score": 1.0})
    args = defects_args(server, tiny_model_dir, reward_key="reward")
    s = bounded_generate(args, sample())
    assert s.status == Sample.Status.FAILED and not any(s.loss_mask)
    assert s.reward == {"reward": 0.0}  # the spec's zero reward, never {"score": 1.0, "reward": 0.0} made up
    assert "returned a dict without the spec's reward_key 'reward' (keys: ['score'])" in s.metadata["status_reason"]
    assert "AgentSpec(reward_key=...)" in s.metadata["status_reason"]
    monkeypatch.setattr(DEFECTS, "reward", lambda rin, ctx: {"reward": 1, "score": 1.0})  # with the key: trained
    ok = bounded_generate(args, sample())
    assert ok.status != Sample.Status.FAILED and ok.reward == {"reward": 1.0, "score": 1.0}


@pytest.mark.parametrize(("dict_reward", "value", "flags", "words"), [
    (False, {"reward": 1.0, "format": 0.5}, {"reward_key": None},
     "returned a dict (keys: ['format', 'reward']), but agent 'reward_defects' declares a float reward"),
    (True, 1.0, {"reward_key": "reward"}, "returned float 1.0, but agent 'reward_defects' declares a dict reward"),
])
def test_a_reward_of_the_other_shape_than_the_spec_declares_fails_its_sample(
        server: Any, tiny_model_dir: Path, monkeypatch: Any, dict_reward: bool, value: Any,  # noqa: F811
        flags: dict[str, Any], words: str) -> None:
    """The launch flags are checked against `dict_reward` before any rollout, so a reward of the other shape
    passed to slime would stop it later (a dict without --reward-key in torch.tensor, or the converter asking
    for --reward-key, which the preflight then refuses; a float under --reward-key in slime's indexing)."""
    monkeypatch.setattr(DEFECTS, "dict_reward", dict_reward)
    monkeypatch.setattr(DEFECTS, "reward", lambda rin, ctx: value)
    args = defects_args(server, tiny_model_dir, **flags)
    s = bounded_generate(args, sample())
    assert_failed(s, words, reward={"reward": 0.0} if dict_reward else 0.0)
    assert "dict_reward=" in s.metadata["status_reason"]
    s.reward = None  # the rm hook holds the same rule
    assert asyncio.run(rl_bridge.reward_func(args, s)) == ({"reward": 0.0} if dict_reward else 0.0)
    assert words in s.metadata["status_reason"]


@pytest.mark.parametrize(("dict_reward", "flags", "words"), [
    (True, {"reward_key": None}, "dict reward whose scalar is under 'reward', but --reward-key is None: slime would "
                                 "read the whole dict as the reward. Pass --reward-key reward"),
    (True, {"reward_key": "score"}, "but --reward-key is 'score': slime would read 'score' as the reward"),
    (True, {"reward_key": "reward", "eval_reward_key": "score"}, "--eval-reward-key is 'score': pass "
                                                                  "--eval-reward-key reward, or leave it unset"),
    (False, {"reward_key": "score"}, "returns a float reward, but --reward-key is 'score': slime would index the "
                                     "float"),
    (False, {"reward_key": None, "eval_reward_key": "acc"}, "float reward, but --eval-reward-key is 'acc'"),
])
def test_a_reward_key_slime_would_misread_is_refused_before_any_rollout(
        server: Any, tiny_model_dir: Path, monkeypatch: Any, dict_reward: bool, flags: dict[str, Any],  # noqa: F811
        words: str) -> None:
    """slime reads `sample.reward[args.reward_key]` when the flag is set and the reward itself when not (its
    dynamic-sampling filters, default normalisation, eval logging): a seed launch script's `--reward-key score`
    over a float reward stopped slime with a TypeError, a dict reward without the flag in torch.tensor."""
    monkeypatch.setattr(DEFECTS, "dict_reward", dict_reward)
    args = defects_args(server, tiny_model_dir, **flags)
    with pytest.raises(ConfigError) as info:
        bounded_generate(args, sample())
    assert words in " ".join(str(info.value).split())
    assert server.stats.generate_requests == 0
    # the flag as the reward is read: trained (eval_reward_key unset falls back to reward_key)
    right = {"reward_key": "reward" if dict_reward else None}
    monkeypatch.setattr(DEFECTS, "reward", lambda rin, ctx: {"reward": 1.0} if dict_reward else 1.0)
    assert bounded_generate(defects_args(server, tiny_model_dir, **right), sample()).status != Sample.Status.FAILED


def test_eval_metrics_refuses_a_dict_reward_without_the_key() -> None:
    with pytest.raises(ConfigError, match=r"eval dataset 'd': dict reward \['score'\] has no key 'reward'.*"
                                          r"--eval-reward-key"):
        rl_bridge.eval_metrics({"d": {"rewards": [{"score": 1.0}]}})
    assert rl_bridge.eval_metrics({"d": {"rewards": [{"score": 1.0}]}}, "score")["d"]["accuracy"] == 1.0
    assert rl_bridge.eval_metrics({"d": {"rewards": [1.0, 0.0]}})["d"]["accuracy"] == 0.5


def test_the_reward_timeout_must_be_positive(server: Any, tiny_model_dir: Path) -> None:  # noqa: F811
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN",
                     agentgraph_reward_timeout_s=0.0)
    with pytest.raises(ConfigError, match="agentgraph_reward_timeout_s"):
        generate(args, sample())
    with pytest.raises(ConfigError, match="reward_timeout_s must be a number of seconds > 0"):
        Limits(reward_timeout_s=float("nan"))
    assert server.stats.generate_requests == 0


def test_reward_func_fails_a_sample_generate_never_filled(tiny_model_dir: Path) -> None:
    """slime's own generate with our rm (--custom-rm-path without --custom-generate-function-path): the
    Sample has no extracted answer, and grading its raw response text would make up a reward."""
    args = make_args("http://127.0.0.1:9", tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = Sample(group_index=0, index=0, prompt="What is 6 * 7?", label="42", metadata={"source": "t"},
               response="Let me think... \\boxed{42}", tokens=[1, 2, 3], response_length=2, loss_mask=[1, 1],
               rollout_log_probs=[-0.5, -0.25])
    assert asyncio.run(rl_bridge.reward_func(args, s)) == 0.0  # before: 1.0, graded from the raw response
    assert s.status == Sample.Status.FAILED and s.remove_sample and not any(s.loss_mask)
    reason = s.metadata["status_reason"]
    assert "'metadata.answer'" in reason and "--custom-generate-function-path rl_bridge.generate" in reason, reason
    assert s.metadata["source"] == "t"  # the row's own metadata is kept

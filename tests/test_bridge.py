"""rl_bridge end to end: slime's hooks against the local SGLang-contract server, with a Sample
stand-in that has slime's exact fields and Status enum."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.errors import ConfigError
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample, SampleV03, SampleV030
from rl_bridge.setup import aclose_all, clear_cache

SLIME_SAMPLING = {  # what slime's rollout hands a custom generate function
    "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 16, "stop": None,
    "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
    "spaces_between_special_tokens": False,
}


def make_args(srv_url: str, model_dir: Path, agent: str, **extra: Any) -> SimpleNamespace:
    host, port = srv_url.removeprefix("http://").rsplit(":", 1)
    return SimpleNamespace(**{"agentgraph": agent, "hf_checkpoint": str(model_dir), "sglang_router_ip": host,
                              "sglang_router_port": int(port), "agentgraph_max_retries": 0, "reward_key": None, **extra})


def sample(i: int = 0, cls: type = Sample) -> Any:
    return cls(group_index=0, index=i, prompt="What is 6 * 7?", label="42", metadata={"source": "t"})


def generate(args: Any, s: Any, **sp: Any) -> Any:
    return asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, **sp}))


def check_against_server(seqs: list[dict], calls: list) -> None:
    """Invariants 1-3 token by token against what the server returned."""
    spans = 0
    for seq in seqs:
        tokens, n = seq["tokens"], seq["response_length"]
        assert len(seq["loss_mask"]) == len(seq["rollout_log_probs"]) == n
        start = len(tokens) - n
        for k in range(n):
            if not seq["loss_mask"][k]:
                assert seq["rollout_log_probs"][k] == 0.0
        for prompt, comp in calls:
            a, b = len(prompt), len(prompt) + len(comp.token_ids)
            if tokens[:a] == prompt and tokens[a:b] == comp.token_ids and a >= start:
                spans += 1
                assert seq["loss_mask"][a - start:b - start] == [1] * (b - a)
                assert seq["rollout_log_probs"][a - start:b - start] == comp.logprobs
        assert sum(seq["loss_mask"]) == sum(
            len(c.token_ids) for p, c in calls
            if tokens[:len(p)] == p and tokens[len(p):len(p) + len(c.token_ids)] == c.token_ids and len(p) >= start)
    assert spans == len(calls)


def test_concat_layout_one_sequence(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = generate(args, sample())
    assert s.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    seqs = s.train_metadata["turns"]
    assert len(seqs) == 1 and s.train_metadata["layout"] == "concat"
    assert s.tokens == seqs[0]["tokens"] and s.loss_mask == seqs[0]["loss_mask"]
    assert s.response_length == seqs[0]["response_length"]
    assert len(server.recorder.calls) == 2
    check_against_server(seqs, server.recorder.calls)
    assert s.metadata["llm_calls"] == 2 and s.metadata["source"] == "t"
    # the reward is computed once, in the rollout: slime skips its rm for a sample that has one, and
    # reward_func (called where a reward is missing) recomputes the same value from the same RewardInput
    assert s.reward in (0.0, 1.0)
    kept, s.reward = s.reward, None
    assert asyncio.run(rl_bridge.reward_func(args, s)) == kept


def test_per_turn_layout_two_sequences(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN_PER_TURN")
    s = generate(args, sample())
    seqs = s.train_metadata["turns"]
    assert len(seqs) == 2
    check_against_server(seqs, server.recorder.calls)
    for seq, (prompt, comp) in zip(seqs, server.recorder.calls):
        assert seq["tokens"] == prompt + comp.token_ids and seq["loss_mask"] == [1] * len(comp.token_ids)


def test_list_layout_siblings_share_rollout_id(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN_PER_TURN",
                     agentgraph_return_list=True)
    out = generate(args, sample(5, SampleV03))
    assert isinstance(out, list) and len(out) == 2
    assert {o.rollout_id for o in out} == {5}
    check_against_server([o.train_metadata["turns"][0] for o in out], server.recorder.calls)
    for o in out:
        assert o.tokens == o.train_metadata["turns"][0]["tokens"]
        assert len(o.loss_mask) == o.response_length == len(o.rollout_log_probs)
    rewards = asyncio.run(rl_bridge.reward_func(args, out))
    assert len(rewards) == 2 and all(isinstance(r, float) for r in rewards)


def test_list_layout_on_slime_030_shares_group_id(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN_PER_TURN",
                     agentgraph_return_list=True)
    out = generate(args, sample(7, SampleV030))
    assert len(out) == 2 and [o.group_id for o in out] == [7, 7]  # v0.3.0 asserts every sibling has one
    with pytest.raises(AttributeError):
        out[0].rollout_id  # noqa: B018 - v0.3.0's Sample refuses to read it
    data = rl_bridge.convert(make_args(server.url, tiny_model_dir, "x", n_samples_per_prompt=1), out)
    assert data["group_ids"] == [7, 7] and data["group_mask_sums"][0] == sum(map(sum, data["loss_masks"]))


def test_partial_rollout_carried_over_sample_trains_nothing(server: Any, tiny_model_dir: Path) -> None:
    """slime's generate_and_rm with --partial-rollout --mask-offpolicy-in-partial-rollout zeroes the top-level
    mask of a sample carried over from an earlier rollout and returns a COMPLETED one as it is."""
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN_PER_TURN",
                     n_samples_per_prompt=2, partial_rollout=True, mask_offpolicy_in_partial_rollout=True)
    fresh, carried = generate(args, sample(0)), generate(args, sample(1))
    assert fresh.loss_mask == fresh.train_metadata["turns"][0]["loss_mask"] and any(fresh.loss_mask)
    carried.loss_mask = [0] * carried.response_length  # what slime does before it sees the COMPLETED status
    data = rl_bridge.convert(args, [fresh, carried])
    assert data["agentgraph_offpolicy_masked_trajectories"] == 1
    assert all(any(m) for m in data["loss_masks"][:2]) and not any(map(any, data["loss_masks"][2:]))


def test_reward_and_convert_round_trip(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN_PER_TURN",
                     n_samples_per_prompt=2, rollout_batch_size=1, global_batch_size=4,
                     advantage_estimator="grpo")
    samples = [generate(args, sample(i)) for i in range(2)]
    for s in samples:
        s.reward = asyncio.run(rl_bridge.reward_func(args, s))
        assert s.reward in (0.0, 1.0)
    # a forced correct answer scores 1
    samples[0].metadata["answer"] = "so \\boxed{42}"
    assert asyncio.run(rl_bridge.reward_func(args, samples[0])) == 1.0
    samples[0].reward = 1.0
    data = rl_bridge.convert(args, samples)
    assert len(data["tokens"]) == 4 and data["rewards"][:2] == [data["rewards"][0]] * 2
    assert data["rewards"][0] > 0 > data["rewards"][2]
    assert all(len(m) == n for m, n in zip(data["loss_masks"], data["response_lengths"]))


def test_graph_exception_comes_back_failed(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:FAILING")
    s = generate(args, sample())
    assert s.status == Sample.Status.FAILED and s.remove_sample
    assert "always fails" in s.metadata["status_reason"] and "RuntimeError" in s.metadata["error"]
    # the turn made before the failure is kept for debugging (and masked)
    assert s.metadata["llm_calls"] == 1 and s.metadata["trace_summary"]["turns_by_node"] == {"solve": 1}
    for seq in s.train_metadata["turns"]:
        assert not any(seq["loss_mask"]) and not any(seq["rollout_log_probs"])
    assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs) >= 1
    assert asyncio.run(rl_bridge.reward_func(args, s)) == 0.0


def test_server_down_comes_back_failed(tiny_model_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    args = make_args(f"http://127.0.0.1:{port}", tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = generate(args, sample())
    clear_cache()
    assert s.status == Sample.Status.FAILED and "EngineUnavailableError" in s.metadata["status_reason"]
    assert not any(s.loss_mask)


def test_abort_comes_back_aborted(server: Any, tiny_model_dir: Path) -> None:
    server.faults.schedule("abort", 1)
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = generate(args, sample())
    assert s.status == Sample.Status.ABORTED


def test_truncation_comes_back_truncated(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = generate(args, sample(), max_new_tokens=2)  # the random model never closes its turn in 2 tokens
    assert s.status == Sample.Status.TRUNCATED
    assert "max_new_tokens" in s.metadata["status_reason"]
    check_against_server(s.train_metadata["turns"], server.recorder.calls)


@pytest.mark.parametrize("agent, hf, match", [
    ("no_such_agent", True, "unknown agent"),
    ("", True, "no agent selected"),
    ("agentgraphs.testing.agents:TWO_TURN", False, "hf_checkpoint"),
    ("agentgraphs.testing.agents:NOPE", True, "not an AgentSpec"),
])
def test_bad_args_fail_before_any_rollout(server: Any, tiny_model_dir: Path, monkeypatch: Any,
                                          agent: str, hf: bool, match: str) -> None:
    monkeypatch.delenv("AGENTGRAPH", raising=False)
    args = make_args(server.url, tiny_model_dir, agent)
    if not hf:
        args.hf_checkpoint = None
    with pytest.raises(ConfigError, match=match):
        generate(args, sample())
    assert server.stats.generate_requests == 0


def test_unknown_agent_option_is_an_error(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "memagent", agentgraph_options={"chunk_size": 10})
    with pytest.raises(ConfigError, match="chunk_size"):
        generate(args, sample())


def test_agent_from_environment(server: Any, tiny_model_dir: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("AGENTGRAPH", "agentgraphs.testing.agents:TWO_TURN")
    args = make_args(server.url, tiny_model_dir, "")
    assert generate(args, sample()).status != Sample.Status.FAILED


def test_eval_log_writes_json_and_feeds_slime_logger(tmp_path: Path) -> None:
    samples = [Sample(index=i, metadata={"metrics": {"sub_em": float(i % 2), "f1": 0.5}},
                      status=Sample.Status.COMPLETED) for i in range(4)]
    data = {"ruler_7k": {"rewards": [1.0, 0.0, 1.0, 1.0], "truncated": [0, 0, 1, 0], "samples": samples}}
    extra: dict[str, Any] = {}
    args = SimpleNamespace(agentgraph_eval_dir=str(tmp_path), reward_key=None)
    assert rl_bridge.eval_log(3, args, data, extra) is False
    assert extra["eval/ruler_7k/accuracy"] == 0.75 and extra["eval/ruler_7k/sub_em"] == 0.5
    assert extra["eval/ruler_7k/truncated_rate"] == 0.25
    written = json.loads((tmp_path / "eval_3.json").read_text())
    assert written["metrics"]["ruler_7k"]["f1"] == 0.5


def test_agent_from_a_file_path(tmp_path: Path) -> None:
    from agentgraphs.spec import load_spec

    src = Path(__file__).resolve().parent.parent / "examples" / "new_agent.py"
    spec = load_spec(f"{src}:SPEC")
    assert spec.layout == "concat"
    with pytest.raises(ConfigError, match="no such file"):
        load_spec(f"{tmp_path / 'missing.py'}:SPEC")


def test_evaluation_has_its_own_limits(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN",
                     agentgraph_max_llm_calls=1, agentgraph_eval_max_llm_calls=5)
    train = generate(args, sample())
    assert train.status == Sample.Status.FAILED and "LLMCallLimitExceeded" in train.metadata["status_reason"]
    evaluated = asyncio.run(rl_bridge.generate(args, sample(1), SLIME_SAMPLING, evaluation=True))
    assert evaluated.status != Sample.Status.FAILED and evaluated.metadata["llm_calls"] == 2



def test_recursion_limit_is_a_slime_setting(server: Any, tiny_model_dir: Path) -> None:
    """TWO_TURN runs two LangGraph steps (solve, check): agentgraph_recursion_limit 1 stops it, naming the limit
    and the setting; agentgraph_eval_recursion_limit gives evaluation its own."""
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN",
                     agentgraph_recursion_limit=1, agentgraph_eval_recursion_limit=25)
    train = generate(args, sample())
    reason = train.metadata["status_reason"]
    assert train.status == Sample.Status.FAILED and sum(train.loss_mask) == 0
    assert reason.startswith("graph raised GraphRecursionError: the graph ran 1 steps (Limits.recursion_limit)")
    assert "agentgraph_recursion_limit" in reason
    evaluated = asyncio.run(rl_bridge.generate(args, sample(1), SLIME_SAMPLING, evaluation=True))
    assert evaluated.status != Sample.Status.FAILED and evaluated.metadata["llm_calls"] == 2


def test_every_limit_is_a_slime_setting() -> None:
    """A Limits field rl_bridge does not read from args could not be set under slime at all."""
    from dataclasses import fields

    from agentgraphs.context import Limits
    from rl_bridge.setup import LIMIT_SETTINGS, BridgeSettings

    assert set(LIMIT_SETTINGS) == {f.name for f in fields(Limits)}
    assert {f"agentgraph_{name}" for name in LIMIT_SETTINGS} <= set(BridgeSettings.model_fields)

def test_failed_placeholder_keeps_a_prompt_token(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = generate(args, Sample(index=0, prompt=["not", "a string"], label="1"))
    assert s.status == Sample.Status.FAILED and "input field 'prompt'" in s.metadata["status_reason"]
    # slime reads the response log-probs from the logits at prompt_len - 1: the prompt must not be empty
    assert len(s.tokens) > s.response_length == 1 and s.loss_mask == [0]


@pytest.mark.parametrize("metadata", ["source: t", ["t"], 5])
def test_metadata_that_is_not_a_dict_comes_back_failed_naming_it(server: Any, tiny_model_dir: Path,
                                                                  metadata: Any) -> None:
    """slime keeps a row's --metadata-key value as it is (only a falsy one becomes {}): a string or a list was
    rolled out and trained as metadata {"value": ...}, a row the graph never saw, without a word (the JSONL
    reader of `agentgraphs run` refuses the same row)."""
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    before = server.stats.generate_requests
    s = generate(args, Sample(index=0, prompt="What is 6 * 7?", label="42", metadata=metadata))
    assert s.status == Sample.Status.FAILED and s.remove_sample, s.metadata["status_reason"]
    assert s.metadata["status_reason"].startswith(
        f"bad input: input field 'metadata': must be an object, got {type(metadata).__name__}")
    assert "--metadata-key" in s.metadata["status_reason"] and s.metadata["value"] == metadata  # kept, not lost
    assert len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length < len(s.tokens) and not any(s.loss_mask)
    assert server.stats.generate_requests == before  # refused before any generation


@pytest.mark.parametrize("as_list", [False, True])  # per sample, and --group-rm / a generate that returned a list
def test_reward_func_on_a_sample_with_non_dict_metadata_fails_it_instead_of_raising(server: Any, tiny_model_dir: Path,
                                                                                    as_list: bool) -> None:
    """A Sample rl_bridge.generate did not fill (slime's own generate, an eval dataset's generate path) whose row
    metadata is a string: reward_func raised TypeError / AttributeError out of slime's rollout instead of the
    documented FAILED sample naming the field and the fix; eval_log raised on it too."""
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = Sample(index=0, prompt="What is 6 * 7?", label="42", response="\\boxed{42}", tokens=[1, 2, 3],
               response_length=2, loss_mask=[1, 1], rollout_log_probs=[-0.1, -0.2], metadata="source: t",
               status=Sample.Status.COMPLETED)
    reward = asyncio.run(rl_bridge.reward_func(args, [s] if as_list else s))
    assert reward == ([0.0] if as_list else 0.0)
    assert s.status == Sample.Status.FAILED and s.remove_sample and s.loss_mask == [0, 0]
    assert "input field 'metadata.answer'" in s.metadata["status_reason"]
    assert "--custom-generate-function-path rl_bridge.generate" in s.metadata["status_reason"]
    assert s.metadata["value"] == "source: t"  # the row's value is kept
    raw = Sample(index=1, metadata=["a", "list"], status=Sample.Status.COMPLETED)
    assert rl_bridge.eval_metrics({"d": {"rewards": [1.0], "samples": [raw]}}) == {
        "d": {"count": 1.0, "accuracy": 1.0, "status_completed": 1.0}}


@pytest.mark.parametrize("flags, words", [
    ({"apply_chat_template": True}, "--apply-chat-template"),
    ({"custom_convert_samples_to_train_data_path": None}, "--custom-convert-samples-to-train-data-path"),
    ({"agentgraph_return_list": True, "partial_rollout": True}, "--partial-rollout"),
    ({"agentgraph_return_list": True, "dynamic_sampling_filter_path": "slime.rollout.filter_hub."
      "dynamic_sampling_filters.check_reward_nonzero_std"}, "--dynamic-sampling-filter-path"),
    ({"agentgraph_return_list": True}, "needs slime >= 0.3"),  # a v0.2.2 Sample: no rollout_id / group_id
    ({"use_rollout_routing_replay": True}, "--use-rollout-routing-replay"),
    ({"agentgraph_template_kwargs": {"enable_thinking": False}}, "'enable_thinking' is not read"),  # Qwen2.5
    ({"label_key": None}, "--label-key"),
])
def test_slime_flags_that_would_break_training_are_refused(server: Any, tiny_model_dir: Path,
                                                           flags: dict, words: str) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN", **flags)
    with pytest.raises(ConfigError, match=words):
        generate(args, sample())
    assert server.stats.generate_requests == 0


def test_unscorable_sample_becomes_failed_instead_of_stopping_slime(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    s = generate(args, sample())
    s.label = object()  # the reward function cannot handle this
    s.metadata["answer"] = "\\boxed{42}"
    from agentgraphs.testing import agents

    original = agents.TWO_TURN.reward
    agents.TWO_TURN.reward = lambda rin, ctx: 1 / 0
    try:
        assert asyncio.run(rl_bridge.reward_func(args, s)) == 0.0
    finally:
        agents.TWO_TURN.reward = original
    assert s.status == Sample.Status.FAILED and s.remove_sample
    assert "ZeroDivisionError" in s.metadata["status_reason"] and not any(s.loss_mask)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"reward": float("nan")}])
def test_eval_log_refuses_a_non_finite_reward(tmp_path: Path, bad: Any) -> None:
    """A NaN reward (a custom rm, or an eval path that bypassed generate's check) made the dataset's accuracy
    NaN, written to eval_N.json and handed to slime's logger as if it were a number."""
    data = {"aime": {"rewards": [1.0, bad, 0.0], "samples": [Sample(index=i) for i in range(3)]}}
    args = SimpleNamespace(agentgraph_eval_dir=str(tmp_path), reward_key=None)
    with pytest.raises(ConfigError, match=r"eval dataset 'aime': .*not finite"):
        rl_bridge.eval_log(0, args, data, {})
    assert not (tmp_path / "eval_0.json").exists()


def test_eval_metrics_average_over_every_sample(tmp_path: Path) -> None:
    ok = Sample(index=0, metadata={"metrics": {"sub_em": 1.0}}, status=Sample.Status.COMPLETED)
    failed = Sample(index=1, metadata={}, status=Sample.Status.FAILED)
    data = {"ruler": {"rewards": [1.0, 0.0], "samples": [ok, failed]}}
    args = SimpleNamespace(agentgraph_eval_dir=str(tmp_path), reward_key=None)
    assert rl_bridge.eval_log(0, args, data, None) is False  # slime's v0.2.2 default passes None
    metrics = json.loads((tmp_path / "eval_0.json").read_text())["metrics"]["ruler"]
    assert metrics["accuracy"] == metrics["sub_em"] == 0.5 and metrics["status_failed"] == 1


@pytest.mark.parametrize("kind", ["sglang", "openai"])
def test_helper_engines_take_the_request_timeout_and_retries(server: Any, tiny_engine: Any, tiny_model_dir: Path,
                                                             kind: str) -> None:
    """agentgraph_request_timeout_s / agentgraph_max_retries reach a helper engine as they reach the policy:
    AgentFlow's judge (the seed's rule misses, so the judge decides) on its own server, with faults. The judge
    states a verdict (a reply without one fails the sample: tests/agentflow/test_reward.py)."""
    from agentgraphs.testing.scripted import ScriptedPolicy

    verdict = ScriptedPolicy(tiny_engine, lambda call: "41 is not 42.\nVERDICT: False", name="judge")  # the seed's
    with SGLangTestServer(verdict, port=0) as judge_server:
        judge = f"sglang:{judge_server.url}" if kind == "sglang" else f"openai:{judge_server.url}/v1#judge"

        def score(**settings: Any) -> Any:
            clear_cache()
            args = make_args(server.url, tiny_model_dir, "agentflow", agentgraph_engines={"judge": judge}, **settings)
            s = Sample(group_index=0, index=0, prompt="What is 6 * 7?", label="42", status=Sample.Status.COMPLETED,
                       metadata={"answer": "\\boxed{41}", "options": {"variant": "seed"}})

            async def run() -> Any:
                try:
                    return await rl_bridge.reward_func(args, s)
                finally:
                    await aclose_all()

            return asyncio.run(run()), s

        requests = (lambda: judge_server.stats.generate_requests + judge_server.stats.chat_requests)
        # two injected 503s and two retries allowed: the third attempt answers and the judge scores
        judge_server.faults.schedule("http503", 2)
        before = requests()
        reward, s = score(agentgraph_max_retries=2, agentgraph_request_timeout_s=60.0)
        assert reward in (0.0, 1.0) and s.status == Sample.Status.COMPLETED, s.metadata.get("status_reason")
        assert requests() - before == 3
        # one retry allowed: two 503s outlast it, the sample becomes FAILED with the judge's error
        judge_server.faults.schedule("http503", 2)
        before = requests()
        reward, s = score(agentgraph_max_retries=1, agentgraph_request_timeout_s=60.0)
        assert reward == 0.0 and s.status == Sample.Status.FAILED and s.remove_sample
        assert "failed after 2 attempt(s)" in s.metadata["status_reason"] and judge_server.url in s.metadata["status_reason"]
        assert requests() - before == 2
        # a judge slower than agentgraph_request_timeout_s times out (the engine default would wait 600 s)
        judge_server.faults.latency_s = 3.0
        reward, s = score(agentgraph_max_retries=0, agentgraph_request_timeout_s=0.5)
        assert s.status == Sample.Status.FAILED and "Timeout" in s.metadata["status_reason"], s.metadata
        assert "failed after 1 attempt(s)" in s.metadata["status_reason"]


@pytest.mark.parametrize("package", ["slime.observability", "slime.utils"])  # slime after v0.3.1, and before
def test_eval_log_reaches_slime_tracker_in_either_layout(tmp_path: Path, monkeypatch: Any, package: str) -> None:
    import sys
    import types

    logged: list[tuple[dict, str]] = []
    tracker = types.ModuleType(f"{package}.logging_utils")
    tracker.log = lambda args, metrics, step_key: logged.append((metrics, step_key))  # type: ignore[attr-defined]
    metric_utils = types.ModuleType(f"{package}.metric_utils")
    metric_utils.compute_rollout_step = lambda args, rollout_id: 10 * rollout_id  # type: ignore[attr-defined]
    for name, module in (("slime", types.ModuleType("slime")), (package, types.ModuleType(package)),
                         (tracker.__name__, tracker), (metric_utils.__name__, metric_utils)):
        monkeypatch.setitem(sys.modules, name, module)
    data = {"ruler": {"rewards": [1.0, 0.0], "samples": []}}
    args = SimpleNamespace(agentgraph_eval_dir=str(tmp_path), reward_key=None)
    assert rl_bridge.eval_log(2, args, data, None) is False  # slime's default eval passes no dict
    assert logged == [({"eval/ruler/count": 2.0, "eval/ruler/accuracy": 0.5, "eval/step": 20}, "eval/step")]


def test_eval_log_refuses_rewards_and_samples_of_different_counts(tmp_path: Path) -> None:
    """Accuracy averaged over the rewards and the metrics over the samples: with 3 rewards for 2 samples the two
    figures of one dataset described different samples, and eval_N.json said nothing."""
    data = {"aime": {"rewards": [1.0, 0.0, 1.0], "samples": [Sample(index=i) for i in range(2)]}}
    args = SimpleNamespace(agentgraph_eval_dir=str(tmp_path), reward_key=None)
    with pytest.raises(ConfigError, match=r"eval dataset 'aime': 3 rewards for 2 samples"):
        rl_bridge.eval_log(0, args, data, {})
    assert not (tmp_path / "eval_0.json").exists()


@pytest.mark.parametrize(("data", "said"), [({}, "no eval dataset"), ({"aime": {"rewards": [], "samples": []}},
                                                                     "dataset 'aime' has no evaluated sample")])
def test_eval_log_warns_when_there_is_nothing_to_log(tmp_path: Path, caplog: Any, data: Any, said: str) -> None:
    """An empty eval (no dataset, or a dataset with no sample) wrote a metrics file with no accuracy, silently."""
    args = SimpleNamespace(agentgraph_eval_dir=str(tmp_path), reward_key=None)
    with caplog.at_level("WARNING"):
        assert rl_bridge.eval_log(0, args, data, {}) is False
    assert any(said in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    assert json.loads((tmp_path / "eval_0.json").read_text())["metrics"] == {
        name: {"count": 0.0} for name in data}

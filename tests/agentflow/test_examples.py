"""examples/agentflow: data preparation through the shared loader, the AIME table, the launch script and
config, and `agentgraphs run agentflow` end to end on the tiny model with a helper engine."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import yaml

from agentgraphs.agentflow import SPEC
from agentgraphs.batch import run_file

ROOT = Path(__file__).resolve().parents[2]
prepare_data = importlib.import_module("examples.agentflow.prepare_data")
evaluate = importlib.import_module("examples.agentflow.evaluate")

DAPO_PROMPT = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{q}\n\n"
               'Remember to put your answer on its own line after "Answer:".')


def test_prepare_dapo_and_aime_rows(tmp_path: Path) -> None:
    dapo = tmp_path / "dapo.jsonl"
    lines = [{"prompt": [{"role": "user", "content": DAPO_PROMPT.format(q="What is 6*7?")}],
              "reward_model": {"ground_truth": "42", "style": "rule"}, "extra_info": {"index": "a1"}}] * 2
    dapo.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "train.jsonl"
    assert prepare_data.main(["--source", str(dapo), "--out", str(out), "--dedup"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == [{"input": "What is 6*7?", "label": "42",
                     "metadata": {"question": "What is 6*7?", "id": "a1", "source": str(dapo)}}]
    aime = tmp_path / "aime.json"
    aime.write_text(json.dumps([{"ID": "2024-I-1", "Problem": "Find x.", "Answer": 204}]))
    out2 = tmp_path / "aime24.jsonl"
    assert prepare_data.main(["--source", str(aime), "--out", str(out2)]) == 0
    row = json.loads(out2.read_text())
    assert (row["input"], row["label"], row["metadata"]["id"]) == ("Find x.", "204", "2024-I-1")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "no answer here"}) + "\n")
    assert prepare_data.main(["--source", str(bad), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()


def test_cli_run_agentflow_with_a_helper_engine_and_the_aime_table(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = tmp_path / "aime24.jsonl"
    data.write_text("".join(json.dumps({"input": f"What is {i}+{i}?", "label": str(2 * i),
                                        "metadata": {"question": f"What is {i}+{i}?"}}) + "\n" for i in range(2)))
    out = tmp_path / "run"
    summary = run_file("agentflow", data, f"hf:{tiny_model_dir}", out, engines={"helper": f"hf:{tiny_model_dir}"},
                       options={"max_steps": 1, "judge": None}, n_samples=2, max_new_tokens=8, evaluation=True)
    assert summary["results"] == 4
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    traces = [json.loads(x) for x in (out / "traces.jsonl").read_text().splitlines()]
    assert all(s["status"] in ("completed", "truncated") for s in samples), [s["metadata"] for s in samples]
    for trace in traces:
        engines = {t["node"]: t["engine"] for t in trace["turns"]}
        assert engines["plan_next_step"] == f"hf:{tiny_model_dir}"
        assert not any(t["trainable"] for t in trace["turns"])  # evaluation: nothing trainable
    result = evaluate.scores(samples)
    assert result["problems"] == 2 and result["samples"] == 4
    table = evaluate.aime_table([("tiny", result)], 2)
    assert "| tiny |" in table and "avg@2" in table


def test_launch_script_and_yaml() -> None:
    text = (ROOT / "examples" / "agentflow" / "run_agentflow.sh").read_text(encoding="utf-8")
    for needle in ("rl_bridge.generate", "rl_bridge.reward_func", "rl_bridge.convert", "low_var_kl",
                   "--advantage-estimator grpo", "Qwen2.5-7B-Instruct", "sglang.launch_server", "HELPER_PORT",
                   "agentflow.yaml"):
        assert needle in text, needle
    cfg = yaml.safe_load((ROOT / "examples" / "agentflow" / "agentflow.yaml").read_text(encoding="utf-8"))
    assert cfg["agentgraph"] == "agentflow"
    assert cfg["agentgraph_options"]["variant"] == "seed"  # the seed's training, said explicitly
    opts = SPEC.resolve_options(cfg["agentgraph_options"])
    assert opts.max_steps == 5 and opts.train_analysis and opts.reward_split == "divide"
    assert opts.tools == ("base_generator", "python_coder")
    assert cfg["agentgraph_engines"]["helper"].endswith(":30001")
    # the seed's engines (rollout.py:122-144, launch.sh:75-99): python_coder's code from the coder model on its own
    # server (the script's CODER_PORT), every other helper role on the helper model
    assert opts.tool_engines == {"python_coder": "coder"} and cfg["agentgraph_engines"]["coder"].endswith(":30002")
    assert {opts.executor_engine, opts.verifier_engine, opts.final_engine, opts.tool_engine} == {"helper"}
    assert "CODER_PORT=${CODER_PORT:-30002}" in text and "Qwen2.5-Coder-7B-Instruct" in text
    # the judge is stated, and its engine given: rl_bridge's setup check passes (a missing one is refused)
    assert "judge" in cfg["agentgraph_options"] and cfg["agentgraph_options"]["judge"] in cfg["agentgraph_engines"]
    SPEC.check_engines(opts, cfg["agentgraph_engines"])
    from rl_bridge.setup import BridgeSettings

    assert set(cfg) <= set(BridgeSettings.model_fields)  # every key is one the bridge reads
    BridgeSettings(**cfg)


def test_launch_script_trains_with_the_seeds_hyperparameters() -> None:
    """run_agentflow.sh trains as the seed's launch script does (Takenzz/AgentFlow@4b5aa84,
    agentic/agentflow/agentflow_qwen25_7b_rl_v2.sh): --num-epoch 1 (:62), --rollout-batch-size 8 (:63),
    --n-samples-per-prompt 8 (:64), --rollout-temperature 0.7 (:66), --global-batch-size 64 (:67), grpo +
    low_var_kl at 0.001, entropy 0, eps-clip 0.2 / 0.3 (:99-107), adam lr 1e-6 constant, weight decay 0.1,
    betas 0.9 / 0.98 (:110-117), eval top-p 0.95 (:78). One deliberate difference, said in the script:
    --rollout-max-response-len 4096, the cap the seed's engines put on every call (rollout.py:113, 126, 133)
    where its flag says 32768 (:65). The script ran a fixed 200 rollouts; the seed ran an epoch of DAPO-Math-17K
    (its checkpoint_eval_results.jsonl has checkpoints up to iter_0001699)."""
    from tests.launch_flags import assert_seed_flags

    seed = {"--num-epoch": "1", "--rollout-batch-size": "8", "--n-samples-per-prompt": "8",
            "--rollout-temperature": "0.7", "--global-batch-size": "64", "--advantage-estimator": "grpo",
            "--use-kl-loss": None, "--kl-loss-coef": "0.001", "--kl-loss-type": "low_var_kl", "--eps-clip": "0.2",
            "--eps-clip-high": "0.3", "--optimizer": "adam", "--lr": "1e-6", "--lr-decay-style": "constant",
            "--weight-decay": "0.1", "--adam-beta1": "0.9", "--adam-beta2": "0.98", "--eval-top-p": "0.95",
            "--rollout-max-response-len": "4096"}
    assert_seed_flags(ROOT / "examples" / "agentflow" / "run_agentflow.sh", seed)
    cfg = yaml.safe_load((ROOT / "examples" / "agentflow" / "agentflow.yaml").read_text(encoding="utf-8"))
    opts = SPEC.resolve_options(cfg["agentgraph_options"])
    assert opts.planner_max_new_tokens == opts.helper_max_new_tokens == 4096  # the seed's per-call cap


def test_cli_helper_flag(tmp_path: Path, tiny_model_dir: Path) -> None:
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": "What is 1+1?", "label": "2"}) + "\n")
    bad = CliRunner().invoke(app, ["run", "agentflow", "--data", str(data), "--engine", f"hf:{tiny_model_dir}",
                                   "--out", str(tmp_path / "o"), "--helper", "helper"])
    assert bad.exit_code == 2 and "NAME=SPEC" in bad.output
    ok = CliRunner().invoke(app, ["run", "agentflow", "--data", str(data), "--engine", f"hf:{tiny_model_dir}",
                                  "--out", str(tmp_path / "o"), "--helper", f"helper=hf:{tiny_model_dir}",
                                  "-o", "max_steps=1", "-o", "judge=null", "--max-new-tokens", "4"])
    assert ok.exit_code == 0, ok.output
    trace = json.loads((tmp_path / "o" / "traces.jsonl").read_text().splitlines()[0])
    assert [t["node"] for t in trace["turns"]][0] == "analyze_query"


def test_the_aime_table_says_how_many_samples_failed() -> None:
    """A failed sample (engine down, a judge without a verdict) has reward 0 in samples.jsonl: counted as a
    wrong answer without a word, it lowered the accuracy the table reports. The table says how many."""
    samples = [{"group_index": 0, "status": "completed", "reward": 1.0, "metadata": {"answer": "42"}},
               {"group_index": 0, "status": "failed", "reward": 0.0, "metadata": {"answer": ""}},
               {"group_index": 1, "status": "truncated", "reward": 0.0, "metadata": {"answer": "7"}},
               {"group_index": 1, "status": "aborted", "reward": None, "metadata": {"answer": ""}}]
    result = evaluate.scores(samples)
    assert result["unscored"] == 2 and result["avg@n"] == 25.0  # failed and aborted: counted wrong, and said
    table = evaluate.aime_table([("tiny", result)], 2)
    assert table.splitlines()[0].endswith("| unscored (counted wrong) |")
    assert table.splitlines()[2].endswith("| 2 |")


def test_evaluate_follows_the_seeds_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's AIME protocol (Takenzz/AgentFlow@4b5aa84, agentic/agentflow/eval_all_checkpoints.sh): 10 runs
    per checkpoint (:26, NUM_RUNS) at temperature 0.7, top-p 0.95 (:122-123), reported as best_score = the best
    run's accuracy (:198; its README's 30.0% is one) and avg_score (:199). evaluate.py sampled at top-p 1.0,
    8 samples, and reported no best run."""
    seen: dict[str, object] = {}

    def fake_run_file(agent: str, data: Path, engine: str, out: Path, **kw: object) -> dict[str, object]:
        seen.update(kw)
        out.mkdir(parents=True, exist_ok=True)
        rows = [{"group_index": g, "index": g * 2 + k, "status": "completed",
                 "reward": 1.0 if k == 0 or g == 0 else 0.0, "metadata": {"answer": str(k)}}
                for g in range(2) for k in range(2)]  # run 0: 2/2 right; run 1: 1/2
        (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
        return {"by_status": {"completed": 4}}

    monkeypatch.setattr("agentgraphs.batch.run_file", fake_run_file)
    data = tmp_path / "aime.jsonl"
    data.write_text(json.dumps({"input": "Q", "label": "1"}) + "\n")
    assert evaluate.main([str(data), "--engine", "sglang:http://127.0.0.1:9", "--out", str(tmp_path / "o"),
                          "-o", "judge=null"]) == 0
    assert (seen["n_samples"], seen["temperature"], seen["top_p"]) == (10, 0.7, 0.95)
    table = (tmp_path / "o" / "aime_table.md").read_text().splitlines()
    assert "best of 10 runs" in table[0] and table[2].startswith("| AgentFlow | 75.0 | 100.0 |")


def test_evaluate_says_how_the_judge_sampled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's judge samples (rollout.py:217-222: no sampling parameters, so SGLang's defaults, temperature
    1.0): a seed run says so under its table, as it reports the judge; the original's judge is greedy."""
    seed = evaluate.judge_note(SPEC.resolve_options({}))
    assert "SAMPLED" in seed and "temperature 1.0" in seed and "'judge'" in seed
    assert "greedy" in evaluate.judge_note(SPEC.resolve_options({"variant": "original"}))
    assert "none" in evaluate.judge_note(SPEC.resolve_options({"judge": None}))

    def fake_run_file(agent: str, data: Path, engine: str, out: Path, **kw: object) -> dict[str, object]:
        out.mkdir(parents=True, exist_ok=True)
        (out / "samples.jsonl").write_text(json.dumps({"group_index": 0, "index": 0, "status": "completed",
                                                       "reward": 1.0, "metadata": {"answer": "1"}}) + "\n")
        return {"by_status": {"completed": 1}}

    monkeypatch.setattr("agentgraphs.batch.run_file", fake_run_file)
    data = tmp_path / "aime.jsonl"
    data.write_text(json.dumps({"input": "Q", "label": "1"}) + "\n")
    assert evaluate.main([str(data), "--engine", "sglang:http://127.0.0.1:9", "--out", str(tmp_path / "o"),
                          "--helper", "judge=sglang:http://127.0.0.1:9"]) == 0
    assert (tmp_path / "o" / "aime_table.md").read_text().rstrip().endswith(seed)

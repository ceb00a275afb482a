"""The examples run: the one-page agent, MemAgent's data prep / evaluation table, and the launch material."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # slime loads examples from the repository root; so do the tests
    sys.path.insert(0, str(ROOT))

from agentgraphs.rollout import rollout_input, run_rollout  # noqa: E402
from agentgraphs.spec import load_spec  # noqa: E402
from agentgraphs.trace import check_trace  # noqa: E402

new_agent = importlib.import_module("examples.new_agent")
prepare_data = importlib.import_module("examples.memagent.prepare_data")
evaluate = importlib.import_module("examples.memagent.evaluate")

SOLVE = "2 + 2 = 4, so the answer is \\boxed{4}."
CHECK = "Checking: 2 + 2 is 4. Final answer: \\boxed{4}."


def _context(tiny_engine: Any, script: list[str]) -> tuple[Any, Any]:
    from agentgraphs.context import AgentContext
    from agentgraphs.testing.scripted import ScriptedPolicy

    policy = ScriptedPolicy(tiny_engine, script)
    return AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer), policy


# ------------------------------------------------------------------------------------------ new agent


async def test_new_agent_is_one_concat_sequence_with_glue_masked(tiny_engine: Any) -> None:
    ctx, policy = _context(tiny_engine, [SOLVE, CHECK])
    rollout = await run_rollout(new_agent.SPEC, rollout_input("What is 2 + 2?", "4"), ctx)

    assert rollout.status == "completed", rollout.error
    assert rollout.reward == 1.0
    assert [t["node"] for t in rollout.turns] == ["solve", "check"]
    solve, check = rollout.turns
    # the check turn continued the same conversation: its prompt extends solve's prompt + output
    assert check["prompt_ids"][: len(solve["prompt_ids"]) + len(solve["output_ids"])] == (
        solve["prompt_ids"] + solve["output_ids"]
    )
    assert "Check your answer" in policy.calls[1].prompt_text

    assert check_trace(rollout.turns, "concat") == rollout.sequences
    (seq,) = rollout.sequences
    assert seq["turn_indices"] == [0, 1]
    assert seq["tokens"] == check["prompt_ids"] + check["output_ids"]
    n_solve, n_check = len(solve["output_ids"]), len(check["output_ids"])
    glue = len(check["prompt_ids"]) - len(solve["prompt_ids"]) - n_solve
    assert glue > 0
    assert seq["response_length"] == n_solve + glue + n_check
    assert seq["loss_mask"] == [1] * n_solve + [0] * glue + [1] * n_check
    assert seq["rollout_log_probs"][n_solve : n_solve + glue] == [0.0] * glue
    assert seq["rollout_log_probs"][:n_solve] == solve["output_logprobs"]
    assert seq["rollout_log_probs"][n_solve + glue :] == check["output_logprobs"]


async def test_new_agent_options_and_reward(tiny_engine: Any) -> None:
    # check=False: one turn; the reward reads the solve answer
    ctx, _ = _context(tiny_engine, [SOLVE])
    rollout = await run_rollout(new_agent.SPEC, rollout_input("What is 2 + 2?", "4"), ctx, options={"check": False})
    assert rollout.status == "completed" and rollout.reward == 1.0 and len(rollout.turns) == 1
    # a wrong checked answer scores 0; a chat-style prompt is accepted
    ctx, _ = _context(tiny_engine, [SOLVE, "On reflection: \\boxed{5}."])
    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    rollout = await run_rollout(new_agent.SPEC, rollout_input(prompt, "4"), ctx)
    assert rollout.status == "completed" and rollout.reward == 0.0
    # an empty question fails with a reason, never raises
    ctx, _ = _context(tiny_engine, [])
    rollout = await run_rollout(new_agent.SPEC, rollout_input("  ", "4"), ctx)
    assert rollout.status == "failed" and "prompt" in rollout.reason


def test_new_agent_loads_as_slime_would() -> None:
    assert load_spec("examples.new_agent:SPEC") is new_agent.SPEC
    assert new_agent.SPEC.layout == "concat"
    assert new_agent.boxed_match("\\boxed{\\frac12}", ["0.5"]) == 1.0


# ------------------------------------------------------------------------------------------ data prep

HOTPOT = [
    {"prompt": [{"role": "user", "content": "Which city?"}], "context": "Doc about Paris.",
     "reward_model": {"ground_truth": ["Paris"]}, "extra_info": {"index": 3}},
    {"prompt": "Who wrote it?", "context": "Doc two.", "reward_model": {"ground_truth": "Alice"}},
]
RULER = {"context": "Long doc.", "input": "Who?", "answers": ["Bob"]}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_prepare_hotpotqa(tmp_path: Path) -> None:
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in HOTPOT), encoding="utf-8")
    out = tmp_path / "out" / "train.jsonl"
    assert prepare_data.main(["--hotpotqa", str(src), "--out", str(out)]) == 0
    rows = _read_jsonl(out)
    assert rows[0] == {"input": "Which city?", "label": ["Paris"],
                       "metadata": {"context": "Doc about Paris.", "length": None, "id": "3"}}
    assert rows[1]["label"] == ["Alice"]
    assert prepare_data.main(["--hotpotqa", str(src), "--out", str(out), "--limit", "1"]) == 0
    assert len(_read_jsonl(out)) == 1
    # a bad row: exit status 2, its file:line on stderr, and no half-written output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(HOTPOT[0]) + "\n" + json.dumps({"prompt": "Q", "context": "D"}) + "\n")
    assert prepare_data.main(["--hotpotqa", str(bad), "--out", str(tmp_path / "bad_out.jsonl")]) == 2
    assert not list(tmp_path.glob("bad_out.jsonl*"))


def test_prepare_ruler_and_synthetic(tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "eval_50.json"  # MemAgent's naming (documents) and format (one JSON list)
    a.write_text(json.dumps([RULER, {**RULER, "answers": "Carl"}]), encoding="utf-8")
    b = tmp_path / "custom.jsonl"  # no name convention: the rows' length decides
    b.write_text(json.dumps({**RULER, "length": 14000}) + "\n", encoding="utf-8")
    out_dir = tmp_path / "ruler"
    assert prepare_data.main(["--ruler", str(a), str(b), "--out-dir", str(out_dir)]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["ruler_hqa_14K.jsonl", "ruler_hqa_7K.jsonl"]
    rows = _read_jsonl(out_dir / "ruler_hqa_7K.jsonl")
    assert [r["label"] for r in rows] == [["Bob"], ["Carl"]] and rows[0]["metadata"]["context"] == "Long doc."
    printed = capsys.readouterr().out
    assert f"--eval-prompt-data ruler_hqa_7K {out_dir / 'ruler_hqa_7K.jsonl'} ruler_hqa_14K" in printed

    syn = tmp_path / "syn"
    args = ["--synthetic", "300,1K", "--tokenizer", str(tiny_model_dir), "--per-length", "2", "--out-dir", str(syn)]
    assert prepare_data.main(args) == 0
    rows = _read_jsonl(syn / "synthetic_1K.jsonl")
    assert len(rows) == 2 and all(r["label"][0] in r["metadata"]["context"] for r in rows)
    assert rows[0]["metadata"]["length"] == 1000 and (syn / "synthetic_300.jsonl").exists()

    with pytest.raises(SystemExit):
        prepare_data.main(["--ruler", str(a)])  # no --out-dir


# ------------------------------------------------------------------------------------------ evaluation


def test_ruler_table_formats_lengths_and_metrics() -> None:
    summaries = {
        "7K": {"results": 128, "by_status": {"completed": 128},
               "metrics": {"sub_em": 0.78125, "em": 0.765625, "f1": 0.8}},
        "14K": {"results": 128, "by_status": {"completed": 126, "failed": 2}, "metrics": {"sub_em": 0.765625}},
    }
    table = evaluate.ruler_table(summaries, model="MemAgent (ours)")
    lines = table.splitlines()
    assert lines[0] == "| MemAgent (ours) | 7K | 14K |"
    assert lines[1] == "|---|---|---|"
    assert lines[2] == "| sub_em | 78.12 | 76.56 |"
    assert lines[3] == "| em | 76.56 | - |"
    assert lines[4] == "| f1 | 80.00 | - |"
    assert lines[5:7] == ["| sub_em_strict | - | - |", "| answered | - | - |"]
    assert lines[7] == "| n | 128 | 128 (2 failed) |"
    assert evaluate.ruler_table(list(summaries.items())) == evaluate.ruler_table(summaries)


def test_evaluate_runs_memagent_per_length(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = tmp_path / "data"
    prepare_data.main(["--synthetic", "400,200", "--tokenizer", str(tiny_model_dir), "--per-length", "1",
                       "--out-dir", str(data)])
    files = sorted(data.glob("*.jsonl"), key=evaluate.length_order)
    assert [evaluate.length_of(f) for f in files] == ["200", "400"]
    options = {"chunk_tokens": 150, "memory_max_new_tokens": 4, "final_max_new_tokens": 4}
    summaries = evaluate.evaluate(files, f"hf:{tiny_model_dir}", tmp_path / "out", options=options,
                                  concurrency=2, temperature=1.0)  # one run (runs=1): OUT/<name>/
    assert list(summaries) == ["200", "400"] and all(len(runs) == 1 for runs in summaries.values())
    for label, (summary,) in summaries.items():
        assert summary["results"] == 1 and summary["by_status"].get("failed", 0) == 0, summary
        assert set(summary["metrics"]) >= {"sub_em", "em", "f1", "sub_em_strict", "answered"}
        assert (tmp_path / "out" / f"synthetic_{label}" / "traces.jsonl").exists()
    # evaluation: nothing trainable, whole document read (400 tokens / 150 = 3 updates + final answer)
    trace = _read_jsonl(tmp_path / "out" / "synthetic_400" / "traces.jsonl")[0]
    assert not any(t["trainable"] for t in trace["turns"]) and len(trace["turns"]) >= 4
    assert evaluate.ruler_table(summaries).splitlines()[0] == "| MemAgent | 200 | 400 |"


# ------------------------------------------------------------------------------------------ launch material

SCRIPTS = sorted((ROOT / "examples").rglob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_shell_scripts_parse(script: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    result = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr


def test_memagent_launch_script_names_real_hooks_and_config() -> None:
    text = (ROOT / "examples" / "memagent" / "run_memagent.sh").read_text(encoding="utf-8")
    hooks = re.findall(r"--custom-[a-z-]+-path (rl_bridge\.\w+)", text)
    assert len(hooks) == 4
    for dotted in hooks:  # resolved as slime's load_function does
        module, _, attr = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), dotted
    for flag in ("--use-kl-loss", "--kl-loss-type low_var_kl", "--metadata-key metadata",
                 "--rollout-max-response-len 1024", "--sglang-context-length 131072"):
        assert flag in text
    assert '--custom-config-path "${CONFIG}"' in text and "memagent.yaml" in text


def test_memagent_launch_script_trains_with_the_seeds_hyperparameters() -> None:
    """run_memagent.sh trains as the seed's launch script does (Takenzz/AgentFlow@4b5aa84,
    agentic/memagent/run_memagent_7b.sh): --num-epoch 1 (:58), --rollout-batch-size 16 (:59),
    --n-samples-per-prompt 16 (:60), --rollout-temperature 1.0 (:62), --global-batch-size 256 (:64), grpo +
    low_var_kl at 0.001, eps-clip 0.2 / 0.3 (:88-95; entropy left at slime's 0), adam lr 1e-6 constant, weight
    decay 0.1, betas 0.9 / 0.98 (:97-104), --balance-data (:65). One deliberate difference, said in the script:
    --rollout-max-response-len 1024, the largest cap the seed's calls get (MEM_MAX_MEMORY 1024, MEM_MAX_FINAL
    256, :146-147) where its flag says 8192 (:61). The script ran a fixed 200 rollouts; the seed ran an epoch
    (its results/checkpoint_sweep has checkpoints up to iter_0000499)."""
    from tests.launch_flags import assert_seed_flags

    seed = {"--num-epoch": "1", "--rollout-batch-size": "16", "--n-samples-per-prompt": "16",
            "--rollout-temperature": "1.0", "--global-batch-size": "256", "--advantage-estimator": "grpo",
            "--use-kl-loss": None, "--kl-loss-coef": "0.001", "--kl-loss-type": "low_var_kl", "--eps-clip": "0.2",
            "--eps-clip-high": "0.3", "--optimizer": "adam", "--lr": "1e-6", "--lr-decay-style": "constant",
            "--weight-decay": "0.1", "--adam-beta1": "0.9", "--adam-beta2": "0.98",
            "--rollout-max-response-len": "1024", "--balance-data": None}
    assert_seed_flags(ROOT / "examples" / "memagent" / "run_memagent.sh", seed)


def test_memagent_yaml_options_resolve() -> None:
    cfg = yaml.safe_load((ROOT / "examples" / "memagent" / "memagent.yaml").read_text(encoding="utf-8"))
    spec = load_spec(cfg["agentgraph"])
    opts = spec.resolve_options(cfg["agentgraph_options"])  # an unknown key would raise
    assert opts.variant == "seed" and opts == spec.default_options()  # the file ships the seed's variant
    assert spec.reward_split_for(opts) == "divide"
    original = spec.resolve_options({**cfg["agentgraph_options"], "variant": "original"})
    assert spec.reward_split_for(original) == "broadcast" and original.max_chunks == 8


def test_dockerfile_builds_on_slime_and_never_installs_torch() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    assert "slimerl/slime:latest" in text and "--no-deps -e ." in text
    installs = " ".join(re.findall(r"pip install[^&;]*", text))
    # pyproject.toml's own requirements (and extras), held at the image's versions by constraints
    assert "-c /tmp/image-constraints.txt" in installs and '".${extras:+[${extras}]}"' in installs
    assert "pip list --format=freeze" in text
    # one list stays the truth: no requirement of pyproject.toml is repeated in the Dockerfile
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in requirements} - {"agentgraphs"}  # type: ignore[union-attr]
    assert {"torch", "langgraph"} <= names
    assert not [n for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", installs)]

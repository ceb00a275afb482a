"""examples/toolorchestra: data preparation, the slime YAML and launch script, and `agentgraphs run
toolorchestra` end to end on the tiny Qwen3-template model against a real retrieval index."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import yaml

from agentgraphs.batch import run_file
from agentgraphs.engines import make_engine
from agentgraphs.errors import InputError
from agentgraphs.retrieval import build_index, load_index
from agentgraphs.spec import load_spec
from agentgraphs.testing.tiny_model import ensure_tiny_model
from rl_bridge.setup import BridgeSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toolorchestra"
prepare_data = importlib.import_module("examples.toolorchestra.prepare_data")


def test_prepare_qa_rows_and_errors(tmp_path: Path) -> None:
    src = tmp_path / "nq_train.jsonl"
    src.write_text('{"id": "7", "question": "who wrote hamlet?", "golden_answers": ["Shakespeare", "W. S."]}\n'
                   '{"question": "capital of peru", "answer": "Lima"}\n')
    prepare_data.main(["--qa", str(src), "--out", str(tmp_path / "train.jsonl")])
    rows = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert rows[0] == {"input": "who wrote hamlet?", "label": ["Shakespeare", "W. S."],
                       "metadata": {"question": "who wrote hamlet?", "source": "nq_train", "id": "7"}}
    assert rows[1]["label"] == ["Lima"]
    spec = load_spec("toolorchestra")
    from agentgraphs.rollout import rollout_input

    inp = spec.make_input(rollout_input(rows[0]["input"], rows[0]["label"], rows[0]["metadata"]), spec.default_options())
    assert inp["problem"] == "who wrote hamlet?"
    src.write_text('{"question": "q", "golden_answers": []}\n')
    with pytest.raises(InputError, match=r"nq_train.jsonl:1.golden_answers"):
        prepare_data.main(["--qa", str(src), "--out", str(tmp_path / "x.jsonl")])


def test_synthetic_set_is_answerable_from_its_index(tmp_path: Path) -> None:
    prepare_data.main(["--synthetic", "5", "--out-dir", str(tmp_path)])
    rows = [json.loads(x) for x in (tmp_path / "questions.jsonl").read_text().splitlines()]
    index = load_index(build_index(tmp_path / "corpus.jsonl", tmp_path / "index"))
    for row in rows:
        top = index.search([row["input"]], 1)[0][0]["document"]
        assert row["label"][0] in top["contents"]


def test_yaml_resolves_and_names_an_engine_for_every_expert() -> None:
    cfg = yaml.safe_load((EXAMPLE / "toolorchestra.yaml").read_text(encoding="utf-8"))
    settings = BridgeSettings(**{k: v for k, v in cfg.items()})
    spec = load_spec(settings.agentgraph)
    opts = spec.resolve_options(settings.agentgraph_options)  # an unknown key would raise
    experts = {m for models in opts.experts.values() for m in models}
    assert experts <= set(settings.agentgraph_engines) and opts.reward_shaping == "cost_aware"
    # the seed's variant, set explicitly, and no option below it overrides one of its values
    assert settings.agentgraph_options["variant"] == "seed"
    assert not set(type(opts).variant_table()) & set(settings.agentgraph_options)
    assert (opts.max_turns, opts.invalid_call, opts.group_std) == (12, "end", "population")
    for name, target in settings.agentgraph_engines.items():
        engine = make_engine(target)  # the grammar parses (no connection is made)
        assert engine.name and hasattr(engine, "chat"), name
    ports = set(re.findall(r"127\.0\.0\.1:(\d+)/v1", (EXAMPLE / "toolorchestra.yaml").read_text()))
    script = (EXAMPLE / "run_toolorchestra.sh").read_text(encoding="utf-8")
    assert ports == set(re.findall(r"launch_expert \d+ (\d+) ", script))
    assert "qwen3-8B.sh" in script and "retrieval serve" in script and "--port 8000" in script
    for dotted in re.findall(r"--custom-[a-z-]+-path (rl_bridge\.\w+)", script):
        module, _, attr = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), dotted


def test_launch_script_trains_with_the_seeds_hyperparameters() -> None:
    """run_toolorchestra.sh trains as the seed's launch script does (Takenzz/AgentFlow@4b5aa84,
    agentic/ToolOrchestra/train_orchestra.sh): --num-epoch 2 (:69), --rollout-batch-size 32 (:70),
    --n-samples-per-prompt 8 (:71), --rollout-max-response-len 16384 (:72; rollout.py:46-51 gives the
    orchestrator engine slime's sampling params, so each turn may write 16384 tokens, orchestra_solver.py:364),
    --rollout-temperature 0.7 (:73), --global-batch-size 128 (:74), grpo + low_var_kl at 0.001, entropy 0,
    eps-clip 0.2 / 0.3 (:110-116), adam lr 1e-6 constant, weight decay 0.1, betas 0.9 / 0.98 (:121-126).
    The script had temperature 1.0, global batch 256, eps-clip-high 0.28, weight decay 0.01, 2048-token turns
    and a fixed 200 rollouts."""
    from agentgraphs.toolorchestra.options import orchestrator_turn_tokens
    from tests.launch_flags import assert_seed_flags

    seed = {"--num-epoch": "2", "--rollout-batch-size": "32", "--n-samples-per-prompt": "8",
            "--rollout-max-response-len": "16384", "--rollout-temperature": "0.7", "--global-batch-size": "128",
            "--advantage-estimator": "grpo", "--use-kl-loss": None, "--kl-loss-coef": "0.001",
            "--kl-loss-type": "low_var_kl", "--eps-clip": "0.2", "--eps-clip-high": "0.3", "--optimizer": "adam",
            "--lr": "1e-6", "--lr-decay-style": "constant", "--weight-decay": "0.1", "--adam-beta1": "0.9",
            "--adam-beta2": "0.98"}
    assert_seed_flags(EXAMPLE / "run_toolorchestra.sh", seed)
    cfg = yaml.safe_load((EXAMPLE / "toolorchestra.yaml").read_text(encoding="utf-8"))
    opts = load_spec(cfg["agentgraph"]).resolve_options(cfg["agentgraph_options"])
    # the graph's own cap of a turn does not cut it lower than the run's 16384
    assert orchestrator_turn_tokens(opts, 16384, capped=True) == 16384


def test_agentgraphs_run_toolorchestra_with_helpers(tmp_path: Path, agentgraphs_cache: Path) -> None:
    """The CLI path: a random tiny orchestrator makes format-invalid turns (cut at 6 tokens: TRUNCATED). The
    original variant notes them and goes on until max_turns (one training sequence per turn); the seed's
    ends the episode at the first, unanswered, and its shaping masks the rollout. Both score 0."""
    model = ensure_tiny_model(template="qwen3")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": "What is 2+2?", "label": ["4"]}) + "\n")
    experts = {"search-expert": f"hf:{model}", "code-expert": f"hf:{model}", "answer-expert": f"hf:{model}"}
    for variant, turns in (("original", 2), ("seed", 1)):
        out = tmp_path / variant
        summary = run_file("toolorchestra", data, f"hf:{model}", out, engines=experts, max_new_tokens=6,
                           options={"variant": variant, "max_turns": 2, "retrieval_url": "http://127.0.0.1:9"})
        assert summary["by_status"] == {"truncated": 1} and summary["options"]["variant"] == variant
        sample = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
        assert sample["reward"] == 0.0 and sample["metadata"]["num_sequences"] == turns
        assert sample["metadata"]["trace_summary"]["format_invalid_turns"] == turns
        shaping = sample["train_metadata"]["reward_shaping"]
        assert shaping["name"] == "cost_aware" and shaping["train"] is (variant == "original")

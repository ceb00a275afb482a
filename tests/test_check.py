"""`agentgraphs check`: a clean sampled run passes; each planted fault is flagged with its node and position.

The run is real: the tool agent (tests/viewer_support.py, concat layout) sampled from the tiny Qwen by
HFEngine at temperature 0.7. The audit re-scores with plain transformers (AutoModelForCausalLM, teacher
forcing): an independent reference for the log-probs HFEngine recorded token by token with its KV cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from typer.testing import CliRunner

from agentgraphs.cli import app, run_command
from agentgraphs.viewer import CheckReport, check_run
from agentgraphs.viewer.run_data import read_run

runner = CliRunner()


@pytest.fixture(scope="module")
def sampled_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentgraphs.engines.hf import HFEngine

    engine = HFEngine.from_dir(tiny_model_dir, device="cpu", seed=0)  # its own: the same samples every time
    out = tmp_path_factory.mktemp("check-run")
    data = out / "data.jsonl"
    data.write_text("".join(json.dumps({"input": q, "label": "42"}) + "\n"
                            for q in ("What is 6*7?", "Compute six times seven.", "6 x 7 = ?")), encoding="utf-8")
    run_command("tests.viewer_support:TOOL_AGENT", data, engine, out, concurrency=1, temperature=0.7,
                max_new_tokens=12)
    return out


@pytest.fixture(scope="module")
def clean_report(sampled_run: Path, tiny_model_dir: Path) -> CheckReport:
    return check_run(sampled_run, tiny_model_dir, device="cpu")


def test_clean_run_passes_and_rescoring_matches(clean_report: CheckReport) -> None:
    assert clean_report.ok, clean_report.to_text()
    assert clean_report.rollouts == 3 and clean_report.sequences == 3
    assert set(clean_report.nodes) == {"solve", "answer"}
    assert clean_report.rescored_tokens == clean_report.trained_tokens > 30
    for drift in clean_report.nodes.values():
        assert drift["max_abs_delta"] < 1e-4 and drift["over_threshold"] == 0


def _planted(sampled_run: Path, tmp_path: Path, edit: Callable[[dict[str, Any], list[dict[str, Any]]], None],
             line: int = 1) -> Path:
    """A copy of the run whose sample on `line` has its first training sequence edited by `edit(seq, turns)`."""
    out = tmp_path / "planted"
    shutil.copytree(sampled_run, out)
    lines = (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    sample = json.loads(lines[line - 1])
    turns = list(read_run(sampled_run))[line - 1].turns
    edit(sample["train_metadata"]["turns"][0], turns)
    lines[line - 1] = json.dumps(sample)
    (out / "samples.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _breaches_at(report: CheckReport, node: str, position: int, line: int = 1) -> list[str]:
    return [b["kind"] for b in report.breaches if b["node"] == node and b["position"] == position and b["line"] == line]


def _start(seq: dict[str, Any]) -> int:
    return len(seq["tokens"]) - seq["response_length"]


def test_flags_a_retokenised_span(sampled_run: Path, tmp_path: Path, qwen25: Any, tiny_model_dir: Path) -> None:
    # a trained span whose text re-encodes to other ids (sampled ids are often not the canonical encoding)
    found = [(rec.line, t) for rec in read_run(sampled_run) for t, turn in enumerate(rec.turns)
             if qwen25.encode(qwen25.decode(turn["output_ids"]), add_special_tokens=False) != turn["output_ids"]]
    assert found, "every sampled span re-encodes to itself: sample more tokens"
    line, t = found[0]
    where: dict[str, int] = {}

    def retokenise(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        old = turns[t]["output_ids"]
        new = qwen25.encode(qwen25.decode(old), add_special_tokens=False)
        a = len(turns[t]["prompt_ids"])
        where["position"] = a + next(i for i, (x, y) in enumerate(zip(old + [-1], new + [-1])) if x != y)
        # what a pipeline that decodes and re-encodes a trained span would hand the trainer
        r = a - _start(seq)
        seq["tokens"][a:a + len(old)] = new
        seq["loss_mask"][r:r + len(old)] = [1] * len(new)
        lps = turns[t]["output_logprobs"]
        seq["rollout_log_probs"][r:r + len(old)] = (lps + [lps[-1]] * len(new))[:len(new)]
        seq["response_length"] += len(new) - len(old)

    report = check_run(_planted(sampled_run, tmp_path, retokenise, line), tiny_model_dir)
    assert not report.ok
    node = list(read_run(sampled_run))[line - 1].turns[t]["node"]
    assert "token_mismatch" in _breaches_at(report, node, where["position"], line), report.to_text()


def test_flags_an_off_by_one_mask(sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    where: dict[str, int] = {}

    def shift(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        seq["loss_mask"] = [0] + seq["loss_mask"][:-1]
        a = len(turns[1]["prompt_ids"])  # the answer turn's output starts here
        where["answer"] = a
        where["glue"] = len(turns[0]["prompt_ids"]) + len(turns[0]["output_ids"])

    report = check_run(_planted(sampled_run, tmp_path, shift), tiny_model_dir)
    assert not report.ok
    assert "lost_mask" in _breaches_at(report, "answer", where["answer"]), report.to_text()
    # the token after the solve output is template glue, now trained: no engine produced it
    assert "untraced_token" in _breaches_at(report, "solve", where["glue"])


def test_flags_a_logprob_altered_by_a_hundredth(sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    where: dict[str, int] = {}

    def alter(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        a = len(turns[1]["prompt_ids"]) + 2
        where["position"] = a
        seq["rollout_log_probs"][a - _start(seq)] += 0.01

    report = check_run(_planted(sampled_run, tmp_path, alter), tiny_model_dir)
    assert _breaches_at(report, "answer", where["position"]) == ["logprob_mismatch"], report.to_text()
    assert report.nodes["answer"]["over_threshold"] == 1 and report.nodes["solve"]["over_threshold"] == 0
    assert abs(report.nodes["answer"]["max_abs_delta"] - 0.01) < 1e-4
    assert report.worst[0]["position"] == where["position"] and report.worst[0]["node"] == "answer"


def test_flags_a_dropped_prompt_token(sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    def drop(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        del seq["tokens"][7]

    report = check_run(_planted(sampled_run, tmp_path, drop), tiny_model_dir)
    assert _breaches_at(report, "solve", 7) == ["prompt"], report.to_text()
    assert _breaches_at(report, "answer", 7) == ["prompt"]


def test_cli_exit_status(sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    ok = runner.invoke(app, ["check", str(sampled_run), "--model", str(tiny_model_dir), "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    assert "OK: no invariant breach" in ok.output and "answer" in ok.output

    def mask_glue(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        seq["loss_mask"][-1] = 0  # the final trained token masked, its log-prob kept

    bad = runner.invoke(app, ["check", str(_planted(sampled_run, tmp_path, mask_glue)), "--model", str(tiny_model_dir)])
    assert bad.exit_code == 1, bad.output
    assert "BREACH" in bad.output and "node 'answer'" in bad.output and "position" in bad.output
    missing = runner.invoke(app, ["check", str(tmp_path / "nope"), "--model", str(tiny_model_dir)])
    assert missing.exit_code == 2 and "not a directory" in " ".join(missing.output.split())


@pytest.mark.gpu
def test_check_on_cuda_matches_cpu(sampled_run: Path, tiny_model_dir: Path, clean_report: CheckReport) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    report = check_run(sampled_run, tiny_model_dir, device="cuda")
    assert report.ok, report.to_text()
    assert report.rescored_tokens == clean_report.rescored_tokens
    for node, drift in report.nodes.items():
        assert drift["max_abs_delta"] < 1e-3, (node, drift)


def test_failed_rollout_with_turns_passes_and_its_outputs_show_untrained(tiny_engine: Any, tmp_path: Path,
                                                                         tiny_model_dir: Path) -> None:
    from agentgraphs.viewer.report import write_report

    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input": "What is 6*7?", "label": "42"}) + "\n", encoding="utf-8")
    out = tmp_path / "failed"
    run_command("agentgraphs.testing.agents:FAILING", data, tiny_engine, out, max_new_tokens=4)
    rec = next(iter(read_run(out)))
    assert rec.sample["status"] == "failed" and len(rec.turns) == 1  # the solve turn, then the node raised
    report = check_run(out, tiny_model_dir)
    assert report.ok and report.trained_tokens == 0, report.to_text()
    html = write_report(out).read_text(encoding="utf-8")
    line = html.split('id="ag-rollouts">', 1)[1].split("</script>", 1)[0]
    turn = json.loads(line)["turns"][0]
    assert turn["seq"] is None and turn["or"] == [[4, len(turn["o"])]]  # generated, not trained


def test_prefetched_scorer_gives_the_plain_scorers_report(sampled_run: Path, tiny_model_dir: Path,
                                                           clean_report: CheckReport) -> None:
    """Re-scores computed ahead in padded batches equal one plain forward per sequence; an unannounced call
    falls back to the plain forward."""
    from transformers import AutoModelForCausalLM

    from agentgraphs.viewer.check import model_scorer, prefetched_scorer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    jobs = []
    for rec in read_run(sampled_run):
        (temperature,) = {float(t["temperature"]) for t in rec.turns}  # the run samples at one temperature
        for seq in rec.sequences:
            start = len(seq["tokens"]) - seq["response_length"]
            positions = [start + j for j, m in enumerate(seq["loss_mask"]) if m]
            jobs.append((seq["tokens"], positions, [temperature] * len(positions)))
    scorer = prefetched_scorer(model, jobs[1:], max_tokens=300)  # several padded batches; job 0 is not announced
    plain = model_scorer(model)
    for tokens, positions, temps in jobs:
        assert scorer(tokens, positions, temps) == pytest.approx(plain(tokens, positions, temps), abs=1e-5)
    report = check_run(sampled_run, scorer=scorer)
    assert report.ok and report.rescored_tokens == clean_report.rescored_tokens
    for node, drift in report.nodes.items():
        assert drift["max_abs_delta"] == pytest.approx(clean_report.nodes[node]["max_abs_delta"], abs=1e-5)

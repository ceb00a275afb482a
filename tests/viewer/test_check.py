"""`agentgraphs check`: a clean sampled run passes; each planted fault is flagged with its node and position,
and fails the check (exit 1) with a last line that says FAIL.

The run is real: the tool agent (tests/viewer/support.py, concat layout) sampled from the tiny Qwen by
HFEngine at temperature 0.7. The audit re-scores with plain transformers (AutoModelForCausalLM, teacher
forcing): an independent reference for the log-probs HFEngine recorded token by token with its KV cache.
Faults that keep every invariant (a different model, another temperature, samples and traces edited
alike) fail through re-scoring.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from typer.testing import CliRunner

from agentgraphs.batch import run_file
from agentgraphs.cli import app
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
    run_file("tests.viewer.support:TOOL_AGENT", data, engine, out, concurrency=1, temperature=0.7,
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
    # the header says it once, as the README shows it (it read "re-scored N re-scored trained tokens")
    assert f"\nre-scored {clean_report.rescored_tokens} trained tokens with " in clean_report.to_text()
    assert clean_report.verdict() == f"OK: no invariant breach, {clean_report.rescored_tokens} re-scored trained tokens"


def _planted(sampled_run: Path, tmp_path: Path, edit: Callable[[dict[str, Any], list[dict[str, Any]]], None],
             line: int = 1, *, edit_trace: bool = False) -> Path:
    """A copy of the run whose sample on `line` has its first training sequence edited by `edit(seq, turns)`,
    and the sample's top-level fields with it (as a pipeline that corrupts the sequence would write them).
    `edit_trace`: the edits to `turns` are written to traces.jsonl too (both files changed alike)."""
    out = tmp_path / "planted"
    shutil.copytree(sampled_run, out)
    lines = (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    traces = (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    sample, trace = json.loads(lines[line - 1]), json.loads(traces[line - 1])
    seq = sample["train_metadata"]["turns"][0]
    edit(seq, trace["turns"])
    sample.update({k: seq[k] for k in ("tokens", "response_length", "loss_mask", "rollout_log_probs")})
    lines[line - 1] = json.dumps(sample)
    (out / "samples.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if edit_trace:
        traces[line - 1] = json.dumps(trace)
        (out / "traces.jsonl").write_text("\n".join(traces) + "\n", encoding="utf-8")
    return out


def _edit_traces(run: Path, out: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of `run` whose every Turn in traces.jsonl is edited by `edit(turn)`, and the samples' sequences
    say the sampling of their edited turns: both files agree, as a recorder that got a turn's sampling wrong
    writes them (the sequence's `sampling` is built from its turns)."""
    from agentgraphs.trace import build_sequences

    shutil.copytree(run, out)
    lines = [json.loads(raw) for raw in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    samples = [json.loads(raw) for raw in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    for trace, sample in zip(lines, samples):
        for turn in trace["turns"]:
            edit(turn)
        recorded = sample["train_metadata"]
        for seq, rebuilt in zip(recorded["turns"], build_sequences(trace["turns"], recorded["layout"])):
            seq["sampling"] = rebuilt["sampling"]
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines), encoding="utf-8")
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    return out


def _cli(*args: Any) -> Any:
    return runner.invoke(app, ["check", *map(str, args)])


def _last_line(output: str) -> str:
    return output.rstrip("\n").splitlines()[-1]


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
    # ... so it is not re-scored (no engine call, no sampling to compare with): no drift row of noise
    assert report.unscored_tokens == 1 and set(report.nodes) == {"solve", "answer"}
    assert report.rescored_tokens == report.trained_tokens - 1


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
    assert _last_line(ok.output).startswith("OK: no invariant breach") and "answer" in ok.output

    def mask_glue(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        seq["loss_mask"][-1] = 0  # the final trained token masked, its log-prob kept

    bad = runner.invoke(app, ["check", str(_planted(sampled_run, tmp_path, mask_glue)), "--model", str(tiny_model_dir)])
    assert bad.exit_code == 1, bad.output
    assert "BREACH" in bad.output and "node 'answer'" in bad.output and "position" in bad.output
    assert _last_line(bad.output) == "FAIL: 2 invariant breach(es)"  # lost_mask, masked_logprob
    gone = _cli(sampled_run, "--model", tiny_model_dir, "--fail-on-drift")  # removed: failing is the default
    assert gone.exit_code == 2 and "--fail-on-drift" in gone.output
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
    run_file("agentgraphs.testing.agents:FAILING", data, tiny_engine, out, max_new_tokens=4)
    rec = next(iter(read_run(out)))
    assert rec.sample["status"] == "failed" and len(rec.turns) == 1  # the solve turn, then the node raised
    report = check_run(out, tiny_model_dir)
    assert report.ok and report.trained_tokens == 0, report.to_text()
    html = write_report(out).read_text(encoding="utf-8")
    line = html.split('id="ag-rollouts">', 1)[1].split("</script>", 1)[0]
    turn = json.loads(line)["turns"][0]
    assert turn["seq"] is None and turn["or"] == [[4, len(turn["o"])]]  # generated, not trained


def test_a_different_model_fails_by_default(sampled_run: Path, tiny_model_dir: Path) -> None:
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    other = ensure_tiny_model(template="qwen2.5", seed=1)  # same shape and vocabulary, other weights
    assert other != tiny_model_dir
    result = _cli(sampled_run, "--model", other)
    assert result.exit_code == 1, result.output
    assert "BREACH" not in result.output  # every invariant holds: only re-scoring can tell
    last = _last_line(result.output)
    assert last.startswith("FAIL: 72 of 72 re-scored trained tokens over the threshold"), result.output
    assert "OK" not in last
    allowed = _cli(sampled_run, "--model", other, "--allow-drift")
    assert allowed.exit_code == 0, allowed.output
    assert _last_line(allowed.output).startswith("OK: no invariant breach")
    assert "allowed by --allow-drift" in allowed.output
    report = json.loads(_cli(sampled_run, "--model", other, "--json").stdout)
    assert not report["ok"] and report["drift_over_threshold"] == report["rescored_tokens"] == 72


@pytest.mark.parametrize("threshold", ["inf", "nan", "0", "-1"])
def test_a_threshold_no_token_can_exceed_is_refused(threshold: str, sampled_run: Path) -> None:
    """`--threshold inf` said OK to another model's log-probs (no delta is over infinity): refused instead."""
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    result = _cli(sampled_run, "--model", ensure_tiny_model(template="qwen2.5", seed=1), "--threshold", threshold)
    assert result.exit_code == 2, result.output
    assert "--threshold" in result.output and "OK" not in result.output


def test_log_probs_recorded_at_another_temperature_fail(sampled_run: Path, tmp_path: Path,
                                                        tiny_model_dir: Path) -> None:
    """The engine sampled (and took log-probs) at T=0.7, the trace says 1.0: a recorder that ignored a bind."""
    import torch
    from transformers import AutoModelForCausalLM

    rec = next(iter(read_run(sampled_run)))
    seq, solve = rec.sequences[0], rec.turns[0]
    a, o = len(solve["prompt_ids"]), solve["output_ids"]
    # independently: the recorded log-probs are the T=0.7 ones; at T=1.0 some are over the threshold
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([seq["tokens"][:a + len(o)]])).logits[0, a - 1:a - 1 + len(o)].double()
    at = {t: torch.log_softmax(logits / t, -1).gather(1, torch.tensor([o]).T).squeeze(1).tolist() for t in (0.7, 1.0)}
    assert max(abs(x - y) for x, y in zip(at[0.7], solve["output_logprobs"])) < 1e-4
    assert max(abs(x - y) for x, y in zip(at[1.0], at[0.7])) > 1e-3

    def claim_t1(turn: dict[str, Any]) -> None:
        assert turn["temperature"] == 0.7
        turn["temperature"] = 1.0

    wrong = _edit_traces(sampled_run, tmp_path / "t1", claim_t1)
    result = _cli(wrong, "--model", tiny_model_dir, "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["breaches"] == [] and report["verdict"].startswith("FAIL") and report["drift_over_threshold"] > 0
    for w in report["worst"]:  # re-scored at the temperature the trace claims, as plain transformers gives it
        assert w["temperature"] == 1.0
        if w["line"] == 1 and a <= w["position"] < a + len(o):
            assert abs(w["rescored"] - at[1.0][w["position"] - a]) < 1e-4
    assert _last_line(_cli(wrong, "--model", tiny_model_dir).output).startswith("FAIL")


def test_each_turn_is_rescored_at_its_own_temperature(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentgraphs.engines.hf import HFEngine

    from .support import ANSWER_T, SOLVE_T

    engine = HFEngine.from_dir(tiny_model_dir, device="cpu", seed=0)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input": "What is 6*7?", "label": "42"}) + "\n", encoding="utf-8")
    run = tmp_path / "two-t"
    run_file("tests.viewer.support:TWO_TEMPERATURE_AGENT", data, engine, run, max_new_tokens=12)
    rec = next(iter(read_run(run)))
    assert [t["temperature"] for t in rec.turns] == [SOLVE_T, ANSWER_T]
    report = check_run(run, tiny_model_dir)
    assert report.ok and report.rescored_tokens == report.trained_tokens > 10, report.to_text()
    assert max(n["max_abs_delta"] for n in report.nodes.values()) < 1e-4

    def swap(turn: dict[str, Any]) -> None:
        turn["temperature"] = ANSWER_T if turn["temperature"] == SOLVE_T else SOLVE_T

    swapped = check_run(_edit_traces(run, tmp_path / "swapped", swap), tiny_model_dir)
    assert not swapped.ok and not swapped.breaches
    assert {n["node"] for n in swapped.nodes.values() if n["over_threshold"]} == {"solve", "answer"}


@pytest.mark.parametrize("what", ["token", "logprob"])
def test_samples_and_traces_edited_alike_fail_through_rescoring(what: str, sampled_run: Path, tmp_path: Path,
                                                                tiny_model_dir: Path) -> None:
    where: dict[str, int] = {}

    def edit_both(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        answer = turns[1]
        j = 2
        k = len(answer["prompt_ids"]) + j
        where["position"] = k
        if what == "token":
            new = 9707 if seq["tokens"][k] != 9707 else 9708  # another id, the same log-prob
            seq["tokens"][k] = answer["output_ids"][j] = new
        else:
            seq["rollout_log_probs"][k - _start(seq)] -= 0.05
            answer["output_logprobs"][j] -= 0.05

    planted = _planted(sampled_run, tmp_path, edit_both, edit_trace=True)
    report = check_run(planted, tiny_model_dir)
    assert report.breaches == [], report.to_text()  # the two files agree: no invariant can see it
    assert not report.ok and report.nodes["answer"]["over_threshold"] >= 1
    assert any(w["position"] == where["position"] and w["node"] == "answer" for w in report.worst)
    result = _cli(planted, "--model", tiny_model_dir)
    assert result.exit_code == 1 and _last_line(result.output).startswith("FAIL"), result.output


def test_an_empty_run_is_an_error(tmp_path: Path, tiny_model_dir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "samples.jsonl").write_text("", encoding="utf-8")
    (empty / "traces.jsonl").write_text("", encoding="utf-8")
    result = _cli(empty, "--model", tiny_model_dir)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "no rollout" in lines[0]


def test_a_shifted_top_level_mask_is_caught(sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    """slime trains the top-level fields when rl_bridge.convert is not used: shift the mask there alone."""
    out = tmp_path / "top"
    shutil.copytree(sampled_run, out)
    samples = [json.loads(raw) for raw in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    top = samples[1]
    top["loss_mask"] = [0] + top["loss_mask"][:-1]
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    start = len(top["tokens"]) - top["response_length"]
    report = check_run(out, tiny_model_dir)
    assert [(b["kind"], b["line"], b["node"], b["position"]) for b in report.breaches] == \
        [("top_level", 2, "solve", start)], report.to_text()
    assert "loss_mask" in report.breaches[0]["detail"]
    result = _cli(out, "--model", tiny_model_dir)
    assert result.exit_code == 1 and _last_line(result.output).startswith("FAIL: 1 invariant breach")


def test_a_model_argument_that_is_not_a_model_is_exit_2_with_one_error_line(
        sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    no_weights = tmp_path / "config-only"
    no_weights.mkdir()
    shutil.copy(tiny_model_dir / "config.json", no_weights / "config.json")
    not_a_config = tmp_path / "bad-config"
    not_a_config.mkdir()
    (not_a_config / "config.json").write_text('{"hello": 1}', encoding="utf-8")
    for model in (sampled_run, no_weights, not_a_config, tmp_path / "missing"):
        result = _cli(sampled_run, "--model", model)
        lines = [line for line in result.output.splitlines() if line.strip() and "Loading weights" not in line]
        assert result.exit_code == 2, result.output
        assert len(lines) == 1 and lines[0].startswith(f"error: --model {model}"), result.output
        assert "Traceback" not in result.output


def test_a_prefix_break_in_a_later_turn_is_reported_there(sampled_run: Path, tmp_path: Path,
                                                         tiny_model_dir: Path) -> None:
    """The trace says the answer turn saw another prompt than the one its sequence trains it in."""
    out = tmp_path / "broken"
    shutil.copytree(sampled_run, out)
    traces = [json.loads(raw) for raw in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    answer = traces[0]["turns"][1]
    for k in (5, len(traces[0]["turns"][0]["prompt_ids"]) + len(traces[0]["turns"][0]["output_ids"]) + 3):
        answer["prompt_ids"][k] += 1  # one inside the solve prompt, one inside the glue after its output
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    report = check_run(out, tiny_model_dir)
    prompt = [b for b in report.breaches if b["kind"] == "prompt"]
    assert [(b["node"], b["turn"], b["position"]) for b in prompt] == [("answer", 1, 5)], report.to_text()
    assert not any(b["node"] == "solve" for b in report.breaches), report.to_text()
    # the answer's trained tokens are still its own: re-scored as "answer", not as tokens of no engine call
    assert set(report.nodes) == {"solve", "answer"} and report.unscored_tokens == 0


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


def test_a_sequence_whose_sampling_is_not_its_turns_is_a_breach(sampled_run: Path, tmp_path: Path) -> None:
    """traces.jsonl says the turns of rollout 1 were sampled at T=1.0, samples.jsonl that its sequence was
    trained at 0.7: caught without any model, by the checker every rollout runs."""
    out = tmp_path / "resampled"
    shutil.copytree(sampled_run, out)
    traces = [json.loads(raw) for raw in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    for turn in traces[0]["turns"]:
        assert turn["temperature"] == 0.7
        turn["temperature"] = 1.0
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    report = check_run(out)
    assert [(b["kind"], b["line"], b["sequence"], b["node"]) for b in report.breaches] == \
        [("sampling", 1, 0, "solve")], report.to_text()
    assert "0.7" in report.breaches[0]["detail"] and "1.0" in report.breaches[0]["detail"]


# -- a run that trains nothing (`agentgraphs run --eval`) --------------------------------------------------


@pytest.fixture(scope="module")
def eval_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentgraphs.engines.hf import HFEngine

    engine = HFEngine.from_dir(tiny_model_dir, device="cpu", seed=0)
    out = tmp_path_factory.mktemp("check-eval-run")
    data = out / "data.jsonl"
    data.write_text("".join(json.dumps({"input": q, "label": "42"}) + "\n" for q in ("What is 6*7?", "6 x 7 = ?")),
                    encoding="utf-8")
    run_file("tests.viewer.support:TOOL_AGENT", data, engine, out, concurrency=1, temperature=0.7,
             max_new_tokens=8, evaluation=True)
    return out


def test_an_eval_run_rescores_every_policy_call_and_a_wrong_model_fails(eval_run: Path, tiny_model_dir: Path) -> None:
    """Nothing is trained, so the model check re-scores each recorded call's outputs after its own prompt."""
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    outputs = sum(len(t["output_ids"]) for rec in read_run(eval_run) for t in rec.turns)
    assert outputs > 0 and not any(t["trainable"] for rec in read_run(eval_run) for t in rec.turns)
    right = _cli(eval_run, "--model", tiny_model_dir, "--json")
    report = json.loads(right.stdout)
    assert right.exit_code == 0 and report["ok"], right.output
    assert report["trained_tokens"] == report["rescored_tokens"] == 0
    assert report["rescored_untrained_tokens"] == outputs and report["drift_over_threshold"] == 0
    assert _last_line(_cli(eval_run, "--model", tiny_model_dir).output).startswith(
        f"OK: no invariant breach, {outputs} re-scored policy output tokens")
    wrong = _cli(eval_run, "--model", ensure_tiny_model(template="qwen2.5", seed=1))  # other weights
    assert wrong.exit_code == 1, wrong.output
    last = _last_line(wrong.output)
    assert last.startswith(f"FAIL: {outputs} of {outputs} re-scored policy output tokens over the threshold"), last
    assert "OK" not in last


def test_a_model_check_that_compares_nothing_fails(eval_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    """No call of the run's policy engine (summary.json names another): nothing can be compared, so no OK."""
    out = tmp_path / "no-policy-calls"
    shutil.copytree(eval_run, out)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    summary["engine"] = "sglang:http://elsewhere:30000"
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    result = _cli(out, "--model", tiny_model_dir)
    assert result.exit_code == 1, result.output
    last = _last_line(result.output)
    assert last.startswith("FAIL: no token could be re-scored, so the model was not checked"), last
    assert not check_run(out, tiny_model_dir).ok and check_run(out).ok  # without a model: invariants only


def test_an_eval_turn_whose_log_probs_are_gone_fails(eval_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    def drop(turn: dict[str, Any]) -> None:
        turn["output_logprobs"] = turn["output_logprobs"][:-1]

    damaged = _edit_traces(eval_run, tmp_path / "damaged", drop)
    report = check_run(damaged, tiny_model_dir)
    assert not report.ok and report.unscored_untrained_tokens > 0, report.to_text()
    assert "policy output tokens could not be re-scored" in report.verdict()


@pytest.mark.parametrize("value", [2, 0.5])
def test_a_loss_mask_other_than_0_or_1_is_a_breach(value: float, sampled_run: Path, tmp_path: Path) -> None:
    """slime multiplies a token's loss by its mask: a 2 or a 0.5 is not a trained token, and says so."""
    def weigh(seq: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        seq["loss_mask"][0] = value

    out = _planted(sampled_run, tmp_path, weigh)
    seq = next(iter(read_run(out))).sequences[0]
    report = check_run(out)
    assert not report.ok
    assert [(b["kind"], b["sequence"], b["node"], b["position"]) for b in report.breaches] == [
        ("mask_value", 0, "solve", _start(seq))], report.to_text()
    assert f"loss mask {value!r}" in report.breaches[0]["detail"]


@pytest.mark.parametrize("which", [0, -1])
def test_a_turn_removed_from_an_eval_trace_is_a_breach(which: int, eval_run: Path, tmp_path: Path,
                                                       tiny_model_dir: Path) -> None:
    """An eval run trains nothing, so no training sequence misses the turn: the trace's own records of its calls
    (summary.turns_by_node, path_turns, llm_calls) disagree with its turns."""
    out = tmp_path / "popped"
    shutil.copytree(eval_run, out)
    traces = [json.loads(raw) for raw in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    node = traces[0]["turns"].pop(which)["node"]
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    assert check_run(eval_run).ok
    report = check_run(out)
    assert not report.ok
    found = [(b["kind"], b["line"], b["sequence"]) for b in report.breaches]
    assert found == [("trace_turns", 1, -1), ("trace_turns", 1, -1)], report.to_text()
    assert f"{node!r} 1 recorded, 0 in turns" in report.breaches[0]["detail"]
    assert "path_turns names turn(s) [1] but the trace has 1 turns" in report.breaches[1]["detail"]
    assert _last_line(_cli(out, "--model", tiny_model_dir).output).startswith("FAIL: 2 invariant breach(es)")


def test_an_unknown_sample_status_is_a_breach(sampled_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: a samples.jsonl line with status "complete" (not "completed") passed `check` as OK."""
    out = tmp_path / "run"
    shutil.copytree(sampled_run, out)
    lines = (out / "samples.jsonl").read_text().splitlines()
    sample = json.loads(lines[1])
    sample["status"] = "complete"
    lines[1] = json.dumps(sample)
    (out / "samples.jsonl").write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["check", str(out), "--model", str(tiny_model_dir)])
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and "[status]" in said, r.output
    assert "line 2: status 'complete' is no known status (completed, truncated, aborted, failed)" in said, r.output


def test_an_extra_line_is_named_in_the_file_that_has_it(sampled_run: Path, tmp_path: Path,
                                                        tiny_model_dir: Path) -> None:
    """Before: a garbage line added at the end of samples.jsonl was reported as "traces.jsonl ... ends at line 3"."""
    out = tmp_path / "run"
    shutil.copytree(sampled_run, out)
    with open(out / "samples.jsonl", "a", encoding="utf-8") as fh:
        fh.write("garbage\n")
    r = runner.invoke(app, ["check", str(out), "--model", str(tiny_model_dir)])
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "'samples.jsonl': has a line 4 but traces.jsonl ends at line 3" in said, r.output

"""The CLI is a thin face over library functions; these tests drive it as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgraphs.cli import app, parse_options
from agentgraphs.dataset_io import write_jsonl
from agentgraphs.errors import ConfigError
from agentgraphs.memagent.data import to_slime_row
from agentgraphs.memagent.synthetic import make_needle_example

runner = CliRunner()


@pytest.fixture(scope="module")
def rows_file(tiny_engine, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "rows.jsonl"
    rows = [to_slime_row(make_needle_example(tiny_engine.tokenizer, 900, seed=i)) for i in range(2)]
    write_jsonl(rows, path)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"input": "Q?", "label": ["a"]}\n')  # no document: a FAILED sample, not a skipped row
        fh.write("not json\n")
    return path


def test_run_memagent_writes_one_sample_per_row(rows_file: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                                 "--out", str(out), "--max-new-tokens", "8", "-o", "chunk_tokens=300",
                                 "-o", "final_max_new_tokens=8", "-o", "memory_max_new_tokens=8",
                                 "--n-samples-per-prompt", "2", "--concurrency", "3"])
    assert result.exit_code == 0, result.output  # 4 of 8 fail below: a partial failure still exits 0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(samples) == len(traces) == 8  # 4 rows x 2 samples, input order kept
    assert [s["index"] for s in samples[:4]] == [0, 1, 2, 3]
    assert [s["group_index"] for s in samples[:4]] == [0, 0, 1, 1]
    ok = samples[:4]
    for s, t in zip(ok, traces[:4]):  # each sample against its own trace line
        assert s["status"] in ("completed", "truncated")
        assert t["index"] == s["index"] and t["line"] == s["line"]
        assert len(s["loss_mask"]) == s["response_length"] == len(s["rollout_log_probs"])
        assert len(s["train_metadata"]["turns"]) == len(t["turns"])
    bad = samples[4:]
    assert all(s["status"] == "failed" for s in bad)
    assert "metadata.context" in bad[0]["metadata"]["status_reason"]
    assert "line 4" in bad[-1]["metadata"]["status_reason"] and "invalid JSON" in bad[-1]["metadata"]["status_reason"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == summary["results"] == 8 and summary["by_status"]["failed"] == 4


def test_run_rejects_unknown_option_and_agent(rows_file: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                            "--out", str(tmp_path), "-o", "chunk_size=3"])
    assert r.exit_code == 2 and "chunk_size" in r.output
    r = runner.invoke(app, ["run", "nope", "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                            "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown agent" in r.output
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", "gpt:x", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "hf:MODEL_DIR" in r.output


def test_tiny_model_command(tmp_path: Path) -> None:
    r = runner.invoke(app, ["tiny-model", str(tmp_path / "m"), "--seed", "3"])
    assert r.exit_code == 0, r.output
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path / "m").encode(" Hello", add_special_tokens=False) == [21927]


def test_demo_runs_on_the_embedded_default(tmp_path: Path) -> None:
    from agentgraphs.demo import run_demo

    summary = run_demo(tmp_path / "demo", n_samples=1)
    assert summary["rows"] == summary["results"] == 4
    lines = (tmp_path / "demo" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["tokens"] for line in lines)


def test_parse_options() -> None:
    assert parse_options(["a=1", "b=[1,2]", "c=x y"]) == {"a": 1, "b": [1, 2], "c": "x y"}
    with pytest.raises(ConfigError):
        parse_options(["novalue"])


@pytest.mark.parametrize("pairs, words", [
    # a key given twice: the first value was dropped without a word
    (["max_chunks=4", "max_chunks=8"], "'max_chunks' is given twice"),
    # a value that was meant as JSON but does not parse became a string of its text
    (['judge_models=["a", "b"'], "not valid JSON"),
    (['turns=[{"node": "solve"}'], "not valid JSON"),
    (['extra={"a": 1'], "not valid JSON"),
    (['answer="42'], "not valid JSON"),
])
def test_parse_options_refuses_what_it_would_drop_or_misread(pairs: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        parse_options(pairs)
    assert pairs[-1].partition("=")[0] in str(info.value)
    assert parse_options(["question=What is [1]?", "name=x y", 'answer="42"']) == {
        "question": "What is [1]?", "name": "x y", "answer": "42"}  # plain text is still text


def test_parse_helpers_refuses_a_name_given_twice() -> None:
    from agentgraphs.cli import parse_helpers

    with pytest.raises(ConfigError, match="'judge' is given twice"):
        parse_helpers(["judge=sglang:http://127.0.0.1:1", "judge=sglang:http://127.0.0.1:2"])


def test_run_refuses_an_option_given_twice(rows_file: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", "hf:/nonexistent/model",
                            "--out", str(tmp_path / "out"), "-o", "max_chunks=4", "-o", "max_chunks=8"])
    assert r.exit_code == 2 and "'max_chunks' is given twice" in _said(r), r.output


def _said(result) -> str:
    return " ".join(result.output.split())  # rich wraps long lines at the terminal width


def test_run_engine_dir_must_exist(rows_file: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", "hf:/nonexistent/model",
                            "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert "error:" in _said(r) and "--engine" in _said(r) and "does not exist" in _said(r)
    assert r.exception is None or isinstance(r.exception, SystemExit)  # a message, not a traceback
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", f"hf:{rows_file}",
                            "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "--engine" in _said(r) and "is not a directory" in _said(r)


def test_run_bad_sampling_flag_is_named(rows_file: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                            "--out", str(tmp_path / "out"), "--top-p", "0"])
    assert r.exit_code == 2, r.output
    assert "error:" in _said(r) and "--top-p" in _said(r) and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()  # rejected before any work


def test_run_os_error_is_a_clean_error(rows_file: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory\n")
    r = runner.invoke(app, ["run", "memagent", "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                            "--out", str(blocker / "out")])
    assert r.exit_code == 2, r.output
    assert "error:" in _said(r) and "Not a directory" in _said(r) and "Traceback" not in r.output


def test_run_exits_1_when_every_row_failed(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"input": "Q?", "label": "a"}\nnot json\n', encoding="utf-8")  # no document; not JSON
    out = tmp_path / "out"
    r = runner.invoke(app, ["run", "memagent", "--data", str(data), "--engine", f"hf:{tiny_model_dir}",
                            "--out", str(out)])
    assert r.exit_code == 1, r.output
    assert "every row failed (2 of 2)" in _said(r) and "metadata.context" in _said(r)
    # the outputs are written all the same: one failed sample per row, with its reason
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["status"] for s in samples] == ["failed", "failed"]
    assert json.loads((out / "summary.json").read_text())["by_status"] == {"failed": 2}


def test_run_takes_hf_tiny_like_every_other_entry_point(rows_file: Path, tmp_path: Path,
                                                      agentgraphs_cache: Path) -> None:
    """One engine grammar: `hf:tiny` works for `agentgraphs run` as in a context or Studio (a real process,
    so the CLI's own entry point registers the name, not the test's conftest)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "AGENTGRAPHS_CACHE": str(agentgraphs_cache)}
    proc = subprocess.run(
        [sys.executable, "-m", "agentgraphs.cli", "run", "memagent", "--data", str(rows_file), "--engine", "hf:tiny",
         "--out", str(tmp_path / "o"), "--limit", "1", "--max-new-tokens", "4", "-o", "chunk_tokens=500"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["engine"].startswith("hf:") and summary["results"] == 1


def test_a_misspelt_option_is_refused_naming_the_closest_and_every_option() -> None:
    # before: "unknown option 'max_chunk'" and nothing else: neither the fix nor the options there are
    r = runner.invoke(app, ["draw", "memagent", "-o", "max_chunk=3", "-o", "zzz=1"])
    assert r.exit_code == 2, r.output
    said = _said(r)
    assert "unknown option 'max_chunk' (did you mean 'max_chunks'?)" in said
    assert "unknown option 'zzz';" in said  # nothing close: no guess, still the list
    assert said.count("its options:") == 1 and "chunk_tokens, eval_max_chunks" in said
    r = runner.invoke(app, ["draw", "memagent", "-o", "max_chunks=x"])  # a bad value: no list of names
    assert r.exit_code == 2 and "option max_chunks: input should be a valid integer" in _said(r)
    assert "its options" not in _said(r)


def test_tiny_model_refuses_a_file_or_another_model_at_out_dir(tmp_path: Path) -> None:
    # before: a file was a FileExistsError traceback, and another model's directory was overwritten in part
    # (its config.json and tokenizer replaced, its weight shards left beside them), exit 0
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    r = runner.invoke(app, ["tiny-model", str(a_file)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "is a file, not a directory" in _said(r) and a_file.read_text() == "mine"
    real = tmp_path / "Qwen2.5-7B"
    real.mkdir()
    for name in ("config.json", "model-00001-of-00004.safetensors", "vocab.json"):
        (real / name).write_text("{}")
    r = runner.invoke(app, ["tiny-model", str(real)])
    assert r.exit_code == 2 and "holds another model (model-00001-of-00004.safetensors, vocab.json)" in _said(r)
    assert (real / "config.json").read_text() == "{}" and sorted(p.name for p in real.iterdir()) == [
        "config.json", "model-00001-of-00004.safetensors", "vocab.json"]
    assert runner.invoke(app, ["tiny-model", str(tmp_path / "m")]).exit_code == 0
    assert runner.invoke(app, ["tiny-model", str(tmp_path / "m"), "--seed", "1"]).exit_code == 0  # rebuilt in place


def test_run_into_an_earlier_run_is_refused_unless_overwrite(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Before: a second `run --out DIR` overwrote samples.jsonl, traces.jsonl and summary.json without a word and
    left the earlier run's report.html, which no longer matched them."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n")
    out = tmp_path / "out"
    base = ["run", "agentgraphs.testing.agents:TWO_TURN", "--data", str(rows), "--engine", f"hf:{tiny_model_dir}",
            "--max-new-tokens", "4", "--out", str(out)]
    assert runner.invoke(app, base).exit_code == 0
    (out / "report.html").write_text("<html>the earlier run</html>")
    before = (out / "samples.jsonl").read_bytes()
    r = runner.invoke(app, [*base, "--seed", "1"])
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "holds an earlier run (samples.jsonl, traces.jsonl, summary.json, report.html)" in said, r.output
    assert "give a new directory, or pass --overwrite" in said, r.output
    assert (out / "samples.jsonl").read_bytes() == before and (out / "report.html").exists()
    r = runner.invoke(app, [*base, "--seed", "1", "--overwrite"])
    assert r.exit_code == 0, r.output
    assert not (out / "report.html").exists() and json.loads((out / "summary.json").read_text())["seed"] == 1


def test_run_refused_at_checkpoints_creates_no_file(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Before: `run --checkpoints DIR` was refused after empty samples.jsonl and traces.jsonl were created."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n")
    out = tmp_path / "out"
    r = runner.invoke(app, ["run", "agentgraphs.testing.agents:TWO_TURN", "--data", str(rows), "--engine",
                            f"hf:{tiny_model_dir}", "--out", str(out), "--checkpoints", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory; a checkpoints database" in " ".join(r.output.split()), r.output
    assert not out.exists()


def test_run_data_that_is_a_directory_says_so(tmp_path: Path) -> None:
    """Before: `run --data DIR` said `--data DIR: no such file`."""
    r = runner.invoke(app, ["run", "memagent", "--data", str(tmp_path), "--engine", "hf:tiny",
                            "--out", str(tmp_path / "out")])
    said = "".join(r.output.split())
    assert r.exit_code == 2 and "isadirectory;--dataisaJSONLfile" in said and "nosuchfile" not in said, r.output

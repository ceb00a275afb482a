"""A tokenizer path that is not a tokenizer directory is named as such, not as a bad Hub repo id."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgraphs.cli import app
from agentgraphs.context import shared_tokenizer
from agentgraphs.errors import ConfigError
from agentgraphs.tokenizer_loading import load_tokenizer

runner = CliRunner()


def test_cli_names_a_missing_tokenizer_directory(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"input": "Q?", "label": "A", "metadata": {"context": "D"}}\n', encoding="utf-8")
    args = ["run", "memagent", "--data", str(rows), "--engine", "sglang:http://127.0.0.1:9",
            "--tokenizer", "/no/such/dir", "--out", str(tmp_path / "out")]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())  # rich wraps long lines
    assert "tokenizer directory '/no/such/dir' does not exist" in text
    assert "network access" in text and "Repo id" not in text and "Traceback" not in text


def test_local_paths_are_checked_before_transformers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'./nope' does not exist"):
        load_tokenizer("./nope")
    with pytest.raises(ConfigError, match="does not exist"):
        shared_tokenizer(str(tmp_path / "a" / "b"))  # the cache every caller shares checks too
    file = tmp_path / "tokenizer.json"
    file.write_text("{}")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        load_tokenizer(str(file))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds none of tokenizer.json"):
        load_tokenizer(str(empty))


def test_a_real_directory_loads(tiny_model_dir: Path) -> None:
    assert load_tokenizer(str(tiny_model_dir)).encode(" Hello", add_special_tokens=False) == [21927]

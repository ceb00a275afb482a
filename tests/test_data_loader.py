"""agentgraphs.dataset_io.load_rows reads local files, datasets' own dataset directories, and Hub ids.

Directories are real `datasets` outputs (save_to_disk, and folders of jsonl/parquet files read by
load_dataset(path)); nothing is downloaded. A Hub id is checked for what reaches `datasets.load_dataset`
(split, revision, config, data files) and for the error a machine without network gets.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.dataset_io import load_located_rows, load_rows, source_kind
from agentgraphs.errors import ConfigError, InputError

datasets = pytest.importorskip("datasets")
prepare_data = importlib.import_module("examples.memagent.prepare_data")

ROWS = [{"input": "Who?", "label": ["Bob"]}, {"input": "Where?", "label": ["Paris", "Lutetia"]}]
HOTPOT = [
    {"prompt": [{"role": "user", "content": "Which city?"}], "context": "Doc about Paris.",
     "reward_model": {"ground_truth": ["Paris"]}, "extra_info": {"index": 3}},
    {"prompt": [{"role": "user", "content": "Who wrote it?"}], "context": "Doc two.",
     "reward_model": {"ground_truth": ["Alice"]}, "extra_info": {"index": 4}},
]
RULER = {"context": "Long doc.", "input": "Who?", "answers": ["Bob"]}


@pytest.fixture(autouse=True)
def _arrow_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_dataset(folder) writes an Arrow cache: keep it in the test's directory, not in ~/.cache
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ local files


def test_jsonl_json_list_and_parquet_files(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path / "rows.jsonl", ROWS)
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps(ROWS), encoding="utf-8")
    parquet = tmp_path / "rows.parquet"
    datasets.Dataset.from_list(ROWS).to_parquet(str(parquet))
    for path in (jsonl, listed, parquet):
        assert source_kind(path) == "file"
        assert list(load_rows(path)) == ROWS, path
    assert [w for _, w in load_located_rows(jsonl)] == [f"{jsonl}:1", f"{jsonl}:2"]
    assert [w for _, w in load_located_rows(parquet)] == [f"{parquet}[0]", f"{parquet}[1]"]


def test_bad_files_name_the_place(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:2: not valid JSON"):
        list(load_rows(bad))
    scalar = _jsonl(tmp_path / "scalar.jsonl", [ROWS[0]])
    scalar.write_text(scalar.read_text() + "42\n")
    with pytest.raises(InputError, match=r"scalar.jsonl:2: the row is a int"):
        list(load_rows(scalar))
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match=r"must end in \.jsonl, \.json, \.parquet"):
        load_rows(csv).__next__()


def test_flags_that_cannot_apply_to_a_file_are_refused(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path / "rows.jsonl", ROWS)
    with pytest.raises(ConfigError, match=r"single file, which holds one split \('train'\), not 'test'"):
        load_located_rows(jsonl, split="test")
    with pytest.raises(ConfigError, match=r"--revision cannot apply to the local source"):
        load_located_rows(jsonl, revision="v1")


def test_missing_local_paths_are_not_sent_to_the_hub(tmp_path: Path) -> None:
    for missing in (str(tmp_path / "nope.jsonl"), "./data", "data/sub/train.jsonl", "train.parquet"):
        with pytest.raises(ConfigError, match="does not exist"):
            source_kind(missing)
    assert source_kind("BytedTsinghua-SIA/hotpotqa") == "hub" and source_kind("squad") == "hub"


# ------------------------------------------------------------------------------------------- dataset directories


def test_save_to_disk_dataset_dict_and_dataset(tmp_path: Path) -> None:
    both = tmp_path / "dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:1]),
                          "test": datasets.Dataset.from_list(ROWS[1:])}).save_to_disk(str(both))
    assert source_kind(both) == "directory"
    assert list(load_rows(both)) == ROWS[:1]
    assert list(load_rows(both, split="test")) == ROWS[1:]
    assert [w for _, w in load_located_rows(both, split="test")] == [f"{both}[test][0]"]
    with pytest.raises(ConfigError, match=r"no split 'validation'; its splits are \['test', 'train'\]"):
        load_located_rows(both, split="validation")
    with pytest.raises(ConfigError, match="--revision cannot apply"):
        load_located_rows(both, revision="main")
    single = tmp_path / "single"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(single))
    assert list(load_rows(single)) == ROWS


def test_folder_of_jsonl_and_parquet_files(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    _jsonl(folder / "train.jsonl", ROWS[:1])
    _jsonl(folder / "test.jsonl", ROWS[1:])
    assert list(load_rows(folder)) == ROWS[:1]
    assert list(load_rows(folder, split="test")) == ROWS[1:]
    with pytest.raises(ConfigError, match="cannot load the dataset directory"):
        load_located_rows(folder, split="validation")
    pq = tmp_path / "pq"
    pq.mkdir()
    datasets.Dataset.from_list(ROWS).to_parquet(str(pq / "train.parquet"))
    assert list(load_rows(pq)) == ROWS
    # data_files picks files inside the folder (each becomes the split "train")
    assert list(load_rows(folder, data_files="test.jsonl")) == ROWS[1:]


# ------------------------------------------------------------------------------------------------ Hub ids


def test_hub_ids_pass_split_revision_config_and_files(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def fake_load_dataset(path: str, **kwargs: Any) -> Any:
        seen.append((path, kwargs))
        return datasets.Dataset.from_list(ROWS)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = list(load_rows("org/name", split="validation", revision="abc123", config="cfg",
                          data_files=["eval_50.json"], streaming=True))
    assert rows == ROWS
    path, kwargs = seen[0]
    assert path == "org/name"
    assert {k: kwargs[k] for k in ("split", "revision", "name", "data_files", "streaming")} == {
        "split": "validation", "revision": "abc123", "name": "cfg", "data_files": ["eval_50.json"], "streaming": True}


def test_hub_without_network_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(path: str, **kwargs: Any) -> Any:
        raise ConnectionError("Couldn't reach 'org/name' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError, match=r"'org/name' \(split 'train' at revision 'v2'\).*needs network access"):
        load_located_rows("org/name", revision="v2")


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(ConfigError, match=r"optional extra 'data'.*agentgraphs\[data\]"):
        load_located_rows("org/name")
    assert list(load_rows(_jsonl(tmp_path / "rows.jsonl", ROWS))) == ROWS  # plain files need no extra


# ------------------------------------------------------------------------------------------------ prepare_data


def test_prepare_data_reads_a_dataset_directory_with_split(tmp_path: Path) -> None:
    src = tmp_path / "hotpotqa"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(HOTPOT[:1]),
                          "dev": datasets.Dataset.from_list(HOTPOT[1:])}).save_to_disk(str(src))
    out = tmp_path / "dev.jsonl"
    assert prepare_data.main(["--hotpotqa", str(src), "--split", "dev", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [{"input": "Who wrote it?", "label": ["Alice"],
                     "metadata": {"context": "Doc two.", "length": None, "id": "4"}}]
    # a split the directory lacks: exit 2 naming the splits it has, nothing written
    assert prepare_data.main(["--hotpotqa", str(src), "--split", "nope", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()


def test_prepare_data_ruler_files_inside_one_source(tmp_path: Path) -> None:
    repo = tmp_path / "repo"  # a local copy of a Hub repository holding MemAgent's eval_{n_docs}.json files
    repo.mkdir()
    (repo / "eval_50.json").write_text(json.dumps([RULER, {**RULER, "answers": "Carl"}]), encoding="utf-8")
    (repo / "eval_100.json").write_text(json.dumps([RULER]), encoding="utf-8")
    out_dir = tmp_path / "ruler"
    args = ["--ruler", str(repo), "--data-files", "eval_50.json", "eval_100.json", "--out-dir", str(out_dir)]
    assert prepare_data.main(args) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["ruler_hqa_14K.jsonl", "ruler_hqa_7K.jsonl"]
    labels = [json.loads(line)["label"] for line in (out_dir / "ruler_hqa_7K.jsonl").read_text().splitlines()]
    assert labels == [["Bob"], ["Carl"]]
    two = ["--ruler", str(repo), str(repo), "--data-files", "eval_50.json", "--out-dir", str(out_dir)]
    assert prepare_data.main(two) == 2  # --data-files belongs to one source


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_prepare_data_refuses_a_limit_below_one(tmp_path: Path, limit: str) -> None:
    # before: an empty training file was written and the command exited 0
    src = _jsonl(tmp_path / "hotpotqa.jsonl", HOTPOT)
    out = tmp_path / "train.jsonl"
    assert prepare_data.main(["--hotpotqa", str(src), "--limit", limit, "--out", str(out)]) == 2
    assert not out.exists()
    assert prepare_data.main(["--hotpotqa", str(src), "--limit", "1", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 1

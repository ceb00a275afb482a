"""MemAgent dataset readers (RULER-HQA, HotpotQA), the slime row shape, and the synthetic needle generator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.dataset_io import write_jsonl
from agentgraphs.errors import InputError
from agentgraphs.memagent.data import (
    read_hotpotqa,
    read_memagent_rows,
    read_ruler_hqa,
    row_from_hotpotqa,
    row_from_ruler,
    to_slime_row,
)
from agentgraphs.memagent.synthetic import (
    build_filler_pool,
    make_dataset,
    make_needle_example,
)


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


RULER_ROW = {"context": "Doc one.", "input": "Who?", "answers": ["Alice", "Al"], "length": 7000, "_id": 5}
HOTPOT_ROW = {
    "data_source": "hotpotqa",
    "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Which city?"}],
    "context": "Doc two.",
    "reward_model": {"style": "rule", "ground_truth": ["Paris"]},
    "extra_info": {"index": 9},
}

# ------------------------------------------------------------------------------------------------ good rows


def test_read_ruler_jsonl(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "eval.jsonl", [RULER_ROW, {"context": "D", "input": "Q", "answers": "A"}])
    rows = list(read_ruler_hqa(path))
    assert rows[0] == {
        "question": "Who?", "document": "Doc one.", "answers": ["Alice", "Al"], "length": 7000, "id": "5"
    }
    assert rows[1]["answers"] == ["A"] and rows[1]["length"] is None
    assert rows[1]["id"].endswith("eval.jsonl:2")  # no id in the row: its location


def test_read_ruler_list_file_and_blank_lines(tmp_path: Path) -> None:
    listed = tmp_path / "eval_50.json"
    listed.write_text(json.dumps([RULER_ROW, RULER_ROW], indent=2), encoding="utf-8")
    assert [r["question"] for r in read_ruler_hqa(listed)] == ["Who?", "Who?"]
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n" + json.dumps(RULER_ROW) + "\n\n   \n", encoding="utf-8")
    assert len(list(read_ruler_hqa(blank))) == 1


def test_read_hotpotqa_chat_and_string_prompts(tmp_path: Path) -> None:
    string_prompt = {"prompt": "Who wrote it?", "context": "D", "reward_model": {"ground_truth": "Bob"}}
    rows = list(read_hotpotqa(_jsonl(tmp_path / "train.jsonl", [HOTPOT_ROW, string_prompt])))
    assert rows[0] == {
        "question": "Which city?", "document": "Doc two.", "answers": ["Paris"], "length": None, "id": "9"
    }
    assert rows[1]["question"] == "Who wrote it?" and rows[1]["answers"] == ["Bob"]


def test_auto_format_per_row(tmp_path: Path) -> None:
    rows = list(read_memagent_rows(_jsonl(tmp_path / "mixed.jsonl", [RULER_ROW, HOTPOT_ROW])))
    assert [r["answers"] for r in rows] == [["Alice", "Al"], ["Paris"]]
    with pytest.raises(ValueError):
        list(read_memagent_rows(tmp_path / "mixed.jsonl", fmt="parquet"))  # type: ignore[arg-type]


def test_auto_format_names_both_formats_for_a_row_of_neither(tmp_path: Path) -> None:
    """A HotpotQA row whose reward_model key is misspelled was read as RULER and refused as a missing 'input',
    which sent the user to the wrong format; it now names both formats' keys and the row's own."""
    misspelled = {k if k != "reward_model" else "reward_modle": v for k, v in HOTPOT_ROW.items()}
    path = _jsonl(tmp_path / "mixed.jsonl", [RULER_ROW, misspelled])
    with pytest.raises(InputError) as info:
        list(read_memagent_rows(path))
    said = str(info.value)
    assert info.value.field == "input / reward_model" and "mixed.jsonl:2" in said, said
    assert "a HotpotQA row 'prompt', 'context' and 'reward_model'" in said and "reward_modle" in said, said
    with pytest.raises(InputError) as named:  # the format named: its own field-by-field refusal
        list(read_memagent_rows(_jsonl(tmp_path / "hotpot.jsonl", [misspelled]), fmt="hotpotqa"))
    assert named.value.field == "reward_model.ground_truth"


def test_slime_row_and_write_jsonl_round_trip(tmp_path: Path) -> None:
    row = row_from_ruler(RULER_ROW)
    slime = to_slime_row(row)
    metadata = {"context": "Doc one.", "length": 7000, "id": "5"}
    assert slime == {"input": "Who?", "label": ["Alice", "Al"], "metadata": metadata}
    out = tmp_path / "out.jsonl"
    assert write_jsonl([slime, {"input": "é", "label": ["x"], "metadata": {}}], out) == 2
    lines = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == slime and "é" in lines[1]


def test_rows_stream_before_a_later_bad_row(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "eval.jsonl", [RULER_ROW, {"context": "D", "answers": ["A"]}])
    rows = read_ruler_hqa(path)
    assert next(rows)["question"] == "Who?"  # read lazily, line by line
    with pytest.raises(InputError):
        next(rows)


# ------------------------------------------------------------------------------------------------ bad rows


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"context": "D", "answers": ["A"]}, "input"),
        ({"context": "D", "input": "  ", "answers": ["A"]}, "input"),
        ({"context": "D", "input": 3, "answers": ["A"]}, "input"),
        ({"input": "Q", "answers": ["A"]}, "context"),
        ({"context": "", "input": "Q", "answers": ["A"]}, "context"),
        ({"context": "D", "input": "Q"}, "answers"),
        ({"context": "D", "input": "Q", "answers": 42}, "answers"),
        ({"context": "D", "input": "Q", "answers": []}, "answers"),
        ({"context": "D", "input": "Q", "answers": ["A", 1]}, "answers"),
        # a blank gold would match a blank prediction: refused when the data is prepared, not at rollout
        ({"context": "D", "input": "Q", "answers": ""}, "answers"),
        ({"context": "D", "input": "Q", "answers": ["A", " "]}, "answers"),
        # a length bucket that is not a whole number of tokens was dropped to None without a word
        ({"context": "D", "input": "Q", "answers": ["A"], "length": "7000"}, "length"),
        ({"context": "D", "input": "Q", "answers": ["A"], "length": 7000.5}, "length"),
        ({"context": "D", "input": "Q", "answers": ["A"], "length": float("nan")}, "length"),
        ({"context": "D", "input": "Q", "answers": ["A"], "length": True}, "length"),
        (["not", "an", "object"], "row"),
    ],
)
def test_bad_ruler_rows_name_their_field(tmp_path: Path, row: Any, field: str) -> None:
    path = _jsonl(tmp_path / "eval.jsonl", [RULER_ROW, row])
    with pytest.raises(InputError) as info:
        list(read_ruler_hqa(path))
    assert info.value.field == field
    assert "eval.jsonl:2" in str(info.value) and info.value.fix


def test_a_whole_number_float_length_is_kept(tmp_path: Path) -> None:
    # a parquet/pandas column of lengths reads 7000 as 7000.0: the bucket is kept, not silently lost
    row = row_from_ruler({**RULER_ROW, "length": 7000.0}, "eval.parquet[0]")
    assert row["length"] == 7000 and isinstance(row["length"], int)
    assert to_slime_row(row)["metadata"]["length"] == 7000
    assert row_from_ruler({**RULER_ROW, "length": None})["length"] is None  # absent stays absent


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prompt": None}, "prompt"),
        ({"prompt": [{"role": "system", "content": "only system"}]}, "prompt"),
        ({"prompt": 7}, "prompt"),
        ({"context": None}, "context"),
        ({"context": " \n"}, "context"),
        ({"reward_model": None}, "reward_model.ground_truth"),
        ({"reward_model": {"style": "rule"}}, "reward_model.ground_truth"),
        ({"reward_model": {"ground_truth": {"a": 1}}}, "reward_model.ground_truth"),
        ({"reward_model": {"ground_truth": ["Paris", ""]}}, "reward_model.ground_truth"),
    ],
)
def test_bad_hotpotqa_rows_name_their_field(change: dict[str, Any], field: str) -> None:
    row = {**HOTPOT_ROW, **change}
    with pytest.raises(InputError) as info:
        row_from_hotpotqa(row, "train.jsonl:1")
    assert info.value.field == field
    assert "train.jsonl:1" in str(info.value)


def test_non_utf8_bytes_report_the_line(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_bytes(json.dumps(RULER_ROW).encode() + b"\n" + b'{"context": "caf\xe9", "input": "Q", "answers": "A"}\n')
    with pytest.raises(InputError) as info:
        list(read_ruler_hqa(path))
    assert info.value.field == "file" and "eval.jsonl:2" in str(info.value)

    listed = tmp_path / "eval.json"
    listed.write_bytes(b'[\n{"context": "D", "input": "Q", "answers": "A"},\n{"context": "\xff"}]')
    with pytest.raises(InputError) as info:
        list(read_ruler_hqa(listed))
    assert info.value.field == "file" and "eval.json:3" in str(info.value)


def test_invalid_json_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps(RULER_ROW) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        list(read_ruler_hqa(path))
    assert info.value.field == "line" and "eval.jsonl:2" in str(info.value)


# ------------------------------------------------------------------------------------------------ synthetic


class WhitespaceTokenizer:
    """Stand-in when the tiny model's tokenizer is unavailable: one token per whitespace-separated word."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[str]:
        return text.split()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    try:
        from transformers import AutoTokenizer

        from agentgraphs.testing.tiny_model import ensure_tiny_model
    except ImportError:
        return WhitespaceTokenizer()
    return AutoTokenizer.from_pretrained(ensure_tiny_model())


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("n_tokens", [300, 7_000, 64_000])
def test_needle_document_length_and_answer(tokenizer: Any, n_tokens: int) -> None:
    row = make_needle_example(tokenizer, n_tokens, seed=3)
    assert abs(_n_tokens(tokenizer, row["document"]) - n_tokens) <= 0.02 * n_tokens
    (answer,) = row["answers"]
    assert row["document"].count(answer) == 1
    assert row["question"].startswith("What is the secret code of ")
    name = row["question"].removeprefix("What is the secret code of ").removesuffix("?")
    assert f"The secret code of {name} is {answer}." in row["document"]
    assert row["length"] == n_tokens


class CountingEncoder:
    """Counts the text a builder hands to the tokenizer: the work that would grow with the document."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self.chars = inner, 0, 0

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        self.calls += 1
        self.chars += len(text)
        return self.inner.encode(text, add_special_tokens=add_special_tokens)


def test_448k_document_never_tokenizes_the_document(tokenizer: Any) -> None:
    # A count, not a stopwatch: building tokenizes a fixed pool of short sentences and the needle, once,
    # whatever the length; the document itself is never (re-)tokenized, so building it is linear.
    counting = CountingEncoder(tokenizer)
    small = make_needle_example(counting, 7_000, seed=0)
    small_calls, small_chars = counting.calls, counting.chars
    counting.calls = counting.chars = 0
    row = make_needle_example(counting, 448_000, seed=0)
    assert counting.calls == small_calls and counting.chars == small_chars  # independent of the length
    assert counting.chars < len(small["document"]) < len(row["document"]) / 50
    assert abs(_n_tokens(tokenizer, row["document"]) - 448_000) <= 0.02 * 448_000
    assert row["document"].count(row["answers"][0]) == 1


def _needle_token_offset(tokenizer: Any, row: Any) -> int:
    at = row["document"].index("The secret code of ")
    return _n_tokens(tokenizer, row["document"][:at])


@pytest.mark.parametrize("position", [0.0, 0.3, 1.0])
def test_relative_needle_position(tokenizer: Any, position: float) -> None:
    row = make_needle_example(tokenizer, 20_000, seed=1, needle_position=position)
    assert abs(_needle_token_offset(tokenizer, row) - position * 20_000) <= 0.02 * 20_000


@pytest.mark.parametrize("chunk", [0, 3, 7])
def test_chunk_index_needle_position(tokenizer: Any, chunk: int) -> None:
    row = make_needle_example(tokenizer, 40_000, seed=2, needle_position=chunk, chunk_size=5_000)
    assert _needle_token_offset(tokenizer, row) // 5_000 == chunk


def test_needle_arguments_are_checked(tokenizer: Any) -> None:
    with pytest.raises(ValueError):
        make_needle_example(tokenizer, 1_000, seed=0, needle_position=1.5)
    with pytest.raises(ValueError):
        make_needle_example(tokenizer, 10_000, seed=0, needle_position=2, chunk_size=5_000)
    with pytest.raises(ValueError):
        make_needle_example(tokenizer, 5, seed=0)


def test_generator_is_deterministic(tokenizer: Any) -> None:
    a = make_needle_example(tokenizer, 3_000, seed=11)
    assert make_needle_example(tokenizer, 3_000, seed=11) == a
    assert make_needle_example(tokenizer, 3_000, seed=12)["document"] != a["document"]


def test_make_dataset(tokenizer: Any) -> None:
    rows = make_dataset(tokenizer, [2_000, 8_000], per_length=3, seed=0)
    assert [r["length"] for r in rows] == [2_000] * 3 + [8_000] * 3
    assert len({r["id"] for r in rows}) == 6
    assert rows == make_dataset(tokenizer, [2_000, 8_000], per_length=3, seed=0)
    for row in rows:
        assert row["document"].count(row["answers"][0]) == 1
        length = row["length"]
        assert length is not None and abs(_n_tokens(tokenizer, row["document"]) - length) <= 0.02 * length
    slime = to_slime_row(rows[0])
    assert slime["label"] == rows[0]["answers"] and slime["metadata"]["context"] == rows[0]["document"]


def _flush_chunks(tokenizer: Any, document: str, chunk: int) -> list[int]:
    """The whole chunks of `chunk` tokens that end exactly at a sentence's end (their last token a period)."""
    ids = tokenizer.encode(document, add_special_tokens=False)
    return [k for k in range(len(ids) // chunk) if tokenizer.decode(ids[(k + 1) * chunk - 1:(k + 1) * chunk]) == "."]


def test_where_a_chunk_ends_in_a_sentence_does_not_cycle_with_the_chunk_index(tokenizer: Any) -> None:
    """With sentences of one length (11 Qwen2.5 tokens) and 512-token chunks, the chunks before a needle that end
    at a sentence's end are exactly 10, 21, ...: a model trained on up to 8 chunks never reads one, a long
    document shows one every 11 chunks. With varied lengths (the default) any chunk can, about as often early
    as late."""
    uniform, varied = (build_filler_pool(tokenizer, sentence_lengths=s) for s in ("uniform", "varied"))
    assert set(uniform.token_counts) == {11}
    assert len(set(varied.token_counts)) >= 6 and min(varied.token_counts) >= 6 and max(varied.token_counts) <= 15
    kw = {"needle_position": 15, "chunk_size": 512}  # 16 chunks: the needle in the last, 15 chunks of filler before
    for seed in range(4):
        row = make_needle_example(tokenizer, 8_000, seed=seed, pool=uniform, **kw)
        assert _flush_chunks(tokenizer, row["document"], 512)[:1] == [10]
    early = late = 0
    docs = 60
    for seed in range(docs):
        row = make_needle_example(tokenizer, 8_000, seed=seed, **kw)
        ends = _flush_chunks(tokenizer, row["document"], 512)
        early += sum(1 for k in ends if k < 7)  # chunks a 4K training document has before its needle
        late += sum(1 for k in ends if 7 < k < 15)
    assert 0.03 < early / (7 * docs) < 0.2 and 0.03 < late / (7 * docs) < 0.2, (early, late)
    with pytest.raises(ValueError, match="sentence_lengths"):
        build_filler_pool(tokenizer, sentence_lengths="equal")  # type: ignore[arg-type]

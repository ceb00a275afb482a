"""AgentFlow's row conversion (agentflow/data.py) from the outside: a gold answer is kept exactly or the row is
refused naming its field; it is never turned into the text of another value or taken from a later field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.agentflow.data import slime_rows, to_row
from agentgraphs.errors import InputError
from agentgraphs.row_fields import answers_of


@pytest.mark.parametrize("row, field", [
    ({"problem": "Q?", "answer": float("nan")}, "answer"),  # a parquet/pandas row with no answer reads as NaN
    ({"problem": "Q?", "answer": float("inf")}, "answer"),
    ({"problem": "Q?", "answer": True}, "answer"),
    ({"problem": "Q?", "reward_model": {"ground_truth": {"x": 1}}}, "reward_model.ground_truth"),
    ({"problem": "Q?", "reward_model": {"ground_truth": float("nan")}}, "reward_model.ground_truth"),
    # present but unusable: never silently replaced by a later field (here the whole worked solution)
    ({"problem": "Q?", "answer": "", "solution": "Long worked solution ... so 7."}, "answer"),
    ({"problem": "Q?", "answer": ["", " "], "solution": "Long worked solution ... so 7."}, "answer"),
    ({"problem": "Q?", "Answer": {"value": 7}, "solution": "Long worked solution ... so 7."}, "Answer"),
    ({"problem": 12, "question": "Another question?", "answer": "7"}, "problem"),
    ({"problem": "  ", "question": "Another question?", "answer": "7"}, "problem"),
])
def test_an_unusable_field_is_refused_by_name(row: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as info:
        to_row(row, "aime.jsonl:3", "aime.jsonl")
    assert "aime.jsonl:3" in str(info.value) and f"'{field}'" in str(info.value), str(info.value)


def test_a_list_of_gold_answers_is_kept_as_a_list() -> None:
    row = to_row({"problem": "Q?", "reward_model": {"ground_truth": ["1/2", "0.5"]}}, "w", "s")
    assert row["label"] == ["1/2", "0.5"]  # before: the text "['1/2', '0.5']", which no answer equals
    assert answers_of(row["label"]) == ["1/2", "0.5"]


def test_a_whole_number_float_answer_is_its_integer() -> None:
    # the rule every reward reads labels by (agentgraphs.row_fields): 42.0 from a numeric column is 42
    assert to_row({"problem": "Q?", "answer": 42.0}, "w", "s")["label"] == "42"
    assert to_row({"problem": "Q?", "answer": 42}, "w", "s")["label"] == "42"
    assert to_row({"problem": "Q?", "reward_model": {"ground_truth": " 7 "}}, "w", "s")["label"] == "7"


def test_the_first_present_field_still_decides(tmp_path: Path) -> None:
    path = tmp_path / "dapo.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "user", "content": "What is 6*7?"}],
                                "reward_model": {"ground_truth": "42"}, "solution": "6*7=42"}) + "\n")
    assert [r["label"] for r in slime_rows(str(path))] == ["42"]


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(tmp_path: Path, limit: int) -> None:
    # before: the first row was still written (the count was checked only after it)
    from agentgraphs.errors import ConfigError

    path = tmp_path / "aime.jsonl"
    path.write_text("".join(json.dumps({"problem": f"Q{i}?", "answer": i}) + "\n" for i in range(3)))
    with pytest.raises(ConfigError, match=rf"--limit {limit}: must be at least 1"):
        list(slime_rows(str(path), limit=limit))
    assert len(list(slime_rows(str(path), limit=2))) == 2

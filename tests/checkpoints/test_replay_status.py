"""A replay or fork on another engine keeps the status its restored turns give it: the earlier branch's turns
are trained as they are, so one cut by max_new_tokens makes the new rollout TRUNCATED (invariant 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgraphs.batch import run_file
from agentgraphs.checkpoints.replay import replay
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.tiny_model import register_tiny_alias


def test_a_restored_turn_cut_by_length_keeps_the_branch_truncated(tmp_path: Path, tiny_engine: Any) -> None:
    register_tiny_alias()
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n")
    db = tmp_path / "runs.sqlite"
    run_file("agentgraphs.testing.agents:TWO_TURN", rows, "hf:tiny", tmp_path / "out", checkpoints=db,
             temperature=0.0, max_new_tokens=6)
    sample = json.loads((tmp_path / "out" / "samples.jsonl").read_text())
    thread = sample["metadata"]["checkpoint_thread"]
    trace = json.loads((tmp_path / "out" / "traces.jsonl").read_text())
    assert trace["turns"][0]["finish_reason"] == "length"  # the random model never ends a turn in 6 tokens
    # from checkpoint 2 (after `solve`): another engine answers `revise` in one token and stops
    result = replay(str(db), thread, 2, engine=ScriptedPolicy(tiny_engine, ["4"], name="other"))
    rollout = result.rollout
    restored, new = rollout.turns[0], rollout.turns[-1]
    assert restored["finish_reason"] == "length" and restored["trainable"]
    assert not restored["engine"].startswith("other")
    assert new["engine"].startswith("other:") and new["finish_reason"] == "stop"
    assert rollout.status == "truncated" and "[0]" in rollout.reason, rollout.reason

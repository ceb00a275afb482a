"""`agentgraphs debug` driven through a real pseudo-terminal (pexpect), as a user types it: step, inspect a
Turn's coloured tokens, edit the state, fork from an earlier checkpoint, continue, quit; then resume the
thread in a new process and continue the ORIGINAL branch. The tiny model at temperature 0 makes it
deterministic; the database is then checked from Python (branches, trace invariants)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.checkpoints.replay import history
from agentgraphs.testing.agents import TWO_TURN
from agentgraphs.trace import check_trace

pexpect = pytest.importorskip("pexpect", reason="pip install pexpect (the `test` extra)")

ROOT = Path(__file__).resolve().parents[2]
AGENT = "agentgraphs.testing.agents:TWO_TURN"
PROMPT = "debug> "
GREEN = r"\x1b\[(?:[0-9;]*;)?(?:32|92)m"  # trained output tokens
CYAN = r"\x1b\[(?:[0-9;]*;)?(?:36|96)m"  # a fresh prompt
MAGENTA = r"\x1b\[(?:[0-9;]*;)?(?:35|95)m"  # glue the prompt added to its conversation


def tokens(text: str) -> str:
    """A regex for `text` as coloured tokens print it: colour codes may sit between any two characters."""
    return r"(?:\x1b\[[0-9;]*m)*".join(re.escape(ch) for ch in text)


def spawn(args: list[str], tmp_path: Path, agent: str = AGENT) -> Any:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50", "NO_COLOR": "", "FORCE_COLOR": "1"}
    env.pop("NO_COLOR")
    child = pexpect.spawn(sys.executable, ["-m", "agentgraphs.cli", "debug", agent, *args], cwd=str(tmp_path),
                          env=env, encoding="utf-8", timeout=60, dimensions=(50, 200))
    return child


def command(child: Any, line: str, *expect: str) -> None:
    child.expect_exact(PROMPT)
    child.sendline(line)
    for pattern in expect:
        child.expect(pattern)


@pytest.mark.slow  # two processes that each import torch and load the tiny model
def test_step_inspect_edit_fork_continue_quit_and_resume(tmp_path: Path, tiny_model_dir: Path) -> None:
    engine = ["--engine", f"hf:{tiny_model_dir}", "--temperature", "0", "--max-new-tokens", "6"]
    row = json.dumps({"input": "What is 2+2?", "label": "4"})
    child = spawn(["--input", row, "--db", "dbg.sqlite", "--thread", "t1", *engine], tmp_path)
    child.expect("debugging two_turn, thread t1")
    child.expect("next: solve")

    command(child, "step", "node solve", "turns: \\+1", "turn 0", "solve", GREEN, "next: check")
    command(child, "state", "turns: 1 turns", "question: 'What is 2\\+2\\?'", "next: check")
    command(child, "turn 0", "turn 0", CYAN, tokens("What is 2+2?"), GREEN)  # prompt, then trained output
    command(child, "turn 0 lp", "log-prob", "│ 5 │")  # six output tokens with their log-probs
    command(child, "history", "input", "__start__", "solve", "check")
    command(child, "fork 1", "at checkpoint 1", "next: solve")
    command(child, 'edit question "What is 3+3?"', "edited question: new checkpoint")
    command(child, "state question", "What is 3\\+3\\?")
    command(child, "step", "node solve", tokens("What is 3+3?"), "next: check")
    command(child, "edit nope 1", "error:.*no key 'nope'")
    command(child, "continue", "node check", "conversation 'main' so far", MAGENTA, tokens("Check your answer"), GREEN,
            "run finished: status truncated", "reward 0.0")
    command(child, "step", "the run has ended here")
    command(child, "quit", "resume with --thread t1")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    # a new process resumes the thread: no --input (the row is stored), the engine given again
    child = spawn(["--db", "dbg.sqlite", "--thread", "t1", "--engine", f"hf:{tiny_model_dir}"], tmp_path)
    child.expect("debugging two_turn, thread t1")
    child.expect("next: \\(end of run\\)")
    command(child, "history", "update", "check")
    command(child, "fork 2", "at checkpoint 2", "question: 'What is 2\\+2\\?'", "next: check")
    command(child, "c", "node check", "run finished")
    command(child, "state question", "What is 2\\+2\\?")
    command(child, "q", "resume with --thread t1")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    items = history(tmp_path / "dbg.sqlite", "t1")
    ends = [c for c in items if c["next"] == [] and c["wrote"] == ["check"]]
    assert len(ends) == 2 and ends[-1]["head"] and not ends[0]["head"]  # two finished branches
    # the resumed branch: LangGraph copies a past checkpoint (its "fork", listed as "branch") before running from it
    assert [c["wrote"] for c in items if c["head"]] == [["input"], ["__start__"], ["solve"], ["branch"], ["check"]]
    # both branches' traces satisfy the invariants (the check turn continues the solve turn append-only)
    import asyncio

    from agentgraphs.checkpoints.replay import thread_config
    from agentgraphs.checkpoints.savers import compact_async_sqlite_saver

    async def states() -> list[dict[str, Any]]:
        async with compact_async_sqlite_saver(str(tmp_path / "dbg.sqlite")) as saver:
            graph = TWO_TURN.graph(None, checkpointer=saver)
            return [(await graph.aget_state(thread_config("t1", c["checkpoint_id"]))).values for c in ends]

    for values in asyncio.run(states()):
        [seq] = check_trace(values["turns"], "concat")
        assert seq["turn_indices"] == [0, 1]


def test_the_input_row_from_a_file_inline_json_or_a_bare_prompt(tmp_path: Path) -> None:
    from agentgraphs.errors import ConfigError
    from agentgraphs.rollout_inputs import read_input_row

    keys = ("input", "label", "metadata")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"input": "a", "label": "1"}\n\n{"q": "b", "label": "2", "metadata": {"k": 1}}\n')
    assert read_input_row(str(rows), 2, ("q", "label", "metadata")) == {
        "prompt": "b", "label": "2", "metadata": {"k": 1}, "index": 0}
    assert read_input_row('{"input": "c"}', keys=keys)["prompt"] == "c"
    assert read_input_row("What is 2+2?", keys=keys) == {"prompt": "What is 2+2?", "label": None, "metadata": {},
                                                         "index": 0}
    with pytest.raises(ConfigError, match="--line 3: .* has 2 rows"):
        read_input_row(str(rows), 3, keys)
    with pytest.raises(ConfigError, match="missing field 'input'"):
        read_input_row(str(rows), 2, keys)

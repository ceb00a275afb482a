"""What the debugging tools hand back is what ran: an edit (fork, the debugger's `edit`) counts as the node
that wrote its checkpoint, so what was to run next runs; a resumed debug thread keeps its stored sampling;
a replay's --out directory is a run directory `view` and `check` read; history never hides an id."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentgraphs.batch import run_file
from agentgraphs.checkpoints.debugger import DebugSession
from agentgraphs.checkpoints.replay import fork, history, threads
from agentgraphs.cli import app
from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.errors import ConfigError
from agentgraphs.spec import load_spec
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.trace import check_trace

ROOT = Path(__file__).resolve().parents[2]
TWO_TURN = "agentgraphs.testing.agents:TWO_TURN"
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris", "field": "population"}}\n</tool_call>'
runner = CliRunner()


def _react_policy(tiny_engine: Any) -> ScriptedPolicy:
    def script(call: Any) -> str:
        return "The population is \\boxed{2.1}." if "<tool_response>" in call.prompt_text else CALL
    return ScriptedPolicy(tiny_engine, script)


@pytest.fixture()
def react_thread(tmp_path: Path, tiny_engine: Any) -> tuple[Path, str]:
    """A react_agent run (agent -> tools -> agent) kept in a checkpoints database: (db, thread)."""
    rows, db = tmp_path / "rows.jsonl", tmp_path / "react.sqlite"
    rows.write_text(json.dumps({"input": "Population of Paris?", "label": "2.1"}) + "\n")
    run_file(str(ROOT / "examples" / "react_agent.py") + ":SPEC", rows, _react_policy(tiny_engine),
             tmp_path / "out", checkpoints=db, temperature=1.0, max_new_tokens=64)
    [info] = threads(db)
    return db, info["thread_id"]


def _ctx(policy: Any) -> AgentContext:
    return AgentContext(policy=policy, tokenizer=policy.tokenizer, sampling=SamplingParams(max_new_tokens=64))


def test_a_fork_after_a_send_node_runs_what_was_next(react_thread: tuple[Path, str], tiny_engine: Any) -> None:
    db, thread = react_thread
    steps = history(db, thread)
    assert [c["wrote"] for c in steps] == [["input"], ["__start__"], ["agent"], ["tools"], ["agent"]]
    assert steps[3]["next"] == ["agent"]  # `tools` (reached by Send) wrote it; the agent runs next
    policy = _react_policy(tiny_engine)
    note = {"role": "user", "content": "Answer with the number only."}
    result = fork(db, thread, 3, {"messages": [note]}, context=_ctx(policy))
    rollout = result.rollout
    assert len(policy.calls) == 1 and "Answer with the number only." in policy.calls[0].prompt_text
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    assert rollout.path == ["agent", "tools", "agent"]  # the whole branch: restored steps, then the new one
    assert len(rollout.turns) == 2 and rollout.turns[1]["rid"] != "" and rollout.llm_calls == 2
    check_trace(rollout.turns, "concat")
    edited = next(c for c in history(db, thread) if c["checkpoint_id"] == result.forked_checkpoint)
    assert edited["next"] == ["agent"] and edited["wrote"] == ["update"]

    with pytest.raises(ConfigError, match="cannot tell which node wrote checkpoint .*--as-node"):
        fork(db, thread, 0, {"messages": [note]}, context=_ctx(policy))  # the input checkpoint: no node wrote it
    with pytest.raises(ConfigError, match="as_node 'nope' is no node of the graph"):
        fork(db, thread, 3, {"messages": [note]}, as_node="nope", context=_ctx(policy))


def test_the_debuggers_edit_keeps_the_next_node_and_a_second_edit_keeps_it_too(
        react_thread: tuple[Path, str], tiny_engine: Any) -> None:
    db, thread = react_thread
    spec = load_spec(str(ROOT / "examples" / "react_agent.py") + ":SPEC")
    policy = _react_policy(tiny_engine)

    async def go() -> tuple[tuple[str, ...], tuple[str, ...], list[str], int]:
        async with DebugSession.open(spec, db, thread_id=thread, context=_ctx(policy)) as session:
            await session.goto(3)
            await session.edit({"messages": [{"role": "user", "content": "Be brief."}]})
            first = tuple((await session.state()).next)
            await session.edit({"messages": [{"role": "user", "content": "Very brief."}]})  # an edit of an edit
            second = tuple((await session.state()).next)
            step = await session.step()
            return first, second, [n for n, _ in step.updates], len(await session.turns())

    first, second, ran, turns = asyncio.run(go())
    assert first == second == ("agent",)
    assert ran == ["agent"] and turns == 2 and len(policy.calls) == 1


def _stored_sampling(db: Path, thread: str) -> dict[str, Any]:
    con = sqlite3.connect(db)
    try:
        [blob] = con.execute("SELECT record FROM agentgraphs_threads WHERE thread_id = ?", (thread,)).fetchone()
    finally:
        con.close()
    return json.loads(zlib.decompress(blob))["sampling"]


def test_a_resumed_debug_thread_keeps_its_sampling(tmp_path: Path, tiny_model_dir: Path) -> None:
    db, engine = tmp_path / "dbg.sqlite", f"hf:{tiny_model_dir}"
    row = json.dumps({"input": "What is 2+2?", "label": "4"})
    start = runner.invoke(app, ["debug", TWO_TURN, "--input", row, "--db", str(db), "--thread", "t1", "--engine",
                                engine, "--temperature", "0", "--max-new-tokens", "6"], input="step\nquit\n")
    assert start.exit_code == 0, start.output
    assert _stored_sampling(db, "t1")["temperature"] == 0.0
    # resumed with one flag: the other stays the thread's (not the 1.0 default); the new one is stored and said
    resumed = runner.invoke(app, ["debug", TWO_TURN, "--db", str(db), "--thread", "t1", "--engine", engine,
                                  "--max-new-tokens", "8"], input="continue\nquit\n")
    assert resumed.exit_code == 0, resumed.output
    assert "max_new_tokens 6 -> 8 (stored with the thread)" in resumed.output
    stored = _stored_sampling(db, "t1")
    assert stored["temperature"] == 0.0 and stored["max_new_tokens"] == 8
    items = history(db, "t1")
    assert items[-1]["next"] == [] and items[-1]["turns"] == 2

    async def temperatures() -> list[float]:
        async with DebugSession.open(TWO_TURN, db, thread_id="t1", engine=engine) as session:
            assert session.context.sampling.temperature == 0.0 and not session.notes
            return [t["temperature"] for t in await session.turns()]

    assert asyncio.run(temperatures()) == [0.0, 0.0]  # both turns sampled as the record says
    refused = runner.invoke(app, ["debug", TWO_TURN, "--db", str(db), "--thread", "t1", "--engine", engine,
                                  "--temperature", "1"], input="quit\n")
    assert refused.exit_code == 2 and "sampled with temperature=0.0, not 1.0" in refused.output
    other_row = runner.invoke(app, ["debug", TWO_TURN, "--db", str(db), "--thread", "t1", "--engine", engine,
                                    "--input", "What is 3+3?"], input="quit\n")
    assert other_row.exit_code == 2 and "started from another input row" in other_row.output


def cli_from(output: str) -> str:
    return json.loads(output[output.index("{"):])["from_checkpoint"]  # after the loader's progress bar


def test_a_replay_out_dir_is_a_run_dir_view_and_check_read(tmp_path: Path, tiny_model_dir: Path) -> None:
    rows, db, out = tmp_path / "rows.jsonl", tmp_path / "ck.sqlite", tmp_path / "out"
    rows.write_text(json.dumps({"input": "What is 2+2?", "label": "4", "metadata": {"source": "t"}}) + "\n")
    ran = runner.invoke(app, ["run", TWO_TURN, "--data", str(rows), "--engine", "hf:tiny", "--out", str(out),
                              "--temperature", "0", "--max-new-tokens", "6", "--checkpoints", str(db)])
    assert ran.exit_code == 0, ran.output
    original = json.loads((out / "samples.jsonl").read_text())
    thread = original["metadata"]["checkpoint_thread"]
    at = next(c["index"] for c in history(db, thread) if c["next"] == ["check"])
    replayed_dir = tmp_path / "replayed"
    cli = runner.invoke(app, ["replay", str(db), thread, "--checkpoint", str(at), "--engine", "hf:tiny",
                              "--out", str(replayed_dir)])
    assert cli.exit_code == 0, cli.output
    sample = json.loads((replayed_dir / "samples.jsonl").read_text())
    for key in ("index", "prompt", "label", "tokens", "loss_mask", "rollout_log_probs", "reward", "status"):
        assert sample[key] == original[key], key  # temperature 0, same model: the same row, regenerated
    assert "line" in sample and "group_index" in sample  # not stored with the thread: null, never guessed
    assert sample["metadata"]["source"] == "t" and sample["metadata"]["checkpoint_thread"] == thread
    trace = json.loads((replayed_dir / "traces.jsonl").read_text())
    assert trace["path"] == ["solve", "check"] and trace["path_turns"] == [[0], [1]]  # the whole branch
    summary = json.loads((replayed_dir / "summary.json").read_text())
    assert summary["engine"] == f"hf:{tiny_model_dir}" and summary["agent"] == "two_turn"
    assert summary["results"] == 1 and summary["replayed_from"] == cli_from(cli.output)
    viewed = runner.invoke(app, ["view", str(replayed_dir)])
    assert viewed.exit_code == 0, viewed.output
    assert (replayed_dir / "report.html").is_file()
    checked = runner.invoke(app, ["check", str(replayed_dir), "--model", "hf:tiny"])
    assert checked.exit_code == 0 and "OK" in checked.output, checked.output
    # a plain replay from a middle checkpoint starts a branch: listed as such, not as a fork
    assert ["branch"] in [c["wrote"] for c in history(db, thread)]
    assert "fork" not in [w for c in history(db, thread) for w in c["wrote"]]


def test_history_never_cuts_a_thread_id(tmp_path: Path, tiny_model_dir: Path) -> None:
    rows, db = tmp_path / "rows.jsonl", tmp_path / "ck.sqlite"
    rows.write_text(json.dumps({"input": "2+2?", "label": "4"}) + "\n")
    run_file(TWO_TURN, rows, f"hf:{tiny_model_dir}", tmp_path / "out", checkpoints=db, temperature=0.0,
             max_new_tokens=2)
    [info] = threads(db)
    listing = runner.invoke(app, ["history", str(db)], env={"COLUMNS": "60"})
    assert listing.exit_code == 0 and info["thread_id"] in listing.output, listing.output


def test_inline_json_longer_than_a_file_name_is_a_row() -> None:
    from agentgraphs.rollout_inputs import read_input_row

    for size in (300, 3000, 5000):
        text = "x" * size
        row = read_input_row(json.dumps({"input": text, "label": "4"}))
        assert row["prompt"] == text and row["label"] == "4"


def test_the_terminal_edit_takes_the_node_it_counts_as(react_thread: tuple[Path, str], tiny_engine: Any) -> None:
    from rich.console import Console

    from agentgraphs.checkpoints.tui import repl

    db, thread = react_thread
    spec = load_spec(str(ROOT / "examples" / "react_agent.py") + ":SPEC")
    lines = iter(["fork 2", 'edit --as tools messages [{"role": "user", "content": "x"}]', "edit --as", "quit"])
    console = Console(record=True, width=200, color_system=None)

    async def go() -> None:
        async with DebugSession.open(spec, db, thread_id=thread, context=_ctx(_react_policy(tiny_engine))) as s:
            await repl(s, console, lambda _prompt: next(lines))

    asyncio.run(go())
    text = console.export_text()
    assert "at checkpoint 2" in text and "next: tools" in text  # the agent asked for a tool ...
    assert "next: agent" in text.split("edited messages: new checkpoint")[1]  # ... the edit stood in for it
    assert "usage: edit [--as NODE] KEY JSON_VALUE" in text


def test_a_resumed_debug_thread_keeps_its_options(tmp_path: Path, tiny_model_dir: Path) -> None:
    db, engine = tmp_path / "opts.sqlite", f"hf:{tiny_model_dir}"
    row = json.dumps({"input": "Where was Alice born?", "label": "Paris",
                      "metadata": {"context": "Alice was born in Paris. " * 40}})
    args = ["debug", "memagent", "--db", str(db), "--thread", "m1", "--engine", engine, "--max-new-tokens", "4"]
    start = runner.invoke(app, [*args, "--input", row, "-o", "chunk_tokens=120"], input="step\nquit\n")
    assert start.exit_code == 0, start.output
    same = runner.invoke(app, [*args, "-o", "chunk_tokens=120"], input="quit\n")
    assert same.exit_code == 0, same.output
    other = runner.invoke(app, [*args, "-o", "chunk_tokens=60"], input="quit\n")
    said = " ".join(other.output.split())  # the console wraps the message at its width
    assert other.exit_code == 2 and "a resumed thread keeps its options" in said, other.output


def test_debug_refuses_a_missing_input_file_and_a_db_that_is_not_one(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: `--input rows.jsonl` naming no file debugged the prompt "rows.jsonl"; `--db` naming a directory or
    a file that is no checkpoints database ended in sqlite3's OperationalError / DatabaseError traceback (exit 1),
    and `run --checkpoints` on another application's SQLite file added LangGraph's tables to it."""
    def debug(*flags: str) -> Any:
        return runner.invoke(app, ["debug", "agentgraphs.testing.agents:TWO_TURN", "--engine",
                                   f"hf:{tiny_model_dir}", *flags], input="")

    r = debug("--input", str(tmp_path / "rows.jsonl"), "--db", str(tmp_path / "d.sqlite"))
    said = "".join(r.output.split())  # rich wraps long paths mid-word
    assert r.exit_code == 2 and f"--input{tmp_path / 'rows.jsonl'}:nosuchfile" in said, r.output
    assert not (tmp_path / "d.sqlite").exists()
    app_db, rows = tmp_path / "app.db", tmp_path / "rows.jsonl"
    conn = sqlite3.connect(app_db)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    rows.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n")
    for db, words in ((tmp_path, "isadirectory;acheckpointsdatabaseisoneSQLitefile"),
                      (rows, "notacheckpointsdatabase"), (app_db, "notacheckpointsdatabase(nocheckpointstable)")):
        r = debug("--input", str(rows), "--db", str(db))
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        assert words in "".join(r.output.split()), r.output
    r = runner.invoke(app, ["run", "agentgraphs.testing.agents:TWO_TURN", "--data", str(rows), "--engine",
                            f"hf:{tiny_model_dir}", "--out", str(tmp_path / "out"), "--checkpoints", str(app_db)])
    assert r.exit_code == 2 and "notacheckpointsdatabase" in "".join(r.output.split()), r.output
    conn = sqlite3.connect(app_db)
    assert [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["users"]
    conn.close()
    assert rows.read_text() == json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n"


def test_debug_refuses_line_with_a_one_row_input(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: `debug --input '{...}' --line 3` debugged the inline row and ignored --line without a word."""
    one = tmp_path / "row.json"
    one.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}))
    for value, what in (('{"input": "What is 2+2?"}', "inline JSON or a prompt text"),
                        ("What is 2+2?", "inline JSON or a prompt text"), (str(one), f"the file {one}")):
        r = runner.invoke(app, ["debug", "agentgraphs.testing.agents:TWO_TURN", "--engine", f"hf:{tiny_model_dir}",
                                "--input", value, "--line", "3", "--db", str(tmp_path / "d.sqlite")], input="")
        said = "".join(r.output.split())  # rich wraps long paths mid-word
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        want = f"--line 3: --input is {what} (one row); --line picks a row of a .jsonl file"
        assert "".join(want.split()) in said, r.output
    assert not (tmp_path / "d.sqlite").exists()

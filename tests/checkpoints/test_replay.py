"""Replay and fork from a checkpoints database: a failed rollout of `run --checkpoints` is opened and
replayed, the same engine regenerates the run exactly, another engine (or an edited state) makes a new
branch whose turns continue the stored conversation append-only and pass the trace invariants."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentgraphs.batch import run_rows
from agentgraphs.checkpoints.replay import RunCheckpoints, fork, history, open_checkpoints, replay, threads
from agentgraphs.checkpoints.savers import CompactAsyncSqliteSaver
from agentgraphs.cli import app
from agentgraphs.context import AgentContext, Limits
from agentgraphs.engines import SamplingParams
from agentgraphs.errors import CheckpointError, ConfigError
from agentgraphs.rollout_inputs import read_rollout_inputs
from agentgraphs.testing.agents import TWO_TURN
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.trace import check_trace

AGENT = "agentgraphs.testing.agents:TWO_TURN"
SAMPLING = SamplingParams(max_new_tokens=6, temperature=0.0)
runner = CliRunner()


@pytest.fixture()
def rows_file(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n")
    return path


def _samples(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def _prefix(a: list[int], b: list[int]) -> bool:
    return b[: len(a)] == a


def test_a_failed_rollout_is_opened_and_replayed(rows_file: Path, tmp_path: Path, tiny_engine: Any) -> None:
    db = tmp_path / "ck.sqlite"
    samples: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []

    def tight_context() -> AgentContext:  # one LLM call allowed: the second node fails the rollout
        return AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer, sampling=SAMPLING,
                            limits=Limits(max_llm_calls=1))

    async def go() -> None:
        async with open_checkpoints(db) as saver:
            assert isinstance(saver, CompactAsyncSqliteSaver)
            store = RunCheckpoints(saver, AGENT, SAMPLING, "hf:tiny")
            await run_rows(TWO_TURN, read_rollout_inputs(rows_file), tight_context, checkpoints=store,
                           on_result=lambda s, t: (samples.append(s), traces.append(t)))

    asyncio.run(go())
    [sample] = samples
    assert sample["status"] == "failed" and "LLMCallLimitExceeded" in sample["metadata"]["status_reason"]
    thread = sample["metadata"]["checkpoint_thread"]
    assert [t["thread_id"] for t in threads(db)] == [thread]
    steps = history(db, thread)
    assert [c["next"] for c in steps] == [["__start__"], ["solve"], ["check"]]
    assert [c["wrote"] for c in steps] == [["input"], ["__start__"], ["solve"]] and steps[-1]["turns"] == 1

    result = replay(db, thread, engine=tiny_engine)  # the latest checkpoint; default limits this time
    rollout = result.rollout
    assert rollout.status in ("completed", "truncated"), rollout.reason  # 6-token cap on a random model
    assert [t["node"] for t in rollout.turns] == ["solve", "check"]
    solve, check = rollout.turns
    assert solve == traces[0]["turns"][0]  # the failed run's turn, restored exactly
    assert _prefix(solve["prompt_ids"] + solve["output_ids"], check["prompt_ids"])  # append-only continuation
    [seq] = check_trace(rollout.turns, "concat")
    assert seq["turn_indices"] == [0, 1]
    assert rollout.reward is not None  # scored with the stored row's label
    after = history(db, thread)
    assert result.from_checkpoint == steps[-1]["checkpoint_id"]
    assert after[-1]["checkpoint_id"] == result.head_checkpoint and after[-1]["next"] == []
    assert all(c["head"] for c in after)  # the replay continued the failed branch


def test_cli_run_keeps_checkpoints_and_a_replay_regenerates_the_run(rows_file: Path, tmp_path: Path,
                                                                      tiny_model_dir: Path, tiny_engine: Any) -> None:
    db, out = tmp_path / "ck.sqlite", tmp_path / "out"
    result = runner.invoke(app, ["run", AGENT, "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                                 "--out", str(out), "--temperature", "0", "--max-new-tokens", "6",
                                 "--checkpoints", str(db)])
    assert result.exit_code == 0, result.output
    [sample] = _samples(out)
    thread = sample["metadata"]["checkpoint_thread"]
    trace = json.loads((out / "traces.jsonl").read_text())
    assert trace["checkpoint_thread"] == thread
    # from the input, on the same model at temperature 0: the very same tokens and log-probs
    again = replay(db, thread, 0, engine=tiny_engine).rollout
    assert again.status == sample["status"]
    assert [t["output_ids"] for t in again.turns] == [t["output_ids"] for t in trace["turns"]]
    assert [t["output_logprobs"] for t in again.turns] == [t["output_logprobs"] for t in trace["turns"]]
    # the same through the CLI, from the checkpoint after `solve`, written as a run directory
    steps = history(db, thread)
    at = next(c["index"] for c in steps if c["next"] == ["check"] and c["head"])
    cli = runner.invoke(app, ["replay", str(db), thread, "--checkpoint", str(at), "--engine",
                              f"hf:{tiny_model_dir}", "--out", str(tmp_path / "replayed")])
    assert cli.exit_code == 0, cli.output
    [replayed] = _samples(tmp_path / "replayed")
    assert replayed["tokens"] == sample["tokens"] and replayed["metadata"]["checkpoint_thread"] == thread
    listing = runner.invoke(app, ["history", str(db), "--thread", thread])
    assert listing.exit_code == 0 and "check" in listing.output


def test_fork_with_an_edited_state_on_another_engine(rows_file: Path, tmp_path: Path, tiny_model_dir: Path,
                                                     tiny_engine: Any) -> None:
    db, out = tmp_path / "ck.sqlite", tmp_path / "out"
    assert runner.invoke(app, ["run", AGENT, "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                               "--out", str(out), "--temperature", "0", "--max-new-tokens", "6",
                               "--checkpoints", str(db)]).exit_code == 0
    thread = _samples(out)[0]["metadata"]["checkpoint_thread"]
    before = history(db, thread)
    start = next(c for c in before if c["next"] == ["solve"])
    policy = ScriptedPolicy(tiny_engine, ["It is 6.", "So \\boxed{6}."])
    ctx = AgentContext(policy=policy, tokenizer=policy.tokenizer, sampling=SamplingParams(max_new_tokens=32))
    result = fork(db, thread, start["checkpoint_id"], {"question": "What is 3+3?"}, context=ctx)
    rollout = result.rollout
    assert rollout.status == "completed" and rollout.reward == 0.0  # the stored label (4) still scores it
    assert "What is 3+3?" in policy.calls[0].prompt_text and "2+2" not in policy.calls[0].prompt_text
    assert rollout.answer == "So \\boxed{6}." and [t["engine"] for t in rollout.turns] == [policy.name] * 2
    check_trace(rollout.turns, "concat")
    after = history(db, thread)
    forked = next(c for c in after if c["checkpoint_id"] == result.forked_checkpoint)
    assert forked["source"] == "update" and forked["parent_id"] == start["checkpoint_id"] and forked["head"]
    old_end = before[-1]["checkpoint_id"]
    assert any(c["checkpoint_id"] == old_end and not c["head"] for c in after)  # the first branch is kept

    with pytest.raises(ConfigError, match="no key 'questoin'"):
        fork(db, thread, 0, {"questoin": "x"}, engine=policy)
    with pytest.raises(CheckpointError, match="checkpoints 0.."):
        replay(db, thread, 99, engine=policy)
    with pytest.raises(CheckpointError, match="no thread 'nope' in "):
        history(db, "nope", agent=AGENT)


def test_memagent_replayed_from_a_middle_checkpoint_regenerates_the_run(tmp_path: Path, tiny_engine: Any) -> None:
    from agentgraphs.batch import run_file
    from agentgraphs.dataset_io import write_jsonl
    from agentgraphs.memagent.data import to_slime_row
    from agentgraphs.memagent.synthetic import make_needle_example

    write_jsonl([to_slime_row(make_needle_example(tiny_engine.tokenizer, 1500, seed=0))], tmp_path / "rows.jsonl")
    db, out = tmp_path / "ck.sqlite", tmp_path / "out"
    run_file("memagent", tmp_path / "rows.jsonl", tiny_engine, out, checkpoints=db, temperature=0.0,
             max_new_tokens=8, options={"chunk_tokens": 500, "memory_max_new_tokens": 8, "final_max_new_tokens": 8})
    [sample] = _samples(out)
    trace = json.loads((out / "traces.jsonl").read_text())
    thread = sample["metadata"]["checkpoint_thread"]
    steps = history(db, thread)
    updates = len(trace["turns"]) - 1  # one turn per memory update, then the final answer
    assert updates >= 3
    assert [c["wrote"][0] for c in steps] == ["input", "__start__", "prepare", *["memory_update"] * updates,
                                              "final_answer"]
    mid = steps[4]  # after two memory updates: their turns are restored, the rest regenerated
    again = replay(db, thread, mid["index"], engine=tiny_engine).rollout
    def fields(turns: list[Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in t.items() if k != "rid"} for t in turns]  # a request id is per call

    assert again.turns[:2] == trace["turns"][:2]  # restored from the checkpoint, request ids included
    assert fields(again.turns) == fields(trace["turns"])  # regenerated: every id, log-prob and field
    assert again.reward == sample["reward"] and again.status == sample["status"]


def test_spec_graph_compiles_with_a_checkpointer_whatever_build_graph_takes() -> None:
    from agentgraphs.checkpoints.savers import compact_sqlite_saver
    from agentgraphs.memagent import SPEC

    with compact_sqlite_saver(":memory:") as saver:
        for spec in (SPEC, TWO_TURN):  # build_graph(options, *, checkpointer=None) / build_graph(options)
            with_saver = spec.graph(None, checkpointer=saver)
            assert with_saver.checkpointer is saver
            assert spec.graph(None).checkpointer is None  # the cached graph is left as it was
            assert with_saver.get_graph().nodes.keys() == spec.graph(None).get_graph().nodes.keys()


def test_a_messages_graph_is_stepped_and_its_turns_found_in_its_messages(tmp_path: Path, tiny_engine: Any) -> None:
    """A `create_react_agent` graph keeps its Turns in AIMessages: the debugger finds them through the spec."""
    from agentgraphs.checkpoints.debugger import DebugSession
    from agentgraphs.spec import load_spec

    spec = load_spec(str(Path(__file__).resolve().parents[2] / "examples" / "react_agent.py") + ":SPEC")
    call = '<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris", "field": "population"}}\n</tool_call>'
    policy = ScriptedPolicy(tiny_engine, [call, "About 2.1 million, so \\boxed{2.1}."])
    ctx = AgentContext(policy=policy, tokenizer=policy.tokenizer, sampling=SamplingParams(max_new_tokens=64))
    row = {"prompt": "How many million people live in Paris?", "label": "2.1", "metadata": {}, "index": 0}

    async def go() -> tuple[list[Any], Any, list[Any]]:
        async with DebugSession.open(spec, tmp_path / "r.sqlite", row=row, context=ctx) as session:
            nodes = []
            for _ in range(3):
                nodes += [n for n, _ in (await session.step()).updates]
            assert len(await session.turns()) == 2 and (await session.state()).next == ()
            return nodes, await session.rollout(), await session.history()

    nodes, rollout, steps = asyncio.run(go())
    assert nodes == ["agent", "tools", "agent"]
    assert rollout.status == "completed" and rollout.reward == 1.0
    [seq] = check_trace(rollout.turns, "concat")  # the tool result is masked glue between the two outputs
    assert seq["turn_indices"] == [0, 1] and 0 in seq["loss_mask"]
    assert [c["turns"] for c in steps] == [0, 0, 1, 1, 2]


def test_a_thread_record_brings_back_helper_engines_and_the_evaluation_flag(tiny_model_dir: Path,
                                                                            tiny_engine: Any) -> None:
    from agentgraphs.checkpoints.replay import context_for, thread_record

    record = thread_record("t", AGENT, TWO_TURN.resolve_options(None), {"prompt": "q", "label": None,
                           "metadata": {}, "index": 0}, SAMPLING, tiny_engine,
                           engines={"judge": f"hf:{tiny_model_dir}"}, evaluation=True)
    assert record["engine"] == tiny_engine.name and record["engines"] == {"judge": f"hf:{tiny_model_dir}"}
    ctx = context_for(tiny_engine, json.loads(json.dumps(record)))  # as stored: plain JSON
    assert ctx.engines["judge"].name == f"hf:{tiny_model_dir}" and ctx.evaluation and ctx.sampling == SAMPLING
    assert not context_for(tiny_engine, record, engines={}, evaluation=False).engines
    with pytest.raises(ConfigError, match="engines\\['judge'\\] 'hf:/nonexistent'.*--helper"):
        context_for(tiny_engine, {**record, "engines": {"judge": "hf:/nonexistent"}})


def test_a_thread_that_is_not_in_the_database_is_named_as_such(rows_file: Path, tmp_path: Path,
                                                               tiny_engine: Any) -> None:
    """replay / fork / history of a mistyped thread id said "has no agentgraphs record: name its agent
    (--agent)", a fix that only led to a second error; it now says the thread is not there and how to list them."""
    from agentgraphs.batch import run_file

    db = tmp_path / "ck.sqlite"
    run_file(AGENT, rows_file, tiny_engine, tmp_path / "out", max_new_tokens=4, checkpoints=db)
    [real] = [t["thread_id"] for t in threads(db)]
    typo = real[:-1] + "9"
    for call in (lambda: replay(db, typo, 0, engine=tiny_engine), lambda: history(db, typo),
                 lambda: fork(db, typo, 0, {"question": "x"}, engine=tiny_engine),
                 lambda: history(db, typo, agent=AGENT)):
        with pytest.raises(CheckpointError) as err:
            call()
        said = str(err.value)
        assert f"no thread {typo!r} in {db}" in said and f"agentgraphs history {db}" in said, said
        assert "--agent" not in said
    result = runner.invoke(app, ["replay", str(db), typo])
    assert result.exit_code == 2 and "no thread" in result.output, result.output


def test_an_empty_or_foreign_sqlite_file_is_refused_and_left_as_it_was(tmp_path: Path, tiny_engine: Any) -> None:
    """replay / fork / history on an empty file or another program's SQLite database opened LangGraph's saver
    on it, which created checkpoint tables in that file before failing to find the thread; now refused
    read-only, naming the file, and the file is byte for byte as it was."""
    import sqlite3

    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    for db in (empty, foreign):
        before = db.read_bytes()
        for call in (lambda: replay(db, "t0", 0, engine=tiny_engine), lambda: history(db, "t0"),
                     lambda: fork(db, "t0", 0, {"question": "x"}, engine=tiny_engine)):
            with pytest.raises(CheckpointError, match="not a checkpoints database"):
                call()
        assert db.read_bytes() == before, db
        result = runner.invoke(app, ["replay", str(db), "t0"])
        said = " ".join(result.output.split())  # the console wraps at its width
        assert result.exit_code == 2 and "not a checkpoints database" in said, result.output


def test_a_fork_whose_value_a_reducer_refuses_is_an_error_naming_the_key(rows_file: Path, tmp_path: Path,
                                                                         tiny_model_dir: Path) -> None:
    # before: `--set turns=5` (turns appends: it takes a list) ended in a raw TypeError traceback, exit 1
    db, out = tmp_path / "ck.sqlite", tmp_path / "out"
    assert runner.invoke(app, ["run", AGENT, "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                               "--out", str(out), "--temperature", "0", "--max-new-tokens", "6",
                               "--checkpoints", str(db)]).exit_code == 0
    thread = _samples(out)[0]["metadata"]["checkpoint_thread"]
    r = runner.invoke(app, ["fork", str(db), thread, "--checkpoint", "1", "--set", "turns=5"])
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "error: the edit of ['turns'] does not fit the state" in said and "Fix:" in said
    # before: `--set 'turns=[5]'` passed the reducer, then the rollout crashed with an AttributeError traceback in
    # agentgraphs.calls._key
    for value, what in (("[5]", "item 0 (5) is an int, not a Turn"),
                        ('[{"node": "x"}]', "item 0 ({'node': 'x'}) is a Turn without 'prompt_ids'")):
        r = runner.invoke(app, ["fork", str(db), thread, "--checkpoint", "1", "--set", f"turns={value}"])
        said = " ".join(r.output.split())
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        assert f"error: the edit of 'turns': {what}" in said and "Fix: 'turns' holds the Turns" in said, r.output


def test_an_out_that_is_a_file_is_refused_before_the_work(rows_file: Path, tmp_path: Path,
                                                          tiny_model_dir: Path) -> None:
    # before: `run` loaded its engine and `replay` / `fork` ran the whole branch (kept in the database), then
    # each failed on `[Errno 17] File exists: 'FILE'`, naming neither --out nor the fix
    db, out, a_file = tmp_path / "ck.sqlite", tmp_path / "out", tmp_path / "notes.txt"
    a_file.write_text("mine")

    def said(result: Any) -> str:
        return " ".join(result.output.split())

    r = runner.invoke(app, ["run", AGENT, "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                            "--out", str(a_file)])
    assert r.exit_code == 2 and f"--out {a_file}: is a file" in said(r) and "directory" in said(r), r.output
    assert runner.invoke(app, ["run", AGENT, "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                               "--out", str(out), "--max-new-tokens", "6", "--checkpoints", str(db)]).exit_code == 0
    thread = _samples(out)[0]["metadata"]["checkpoint_thread"]
    before = len(history(db, thread))
    for cmd in (["replay", str(db), thread, "--checkpoint", "1"],
                ["fork", str(db), thread, "--checkpoint", "1", "--set", 'question="3+3?"']):
        r = runner.invoke(app, [*cmd, "--out", str(a_file)])
        assert r.exit_code == 2 and f"--out {a_file}: is a file" in said(r), r.output
    assert len(history(db, thread)) == before and a_file.read_text() == "mine"  # no branch was run


def test_replay_and_fork_into_an_earlier_run_are_refused_unless_overwrite(rows_file: Path, tmp_path: Path,
                                                                          tiny_model_dir: Path) -> None:
    # before: replay / fork --out DIR holding a run overwrote its samples.jsonl and traces.jsonl without a word and
    # left its report.html, which then showed rollouts the directory no longer held
    db, out = tmp_path / "ck.sqlite", tmp_path / "out"
    assert runner.invoke(app, ["run", AGENT, "--data", str(rows_file), "--engine", f"hf:{tiny_model_dir}",
                               "--out", str(out), "--max-new-tokens", "6", "--checkpoints", str(db)]).exit_code == 0
    (out / "report.html").write_text("<html>the earlier run</html>")
    earlier = (out / "samples.jsonl").read_text()
    thread = _samples(out)[0]["metadata"]["checkpoint_thread"]
    before = len(history(db, thread))
    for cmd in (["replay", str(db), thread, "--checkpoint", "1"],
                ["fork", str(db), thread, "--checkpoint", "1", "--set", 'question="3+3?"']):
        r = runner.invoke(app, [*cmd, "--out", str(out)])
        said = " ".join(r.output.split())
        assert r.exit_code == 2 and f"--out {out}: holds an earlier run" in said and "--overwrite" in said, r.output
    assert len(history(db, thread)) == before and (out / "samples.jsonl").read_text() == earlier  # nothing ran
    for cmd in (["replay", str(db), thread, "--checkpoint", "1"],
                ["fork", str(db), thread, "--checkpoint", "1", "--set", 'question="3+3?"']):
        r = runner.invoke(app, [*cmd, "--out", str(out), "--overwrite"])
        assert r.exit_code == 0, r.output
        rows = _samples(out)
        assert len(rows) == 1 and rows[0]["metadata"]["checkpoint_thread"] == thread
        assert not (out / "report.html").exists() and (out / "summary.json").exists()
    assert len(history(db, thread)) > before

"""run_rows: a bounded worker pool with results in input order; one slow row never stalls the others.

The assertions are structural (which rows started before which finished, how many were in flight),
never timed: they hold on a loaded 2-core machine as well as on an idle one.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator, Mapping

from langgraph.graph import END, START, StateGraph

from agentgraphs.batch import run_rows
from agentgraphs.context import AgentContext
from agentgraphs.node import TraceState
from agentgraphs.rollout_inputs import ParsedRow
from agentgraphs.spec import AgentSpec, RolloutInput
from agentgraphs.testing.fake_engines import FixedLatencyEngine

ROWS = 12
CONCURRENCY = 4
HEAD_WAIT_S = 30.0  # only bounds how long a regression takes to fail; never reached when the pool works


class Recorder:
    """What happened, in event order: row starts and finishes, rows pulled, the most in flight."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.pulled = 0
        self.finished = 0
        self.max_read_ahead = 0  # rows pulled from the iterator but not yet finished
        self.others_started = asyncio.Event()
        self.head_timed_out = False


class RowState(TraceState):
    row: int


def _spec(rec: Recorder) -> AgentSpec:
    async def work(state: RowState, runtime: Any) -> dict[str, Any]:
        i = state["row"]
        rec.events.append(("start", i))
        rec.in_flight += 1
        rec.max_in_flight = max(rec.max_in_flight, rec.in_flight)
        rec.max_read_ahead = max(rec.max_read_ahead, rec.pulled - rec.finished)
        if sum(1 for kind, _ in rec.events if kind == "start") == ROWS:
            rec.others_started.set()
        try:
            if i == 0:  # the slow row: it finishes only once every other row has started
                try:
                    await asyncio.wait_for(rec.others_started.wait(), HEAD_WAIT_S)
                except asyncio.TimeoutError:
                    rec.head_timed_out = True
            else:
                await asyncio.sleep(0)
        finally:
            rec.in_flight -= 1
            rec.finished += 1
            rec.events.append(("finish", i))
        return {}

    def build(options: Mapping[str, Any]) -> Any:
        g = StateGraph(RowState, context_schema=AgentContext)
        g.add_node("work", work)
        g.add_edge(START, "work")
        g.add_edge("work", END)
        return g.compile(name="rows")

    def make_input(row: RolloutInput, options: Mapping[str, Any]) -> dict[str, Any]:
        return {"row": row["index"], "turns": []}

    return AgentSpec(name="rows", build_graph=build, make_input=make_input, answer=lambda s: "",
                     reward=lambda r, c: 1.0, requires_label=False)


def _rows(rec: Recorder) -> Iterator[ParsedRow]:
    for i in range(ROWS):
        rec.pulled += 1
        yield ParsedRow(line=i + 1, inp=RolloutInput(prompt=f"row {i}", label=None, metadata={}, index=i))


async def test_a_slow_row_does_not_stall_the_others() -> None:
    rec = Recorder()
    engine = FixedLatencyEngine(latency_s=0.0)
    delivered: list[int] = []
    summary = await run_rows(_spec(rec), _rows(rec), lambda: AgentContext(policy=engine, tokenizer=engine.tokenizer),
                             concurrency=CONCURRENCY,
                             on_result=lambda sample, trace: delivered.append(sample["index"]))

    assert not rec.head_timed_out, f"the other rows waited for row 0: {rec.events}"
    head_done = rec.events.index(("finish", 0))
    started_before = {i for kind, i in rec.events[:head_done] if kind == "start"}
    assert started_before == set(range(ROWS))  # rows CONCURRENCY.. ran while row 0 held its slot
    # bounded: never more than `concurrency` rollouts in flight, rows read lazily, and the pool was used
    assert rec.max_in_flight == CONCURRENCY
    assert rec.max_read_ahead <= CONCURRENCY
    # input order kept for the sink, every row answered
    assert delivered == list(range(ROWS))
    assert summary.rows == summary.results == ROWS and summary.by_status == {"completed": ROWS}


async def test_bad_rows_and_concurrency_one_keep_order() -> None:
    rec = Recorder()
    rec.others_started.set()  # no slow head here
    engine = FixedLatencyEngine(latency_s=0.0)
    rows = list(_rows(rec))
    rows[3] = ParsedRow(line=4, inp=None, error="line 4: invalid JSON")
    delivered: list[tuple[int, str]] = []
    summary = await run_rows(_spec(rec), rows, lambda: AgentContext(policy=engine, tokenizer=engine.tokenizer),
                             concurrency=1,
                             on_result=lambda sample, trace: delivered.append((sample["line"], sample["status"])))
    assert [line for line, _ in delivered] == list(range(1, ROWS + 1))
    assert delivered[3] == (4, "failed")
    assert rec.max_in_flight == 1
    assert summary.results == ROWS and summary.by_status == {"completed": ROWS - 1, "failed": 1}


async def test_a_failing_sink_stops_the_run_and_leaves_no_rollout_running() -> None:
    rec = Recorder()
    rec.others_started.set()
    engine = FixedLatencyEngine(latency_s=0.0)

    def sink(sample: dict[str, Any], trace: dict[str, Any]) -> None:
        if sample["index"] == 2:
            raise OSError(28, "No space left on device")

    before = asyncio.all_tasks()
    try:
        await run_rows(_spec(rec), _rows(rec), lambda: AgentContext(policy=engine, tokenizer=engine.tokenizer),
                       concurrency=CONCURRENCY, on_result=sink)
    except OSError as exc:
        assert exc.errno == 28
    else:
        raise AssertionError("the sink's OSError was swallowed")
    assert asyncio.all_tasks() <= before
    assert rec.pulled < ROWS  # the pool stopped pulling rows


def test_run_file_refuses_a_run_of_nothing(tiny_engine: Any, tmp_path: Any) -> None:
    """`agentgraphs run` on an empty file, or with a --limit below 1, ran no rollout, exited 0 and wrote a
    summary with mean_reward 0.0: a made-up number for a run that did nothing."""
    import pytest

    from agentgraphs.batch import run_file
    from agentgraphs.errors import ConfigError

    agent = "agentgraphs.testing.agents:TWO_TURN"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"--data .*empty\.jsonl.* no row"):
        run_file(agent, empty, tiny_engine, tmp_path / "out_empty", max_new_tokens=4)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"input": "What is 6 * 7?", "label": "42"}\n', encoding="utf-8")
    for limit in (0, -1):
        with pytest.raises(ConfigError, match=rf"--limit {limit}: .*at least 1"):
            run_file(agent, rows, tiny_engine, tmp_path / f"out_{limit}", max_new_tokens=4, limit=limit)
    assert not any(tmp_path.glob("out_*/summary.json"))  # refused before anything is written
    summary = run_file(agent, rows, tiny_engine, tmp_path / "out_ok", max_new_tokens=4, limit=1)
    assert summary["results"] == 1

"""A debugger step cancelled while a plain `def` node waits in TracedChatModel.invoke() (a worker thread of the
loop's default executor, waiting on the sync calls' background loop), against the SGLang-contract server.

Each way a step ends early: the caller's timeout (`asyncio.wait_for(session.step(), t)`), a cancel of the task
running it (what Ctrl-C does in `agentgraphs debug`), and the session closing under it. In each the request is
aborted by rid (once), gone from the server at once (the engine would hang for 3600 s), nothing is retried, the
step reports that it was cancelled, and the one executor thread is free again: the next step is answered and
checkpointed from where the cancelled one started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.checkpoints.debugger import DebugSession, StepCancelled
from agentgraphs.testing.agents import SYNC_ANSWER
from agentgraphs.testing.fake_engines import FixedLatencyEngine
from agentgraphs.testing.server import SGLangTestServer
from rl_bridge.setup import load_tokenizer

HANG_S = 60.0  # a guard that turns a hang into a failure, not a performance bound
GONE_S = 10.0  # how long a cancelled step's request may stay on the server (the engine hangs for 3600 s)
ROW = {"prompt": "What is 6 * 7?", "label": "42", "metadata": {}, "index": 0}


async def wait_until(cond: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def alive_after(server: SGLangTestServer) -> float:
    """Seconds until the server has no request in flight (GONE_S when they are still there then)."""
    ended = time.monotonic()
    while server.in_flight_rids() and time.monotonic() - ended < GONE_S:
        await asyncio.sleep(0.02)
    return time.monotonic() - ended


def run_on_one_thread(main: Any) -> Any:
    """Run `main()` on a loop whose default executor (where LangGraph runs `def` nodes) has ONE thread, and do
    not join it at the end: a thread still blocked must not hang the test."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize("end", ["timeout", "cancel", "close"])
def test_a_cancelled_step_aborts_its_def_node_call(tmp_path: Path, tiny_model_dir: Path, end: str) -> None:
    engine = FixedLatencyEngine(latency_s=3600.0)
    tokenizer = load_tokenizer(str(tiny_model_dir))
    db = tmp_path / "debug.sqlite"
    with SGLangTestServer(engine) as server:
        how = {"engine": f"sglang:{server.url}", "tokenizer": tokenizer, "sampling": {"max_new_tokens": 16}}

        async def cancelled_step() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with DebugSession.open(SYNC_ANSWER, db, row=ROW, thread_id="t", **how) as session:
                task = asyncio.create_task(asyncio.wait_for(session.step(), 0.5) if end == "timeout"
                                           else session.step())
                await wait_until(lambda: len(server.in_flight_rids()) == 1)
                out["rids"] = server.in_flight_rids()
                if end == "cancel":
                    task.cancel()
                if end != "close":
                    out["outcome"] = (await asyncio.wait([task], timeout=HANG_S))[0]
                    out["alive_s"] = await alive_after(server)
            if end == "close":  # the session closed with the step still running
                out["alive_s"] = await alive_after(server)
                out["outcome"] = (await asyncio.wait([task], timeout=HANG_S))[0]
            out["requests"] = server.stats.generate_requests
            out["task"] = task
            if server.in_flight_rids():  # the one thread is still blocked: another step would only queue behind it
                return out
            engine.latency_s = 0.0
            async with DebugSession.open(SYNC_ANSWER, db, thread_id="t", **how) as session:
                out["next"] = await asyncio.wait_for(session.step(), HANG_S)
                out["turns"] = await session.turns()
            return out

        out = run_on_one_thread(cancelled_step)
        print(f"[{end}] the hung request was gone {out['alive_s']:.2f} s after the step was cancelled")
        assert out["alive_s"] < GONE_S, (f"the def node's request was still on the server {GONE_S} s after its step "
                                         f"was cancelled ({end}; aborts: {dict(server.stats.aborts)})")
        assert [server.stats.aborts[rid] for rid in out["rids"]] == [1], "the rid aborted once"
        assert out["requests"] == 1  # nothing retried after the cancel
    task = out["task"]
    assert out["outcome"] == {task}, "the cancelled step must end"
    if end == "timeout":
        assert isinstance(task.exception(), asyncio.TimeoutError)
    elif end == "cancel":
        assert task.cancelled()
    else:
        assert isinstance(task.exception(), StepCancelled) and "session closed" in str(task.exception())
    # the thread is free: the next step (resumed in a new session) runs the node again from where the cancelled
    # step started, and is answered and recorded
    assert [node for node, _ in out["next"].updates] == ["answer"] and out["next"].done
    assert len(out["turns"]) == 1 and out["turns"][0]["output_ids"]


def alive_after_sync(server: SGLangTestServer) -> float:
    ended = time.monotonic()
    while server.in_flight_rids() and time.monotonic() - ended < GONE_S:
        time.sleep(0.02)
    return time.monotonic() - ended


@pytest.mark.slow  # a process that imports torch
def test_ctrl_c_in_agentgraphs_debug_interrupts_the_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Ctrl-C while `agentgraphs debug` runs a step of a `def` node: the request is aborted by rid, the prompt
    comes back saying the step was interrupted, and the next step (the same node again) is answered."""
    pexpect = pytest.importorskip("pexpect", reason="pip install pexpect (the `test` extra)")
    from tests.checkpoints.test_tui import command, spawn

    engine = FixedLatencyEngine(latency_s=3600.0)
    with SGLangTestServer(engine) as server:
        child = spawn(["--input", "What is 6 * 7?", "--db", "dbg.sqlite", "--thread", "t1", "--engine",
                       f"sglang:{server.url}", "--tokenizer", str(tiny_model_dir), "--max-new-tokens", "16"],
                      tmp_path, agent="agentgraphs.testing.agents:SYNC_ANSWER")
        try:
            child.expect("debugging sync_answer, thread t1")
            command(child, "step")
            deadline = time.monotonic() + HANG_S
            while not server.in_flight_rids():
                assert time.monotonic() < deadline and child.isalive(), "the step's request never came"
                time.sleep(0.02)
            rids = server.in_flight_rids()
            child.sendintr()
            alive_s = alive_after_sync(server)
            print(f"[ctrl-c] the hung request was gone {alive_s:.2f} s after Ctrl-C")
            assert alive_s < GONE_S, (f"the request was still on the server {GONE_S} s after Ctrl-C "
                                      f"(aborts: {dict(server.stats.aborts)})")
            assert [server.stats.aborts[rid] for rid in rids] == [1]
            child.expect("step interrupted")
            child.expect("next: answer")  # no checkpoint was written: the node is still to run
            engine.latency_s = 0.0
            command(child, "step", "node answer", "run finished")
            assert server.stats.generate_requests == 2  # the interrupted call was not retried
            command(child, "quit", "resume with --thread t1")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert child.exitstatus == 0

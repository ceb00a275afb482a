"""Cancelling rl_bridge.generate the way slime does on abort (task.cancel()), and the rollout deadline.

A cancelled rollout must stop the server's work for it (an /abort_request naming each request in
flight by rid), let CancelledError through (run_rollout swallows everything else), return without
waiting for the engine (shown by counts: requests aborted and stopped in flight, none retried), and
leave no asyncio task or connection behind. So must a rollout whose `def` node is blocked in
TracedChatModel.invoke() (a worker thread waiting on the sync calls' background loop), at its deadline too.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import psutil
import pytest

import rl_bridge
from agentgraphs.engines import Completion, SamplingParams
from agentgraphs.testing.fake_engines import FixedLatencyEngine
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache, load_tokenizer

N = 16
# A call that does NOT honour the cancel hangs on a 3600 s engine; HANG_S only turns such a hang into a
# failure (a guard, not a performance bound: generous for a loaded 2-core machine). That the calls were
# cut short shows in counts: each request aborted once by rid, stopped in flight, none retried.
HANG_S = 60.0
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 16, "stop": None,
            "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
            "spaces_between_special_tokens": False}


class SecondTurnHangs:
    """Answers a conversation's first prompt at once and hangs on any prompt extending it."""

    name = "second-turn-hangs"

    def __init__(self) -> None:
        self.inner = FixedLatencyEngine(latency_s=0.0)
        self.tokenizer = self.inner.tokenizer
        self.first_prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        if any(prompt_ids[: len(p)] == p for p in self.first_prompts):
            await asyncio.sleep(3600)
        self.first_prompts.append(list(prompt_ids))
        return await self.inner.generate(prompt_ids, params)


def make_args(server: SGLangTestServer, model_dir: Path, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(**{
        "agentgraph": "agentgraphs.testing.agents:TWO_TURN", "hf_checkpoint": str(model_dir),
        "sglang_router_ip": "127.0.0.1", "sglang_router_port": server.port,
        "agentgraph_max_retries": 3, "reward_key": None, **extra,
    })


async def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def established() -> int:
    return sum(1 for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED)


def run_and_cancel(server: SGLangTestServer, args: Any, ready: Callable[[], bool]) -> dict[str, Any]:
    """Start N generate calls, cancel them all once `ready()`, and measure what happened."""

    async def main() -> dict[str, Any]:
        samples = [Sample(index=i, prompt=f"Question {i}: what is 6 * 7?", label="42") for i in range(N)]
        tasks = [asyncio.create_task(rl_bridge.generate(args, s, dict(SAMPLING))) for s in samples]
        await wait_until(ready)
        rids = server.in_flight_rids()
        aborts_before = sum(server.stats.aborts.values())
        for t in tasks:
            t.cancel()
        done, pending = await asyncio.wait(tasks, timeout=HANG_S)
        await wait_until(lambda: not server.in_flight_rids(), 15.0)  # a poll: ends when they are gone
        await aclose_all()
        leftover = asyncio.all_tasks() - {asyncio.current_task()}
        return {
            "rids": rids, "pending": pending, "leftover": leftover,
            "cancelled": [t.cancelled() for t in done], "samples": samples,
            "new_aborts": sum(server.stats.aborts.values()) - aborts_before,
        }

    try:
        return asyncio.run(main())
    finally:
        clear_cache()


@pytest.fixture(autouse=True)
def _tokenizer_loaded(tiny_model_dir: Path) -> None:
    load_tokenizer(str(tiny_model_dir))  # off the clock


def check_prompt_and_clean(out: dict[str, Any]) -> None:
    assert not out["pending"] and out["cancelled"] == [True] * N, "CancelledError must propagate"
    assert not out["leftover"], f"leaked tasks: {out['leftover']}"
    # the Samples were never filled in: slime re-queues them as they were
    assert all(s.status == Sample.Status.PENDING for s in out["samples"])


def test_cancel_first_turn_aborts_each_request_by_rid(tiny_model_dir: Path) -> None:
    with SGLangTestServer(FixedLatencyEngine(latency_s=3600.0)) as server:
        before = established()
        out = run_and_cancel(server, make_args(server, tiny_model_dir),
                             lambda: len(server.in_flight_rids()) == N)
        check_prompt_and_clean(out)
        assert len(out["rids"]) == N
        assert all(server.stats.aborts[rid] == 1 for rid in out["rids"]), "every rid aborted once"
        assert out["new_aborts"] == N
        assert server.stats.aborted_in_flight + server.stats.disconnects >= N
        assert server.stats.generate_requests == N  # nothing was retried after the cancel
        deadline = time.monotonic() + 15.0  # a poll, not a bound
        while established() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert established() <= before, "connections left open after aclose_all"


def test_cancel_mid_rollout_aborts_the_second_turn(tiny_model_dir: Path) -> None:
    engine = SecondTurnHangs()
    with SGLangTestServer(engine) as server:
        out = run_and_cancel(server, make_args(server, tiny_model_dir),
                             lambda: len(server.in_flight_rids()) == N)
        check_prompt_and_clean(out)
        assert len(engine.first_prompts) == N  # every first turn was answered ...
        assert server.stats.generate_requests == 2 * N  # ... and every second turn was in flight
        assert all(server.stats.aborts[rid] == 1 for rid in out["rids"])
        assert server.stats.aborted_in_flight + server.stats.disconnects >= N  # stopped, not waited for


def test_cancel_during_retry_backoff_returns_promptly(tiny_model_dir: Path) -> None:
    with SGLangTestServer(FixedLatencyEngine(latency_s=0.0)) as server:
        server.faults.set_rate("http503", 1.0)  # every attempt fails: the client sits in backoff
        out = run_and_cancel(server, make_args(server, tiny_model_dir, agentgraph_max_retries=50),
                             lambda: server.stats.generate_requests >= N)
        check_prompt_and_clean(out)
        # a call cancelled while it waits for an answer aborts that request; one in backoff has none
        assert out["new_aborts"] <= N
        assert set(server.stats.aborts) <= {body["rid"] for body in server.stats.bodies}
        assert server.stats.generate_requests < 4 * N  # no retry storm after the cancel


# -- a plain `def` node (the kit's SYNC_ANSWER): its invoke() blocks one of the loop's executor threads ------
WORKERS = 2  # the loop's executor threads, which LangGraph runs def nodes in: all blocked by the slow calls
GONE_S = 10.0  # how long an ended rollout's request may stay on the server (the engine hangs for 3600 s)


@pytest.mark.parametrize("end", ["deadline", "cancel"])
def test_a_def_node_call_in_flight_is_aborted_when_its_rollout_ends(tiny_model_dir: Path, end: str) -> None:
    """A rollout ended by agentgraph_max_time_s, or cancelled by slime, while its def node waits in
    TracedChatModel.invoke(): the request is aborted by rid (it ran until the server's answer, up to the 600 s
    read timeout, holding its thread), and the executor thread is free again, so a later rollout is answered
    (it queued behind the blocked threads and failed at its own deadline)."""
    engine = FixedLatencyEngine(latency_s=3600.0)
    with SGLangTestServer(engine) as server:
        agent = {"agentgraph": "agentgraphs.testing.agents:SYNC_ANSWER"}
        args = make_args(server, tiny_model_dir, **agent, **({"agentgraph_max_time_s": 0.5} if end == "deadline"
                                                             else {}))
        later_args = make_args(server, tiny_model_dir, **agent, agentgraph_max_time_s=HANG_S)

        async def main() -> dict[str, Any]:
            samples = [Sample(index=i, prompt=f"Question {i}: what is 6 * 7?", label="42") for i in range(WORKERS)]
            tasks = [asyncio.create_task(rl_bridge.generate(args, s, dict(SAMPLING))) for s in samples]
            await wait_until(lambda: len(server.in_flight_rids()) == WORKERS)
            rids = server.in_flight_rids()
            if end == "cancel":
                for t in tasks:
                    t.cancel()
            done, pending = await asyncio.wait(tasks, timeout=HANG_S)
            ended = time.monotonic()
            while server.in_flight_rids() and time.monotonic() - ended < GONE_S:
                await asyncio.sleep(0.02)
            alive_s = time.monotonic() - ended
            requests = server.stats.generate_requests
            engine.latency_s = 0.0
            later = Sample(index=99, prompt="Question 99: what is 6 * 7?", label="42")
            if not server.in_flight_rids():  # else the later rollout only waits for the blocked threads
                await rl_bridge.generate(later_args, later, dict(SAMPLING))
            await aclose_all()
            return {"rids": rids, "pending": pending, "done": done, "samples": samples, "alive_s": alive_s,
                    "requests": requests, "later": later}

        loop = asyncio.new_event_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=WORKERS))
        try:
            out = loop.run_until_complete(main())
        finally:
            loop.close()  # does not join the executor: a thread still blocked must not hang the test
            clear_cache()
        assert not out["pending"]
        assert out["alive_s"] < GONE_S, (f"the def node's requests were still on the server {GONE_S} s after their "
                                         f"rollouts ended (aborts: {dict(server.stats.aborts)})")
        assert all(server.stats.aborts[rid] == 1 for rid in out["rids"]), "every rid aborted once"
        assert out["requests"] == WORKERS  # nothing retried after the rollout ended
    if end == "cancel":
        assert all(t.cancelled() for t in out["done"]), "CancelledError must propagate"
        assert all(s.status == Sample.Status.PENDING for s in out["samples"])  # slime re-queues them as they were
    else:
        for s in out["samples"]:
            assert s.status == Sample.Status.FAILED and s.metadata["status_reason"] == "rollout exceeded max_time_s=0.5"
            assert not any(s.loss_mask), "nothing of a rollout that ran out of time is trained"
    later = out["later"]
    assert later.status == Sample.Status.COMPLETED, later.metadata.get("status_reason")
    assert any(later.loss_mask) and len(later.rollout_log_probs) == later.response_length

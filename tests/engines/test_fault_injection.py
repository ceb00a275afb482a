"""1,000 rollouts through rl_bridge.generate against a server that fails at random (seeded).

The server (SGLangTestServer over FixedLatencyEngine: no model, 2 ms per call) injects every fault
kind it knows into a fraction of /generate requests. For each rollout the test replays the faults
the server drew for that rollout's requests and derives the status it must end with:

- a call succeeds at the first attempt without a fault; a retryable fault (5xx, dropped connection,
  stall past the client timeout, cut or invalid body, log-probs shorter than the ids) costs one
  attempt; max_retries + 1 of them in a row fail the call -> FAILED, all-zero masks;
- an injected abort ends the rollout -> ABORTED (slime re-queues it; never trained);
- both calls succeed -> COMPLETED, or TRUNCATED when max_new_tokens cut the turns.

And it checks what DESIGN.md invariants 4 and 5 promise under load: one Sample per input, the
derived status, retries counted exactly in sample.metadata["retries"], no exception escaping, no
asyncio task and no TCP connection left behind once rl_bridge.setup.aclose_all() has run.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil

import rl_bridge
from agentgraphs.testing.fake_engines import TOY_SCRIPT, FixedLatencyEngine
from agentgraphs.testing.server import FAULT_KINDS, Faults, SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache, load_tokenizer

ROLLOUTS = 1000
CONCURRENCY = 64
MAX_RETRIES = 2
# The client's per-request timeout: what a "slow" fault runs into. Well above any queueing delay on a
# loaded 2-core machine: an attempt that timed out before the server drew its fault (or while a
# fault-free answer was still queued) would make the replay below derive the wrong outcome.
TIMEOUT_S = 10.0
RATES = {  # per /generate attempt; one attempt in four fails, so ~1.4 % of calls fail for good
    "http500": 0.04, "http503": 0.04, "drop": 0.04, "slow": 0.01, "abort": 0.01,
    "truncated_json": 0.04, "cut_body": 0.03, "short_logprobs": 0.04,
}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "stop": None, "stop_token_ids": None,
            "skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False}
PROMPT = re.compile(r"Question (\d+):")


class RecordingFaults(Faults):
    """Faults that remember which fault each request (by rid) drew.

    The server appends a /generate body to stats.bodies and draws its fault in the same
    synchronous step, so the last body is the request being served.
    """

    def __init__(self, server: SGLangTestServer, seed: int) -> None:
        super().__init__(seed)
        self.server = server
        self.drawn: list[tuple[list[int], str | None]] = []  # (input_ids, fault) in arrival order

    def draw(self) -> str | None:
        kind = super().draw()
        self.drawn.append((self.server.stats.bodies[-1]["input_ids"], kind))
        return kind


def truncating(i: int) -> bool:
    return i % 10 == 0  # these rollouts get max_new_tokens below the script's length


def expected_outcome(faults: list[str | None]) -> tuple[str, list[int]]:
    """The status a rollout must end with, and the attempts each of its calls took."""
    calls: list[int] = []
    attempts = 0
    for n, fault in enumerate(faults, start=1):
        attempts += 1
        if fault is None or fault == "abort":
            calls.append(attempts)
            attempts = 0
            if fault == "abort":
                assert n == len(faults), "requests after an abort"
                return "aborted", calls
            if len(calls) == 2:
                assert n == len(faults), "requests after the last call"
                return "ok", calls
        elif attempts == MAX_RETRIES + 1:
            assert n == len(faults), "requests after a call failed for good"
            return "failed", calls + [attempts]
    raise AssertionError(f"rollout stopped early: faults {faults}")


def tcp_connections() -> set[tuple[Any, Any, str]]:
    return {(c.laddr, c.raddr, c.status) for c in psutil.Process().net_connections(kind="tcp")
            if c.status != psutil.CONN_LISTEN}


def test_1000_rollouts_under_random_faults(tiny_model_dir: Path) -> None:
    engine = FixedLatencyEngine(latency_s=0.002)
    server = SGLangTestServer(engine, port=0)
    server.faults = faults = RecordingFaults(server, seed=1234)
    for kind, p in RATES.items():
        faults.set_rate(kind, p)
    faults.slow_s = 6 * TIMEOUT_S  # far past the client's timeout (the client aborts the stalled attempt)
    assert set(RATES) == set(FAULT_KINDS)
    args = SimpleNamespace(
        agentgraph="agentgraphs.testing.agents:TWO_TURN", hf_checkpoint=str(tiny_model_dir),
        sglang_router_ip="127.0.0.1", sglang_router_port=0, agentgraph_max_retries=MAX_RETRIES,
        agentgraph_request_timeout_s=TIMEOUT_S, reward_key=None,
    )
    load_tokenizer(str(tiny_model_dir))  # off the clock
    errors: list[dict[str, Any]] = []

    async def main() -> list[Any]:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> Any:
            sample = Sample(group_index=i // 8, index=i, prompt=f"Question {i}: what is 6 * 7?", label="42")
            params = {**SAMPLING, "max_new_tokens": 4 if truncating(i) else 32}
            async with sem:
                return await rl_bridge.generate(args, sample, params)

        try:
            return await asyncio.gather(*(one(i) for i in range(ROLLOUTS)), return_exceptions=True)
        finally:
            await aclose_all()
            leftover = asyncio.all_tasks() - {asyncio.current_task()}
            assert not leftover, f"leaked tasks: {leftover}"

    with server:
        args.sglang_router_port = server.port
        before = tcp_connections()
        started = time.monotonic()
        results = asyncio.run(main())
        wall = time.monotonic() - started
        deadline = time.monotonic() + 15.0  # a poll, not a bound: it ends as soon as the sockets close
        while tcp_connections() - before and time.monotonic() < deadline:
            time.sleep(0.05)  # the server side closes once it reads the client's FIN
        leaked = tcp_connections() - before
        stats = server.stats
    clear_cache()

    # every input came back, as a Sample, nothing raised
    assert len(results) == ROLLOUTS and not errors, errors[:3]
    raised = [r for r in results if isinstance(r, BaseException)]
    assert not raised, raised[:3]
    assert all(isinstance(r, Sample) for r in results) and [r.index for r in results] == list(range(ROLLOUTS))
    assert not leaked, f"{len(leaked)} connections left open, e.g. {sorted(leaked)[:3]}"

    # replay each rollout's faults (requests are attributed by the question in their prompt)
    tok = load_tokenizer(str(tiny_model_dir))
    per_rollout: dict[int, list[str | None]] = defaultdict(list)
    for ids, kind in faults.drawn:
        per_rollout[int(PROMPT.search(tok.decode(ids)).group(1))].append(kind)  # type: ignore[union-attr]
    assert sum(map(len, per_rollout.values())) == stats.generate_requests == len(faults.drawn)

    by_status: Counter[str] = Counter()
    retries_total = 0
    for s in results:
        outcome, calls = expected_outcome(per_rollout[s.index])
        status = s.status.value
        by_status[status] += 1
        meta = s.metadata
        assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs) >= 1
        if outcome == "ok":
            assert status == ("truncated" if truncating(s.index) else "completed"), (s.index, meta)
            assert meta["llm_calls"] == 2 and meta["retries"] == sum(c - 1 for c in calls)
            n = 4 if truncating(s.index) else len(TOY_SCRIPT)
            trained = [t for t, m in zip(s.tokens[-s.response_length:], s.loss_mask) if m]
            assert trained == 2 * list(TOY_SCRIPT[:n])  # the server's ids, exactly (invariant 1)
            assert [lp for lp, m in zip(s.rollout_log_probs, s.loss_mask) if m] == [-0.5] * (2 * n)
            assert not s.remove_sample
        elif outcome == "aborted":
            assert status == "aborted", (s.index, meta)
            # the turns before the abort are kept: every call and its retries are counted
            assert meta["llm_calls"] == len(calls) and meta["retries"] == sum(c - 1 for c in calls)
            assert "aborted" in meta["status_reason"]
            assert not any(s.loss_mask)
        else:
            assert status == "failed", (s.index, meta)
            assert f"{MAX_RETRIES + 1} attempt(s)" in meta["status_reason"]
            assert s.remove_sample and not any(s.loss_mask) and not any(s.rollout_log_probs)
            for seq in s.train_metadata["turns"]:
                assert not any(seq["loss_mask"])
        assert 0 <= meta["retries"] <= MAX_RETRIES * meta["llm_calls"]
        retries_total += meta["retries"]

    assert by_status["aborted"] == stats.faults["abort"]  # each injected abort ends exactly one rollout
    assert by_status["failed"] > 0 and by_status["aborted"] > 0 and retries_total > 0  # the mix was real
    print(f"\nfault injection: {ROLLOUTS} rollouts at concurrency {CONCURRENCY} in {wall:.1f} s; "
          f"{stats.generate_requests} /generate requests; faults injected "
          f"{dict(sorted(stats.faults.items()))} ({sum(stats.faults.values())} in all); "
          f"results {dict(sorted(by_status.items()))}; retries recorded {retries_total}; "
          f"max server in-flight {stats.max_in_flight}")

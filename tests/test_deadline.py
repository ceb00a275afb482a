"""agentgraphs.deadline: pure functions in worker processes that a deadline kills; every call answers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentgraphs.deadline import DeadlinePool


@pytest.fixture()
def pool() -> Any:
    p = DeadlinePool(size=2)
    yield p
    p.close()


def test_values_errors_and_a_worker_that_dies(pool: DeadlinePool) -> None:
    assert pool.call("math:factorial", [5], timeout_s=60) == {"ok": True, "value": 120, "reason": "ok"}
    failed = pool.call("math:factorial", [-1], timeout_s=60)
    assert not failed["ok"] and failed["reason"].startswith("error: ValueError")
    assert pool.call("no_such_module_xyz:f", [], timeout_s=60)["reason"].startswith("error: ModuleNotFoundError")
    assert pool.call("os:getcwd", [1, 2], timeout_s=60)["reason"].startswith("error: TypeError")
    unjsonable = pool.call("builtins:set", [[1, 2]], timeout_s=60)  # a set is not JSON: an error, not a crash
    assert unjsonable["reason"].startswith("error: TypeError")
    died = pool.call("os:_exit", [3], timeout_s=60)
    assert not died["ok"] and "died" in died["reason"]
    assert pool.call("math:factorial", [4], timeout_s=60)["value"] == 24  # a fresh worker took its place


def test_a_timeout_kills_only_that_call(pool: DeadlinePool) -> None:
    assert pool.call("math:factorial", [3], timeout_s=60)["value"] == 6
    hung = pool.call("time:sleep", [60], timeout_s=0.5)
    assert hung["reason"].startswith("timeout: time:sleep") and pool.kills == 1
    assert pool.call("math:factorial", [3], timeout_s=60)["value"] == 6


def test_many_threads_share_the_workers(pool: DeadlinePool) -> None:
    results: dict[int, Any] = {}

    def work(i: int) -> None:
        results[i] = pool.call("math:factorial", [i], timeout_s=60)["value"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == {i: __import__("math").factorial(i) for i in range(12)}


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="size"):
        DeadlinePool(size=0)
    with pytest.raises(ValueError, match="timeout_s"):
        DeadlinePool(size=1).call("math:factorial", [1], timeout_s=0)


def test_a_worker_that_cannot_start_is_a_clear_error(monkeypatch: Any) -> None:
    import agentgraphs.deadline as deadline

    monkeypatch.setattr(deadline, "_READY", b"a line the worker never writes\n")
    with pytest.raises(RuntimeError, match="did not start"):
        DeadlinePool(size=1).call("math:factorial", [1], timeout_s=60)

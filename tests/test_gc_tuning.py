"""agentgraphs.gc_tuning: the collector's thresholds are raised while rollouts run and put back after."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from agentgraphs.errors import ConfigError
from agentgraphs.gc_tuning import ROLLOUT_THRESHOLDS, rollouts_running

PYTHON_DEFAULT = (700, 10, 10)


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*PYTHON_DEFAULT)
    yield
    gc.set_threshold(*before)


def test_raised_while_any_rollout_runs_and_restored_after_the_last() -> None:
    async def rollout(seen: list[tuple[int, ...]], delay: float) -> None:
        with rollouts_running():
            await asyncio.sleep(delay)
            seen.append(gc.get_threshold())

    async def main() -> list[tuple[int, ...]]:
        seen: list[tuple[int, ...]] = []
        await asyncio.gather(rollout(seen, 0.01), rollout(seen, 0.03))
        return seen

    assert asyncio.run(main()) == [ROLLOUT_THRESHOLDS, ROLLOUT_THRESHOLDS]  # the first to end kept them raised
    assert gc.get_threshold() == PYTHON_DEFAULT


def test_restored_when_a_rollout_raises() -> None:
    with pytest.raises(RuntimeError), rollouts_running():
        raise RuntimeError("boom")
    assert gc.get_threshold() == PYTHON_DEFAULT


def test_a_process_that_tuned_its_collector_keeps_its_thresholds() -> None:
    gc.set_threshold(5000, 20, 20)
    with rollouts_running():
        assert gc.get_threshold() == (5000, 20, 20)
    assert gc.get_threshold() == (5000, 20, 20)


def test_the_environment_chooses_or_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGRAPHS_GC_THRESHOLDS", "2000,5,7")
    with rollouts_running():
        assert gc.get_threshold() == (2000, 5, 7)
    monkeypatch.setenv("AGENTGRAPHS_GC_THRESHOLDS", "off")
    with rollouts_running():
        assert gc.get_threshold() == PYTHON_DEFAULT
    monkeypatch.setenv("AGENTGRAPHS_GC_THRESHOLDS", "many")
    with pytest.raises(ConfigError, match="AGENTGRAPHS_GC_THRESHOLDS"), rollouts_running():
        pass
    monkeypatch.setenv("AGENTGRAPHS_GC_THRESHOLDS", "1,-1,1")
    with pytest.raises(ConfigError, match=">= 0"), rollouts_running():
        pass
    monkeypatch.delenv("AGENTGRAPHS_GC_THRESHOLDS")
    with rollouts_running():  # the refused entries left no rollout counted: raised, then put back
        assert gc.get_threshold() == ROLLOUT_THRESHOLDS
    assert gc.get_threshold() == PYTHON_DEFAULT


def test_restored_when_the_last_rollout_is_cancelled() -> None:
    async def main() -> tuple[int, ...]:
        started = asyncio.Event()

        async def rollout() -> None:
            with rollouts_running():
                started.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(rollout())
        await started.wait()
        raised = gc.get_threshold()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return raised

    assert asyncio.run(main()) == ROLLOUT_THRESHOLDS
    assert gc.get_threshold() == PYTHON_DEFAULT


def test_thresholds_the_process_sets_while_rollouts_run_are_kept() -> None:
    with rollouts_running():
        gc.set_threshold(3000, 30, 30)
    assert gc.get_threshold() == (3000, 30, 30)
    gc.set_threshold(*PYTHON_DEFAULT)
    with rollouts_running():  # and the next run starts afresh: raised, then put back
        assert gc.get_threshold() == ROLLOUT_THRESHOLDS
    assert gc.get_threshold() == PYTHON_DEFAULT

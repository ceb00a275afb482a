"""An `async def` graph node that blocks the event loop (a CPU-bound loop, time.sleep) held the rollout's
max_time_s deadline, itself a callback on that loop, and with it every rollout of slime's rollout process:
the rollout ended only when the node returned, if ever. `agentgraphs.loop_guard` stops such a node once the
loop has stood still for a whole max_time_s; its rollout fails, and the others on the loop go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from agentgraphs.context import AgentContext, Limits
from agentgraphs.node import TraceState
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.spec import AgentSpec
from agentgraphs.testing.fake_engines import FixedLatencyEngine

BLOCK_S = 20.0  # how long a blocking node would hold the loop unstopped


class State(TraceState):
    answer: str


async def busy(state: State) -> dict[str, Any]:
    until = time.monotonic() + BLOCK_S  # Python code that never awaits
    while time.monotonic() < until:
        pass
    return {"answer": "late"}


async def sleeping(state: State) -> dict[str, Any]:
    for _ in range(int(BLOCK_S / 0.1)):
        time.sleep(0.1)  # a blocking C call inside `async def`
    return {"answer": "late"}


async def polite(state: State) -> dict[str, Any]:
    await asyncio.sleep(0.05)
    return {"answer": "on time"}


def _spec(name: str, *nodes: Any) -> AgentSpec:
    def build(options: Any) -> Any:
        g = StateGraph(State, context_schema=AgentContext)
        for node in nodes:  # all from START: one node runs inline, several as LangGraph tasks of their own
            g.add_node(node.__name__, node)
            g.add_edge(START, node.__name__)
            g.add_edge(node.__name__, END)
        return g.compile(name=name)

    return AgentSpec(name=name, build_graph=build, make_input=lambda row, o: {"answer": "", "turns": []},
                     answer=lambda s: str(s.get("answer", "")), reward=lambda rin, ctx: 0.0)


def _context(max_time_s: float) -> AgentContext:
    return AgentContext(policy=FixedLatencyEngine(latency_s=0.0), limits=Limits(max_time_s=max_time_s))


@pytest.mark.parametrize("nodes", [(busy,), (sleeping,), (busy, polite)], ids=["busy", "sleeping", "parallel"])
def test_a_node_that_blocks_the_loop_is_stopped_at_max_time_s_and_its_rollout_fails(caplog: Any,
                                                                                     nodes: tuple[Any, ...]) -> None:
    async def main() -> tuple[Any, Any, float, float]:
        other_done: list[float] = []

        async def other() -> Any:  # a rollout beside it on the same loop, with a longer budget
            out = await run_rollout(_spec("other", polite), rollout_input("q"), _context(60.0))
            other_done.append(time.monotonic())
            return out

        started = time.monotonic()
        blocked, fine = await asyncio.gather(
            run_rollout(_spec("blocker", *nodes), rollout_input("q"), _context(1.0)), other())
        return blocked, fine, time.monotonic() - started, other_done[0] - started

    with caplog.at_level(logging.ERROR, logger="agentgraphs.loop_guard"):
        blocked, fine, took, _ = asyncio.run(main())
    assert blocked.status == "failed", (blocked.status, blocked.reason)
    assert took < 6, took  # stopped after max_time_s (1 s) and a probe or two, not after BLOCK_S
    assert "max_time_s" in blocked.reason, blocked.reason
    assert fine.status == "completed" and fine.answer == "on time", (fine.status, fine.reason)
    (record,) = [r for r in caplog.records if r.name == "agentgraphs.loop_guard"]  # logged once, with its stack
    said = record.getMessage()
    assert "an async graph node blocked the event loop for over 1.0 s" in said, said
    assert "make it a plain `def`" in said and "raising NodeBlockedLoop in it" in said, said
    assert nodes[0].__name__ in said and "test_node_blocks_loop.py" in said, said


def test_a_loop_that_is_only_slow_is_left_alone() -> None:
    """Blocking the loop for less than max_time_s at a time is slow, not stuck: nothing is raised."""

    async def stepwise(state: State) -> dict[str, Any]:
        for _ in range(8):
            time.sleep(0.4)  # 0.4 s steps, each under the 1 s budget...
            await asyncio.sleep(0)  # ...and the loop turns between them
        return {"answer": "slow"}

    rollout = asyncio.run(run_rollout(_spec("slow", stepwise), rollout_input("q"), _context(5.0)))
    assert rollout.status == "completed" and rollout.answer == "slow", rollout.reason

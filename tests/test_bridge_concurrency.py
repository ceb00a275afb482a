"""rl_bridge driven as slime drives it: many generate calls at once in one event loop, GRPO groups, several
configurations in one process. Each test is bounded in count and time and talks only to 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.errors import ConfigError
from agentgraphs.testing.fake_engines import FixedLatencyEngine
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import (
    SETUP_SLIME_ARGS,
    BridgeSettings,
    aclose_all,
    check_slime_args,
    clear_cache,
    get_setup,
    load_tokenizer,
    slime_concurrency,
)

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 16, "stop": None,
            "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
            "spaces_between_special_tokens": False}
TWO_TURN = "agentgraphs.testing.agents:TWO_TURN"
BOUND_S = 60.0  # a guard against a hang, not a performance bound (a loaded 2-core machine)


@pytest.fixture(autouse=True)
def _fresh(tiny_model_dir: Path) -> Any:
    load_tokenizer(str(tiny_model_dir))  # off the clock
    clear_cache()
    yield
    clear_cache()


def make_args(server: SGLangTestServer, model_dir: Path, agent: str = TWO_TURN, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(**{"agentgraph": agent, "hf_checkpoint": str(model_dir), "sglang_router_ip": "127.0.0.1",
                              "sglang_router_port": server.port, "agentgraph_max_retries": 0, "reward_key": None,
                              **extra})


def group(index: int, size: int) -> list[Sample]:
    """A GRPO group as slime's data source makes it: deep copies of one prompt, consecutive indices."""
    return [Sample(group_index=index, index=index * size + k, prompt=f"Question {index}: what is 6 * 7?",
                   label="42", metadata={"row": index}) for k in range(size)]


def test_a_setup_is_not_reused_for_args_with_other_slime_flags(tiny_model_dir: Path) -> None:
    """Two configurations in one process and loop: the second's slime flags are checked and applied, not
    those of the setup cached for the first (it was keyed by the agentgraph_* settings only)."""
    with SGLangTestServer(FixedLatencyEngine(latency_s=0.05)) as server:
        async def main() -> int:
            try:
                get_setup(make_args(server, tiny_model_dir))
                with pytest.raises(ConfigError, match="rollout-top-p"):
                    get_setup(make_args(server, tiny_model_dir, rollout_top_p=0.9))
                with pytest.raises(ConfigError, match="apply-chat-template"):
                    get_setup(make_args(server, tiny_model_dir, apply_chat_template=True))
                # slime's client keeps 2 requests in flight here: so does this setup's engine
                narrow = make_args(server, tiny_model_dir, sglang_server_concurrency=2, rollout_num_gpus=1)
                out = await asyncio.wait_for(asyncio.gather(
                    *(rl_bridge.generate(narrow, s, dict(SAMPLING)) for s in group(0, 8))), BOUND_S)
                assert [s.status for s in out] == [Sample.Status.COMPLETED] * 8
                return server.stats.max_in_flight
            finally:
                await aclose_all()

        assert asyncio.run(main()) == 2


def test_the_setup_key_names_every_slime_flag_the_setup_reads(tiny_model_dir: Path) -> None:
    """SETUP_SLIME_ARGS (the cache key's slime part) holds every attribute check_slime_args and
    slime_concurrency read: a flag added there without the key would bring the stale setup back."""
    read: set[str] = set()

    class Args(SimpleNamespace):
        def __getattribute__(self, name: str) -> Any:
            if not name.startswith("__"):
                read.add(name)
            return super().__getattribute__(name)

    from agentgraphs.spec import load_spec

    args = Args(agentgraph=TWO_TURN, hf_checkpoint=str(tiny_model_dir), sglang_router_ip="127.0.0.1",
                sglang_router_port=1, label_key="label", custom_convert_samples_to_train_data_path="rl_bridge.convert",
                sglang_server_concurrency=4, rollout_num_gpus=2, rollout_num_gpus_per_engine=1,
                agentgraph_return_list=True)
    settings = BridgeSettings(agentgraph=TWO_TURN, agentgraph_return_list=True)
    read.clear()
    check_slime_args(args, load_spec(TWO_TURN), settings)
    slime_concurrency(args)
    assert read and read <= set(SETUP_SLIME_ARGS), sorted(read - set(SETUP_SLIME_ARGS))


async def _tool_times_out(state: Any, runtime: Any) -> dict[str, Any]:
    # a node's own timeout (a tool under asyncio.wait_for): TimeoutError, as asyncio.TimeoutError is since 3.11
    raise TimeoutError("the search tool did not answer within 5 s")


def _tool_timeout_graph(options: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    from agentgraphs.context import AgentContext
    from agentgraphs.testing.agents import TwoTurnState, solve

    g = StateGraph(TwoTurnState, context_schema=AgentContext)
    g.add_node("solve", solve)
    g.add_node("search", _tool_times_out)
    g.add_edge(START, "solve")
    g.add_edge("solve", "search")
    g.add_edge("search", END)
    return g.compile(name="tool_timeout")


def _tool_timeout_spec() -> Any:
    from dataclasses import replace

    from agentgraphs.testing.agents import TWO_TURN as spec

    return replace(spec, name="tool_timeout", build_graph=_tool_timeout_graph, _graphs={})


TOOL_TIMEOUT = _tool_timeout_spec()


def _generate_one(args: Any) -> Sample:
    """rl_bridge.generate on one sample, bounded by BOUND_S, its engines closed after."""
    async def main() -> Sample:
        try:
            return await asyncio.wait_for(rl_bridge.generate(args, group(0, 1)[0], dict(SAMPLING)), BOUND_S)
        finally:
            await aclose_all()

    return asyncio.run(main())


@pytest.mark.parametrize("max_time_s", [None, 600.0])
def test_a_timeout_raised_by_a_node_is_not_reported_as_the_rollout_deadline(tiny_model_dir: Path,
                                                                            max_time_s: float | None) -> None:
    """A node that raises TimeoutError failed on its own: the reason names it, not max_time_s (which was
    reported as exceeded even when no deadline was set)."""
    with SGLangTestServer(FixedLatencyEngine(latency_s=0.0)) as server:
        args = make_args(server, tiny_model_dir, "tests.test_bridge_concurrency:TOOL_TIMEOUT",
                         **({"agentgraph_max_time_s": max_time_s} if max_time_s else {}))
        s = _generate_one(args)
    assert s.status == Sample.Status.FAILED
    reason = s.metadata["status_reason"]
    assert "max_time_s" not in reason, reason
    assert reason.startswith("graph raised TimeoutError: the search tool did not answer"), reason


def test_the_rollout_deadline_is_reported_as_such_and_stops_the_generation(tiny_model_dir: Path) -> None:
    with SGLangTestServer(FixedLatencyEngine(latency_s=3600.0)) as server:
        args = make_args(server, tiny_model_dir, agentgraph_max_time_s=0.5)
        s = _generate_one(args)
        assert s.status == Sample.Status.FAILED
        assert s.metadata["status_reason"] == "rollout exceeded max_time_s=0.5"
        assert sum(server.stats.aborts.values()) == 1 and not server.in_flight_rids()


def test_every_sibling_of_an_unscorable_trajectory_is_failed_not_only_the_first(tiny_model_dir: Path,
                                                                               monkeypatch: Any) -> None:
    """List mode: slime scores a trajectory's siblings in one reward_func call. A reward that cannot be
    computed failed the first sibling only; the others were handed the cached 0.0 with their loss masks on,
    so they trained on a made-up reward."""
    from agentgraphs.testing import agents
    from agentgraphs.testing.slime_sample import SampleV03

    with SGLangTestServer(FixedLatencyEngine(latency_s=0.0)) as server:
        args = make_args(server, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN_PER_TURN",
                         agentgraph_return_list=True)

        async def main() -> tuple[list[Any], list[Any]]:
            try:
                sample = SampleV03(group_index=0, index=0, prompt="Question 0: what is 6 * 7?", label="42")
                sibs = await asyncio.wait_for(rl_bridge.generate(args, sample, dict(SAMPLING)), BOUND_S)
                for s in sibs:
                    s.reward = None  # slime scores what has no reward
                monkeypatch.setattr(agents.TWO_TURN_PER_TURN, "reward", lambda rin, ctx: 1 / 0)
                return sibs, await rl_bridge.reward_func(args, sibs)
            finally:
                await aclose_all()

        sibs, rewards = asyncio.run(main())
    assert len(sibs) == 2 and rewards == [0.0, 0.0]
    for s in sibs:
        assert s.status == SampleV03.Status.FAILED and s.remove_sample
        assert not any(s.loss_mask) and not any(s.rollout_log_probs)
        assert "ZeroDivisionError" in s.metadata["status_reason"]

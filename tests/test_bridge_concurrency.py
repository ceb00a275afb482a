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

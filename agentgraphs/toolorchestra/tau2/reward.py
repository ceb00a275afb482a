"""The reward of tau^2 mode: tau^2's own evaluation of the finished conversation.

`evaluate_simulation` with the evaluation type of the option `evaluation_type` (`all` by default): 1.0 when
the final database matches the gold actions' database and the required information was communicated
(airline, retail), or when the environment assertions and gold user actions hold (telecom); 0.0 otherwise,
and for an episode cut by max_steps, max_errors or a failing user simulator.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ...context import AgentContext
from ...errors import ConfigError
from ...spec import RewardInput, reward_options
from . import bench
from .graph import Tau2Options

__all__ = ["reward"]


async def reward(rin: RewardInput, ctx: AgentContext | None) -> dict[str, Any]:
    """tau^2's own evaluation of the episode in `rin["answer"]` (off the event loop: it rebuilds databases).

    The evaluation type is the resolved option `evaluation_type` (`all` by default).
    """
    try:
        record = json.loads(rin["answer"])
    except ValueError:
        raise ConfigError("the answer is not a tau^2 episode record (JSON); was it produced by this spec?") from None
    kind = reward_options(rin, Tau2Options, "toolorchestra-tau2").evaluation_type
    return await asyncio.to_thread(bench.evaluate_episode, record, kind)

"""The Engine protocol and the records every engine returns.

An engine turns prompt token ids into a Completion: the exact output token ids and the log-prob
of each, as sampled. Nothing here knows about chat templates or LangGraph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length", "abort"]

# The largest log-prob accepted from an engine. A log-prob is <= 0 in exact arithmetic; servers compute
# log-softmax in floating point and may return a hair above 0 for a near-certain token. Every check of
# a recorded log-prob (the engines' response parsing, the trace invariants) uses this one bound.
MAX_LOGPROB = 1e-4


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings, named as SGLang names them.

    `to_sglang()` emits only keys SGLang documents, so a 0.5.x server never answers 400.

    >>> SamplingParams(temperature=0.7, max_new_tokens=16).to_sglang()["temperature"]
    0.7
    """

    max_new_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    sampling_seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.temperature >= 0 or math.isinf(self.temperature):  # `not >=`: nan fails it too
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (self.top_k == -1 or self.top_k >= 1):
            raise ValueError(f"top_k must be -1 (off) or >= 1, as SGLang accepts it, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] (0 = off), got {self.min_p}")

    def replace(self, **changes: object) -> "SamplingParams":
        import dataclasses

        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_sglang(self) -> dict[str, object]:
        out: dict[str, object] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "ignore_eos": self.ignore_eos,
            # keep the stop token in the text as well as in the ids; detokenise specials faithfully
            "no_stop_trim": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
        }
        if self.stop:
            out["stop"] = list(self.stop)
        if self.stop_token_ids:
            out["stop_token_ids"] = list(self.stop_token_ids)
        if self.sampling_seed is not None:
            out["sampling_seed"] = self.sampling_seed
        return out

    @classmethod
    def from_slime(cls, params: dict[str, object]) -> "SamplingParams":
        """Build from the `sampling_params` dict slime hands a custom generate function."""
        known = {
            "max_new_tokens", "temperature", "top_p", "top_k", "min_p",
            "stop", "stop_token_ids", "ignore_eos", "sampling_seed",
        }
        kw: dict[str, object] = {}
        for key in known & params.keys():
            value = params[key]
            if value is None:
                continue
            if key in ("stop", "stop_token_ids"):
                value = tuple(value) if isinstance(value, (list, tuple)) else (value,)  # type: ignore[arg-type]
            kw[key] = value
        return cls(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Completion:
    """What one engine call returned. `token_ids[i]` was sampled with log-prob `logprobs[i]`."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    text: str = ""
    prompt_tokens: int = 0
    weight_version: str | None = None
    rid: str = ""
    latency_s: float = 0.0
    retries: int = 0
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            from ..errors import EngineProtocolError

            raise EngineProtocolError(
                f"completion has {len(self.token_ids)} token ids but {len(self.logprobs)} log-probs"
            )


@runtime_checkable
class Engine(Protocol):
    """Anything that generates token ids from token ids.

    `name` identifies the engine in traces (e.g. "sglang:http://host:30000" or "hf:/models/tiny").
    """

    name: str

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion: ...

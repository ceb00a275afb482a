"""A stand-in for slime's `Sample` (slime/utils/types.py, v0.2.2) with its exact field list and enum.

rl_bridge never imports slime: it duck-types the object slime hands it. Tests use this class so the
bridge is exercised against the real field names, defaults and Status values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class SpecInfo:
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0


@dataclass
class PrefixCacheInfo:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0


@dataclass
class Sample:
    """Field-for-field the v0.2.2 slime Sample (order and defaults kept)."""

    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: Any = None
    multimodal_train_inputs: Any = None
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_routed_experts: Any = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    generate_function_path: str | None = None
    train_metadata: dict[str, Any] | None = None
    non_generation_time: float = 0.0
    spec_info: SpecInfo = field(default_factory=SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)


@dataclass
class SampleV03(Sample):
    """The v0.3.x additions, for tests of the `list[Sample]` layout and the v0.3 converter keys."""

    rollout_id: int | None = None
    session_id: str | None = None
    teacher_log_probs: list[float] | None = None
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    custom_rm_path: str | None = None

    def append_response_tokens(
        self,
        args: Any = None,
        *,
        tokens: list[int],
        log_probs: list[float],
        trainable: bool = True,
        meta_info: dict[str, Any] | None = None,
        text: str | None = None,
    ) -> None:
        self.tokens = list(self.tokens) + list(tokens)
        self.response_length += len(tokens)
        self.loss_mask = list(self.loss_mask or []) + [1 if trainable else 0] * len(tokens)
        lp = list(log_probs) if trainable else [0.0] * len(tokens)
        self.rollout_log_probs = list(self.rollout_log_probs or []) + lp
        if text is not None:
            self.response += text


@dataclass
class SampleV030(Sample):
    """slime v0.3.0's Sample as the bridge sees it: siblings share `group_id` (v0.3.1 renamed it back to
    rollout_id); reading `rollout_id` raises AttributeError and assigning it sets group_id."""

    group_id: int | None = None

    def __getattribute__(self, name: str) -> Any:
        if name == "rollout_id":
            raise AttributeError("Sample.rollout_id is deprecated and write-only; use Sample.group_id instead.")
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, "group_id" if name == "rollout_id" else name, value)

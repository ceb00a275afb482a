"""Engines: the Engine protocol, its implementations and the factory that builds them from strings.

- `SGLangEngine` (`sglang:URL`): SGLang's native /generate, token-in/token-out; the policy in training.
- `HFEngine` (`hf:DIR`): a transformers model in-process; the embedded default for debugging.
- `OpenAIChatEngine` (`openai:URL#MODEL`): an OpenAI-compatible chat endpoint for helper models
  (judges, executors, experts); it records text, never trainable token ids.

Implementations load lazily: importing this package costs neither httpx nor torch.

>>> from agentgraphs.engines import SamplingParams
>>> SamplingParams(temperature=0.0).temperature
0.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import MAX_LOGPROB, Completion, Engine, FinishReason, SamplingParams
from .factory import make_engine, register_model_alias, resolve_model_dir

if TYPE_CHECKING:
    from .hf import HFEngine
    from .openai import OpenAIChatEngine
    from .sglang import SGLangEngine

_LAZY = {"HFEngine": ".hf", "SGLangEngine": ".sglang", "OpenAIChatEngine": ".openai"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentgraphs.engines' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "MAX_LOGPROB",
    "Completion",
    "Engine",
    "FinishReason",
    "HFEngine",
    "OpenAIChatEngine",
    "SGLangEngine",
    "SamplingParams",
    "make_engine",
    "register_model_alias",
    "resolve_model_dir",
]

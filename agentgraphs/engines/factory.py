"""Engines from short strings, one grammar everywhere (CLI flags, YAML, a run's JSON context, Studio).

    hf:DIR          a transformers model in-process (HFEngine); DIR a local model directory
    hf:ALIAS        a named local model registered by an entry point (`hf:tiny`: the testing kit's tiny
                    model, registered by the CLI, the demo and the Studio graphs)
    sglang:URL      SGLang's native /generate over HTTP (SGLangEngine), the policy in training
    openai:URL#MODEL  an OpenAI-compatible chat endpoint for helper models (judges, experts); text only,
                    never trained (OpenAIChatEngine)
"""

from __future__ import annotations

import os
from typing import Callable

from ..errors import ConfigError
from .base import Engine

_MODEL_ALIASES: dict[str, Callable[[], str]] = {}
GRAMMAR = "'hf:MODEL_DIR', 'sglang:http://HOST:PORT' or 'openai:http://HOST:PORT/v1#MODEL'"


def register_model_alias(name: str, resolve: Callable[[], str]) -> None:
    """Let `hf:NAME` stand for the local directory `resolve()` returns (called on first use).

    >>> register_model_alias("example-model", lambda: "/models/example")
    >>> resolve_model_dir("example-model")
    '/models/example'
    """
    _MODEL_ALIASES[name] = resolve


def resolve_model_dir(target: str) -> str:
    """An `hf:` target: a registered alias's directory, else the path itself."""
    resolve = _MODEL_ALIASES.get(target)
    return str(resolve()) if resolve is not None else target


def make_engine(spec: str, *, request_timeout_s: float | None = None, max_retries: int | None = None,
                **kwargs: object) -> Engine:
    """Build an engine from a short string (see the module docstring for the grammar).

    `request_timeout_s` and `max_retries` set an HTTP engine's (`sglang:`, `openai:`) per-request timeout
    and retry count, the same for the policy and every helper (None: the engine's defaults); an
    in-process `hf:` engine sends no requests, so they do not apply to it. `hf:` needs an existing local
    directory (ConfigError otherwise, before transformers reads a missing path as a hub repo id and fails
    obscurely).

    >>> make_engine("sglang:http://127.0.0.1:30000").name
    'sglang:http://127.0.0.1:30000'
    >>> make_engine("openai:http://127.0.0.1:8001/v1#judge", request_timeout_s=30, max_retries=1).max_retries
    1
    """
    kind, sep, target = spec.partition(":")
    if not sep or not target:
        raise ConfigError(f"engine {spec!r}: expected {GRAMMAR}")
    if kind in ("sglang", "openai"):
        if request_timeout_s is not None:
            kwargs["timeout"] = float(request_timeout_s)
        if max_retries is not None:
            kwargs["max_retries"] = int(max_retries)
    if kind == "sglang":
        from .sglang import SGLangEngine

        return SGLangEngine(target, **kwargs)  # type: ignore[arg-type]
    if kind == "openai":
        from .openai import OpenAIChatEngine

        return OpenAIChatEngine.from_spec(target, **kwargs)  # type: ignore[arg-type]
    if kind == "hf":
        path = resolve_model_dir(target)
        if not os.path.isdir(path):
            problem = "is not a directory" if os.path.exists(path) else "does not exist"
            known = f"; registered names: {sorted(_MODEL_ALIASES)}" if _MODEL_ALIASES else ""
            raise ConfigError(f"engine {spec!r}: model directory {path!r} {problem}; hf: takes a local HF model "
                              f"directory (config.json, weights, tokenizer){known}")
        from .hf import HFEngine

        return HFEngine.from_dir(path, **kwargs)  # type: ignore[arg-type]
    raise ConfigError(f"engine {spec!r}: unknown kind {kind!r}; use {GRAMMAR}")

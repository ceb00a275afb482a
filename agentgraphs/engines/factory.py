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


def make_engine(spec: str, **kwargs: object) -> Engine:
    """Build an engine from a short string (see the module docstring for the grammar).

    `hf:` needs an existing local directory (ConfigError otherwise, before transformers reads a missing
    path as a hub repo id and fails obscurely).

    >>> make_engine("sglang:http://127.0.0.1:30000").name
    'sglang:http://127.0.0.1:30000'
    """
    kind, sep, target = spec.partition(":")
    if not sep or not target:
        raise ConfigError(f"engine {spec!r}: expected {GRAMMAR}")
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

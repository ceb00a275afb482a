"""Shared pytest fixtures. Keep each one small and documented; heavy ones are session-scoped."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def agentgraphs_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point AGENTGRAPHS_CACHE at a per-session temp dir, unless the caller already set one.

    Tests then never read or write ~/.cache, and a fresh machine behaves like a warm one would.
    """
    from agentgraphs.testing.tiny_model import register_tiny_alias

    register_tiny_alias()  # as the CLI / demo / Studio entry points do: `hf:tiny` names the tiny model
    preset = os.environ.get("AGENTGRAPHS_CACHE")
    if preset:
        yield Path(preset)
        return
    path = tmp_path_factory.mktemp("agentgraphs-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTGRAPHS_CACHE", str(path))
        yield path


@pytest.fixture(scope="session")
def tiny_model_dir(agentgraphs_cache: Path) -> Path:
    """A tiny random Qwen2 model with the real Qwen2.5 tokenizer and chat template (built once)."""
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    return ensure_tiny_model(template="qwen2.5")


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir: Path):  # -> agentgraphs.engines.hf.HFEngine
    """An HFEngine on the tiny model, on CPU. Shared: do not mutate it; wrap its model instead."""
    from agentgraphs.engines.hf import HFEngine

    return HFEngine.from_dir(tiny_model_dir, device="cpu", seed=0)


@pytest.fixture(scope="session")
def qwen25(tiny_model_dir: Path):  # -> a transformers fast tokenizer
    """The tiny model's tokenizer: the real Qwen2.5 vocabulary and chat template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def qwen3(agentgraphs_cache: Path):  # -> a transformers fast tokenizer
    """The Qwen3 variant: <think>/<tool_response> tokens and Qwen3's chat template."""
    from transformers import AutoTokenizer

    from agentgraphs.testing.tiny_model import ensure_tiny_model

    return AutoTokenizer.from_pretrained(ensure_tiny_model(template="qwen3"))


@pytest.fixture()
def server(tiny_engine: Any) -> Iterator[Any]:  # -> agentgraphs.testing.server.SGLangTestServer
    """The SGLang-contract server over the tiny model on a free port (it applies stop strings and stop ids as
    SGLang does); `server.recorder.calls` holds every completion it returned. rl_bridge's cached setups are
    cleared after the test. A module whose tests need another server defines its own `server`."""
    from agentgraphs.testing.server import SGLangTestServer
    from rl_bridge.setup import clear_cache
    from tests.test_multiturn import RecordingEngine

    recorder = RecordingEngine(tiny_engine)
    with SGLangTestServer(recorder, port=0) as srv:
        srv.recorder = recorder  # type: ignore[attr-defined]
        yield srv
    clear_cache()

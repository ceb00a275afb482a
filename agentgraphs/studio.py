"""Graphs for `langgraph dev` / LangGraph Studio: every registered agent, built lazily.

langgraph.json names each graph as `./agentgraphs/studio.py:NAME`. This module has a graph factory for
every name `agentgraphs.spec.registered_names()` returns, plus `two_turn` (the small test agent); the file
itself is generated from the registry (`langgraph_config`, `agentgraphs langgraph-json --out langgraph.json`),
so a new agent registers its spec and nothing here changes (tests/test_studio.py keeps the file current).
The server calls a factory with the run's config: method options go in the assistant's configurable as
`{"options": {"max_chunks": 4}}` (defaults otherwise); each distinct set is compiled once (AgentSpec.graph).
ToolOrchestra's experts are the context's engines named search-expert / code-expert / answer-expert;
AgentFlow's helper roles use `engines["helper"]` when the context names one, else the policy.

Each graph is compiled WITHOUT a checkpointer (the server brings persistence). Give the run a context such
as `{"policy": "sglang:http://127.0.0.1:30000", "tokenizer": "/models/Qwen2.5-7B-Instruct"}`; with no
context the engine named by AGENTGRAPHS_ENGINE is used (`hf:tiny`, the embedded tiny model, by default).
Every Turn (ids, log-probs, masks-to-be) is in the thread state, so Studio shows and forks it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from agentgraphs.spec import load_spec, registered_names
from agentgraphs.testing.agents import TWO_TURN
from agentgraphs.testing.tiny_model import register_tiny_alias

register_tiny_alias()
os.environ.setdefault("AGENTGRAPHS_ENGINE", "hf:tiny")

two_turn = TWO_TURN.graph()


def _factory(name: str) -> Callable[[Any], Any]:
    def graph(config: Any = None) -> Any:
        options = ((config or {}).get("configurable") or {}).get("options")
        return load_spec(name).graph(options)

    graph.__name__ = graph.__qualname__ = name
    graph.__doc__ = f"The {name} graph for a run's config (configurable.options: the method options)."
    return graph


def graph_names() -> list[str]:
    """Every graph this module serves: the registered agents and `two_turn`."""
    return [*registered_names(), "two_turn"]


# graphs langgraph.json serves besides the registered agents: the test agent and the chat-model example
EXTRA_GRAPHS = {"two_turn": "./agentgraphs/studio.py:two_turn", "react_agent": "./examples/react_agent.py:graph"}


def langgraph_config() -> dict[str, Any]:
    """The contents of langgraph.json: every registered agent served by this module, plus EXTRA_GRAPHS.

    >>> langgraph_config()["graphs"]["memagent"]
    './agentgraphs/studio.py:memagent'
    """
    graphs = {name: f"./agentgraphs/studio.py:{name}" for name in registered_names()}
    return {"dependencies": ["."], "graphs": {**graphs, **EXTRA_GRAPHS}, "env": {}}


def langgraph_json() -> str:
    """langgraph.json as written to disk (`agentgraphs langgraph-json --out langgraph.json`)."""
    return json.dumps(langgraph_config(), indent=2) + "\n"


def write_langgraph_json(path: str | Path) -> Path:
    """Write `langgraph_json()` to `path`; returns the path."""
    out = Path(path)
    out.write_text(langgraph_json(), encoding="utf-8")
    return out


for _name in registered_names():
    globals()[_name] = _factory(_name)

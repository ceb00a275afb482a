"""Graphs for `langgraph dev` / LangGraph Studio: every registered agent, built lazily.

langgraph.json names each graph as `./agentgraphs/studio.py:NAME`. This module has a graph factory for
every name `agentgraphs.spec.registered_names()` returns, plus `two_turn` (the small test agent), so a new
agent needs one line in langgraph.json (tests/test_studio.py fails while one is missing) and nothing here.
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

import os
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


for _name in registered_names():
    globals()[_name] = _factory(_name)

"""Graphs for `langgraph dev` / LangGraph Studio (listed in langgraph.json).

Each is compiled WITHOUT a checkpointer (the server brings persistence). Give the run a context such
as `{"policy": "sglang:http://127.0.0.1:30000", "tokenizer": "/models/Qwen2.5-7B-Instruct"}`; with no
context the engine named by AGENTGRAPHS_ENGINE is used (`hf:tiny`, the embedded tiny model, by default).
Every Turn (ids, log-probs, masks-to-be) is in the thread state, so Studio shows and forks it.
"""

from __future__ import annotations

import os

from agentgraphs.agentflow.graph import build_graph as _agentflow
from agentgraphs.memagent.graph import build_graph as _memagent
from agentgraphs.toolorchestra.graph import build_graph as _toolorchestra
from agentgraphs.testing.agents import TWO_TURN
from agentgraphs.testing.tiny_model import register_tiny_alias

register_tiny_alias()
os.environ.setdefault("AGENTGRAPHS_ENGINE", "hf:tiny")

memagent = _memagent()
toolorchestra = _toolorchestra()  # experts: engines named search-expert / code-expert / answer-expert
agentflow = _agentflow()  # helper roles use context.engines["helper"] when given, else the policy
two_turn = TWO_TURN.build_graph({})

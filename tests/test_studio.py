"""The graphs listed in langgraph.json load the way `langgraph dev` loads them (by file path) and run
with a plain-JSON context (LangGraph coerces a dict into AgentContext); the file is the one generated from
the registry of agents."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_graph(entry: str):
    path, _, attr = entry.partition(":")
    spec = importlib.util.spec_from_file_location("studio_under_test", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["studio_under_test"] = module
    spec.loader.exec_module(module)
    return getattr(module, attr)


# the nodes of each built-in agent, as its method describes them (written here, not read from a graph)
BUILTIN_NODES = {
    "memagent": {"prepare", "memory_update", "final_answer"},
    "agentflow": {"analyze_query", "plan_next_step", "generate_command", "execute", "update_memory", "verify",
                  "final_output"},
    "toolorchestra": {"orchestrator", "search", "enhance_reasoning", "answer"},
    "toolorchestra-tau2": {"start", "user_simulator", "orchestrator", "environment", "finish"},
}


def _nodes(graph) -> set[str]:
    return set(graph.get_graph().nodes) - {"__start__", "__end__"}


def test_langgraph_json_serves_every_registered_agent() -> None:
    from agentgraphs.spec import load_spec, registered_names

    config = json.loads((ROOT / "langgraph.json").read_text())
    assert set(BUILTIN_NODES) <= set(registered_names())
    assert {*registered_names(), "two_turn"} <= set(config["graphs"]), "regenerate langgraph.json"
    for name in registered_names():
        assert config["graphs"][name] == f"./agentgraphs/studio.py:{name}"
        factory = load_graph(config["graphs"][name])  # a factory of the run's config, as langgraph dev calls it
        graph = factory({"configurable": {}})
        spec = load_spec(name)  # an agent registered by another package: its graph built afresh, not the cache
        expected = BUILTIN_NODES.get(name) or _nodes(spec.build_graph(spec.default_options()))
        assert _nodes(graph) == expected, name


def test_langgraph_json_is_generated_from_the_registry(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentgraphs.cli import app
    from agentgraphs.studio import langgraph_json

    assert (ROOT / "langgraph.json").read_text() == langgraph_json(), \
        "langgraph.json is stale: agentgraphs langgraph-json --out langgraph.json"
    result = CliRunner().invoke(app, ["langgraph-json", "--out", str(tmp_path / "langgraph.json")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "langgraph.json").read_text() == langgraph_json()
    graphs = json.loads(CliRunner().invoke(app, ["langgraph-json"]).output)["graphs"]
    assert {**{name: f"./agentgraphs/studio.py:{name}" for name in BUILTIN_NODES},
            "react_agent": "./examples/react_agent.py:graph"}.items() <= graphs.items()


def test_langgraph_json_graphs_run_with_a_json_context(tiny_model_dir: Path) -> None:
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert {"memagent", "agentflow", "toolorchestra", "two_turn", "react_agent"} <= set(config["graphs"])
    graph = load_graph(config["graphs"]["two_turn"])
    context = {"policy": f"hf:{tiny_model_dir}", "sampling": {"max_new_tokens": 4, "temperature": 0.7}}
    final = asyncio.run(graph.ainvoke({"question": "2+2?", "turns": []}, {"recursion_limit": 10},
                                      context=context))
    assert [t["node"] for t in final["turns"]] == ["solve", "check"]
    assert all(t["temperature"] == 0.7 and len(t["output_ids"]) <= 4 for t in final["turns"])
    memagent = load_graph(config["graphs"]["memagent"])({"configurable": {"options": {"max_chunks": 2}}})
    assert "memory_update" in memagent.get_graph().nodes
    from agentgraphs.memagent import SPEC

    assert memagent is SPEC.graph({"max_chunks": 2})
    toolorchestra = load_graph(config["graphs"]["toolorchestra"])({})
    assert {"orchestrator", "search", "enhance_reasoning", "answer"} <= set(toolorchestra.get_graph().nodes)
    # AgentFlow with a JSON context and no helper engine: every role runs on the policy; the seed's variant
    # (the default) trains the planner's calls, the query analysis and the steps
    agentflow = load_graph(config["graphs"]["agentflow"])({})
    final = asyncio.run(agentflow.ainvoke({"question": "2+2?", "turns": []}, {"recursion_limit": 100},
                                          context=context))
    nodes = [t["node"] for t in final["turns"]]
    assert nodes[0] == "analyze_query" and nodes[-1] == "final_output" and "plan_next_step" in nodes
    assert {t["node"] for t in final["turns"] if t["trainable"]} == {"analyze_query", "plan_next_step"}


def test_no_context_uses_the_embedded_default(monkeypatch, tiny_model_dir: Path) -> None:
    from agentgraphs.context import AgentContext, context_of

    monkeypatch.setenv("AGENTGRAPHS_ENGINE", f"hf:{tiny_model_dir}")
    ctx = context_of(None)
    assert isinstance(ctx, AgentContext) and ctx.policy.name == f"hf:{tiny_model_dir}"
    assert ctx.tokenizer is ctx.policy.tokenizer

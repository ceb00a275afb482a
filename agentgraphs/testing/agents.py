"""Small agents for testing a setup end to end (yours or ours): two policy turns in one conversation.

    agentgraph: agentgraphs.testing.agents:TWO_TURN            # concat layout: one sequence
    agentgraph: agentgraphs.testing.agents:TWO_TURN_PER_TURN   # per_turn layout: two sequences
    agentgraph: agentgraphs.testing.agents:FAILING             # a node that raises (failure paths)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from langgraph.graph import END, START, StateGraph

from ..errors import InputError
from ..answers import last_boxed, normalize_math
from ..node import AgentContext, TraceState, call_llm
from ..spec import AgentSpec, RewardInput, RolloutInput


class TwoTurnState(TraceState):
    question: str
    answer: str


async def solve(state: TwoTurnState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="solve", conversation="main",
                         messages=[{"role": "user", "content": state["question"]}])
    return out.update


async def check(state: TwoTurnState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="check", conversation="main",
                         messages=[{"role": "user", "content": "Check your answer and put it in \\boxed{}."}])
    return {"answer": out.text, **out.update}


async def explode(state: TwoTurnState, runtime: Any) -> dict[str, Any]:
    raise RuntimeError("this node always fails (test agent)")


def _graph(options: Mapping[str, Any], failing: bool = False) -> Any:
    g = StateGraph(TwoTurnState, context_schema=AgentContext)
    g.add_node("solve", solve)
    g.add_node("check", explode if failing else check)
    g.add_edge(START, "solve")
    g.add_edge("solve", "check")
    g.add_edge("check", END)
    return g.compile(name="two_turn")


def make_input(row: RolloutInput, options: Mapping[str, Any]) -> dict[str, Any]:
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("prompt", "must be a non-empty string", "put the question under --input-key")
    return {"question": prompt, "answer": "", "turns": []}


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    boxed = last_boxed(rin["answer"])
    gold = rin["label"]
    return float(boxed is not None and gold is not None and normalize_math(boxed) == normalize_math(str(gold)))


TWO_TURN = AgentSpec(name="two_turn", build_graph=_graph, make_input=make_input,
                     answer=lambda s: str(s.get("answer", "")), reward=reward, layout="concat",
                     description="solve, then self-check in the same conversation")
TWO_TURN_PER_TURN = replace(TWO_TURN, name="two_turn_per_turn", layout="per_turn", _graphs={})
FAILING = replace(TWO_TURN, name="failing", build_graph=lambda o: _graph(o, failing=True), _graphs={})

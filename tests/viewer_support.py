"""A user's own agent for the viewer and check tests: a tool result (an observation) between two policy turns.

    solve (LLM) -> calculator (plain node) -> answer (LLM, same conversation, sees a `tool` message)

With the concat layout its one training sequence holds: prompt | trained | glue + observation + glue | trained.
"""

from __future__ import annotations

from typing import Any, Mapping

from langgraph.graph import END, START, StateGraph

from agentgraphs.answers import boxed_match
from agentgraphs.node import AgentContext, TraceState, call_llm
from agentgraphs.spec import AgentSpec, RewardInput, RolloutInput

TOOL_RESULT = "calculator: 6 * 7 = 42"


class ToolState(TraceState):
    question: str
    observation: str
    answer: str


async def solve(state: ToolState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="solve", conversation="main",
                         messages=[{"role": "user", "content": state["question"]}])
    return out.update


async def calculator(state: ToolState, runtime: Any) -> dict[str, Any]:
    return {"observation": TOOL_RESULT}


async def answer(state: ToolState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="answer", conversation="main",
                         messages=[{"role": "tool", "content": state["observation"]}])
    return {"answer": out.text, **out.update}


def build_graph(options: Any = None) -> Any:
    g = StateGraph(ToolState, context_schema=AgentContext)
    g.add_node("solve", solve)
    g.add_node("calculator", calculator)
    g.add_node("answer", answer)
    g.add_edge(START, "solve")
    g.add_edge("solve", "calculator")
    g.add_edge("calculator", "answer")
    g.add_edge("answer", END)
    return g.compile(name="tool_agent")


def make_input(row: RolloutInput, options: Mapping[str, Any]) -> dict[str, Any]:
    return {"question": str(row["prompt"]), "observation": "", "answer": "", "turns": []}


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    return boxed_match(rin["answer"], rin["label"])


TOOL_AGENT = AgentSpec(name="tool_agent", build_graph=build_graph, make_input=make_input,
                       answer=lambda s: str(s.get("answer", "")), reward=reward, layout="concat",
                       description="solve, call a calculator, answer from its result")

"""Users' own agents for the viewer and check tests.

TOOL_AGENT: a tool result (an observation) between two policy turns.

    solve (LLM) -> calculator (plain node) -> answer (LLM, same conversation, sees a `tool` message)

With the concat layout its one training sequence holds: prompt | trained | glue + observation + glue | trained.
CRITIQUE_AGENT follows a trained turn with an untrained one in the same conversation (per_turn);
TWO_TEMPERATURE_AGENT samples its two turns at two temperatures (per_turn).
"""

from __future__ import annotations

from typing import Any, Mapping

from langgraph.graph import END, START, StateGraph

from agentgraphs.answers import boxed_match
from agentgraphs.context import AgentContext
from agentgraphs.node import TraceState, call_llm
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


def _solve_calculate_answer(name: str, solve_node: Any, answer_node: Any) -> Any:
    """solve -> calculator -> answer, with the given solve and answer nodes."""
    g = StateGraph(ToolState, context_schema=AgentContext)
    g.add_node("solve", solve_node)
    g.add_node("calculator", calculator)
    g.add_node("answer", answer_node)
    g.add_edge(START, "solve")
    g.add_edge("solve", "calculator")
    g.add_edge("calculator", "answer")
    g.add_edge("answer", END)
    return g.compile(name=name)


def build_graph(options: Any = None) -> Any:
    return _solve_calculate_answer("tool_agent", solve, answer)


def make_input(row: RolloutInput, options: Mapping[str, Any]) -> dict[str, Any]:
    return {"question": str(row["prompt"]), "observation": "", "answer": "", "turns": []}


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    return boxed_match(rin["answer"], rin["label"])


TOOL_AGENT = AgentSpec(name="tool_agent", build_graph=build_graph, make_input=make_input,
                       answer=lambda s: str(s.get("answer", "")), reward=reward, layout="concat",
                       description="solve, call a calculator, answer from its result")


# ------------------------------------------------------------------------------------------------------------
# solve (trained) -> critique (same conversation, not trained), per_turn: the critique's prompt holds the
# trained solve output
async def critique(state: ToolState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="critique", conversation="main", trainable=False,
                         messages=[{"role": "user", "content": "Check your answer."}])
    return {"answer": out.text, **out.update}


def build_critique_graph(options: Any = None) -> Any:
    g = StateGraph(ToolState, context_schema=AgentContext)
    g.add_node("solve", solve)
    g.add_node("critique", critique)
    g.add_edge(START, "solve")
    g.add_edge("solve", "critique")
    g.add_edge("critique", END)
    return g.compile(name="critique_agent")


CRITIQUE_AGENT = AgentSpec(name="critique_agent", build_graph=build_critique_graph, make_input=make_input,
                           answer=lambda s: str(s.get("answer", "")), reward=reward, layout="per_turn",
                           description="solve (trained), then an untrained critique in the same conversation")


# ------------------------------------------------------------------------------------------------------------
# two temperatures in one rollout: solve sampled at T=0.5, answer at T=1.3 (per_turn: one sequence each)
SOLVE_T, ANSWER_T = 0.5, 1.3


async def solve_cool(state: ToolState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="solve", conversation="main", temperature=SOLVE_T,
                         messages=[{"role": "user", "content": state["question"]}])
    return out.update


async def answer_hot(state: ToolState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="answer", conversation="main", temperature=ANSWER_T,
                         messages=[{"role": "tool", "content": state["observation"]}])
    return {"answer": out.text, **out.update}


def build_two_temperature_graph(options: Any = None) -> Any:
    return _solve_calculate_answer("two_temperature_agent", solve_cool, answer_hot)


TWO_TEMPERATURE_AGENT = AgentSpec(name="two_temperature_agent", build_graph=build_two_temperature_graph,
                                  make_input=make_input, answer=lambda s: str(s.get("answer", "")), reward=reward,
                                  layout="per_turn", description="solve at T=0.5, answer at T=1.3")

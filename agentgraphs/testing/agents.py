"""Small agents for testing a setup end to end (yours or ours): two policy turns in one conversation.

    agentgraph: agentgraphs.testing.agents:TWO_TURN            # concat layout: one sequence
    agentgraph: agentgraphs.testing.agents:TWO_TURN_PER_TURN   # per_turn layout: two sequences
    agentgraph: agentgraphs.testing.agents:FAILING             # a node that raises (failure paths)
    agentgraph: agentgraphs.testing.agents:SYNC_ANSWER         # a plain `def` node calling model.invoke()

`looping_chat_graph()` continues one conversation N times (long append-only traces, checkpoints).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from langgraph.graph import END, START, MessagesState, StateGraph
from typing_extensions import NotRequired  # typing.NotRequired is Python 3.11+

from ..context import AgentContext
from ..errors import InputError
from ..answers import boxed_match
from ..chat_model import TracedChatModel, messages_graph_spec
from ..node import TraceState, call_llm
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
    return boxed_match(rin["answer"], rin["label"])


TWO_TURN = AgentSpec(name="two_turn", build_graph=_graph, make_input=make_input,
                     answer=lambda s: str(s.get("answer", "")), reward=reward, layout="concat",
                     description="solve, then self-check in the same conversation")
TWO_TURN_PER_TURN = replace(TWO_TURN, name="two_turn_per_turn", layout="per_turn", _graphs={})
FAILING = replace(TWO_TURN, name="failing", build_graph=lambda o: _graph(o, failing=True), _graphs={})

_MODEL = TracedChatModel()


def _answer(state: MessagesState) -> dict[str, Any]:
    return {"messages": [_MODEL.invoke(state["messages"])]}  # LangGraph's quickstart shape: a sync node


def _sync_answer_graph(options: Any = None, checkpointer: Any = None) -> Any:
    builder = StateGraph(MessagesState, context_schema=AgentContext)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer, name="sync_answer")


# one `def` node whose TracedChatModel.invoke() blocks a worker thread (cancellation of sync calls)
SYNC_ANSWER = messages_graph_spec(_sync_answer_graph, reward=lambda rin, ctx: 1.0, name="sync_answer")


class LoopingChatState(TraceState):
    """A conversation that continues `limit` times; `doc_ids` is an optional bulky list (checkpoint tests)."""

    step: int
    limit: int
    doc_ids: NotRequired[list[int]]


async def chat_step(state: LoopingChatState, runtime: Any) -> dict[str, Any]:
    i = state["step"]
    text = f"Step {i}: look at the next part and continue." if i else "Solve the puzzle step by step."
    out = await call_llm(state, runtime, node="chat", conversation="main",
                         messages=[{"role": "user", "content": text}])
    return {"step": i + 1, **out.update}


def _chat_route(state: LoopingChatState) -> str:
    return "chat" if state["step"] < state["limit"] else END


def looping_chat_graph(checkpointer: Any = None) -> Any:
    """One LLM node continuing one conversation `limit` times: long append-only traces on demand.

    >>> sorted(looping_chat_graph().get_graph().nodes)
    ['__end__', '__start__', 'chat']
    """
    builder = StateGraph(LoopingChatState, context_schema=AgentContext)
    builder.add_node("chat", chat_step)
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", _chat_route, ["chat", END])
    return builder.compile(checkpointer=checkpointer, name="looping_chat")

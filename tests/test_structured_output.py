"""`TracedChatModel.with_structured_output`: the schema is a tool the policy calls (or JSON it writes), parsed
after the fact from the exact generated text; parse failures are reported, never repaired; the modes that
need constrained decoding are refused. And `messages_graph_spec(..., turns_of=...)`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from agentgraphs.chat_model import (
    STRUCTURED_ERROR_KEY,
    TURN_KEY,
    TracedChatModel,
    messages_graph_spec,
    turns_from_messages,
)
from agentgraphs.context import AgentContext
from agentgraphs.errors import ConfigError
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.trace import check_trace


class Verdict(BaseModel):
    """Whether the answer is right."""

    correct: bool = Field(description="true when the answer is right")
    reason: str


class Plan(TypedDict):
    """A plan."""

    steps: list[str]


QUESTION = [HumanMessage("Is 2 + 2 = 4? Give a verdict.")]
CALL = '<tool_call>\n{"name": "Verdict", "arguments": {"correct": true, "reason": "arithmetic"}}\n</tool_call>'


def _ctx(tiny_engine: Any, replies: list[str]) -> tuple[AgentContext, ScriptedPolicy]:
    policy = ScriptedPolicy(tiny_engine, replies)
    return AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, sampling={"max_new_tokens": 64}), policy


def test_default_method_is_a_tool_call_the_policy_writes(tiny_engine: Any) -> None:
    ctx, policy = _ctx(tiny_engine, [CALL])
    out = TracedChatModel(context=ctx).with_structured_output(Verdict, include_raw=True).invoke(QUESTION)
    assert out["parsed"] == Verdict(correct=True, reason="arithmetic") and out["parsing_error"] is None
    turn = out["raw"].response_metadata[TURN_KEY]
    # the prompt is the chat template rendering the schema as the one tool (plain transformers, independently)
    want = tiny_engine.tokenizer.apply_chat_template([{"role": "user", "content": QUESTION[0].content}],
                                                     tools=[convert_to_openai_tool(Verdict)],
                                                     add_generation_prompt=True, tokenize=False)
    assert tiny_engine.tokenizer.decode(turn["prompt_ids"]) == want == policy.calls[0].prompt_text
    # trained as generated: the output ids are the policy's own, the text exactly what it wrote
    assert turn["output_ids"] == tiny_engine.tokenizer.encode(CALL + "<|im_end|>", add_special_tokens=False)
    assert turn["trainable"] is True


def test_without_include_raw_it_returns_the_object(tiny_engine: Any) -> None:
    ctx, _ = _ctx(tiny_engine, [CALL])
    assert TracedChatModel(context=ctx).with_structured_output(Verdict).invoke(QUESTION) == Verdict(
        correct=True, reason="arithmetic")
    ctx, _ = _ctx(tiny_engine, ['<tool_call>\n{"name": "Plan", "arguments": {"steps": ["a", "b"]}}\n</tool_call>'])
    assert TracedChatModel(context=ctx).with_structured_output(Plan).invoke(QUESTION) == {"steps": ["a", "b"]}


@pytest.mark.parametrize("reply, problem", [
    ("It is correct.", "wrote no <tool_call>"),
    ('<tool_call>\n{"name": "Verdict", "arguments": {"correct": tru\n</tool_call>', "malformed"),
    ('<tool_call>\n{"name": "Verdict", "arguments": {"correct": "perhaps"}}\n</tool_call>', "do not validate"),
])
def test_parse_failures_are_reported_not_repaired(tiny_engine: Any, reply: str, problem: str) -> None:
    ctx, _ = _ctx(tiny_engine, [reply])
    out = TracedChatModel(context=ctx).with_structured_output(Verdict, include_raw=True).invoke(QUESTION)
    assert out["parsed"] is None and isinstance(out["parsing_error"], OutputParserException)
    assert problem in str(out["parsing_error"])
    raw = out["raw"]
    assert problem in raw.response_metadata[STRUCTURED_ERROR_KEY]
    # the reply is still the policy's exact text, trainable like any other
    turn = raw.response_metadata[TURN_KEY]
    assert turn["output_ids"] == tiny_engine.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
    ctx, _ = _ctx(tiny_engine, [reply])
    with pytest.raises(OutputParserException, match=problem):
        TracedChatModel(context=ctx).with_structured_output(Verdict).invoke(QUESTION)


def test_json_mode_parses_the_content(tiny_engine: Any) -> None:
    ctx, policy = _ctx(tiny_engine, ['{"correct": false, "reason": "no"}', '```json\n{"steps": []}\n```',
                                     '{"correct": fals'])
    model = TracedChatModel(context=ctx)
    assert model.with_structured_output(Verdict, method="json_mode").invoke(QUESTION) == Verdict(
        correct=False, reason="no")
    assert "<tools>" not in policy.calls[0].prompt_text  # json_mode shows no tool: the prompt is the user's
    assert model.with_structured_output(Plan, method="json_mode").invoke(QUESTION) == {"steps": []}
    out = model.with_structured_output(Verdict, method="json_mode", include_raw=True).invoke(QUESTION)
    assert out["parsed"] is None and "not JSON" in str(out["parsing_error"])  # a truncated object is not repaired


@pytest.mark.parametrize("kwargs", [{"method": "json_schema"}, {"strict": True}])
def test_modes_that_need_constrained_decoding_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="constrained decoding") as err:
        TracedChatModel().with_structured_output(Verdict, **kwargs)
    assert "function_calling" in str(err.value)
    with pytest.raises(ConfigError, match="unsupported arguments"):
        TracedChatModel().with_structured_output(Verdict, tool_choice="any")


def _judge_graph(include_raw: bool) -> Any:
    model = TracedChatModel()

    async def judge(state: MessagesState) -> dict[str, Any]:
        structured = model.with_structured_output(Verdict, include_raw=include_raw)
        out = await structured.ainvoke(state["messages"])
        if include_raw:
            return {"messages": [out["raw"]]}
        return {"messages": [AIMessage(out.reason)]}  # only the parsed object: the call's Turn is lost

    g = StateGraph(MessagesState)
    g.add_node("judge", judge)
    g.add_edge(START, "judge")
    g.add_edge("judge", END)
    return g.compile(name="judge")


async def test_in_a_graph_the_raw_message_trains_and_the_parsed_object_is_reported(tiny_engine: Any) -> None:
    spec = messages_graph_spec(_judge_graph(True), reward=lambda rin, ctx: 0.0, name="judge",
                               requires_label=False)
    ctx, _ = _ctx(tiny_engine, [CALL])
    rollout = await run_rollout(spec, rollout_input("Is 2 + 2 = 4?"), ctx)
    assert rollout.status == "completed" and rollout.llm_calls == 1 and rollout.untrained_calls == []
    (seq,) = check_trace(rollout.turns, "concat")
    assert sum(seq["loss_mask"]) == len(rollout.turns[0]["output_ids"])

    spec = messages_graph_spec(_judge_graph(False), reward=lambda rin, ctx: 0.0, name="judge_parsed",
                               requires_label=False)
    ctx, _ = _ctx(tiny_engine, [CALL])
    rollout = await run_rollout(spec, rollout_input("Is 2 + 2 = 4?"), ctx)
    assert rollout.status == "completed" and rollout.llm_calls == 1 and rollout.turns == []
    assert [c["node"] for c in rollout.untrained_calls] == ["judge"]


class DraftState(MessagesState):
    drafts: list[AIMessage]


def _drafts_graph() -> Any:
    model = TracedChatModel()

    async def draft(state: DraftState) -> dict[str, Any]:
        return {"drafts": [await model.ainvoke(state["messages"])]}

    async def answer(state: DraftState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(DraftState)
    g.add_node("draft", draft)
    g.add_node("answer", answer)
    g.add_edge(START, "draft")
    g.add_edge("draft", "answer")
    g.add_edge("answer", END)
    return g.compile(name="drafts")


async def test_from_messages_graph_takes_turns_of_and_layout(tiny_engine: Any) -> None:
    def both(state: Any) -> list[Any]:
        return turns_from_messages([*state.get("drafts", []), *state["messages"]])

    spec = messages_graph_spec(_drafts_graph(), reward=lambda rin, ctx: 0.0, name="drafts",
                               requires_label=False, turns_of=both, layout="per_turn")
    assert spec.layout == "per_turn"
    ctx, _ = _ctx(tiny_engine, ["first", "second"])
    rollout = await run_rollout(spec, rollout_input("Say something."), ctx)
    assert rollout.status == "completed" and rollout.untrained_calls == []
    assert [t["node"] for t in rollout.turns] == ["draft", "answer"] and len(rollout.sequences) == 2
    # the default collects `messages` only: the draft is then reported, not silently lost
    default = messages_graph_spec(_drafts_graph(), reward=lambda rin, ctx: 0.0, name="drafts_default",
                                  requires_label=False)
    ctx, _ = _ctx(tiny_engine, ["first", "second"])
    rollout = await run_rollout(default, rollout_input("Say something."), ctx)
    assert [c["node"] for c in rollout.untrained_calls] == ["draft"]


def test_sync_structured_output_inside_a_sync_node_is_counted(tiny_engine: Any) -> None:
    model = TracedChatModel()

    def judge(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.with_structured_output(Verdict, include_raw=True).invoke(state["messages"])["raw"]]}

    g = StateGraph(MessagesState)
    g.add_node("judge", judge)
    g.add_edge(START, "judge")
    g.add_edge("judge", END)
    spec = messages_graph_spec(g.compile(name="sync_judge"), reward=lambda rin, ctx: 0.0,
                               name="sync_judge", requires_label=False)
    ctx, _ = _ctx(tiny_engine, [CALL])
    rollout = asyncio.run(run_rollout(spec, rollout_input("Is 2 + 2 = 4?"), ctx))
    assert rollout.status == "completed" and rollout.llm_calls == 1 and len(rollout.turns) == 1

"""Every Turn records the sampling it was generated with; a training sequence never mixes samplings; rl_bridge
refuses (or masks) a trainable turn sampled unlike slime's rollout settings.

The reference for what was sent is the SGLang-contract server's record of each request body; the reference
for the log-probs is a plain transformers forward pass, scaled by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel
from transformers import AutoModelForCausalLM

import rl_bridge
from agentgraphs.chat_model import TracedChatModel, messages_graph_spec, turns_from_messages
from agentgraphs.context import AgentContext
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.errors import ConfigError, SamplingMismatchError, TraceError
from agentgraphs.node import TraceState, call_llm
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.spec import AgentSpec
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.trace import build_sequences, check_sequence, check_trace, turn_sampling
from tests.test_bridge import SLIME_SAMPLING, make_args

QUESTION = "Name a colour."


def _bind_graph() -> Any:
    """A messages graph: `draft` at the run's sampling, then `critique` with `.bind(temperature=0.5)`,
    continuing the same conversation (the README's advertised way to adjust one call)."""
    model = TracedChatModel(sampling={"max_new_tokens": 6})

    async def draft(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def critique(state: MessagesState) -> dict[str, Any]:
        ask = HumanMessage("Now say it differently.")
        return {"messages": [ask, await model.bind(temperature=0.5).ainvoke([*state["messages"], ask])]}

    g = StateGraph(MessagesState)
    g.add_node("draft", draft)
    g.add_node("critique", critique)
    g.add_edge(START, "draft")
    g.add_edge("draft", "critique")
    g.add_edge("critique", END)
    return g.compile(name="bind_temperature")


BIND_SPEC = messages_graph_spec(_bind_graph(), reward=lambda rin, ctx: 0.0, name="bind_temperature",
                                requires_label=False)


class CallState(TraceState):
    pass


async def _sampled(state: CallState, runtime: Any) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="sampled", conversation="c", max_new_tokens=4,
                         messages=[{"role": "user", "content": QUESTION}], temperature=0.7, top_k=20, min_p=0.05)
    return out.update


def _call_graph() -> Any:
    g = StateGraph(CallState, context_schema=AgentContext)
    g.add_node("sampled", _sampled)
    g.add_edge(START, "sampled")
    g.add_edge("sampled", END)
    return g.compile()


CALL_SPEC = AgentSpec(name="sampled_call", build_graph=lambda o: _call_graph(), make_input=lambda r, o: {"turns": []},
                      answer=lambda s: "", reward=lambda rin, ctx: 0.0, requires_label=False)


def _reference_logprobs(model: Any, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """Plain transformers, one forward pass, log_softmax(logits / T) at each output position."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    rows = logits[len(prompt) - 1: len(prompt) + len(output) - 1] / temperature
    return torch.log_softmax(rows, dim=-1).gather(1, torch.tensor(output)[:, None])[:, 0].tolist()


async def test_call_llm_records_the_sampling_it_sent(server: Any, tiny_engine: Any) -> None:
    async with SGLangEngine(server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tiny_engine.tokenizer, sampling={"top_p": 0.9})
        rollout = await run_rollout(CALL_SPEC, rollout_input(QUESTION), ctx)
    assert rollout.status in ("completed", "truncated"), rollout.error
    (turn,) = rollout.turns
    sent = server.stats.bodies[-1]["sampling_params"]  # what the server was asked for
    assert {k: turn[k] for k in ("temperature", "top_p", "top_k", "min_p")} == {
        "temperature": sent["temperature"], "top_p": sent["top_p"], "top_k": sent["top_k"], "min_p": sent["min_p"]}
    assert (turn["temperature"], turn["top_p"], turn["top_k"], turn["min_p"]) == (0.7, 0.9, 20, 0.05)
    (seq,) = rollout.sequences
    assert seq["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05}


async def test_bind_temperature_is_recorded_and_its_logprobs_are_at_that_temperature(
        server: Any, tiny_engine: Any, tiny_model_dir: Path) -> None:
    async with SGLangEngine(server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tiny_engine.tokenizer)
        rollout = await run_rollout(BIND_SPEC, rollout_input(QUESTION), ctx)
    assert rollout.status in ("completed", "truncated"), rollout.error
    draft, critique = rollout.turns
    assert [b["sampling_params"]["temperature"] for b in list(server.stats.bodies)[-2:]] == [1.0, 0.5]
    assert (draft["temperature"], critique["temperature"]) == (1.0, 0.5)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    for turn in (draft, critique):
        want = _reference_logprobs(model, turn["prompt_ids"], turn["output_ids"], turn["temperature"])
        assert turn["output_logprobs"] == pytest.approx(want, abs=1e-4)
    at_one = _reference_logprobs(model, critique["prompt_ids"], critique["output_ids"], 1.0)
    assert max(abs(a - b) for a, b in zip(at_one, critique["output_logprobs"])) > 0.05  # the temperature matters
    # the critique extends the draft's conversation, yet it is trained in a sequence of its own
    assert critique["conversation"] == draft["conversation"]
    assert critique["prompt_ids"][:len(draft["prompt_ids"]) + len(draft["output_ids"])] == \
        draft["prompt_ids"] + draft["output_ids"]
    assert [s["turn_indices"] for s in rollout.sequences] == [[0], [1]]
    assert [s["sampling"]["temperature"] for s in rollout.sequences] == [1.0, 0.5]


def _turn(prompt: list[int], output: list[int], *, temperature: float = 1.0, trainable: bool = True,
          conversation: str = "c") -> dict[str, Any]:
    return {"node": "n", "conversation": conversation, "prompt_ids": prompt, "output_ids": output,
            "output_logprobs": [-0.5] * len(output), "trainable": trainable, "finish_reason": "stop",
            "temperature": temperature, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "engine": "e",
            "weight_version": None, "rid": "", "text": "", "retries": 0}


def test_a_sequence_never_mixes_samplings() -> None:
    a = _turn([1, 2], [3, 4])
    b = _turn([1, 2, 3, 4, 5], [6], temperature=0.5)             # extends a, sampled at 0.5
    c = _turn([1, 2, 3, 4, 5, 6, 7], [8], temperature=0.5)       # extends b at 0.5: joins b
    assert [s["turn_indices"] for s in check_trace([a, b, c], "concat")] == [[0], [1, 2]]
    # an untrained turn's sampling does not matter (its tokens are masked): no split
    judge = _turn([1, 2, 3, 4, 5], [6], temperature=0.0, trainable=False)
    d = _turn([1, 2, 3, 4, 5, 6, 7], [8])
    (seq,) = check_trace([a, judge, d], "concat")
    assert seq["turn_indices"] == [0, 1, 2] and seq["sampling"]["temperature"] == 1.0
    assert seq["loss_mask"] == [1, 1, 0, 0, 0, 1]
    # a forged sequence that mixes them is a breach
    forged = dict(build_sequences([a, d], "concat")[0])
    with pytest.raises(TraceError, match="mixes samplings"):
        check_sequence(forged, [a, _turn([1, 2, 3, 4, 5, 6, 7], [8], temperature=0.5)])
    with pytest.raises(TraceError, match="says it was sampled with"):
        check_sequence({**forged, "sampling": {**forged["sampling"], "top_k": 20}}, [a, d])


def test_turns_recorded_before_top_p_was_recorded_still_build() -> None:
    old = [{k: v for k, v in _turn([1, 2], [3]).items() if k not in ("top_p", "top_k", "min_p")},
           {k: v for k, v in _turn([1, 2, 3, 4], [5]).items() if k not in ("top_p", "top_k", "min_p")}]
    assert turn_sampling(old[0]) == {"temperature": 1.0, "top_p": None, "top_k": None, "min_p": None}
    (seq,) = check_trace(old, "concat")
    assert seq["turn_indices"] == [0, 1]


def _bridge(server: Any, tiny_model_dir: Path, **extra: Any) -> Any:
    args = make_args(server.url, tiny_model_dir, "tests.test_sampling_record:BIND_SPEC", rollout_temperature=1.0,
                     rollout_top_p=1.0, rollout_top_k=-1, **extra)
    s = Sample(group_index=0, index=0, prompt=QUESTION, label=None, metadata={})
    return asyncio.run(rl_bridge.generate(args, s, dict(SLIME_SAMPLING)))


def test_rl_bridge_refuses_a_bound_temperature(server: Any, tiny_model_dir: Path) -> None:
    with pytest.raises(SamplingMismatchError) as err:
        _bridge(server, tiny_model_dir)
    said = str(err.value)
    assert "node 'critique'" in said and "temperature=0.5" in said and "temperature=1.0" in said
    assert "--rollout-temperature" in said and "agentgraph_on_sampling_mismatch: mask" in said


def test_rl_bridge_masks_it_when_configured(server: Any, tiny_model_dir: Path) -> None:
    s = _bridge(server, tiny_model_dir, agentgraph_on_sampling_mismatch="mask")
    assert s.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    (masked,) = s.metadata["masked_turns"]
    assert masked["node"] == "critique" and masked["turn"] == 1 and "temperature=0.5" in masked["reason"]
    # the draft trains with its exact log-probs; the critique's tokens stay in the sequence, mask 0, log-prob 0.0
    (draft_prompt, draft), (critique_prompt, critique) = server.recorder.calls
    (seq,) = s.train_metadata["turns"]
    assert seq["sampling"]["temperature"] == 1.0 and seq["tokens"] == critique_prompt + critique.token_ids
    start = len(seq["tokens"]) - seq["response_length"]
    a, b = len(draft_prompt) - start, len(draft_prompt) + len(draft.token_ids) - start
    c = len(critique_prompt) - start
    assert seq["loss_mask"][a:b] == [1] * (b - a) and seq["rollout_log_probs"][a:b] == draft.logprobs
    assert sum(seq["loss_mask"]) == b - a
    assert seq["rollout_log_probs"][c:] == [0.0] * len(critique.token_ids)
    assert s.metadata["trace_summary"]["trained_tokens"] == len(draft.token_ids)
    assert s.tokens == seq["tokens"] and s.loss_mask == seq["loss_mask"]


def test_the_setting_is_typed(server: Any, tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="agentgraph_on_sampling_mismatch"):
        _bridge(server, tiny_model_dir, agentgraph_on_sampling_mismatch="ignore")


def test_evaluation_is_not_refused(server: Any, tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, "tests.test_sampling_record:BIND_SPEC", rollout_temperature=1.0)
    s = Sample(group_index=0, index=0, prompt=QUESTION, label=None, metadata={})
    out = asyncio.run(rl_bridge.generate(args, s, dict(SLIME_SAMPLING), evaluation=True))
    assert out.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)  # nothing trainable in evaluation


def test_turns_from_a_messages_state_keep_their_sampling(tiny_engine: Any) -> None:
    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer, sampling={"top_k": 5})
    out = asyncio.run(_bind_graph().ainvoke({"messages": [{"role": "user", "content": QUESTION}]}, context=ctx))
    turns = turns_from_messages(out["messages"])
    assert [(t["temperature"], t["top_k"]) for t in turns] == [(1.0, 5), (0.5, 5)]


# ----------------------------------------------------- what is bound survives bind_tools / with_structured_output
def _add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class _Verdict(BaseModel):
    correct: bool


def _one_node(call: Any) -> Any:
    async def ask(state: MessagesState) -> dict[str, Any]:
        out = await call(state["messages"])
        return {"messages": [out["raw"] if isinstance(out, dict) else out]}

    g = StateGraph(MessagesState)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(name="bound_then")


def _bound() -> Any:
    return TracedChatModel(sampling={"max_new_tokens": 6}).bind(temperature=0.5)


# LangChain's binding forwards bind_tools / with_structured_output to the bare model: the bound temperature was
# dropped, the call sampled and trained at 1.0 with no word (create_react_agent calls bind_tools on its model)
BOUND_THEN = {
    "create_react_agent": messages_graph_spec(create_react_agent(_bound(), [_add], name="bound_then"),
                                              reward=lambda rin, ctx: 0.0, requires_label=False),
    "bind_tools": messages_graph_spec(_one_node(lambda m: _bound().bind_tools([_add]).ainvoke(m)),
                                      reward=lambda rin, ctx: 0.0, requires_label=False),
    "with_structured_output": messages_graph_spec(
        _one_node(lambda m: _bound().with_structured_output(_Verdict, include_raw=True).ainvoke(m)),
        reward=lambda rin, ctx: 0.0, requires_label=False),
}


@pytest.mark.parametrize("how", sorted(BOUND_THEN))
def test_a_bound_temperature_survives_bind_tools_and_structured_output(how: str, server: Any,
                                                                      tiny_model_dir: Path) -> None:
    args = make_args(server.url, tiny_model_dir, f"tests.test_sampling_record:BOUND_THEN_{how}",
                     rollout_temperature=1.0, rollout_top_p=1.0, rollout_top_k=-1)
    s = Sample(group_index=0, index=0, prompt=QUESTION, label=None, metadata={})
    with pytest.raises(SamplingMismatchError, match="temperature=0.5"):
        asyncio.run(rl_bridge.generate(args, s, dict(SLIME_SAMPLING)))
    assert server.stats.bodies[-1]["sampling_params"]["temperature"] == 0.5  # what the server was asked for


for _how, _spec in BOUND_THEN.items():
    globals()[f"BOUND_THEN_{_how}"] = _spec


@pytest.mark.parametrize("key", ["temperature", "top_k", "max_tokens"])
def test_a_configurable_sampling_key_is_refused_not_ignored(key: str) -> None:
    """`with_config(configurable={"temperature": 0.1})` was ignored: TracedChatModel has no configurable fields."""
    with pytest.raises(ConfigError, match=rf"configurable=\{{'{key}'.*\.bind\("):
        TracedChatModel().with_config(configurable={key: 0.1})
    with pytest.raises(ConfigError, match="reads no configurable fields"):
        TracedChatModel().bind_tools([_add]).with_config({"configurable": {key: 1}})
    # other configurable keys (a thread id, the user's own) pass, and the bound sampling is kept
    bound = TracedChatModel().bind(top_k=5).with_config(configurable={"thread_id": "t", "user": "u"}, run_name="x")
    assert bound.kwargs == {"top_k": 5} and bound.config["configurable"] == {"thread_id": "t", "user": "u"}


async def test_a_helper_call_on_the_servers_defaults_sends_only_what_it_names(server: Any, tiny_engine: Any) -> None:
    """`sampling_base="server"`: the call's overrides over the server's defaults, not the run's sampling. A
    text request carries only the named fields (the server fills the rest); a token engine's /generate gets
    SamplingParams' defaults plus the overrides, sent explicitly; a trainable call is refused."""
    from agentgraphs.engines.openai import OpenAIChatEngine

    helper = OpenAIChatEngine(f"{server.url}/v1", model="helper", max_retries=0)
    run = {"top_p": 0.9, "top_k": 20, "min_p": 0.05, "stop": "</done>", "sampling_seed": 5}
    ask = {"node": "ask", "messages": [{"role": "user", "content": QUESTION}], "trainable": False}
    async with SGLangEngine(server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tiny_engine.tokenizer, engines={"helper": helper}, sampling=run)
        out = await call_llm({}, ctx, engine="helper", sampling_base="server", temperature=0.3, **ask)
        assert set(server.stats.chat_bodies[-1]) == {"model", "messages", "temperature"}
        recorded = [out.turn[k] for k in ("temperature", "top_p", "top_k", "min_p")]
        assert recorded == [0.3, None, None, None]  # what the request left to the server is unknown here
        await call_llm({}, ctx, engine="helper", **ask)  # the run's sampling, as before
        assert {k: server.stats.chat_bodies[-1].get(k) for k in ("top_p", "top_k", "min_p", "stop", "seed")} == {
            "top_p": 0.9, "top_k": 20, "min_p": 0.05, "stop": ["</done>"], "seed": 5}
        out = await call_llm({}, ctx, sampling_base="server", temperature=0.3, max_new_tokens=3, **ask)
        sent = server.stats.bodies[-1]["sampling_params"]
        assert {k: sent.get(k) for k in ("temperature", "top_p", "top_k", "min_p", "stop", "max_new_tokens")} == {
            "temperature": 0.3, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "stop": None, "max_new_tokens": 3}
        assert (out.turn["top_p"], out.turn["top_k"]) == (1.0, -1)
        with pytest.raises(ConfigError, match="sampling_base='server' on a trainable call.*trainable=False"):
            await call_llm({}, ctx, sampling_base="server", **{**ask, "trainable": True})
        with pytest.raises(ConfigError, match="sampling_base='nope'"):
            await call_llm({}, ctx, engine="helper", sampling_base="nope", **ask)  # type: ignore[arg-type]
    await helper.aclose()

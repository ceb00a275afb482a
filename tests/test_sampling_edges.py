"""Sampling settings reach the engine exactly as written, or are refused naming the field: stop strings and stop
ids on every route, value types, plain-data keys, slime's sampling_params keys, TracedChatModel's constructor
arguments, and which context a TracedChatModel samples with inside a run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph

import rl_bridge
from agentgraphs.chat_model import (
    TracedChatModel,
    messages_graph_spec,
    turns_from_messages,
)
from agentgraphs.context import AgentContext, context_of
from agentgraphs.engines import SamplingParams
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.errors import ConfigError
from agentgraphs.node import call_llm
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.spec import AgentSpec
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import clear_cache
from tests.test_bridge import SLIME_SAMPLING, make_args
from tests.test_multiturn import RecordingEngine

HI = [{"role": "user", "content": "Hi"}]
LONG = "word " * 60  # longer than any max_new_tokens here: a turn of it finishes with "length"


@pytest.fixture()
def long_server(tiny_engine: Any):
    """The server answering every prompt with LONG, so every turn is cut by max_new_tokens."""
    with SGLangTestServer(ScriptedPolicy(tiny_engine, lambda call: LONG), port=0) as srv:
        yield srv
    clear_cache()


@dataclass(frozen=True)
class Seeded:
    """The tiny model's answer to HI with sampling_seed `seed` (the same on every route: one request at a time on
    CPU is bit-exact), and a stop string that first occurs in it at its token `stop_at`."""

    seed: int
    prompt_ids: list[int]
    ids: list[int]
    stop_at: int
    stop: str


@pytest.fixture(scope="module")
def seeded(tiny_engine: Any) -> Seeded:
    tok = tiny_engine.tokenizer
    prompt = AgentContext(policy=tiny_engine).template().render(HI)
    for seed in range(20):
        params = SamplingParams(max_new_tokens=24, sampling_seed=seed)
        ids = asyncio.run(tiny_engine.generate(prompt, params)).token_ids
        for k in range(2, len(ids) - 1):
            text, before = tok.decode(ids[k:k + 1]), tok.decode(ids[:k])
            # several characters, one of them already seen: split into characters it would stop earlier
            if len(text.strip()) >= 2 and "\ufffd" not in text and text not in before and set(text) & set(before):
                return Seeded(seed, prompt, ids, k, text)
    raise AssertionError("no usable stop string in the tiny model's answers for seeds 0-19")


def seeded_context(engine: Any, tok: Any, seed: int) -> AgentContext:
    return AgentContext(policy=engine, tokenizer=tok, sampling={"max_new_tokens": 24, "sampling_seed": seed})


# ------------------------------------------------------------------------------- stop strings and ids


@pytest.mark.parametrize("route", ["call_llm", "invoke(stop=)", "bind(stop=)", "sampling="])
async def test_a_stop_string_is_one_stop_string_on_every_route(server: Any, tiny_engine: Any, seeded: Seeded,
                                                               route: str) -> None:
    async with SGLangEngine(server.url) as engine:
        ctx = seeded_context(engine, tiny_engine.tokenizer, seeded.seed)
        if route == "call_llm":
            ids = (await call_llm({}, ctx, node="n", messages=HI, stop=seeded.stop)).completion.token_ids
        else:
            model = TracedChatModel(context=ctx, sampling={"stop": seeded.stop} if route == "sampling=" else {})
            if route == "invoke(stop=)":
                msg = await model.ainvoke("Hi", stop=seeded.stop)
            elif route == "bind(stop=)":
                msg = await model.bind(stop=seeded.stop).ainvoke("Hi")
            else:
                msg = await model.ainvoke("Hi")
            ids = turns_from_messages([msg])[0]["output_ids"]
    (body,) = server.stats.bodies
    assert body["sampling_params"]["stop"] == [seeded.stop]  # one string, not its characters
    assert body["input_ids"] == seeded.prompt_ids
    assert ids == seeded.ids[:seeded.stop_at + 1]  # stopped where the whole string first appeared


async def test_a_stop_token_id_may_be_one_int(server: Any, tiny_engine: Any, seeded: Seeded) -> None:
    stop_id = seeded.ids[seeded.stop_at]
    expected = seeded.ids[:seeded.ids.index(stop_id) + 1]
    params = SamplingParams(max_new_tokens=24, sampling_seed=seeded.seed, stop_token_ids=stop_id)
    assert params.stop_token_ids == (stop_id,)
    assert (await tiny_engine.generate(seeded.prompt_ids, params)).token_ids == expected  # HFEngine took it
    async with SGLangEngine(server.url) as engine:
        out = await call_llm({}, seeded_context(engine, tiny_engine.tokenizer, seeded.seed), node="n", messages=HI,
                             stop_token_ids=stop_id)
    assert server.stats.bodies[-1]["sampling_params"]["stop_token_ids"] == [stop_id]
    assert out.completion.token_ids == expected


@pytest.mark.parametrize("field, value, words", [
    ("stop", "", "stop must be a non-empty string or a list of them"),
    ("stop", 5, "stop must be a non-empty string or a list of them, got 5 (int)"),
    ("stop", ["</a>", None], "stop must be"),
    ("stop_token_ids", "151645", "stop_token_ids must be a token id (int >= 0) or a list of them"),
    ("stop_token_ids", [151645, -1], "stop_token_ids must be a token id"),
    ("stop_token_ids", True, "stop_token_ids must be"),
])
def test_bad_stops_are_refused_naming_the_field(field: str, value: Any, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        SamplingParams(**{field: value})


# ----------------------------------------------------------------------------------- override values


@pytest.mark.parametrize("override, words", [
    ({"temperature": None}, "temperature must be a number, got None (NoneType)"),
    ({"temperature": "0.3"}, "temperature must be a number, got '0.3' (str)"),
    ({"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 0 (a token count), got 2.5 (float)"),
    ({"top_k": 5.0}, "top_k must be -1 (off) or an int >= 1"),
    ({"ignore_eos": "no"}, "ignore_eos must be a bool"),
    ({"temprature": 0.3}, "unknown key 'temprature' (did you mean 'temperature'?); accepted keys: max_new_tokens"),
])
@pytest.mark.parametrize("route", ["call_llm", "bind"])
async def test_bad_sampling_overrides_name_the_field_and_send_nothing(tiny_engine: Any, override: dict[str, Any],
                                                                      words: str, route: str) -> None:
    engine = RecordingEngine(tiny_engine)
    ctx = AgentContext(policy=engine, sampling={"max_new_tokens": 8})
    with pytest.raises(ConfigError) as err:
        if route == "call_llm":
            await call_llm({}, ctx, node="n", messages=HI, **override)
        else:
            await TracedChatModel(context=ctx).bind(**override).ainvoke("Hi")
    assert words in str(err.value) and "sampling override" in str(err.value)
    assert engine.calls == []


async def test_overrides_reach_the_server_and_max_new_tokens_stays_a_ceiling(server: Any, tiny_engine: Any) -> None:
    async with SGLangEngine(server.url) as engine:
        ctx = AgentContext(policy=engine, tokenizer=tiny_engine.tokenizer, sampling={"max_new_tokens": 8})
        await TracedChatModel(context=ctx, sampling={"temperature": 0.3}).ainvoke("Hi")
        await TracedChatModel(context=ctx).bind(temperature=0.5, top_k=7, max_new_tokens=100).ainvoke("Hi")
    sent = [b["sampling_params"] for b in server.stats.bodies]
    assert [(s["temperature"], s["top_k"], s["max_new_tokens"]) for s in sent] == [(0.3, -1, 8), (0.5, 7, 8)]


# ------------------------------------------------------------------------------- plain-data sampling


def test_a_misspelt_plain_data_sampling_key_is_refused(tiny_engine: Any) -> None:
    bad = {"temprature": 0.2, "max_tokens": 8, "top-p": 0.5}
    for make in (lambda: AgentContext(policy=tiny_engine, sampling=bad),
                 lambda: context_of({"policy": tiny_engine, "sampling": bad})):  # a JSON context (`langgraph dev`)
        with pytest.raises(ConfigError) as err:
            make()
        first = "AgentContext.sampling: unknown key 'temprature' (did you mean 'temperature'?)"
        assert str(err.value).startswith(first)
        assert "accepted keys: max_new_tokens, temperature, top_p" in str(err.value)
    for key, means in (("max_tokens", "max_new_tokens"), ("top-p", "top_p"), ("seed", "sampling_seed")):
        with pytest.raises(ConfigError, match=f"unknown key '{key}' \\(did you mean '{means}'\\?\\)"):
            AgentContext(policy=tiny_engine, sampling={key: 1})
    ok = AgentContext(policy=tiny_engine, sampling={"temperature": 0.2, "max_new_tokens": 8, "top_p": 0.5, "stop": "x"})
    assert ok.sampling == SamplingParams(temperature=0.2, max_new_tokens=8, top_p=0.5, stop=("x",))
    with pytest.raises(ConfigError, match="AgentContext.sampling: max_new_tokens must be an int"):
        AgentContext(policy=tiny_engine, sampling={"max_new_tokens": "8"})
    with pytest.raises(ConfigError, match="AgentContext.sampling is a list: pass a SamplingParams or a dict"):
        AgentContext(policy=tiny_engine, sampling=[("temperature", 0.2)])  # type: ignore[arg-type]


def test_misspelt_or_mistyped_plain_data_limits_are_refused_naming_the_key(tiny_engine: Any) -> None:
    """`limits` may be a dict (a JSON context) as `sampling` may: a misspelt key was a bare TypeError from the
    dataclass, and a value of the wrong type ("5" from JSON) failed every rollout later, at the limit's check."""
    for make in (lambda bad: AgentContext(policy=tiny_engine, limits=bad),
                 lambda bad: context_of({"policy": tiny_engine, "limits": bad})):
        with pytest.raises(ConfigError) as err:
            make({"max_llm_call": 5})
        assert str(err.value).startswith("AgentContext.limits: unknown key 'max_llm_call' (did you mean "
                                         "'max_llm_calls'?); accepted keys: max_llm_calls, max_time_s")
        with pytest.raises(ConfigError, match=r"Limits.max_llm_calls must be a whole number >= 1, got '5'"):
            make({"max_llm_calls": "5"})
        with pytest.raises(ConfigError, match=r"Limits.max_time_s must be a number of seconds > 0.*got '60'"):
            make({"max_time_s": "60"})
    ok = AgentContext(policy=tiny_engine, limits={"max_llm_calls": 5, "max_time_s": 60, "recursion_limit": 50})
    assert (ok.limits.max_llm_calls, ok.limits.max_time_s, ok.limits.recursion_limit) == (5, 60, 50)


# ------------------------------------------------------------------------------ slime's sampling_params


def test_slime_keys_we_do_not_apply_pass_only_at_their_neutral_value() -> None:
    neutral = {**SLIME_SAMPLING, "stop": "</answer>", "stop_token_ids": 151645, "repetition_penalty": 1.0,
               "min_new_tokens": 0, "frequency_penalty": 0.0, "presence_penalty": None, "custom_params": {}}
    params = SamplingParams.from_slime(neutral)
    assert params.to_sglang()["stop"] == ["</answer>"] and params.stop_token_ids == (151645,)
    assert params.max_new_tokens == SLIME_SAMPLING["max_new_tokens"]


@pytest.mark.parametrize("extra, words", [
    ({"repetition_penalty": 1.05}, ("sampling_params['repetition_penalty'] = 1.05: agentgraphs engines do not apply "
                                   "it, so the tokens would not be sampled as configured. Fix: drop "
                                   "repetition_penalty from the eval dataset config")),
    ({"min_new_tokens": 8}, "Fix: drop min_new_tokens from the eval dataset config and --eval-min-new-tokens"),
    ({"frequency_penalty": 0.5}, "sampling_params['frequency_penalty'] = 0.5"),
    ({"custom_params": {"return_top_p_token_ids": True}}, "Fix: set --rollout-top-p 1.0"),
    ({"regex": "[0-9]+"}, "slime sampling_params has the key 'regex' (= '[0-9]+'), which agentgraphs does not know"),
    ({"temprature": 0.5}, ("has the key 'temprature' (= 0.5), which agentgraphs does not know, so it cannot honour "
                          "it (did you mean 'temperature'?). Known keys: custom_params, frequency_penalty")),
    ({"max_new_tokens": 2.5}, "slime sampling_params: max_new_tokens must be an int"),
])
def test_slime_keys_that_would_be_dropped_are_refused_before_any_request(server: Any, tiny_model_dir: Path,
                                                                         extra: dict[str, Any], words: str) -> None:
    args = make_args(server.url, tiny_model_dir, "agentgraphs.testing.agents:TWO_TURN")
    with pytest.raises(ConfigError) as err:  # slime >= 0.3.1 eval datasets may add these keys
        asyncio.run(rl_bridge.generate(args, Sample(index=0, prompt="Hi", label="1"), {**SLIME_SAMPLING, **extra},
                                       evaluation=True))
    assert words in str(err.value)
    assert server.stats.generate_requests == 0


# ------------------------------------------------------------------------ TracedChatModel's arguments


@pytest.mark.parametrize("kwargs, words", [
    ({"temperature": 0.3}, ("TracedChatModel(temperature=0.3): not an argument of TracedChatModel (it would be "
                           "ignored); pass sampling={'temperature': 0.3} or use .bind(temperature=0.3)")),
    ({"model_kwargs": {"temperature": 0.3}}, "pass sampling={'temperature': 0.3}"),
    ({"max_tokens": 4}, "pass sampling={'max_new_tokens': 4} or use .bind(max_new_tokens=4)"),
    ({"model": "gpt-4o"}, "the engine comes from the AgentContext"),
    ({"streaming": True}, "TracedChatModel's fields are cache, callbacks, context"),
    ({"sampling": {"temprature": 0.3}}, ("TracedChatModel(sampling=...): unknown key 'temprature' (did you mean "
                                        "'temperature'?)")),
    ({"sampling": {"max_new_tokens": 2.5}}, "TracedChatModel(sampling=...): max_new_tokens must be an int"),
])
def test_langchain_style_arguments_are_refused_with_where_they_belong(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        TracedChatModel(**kwargs)
    assert words in str(err.value)


def test_base_chat_model_fields_still_work() -> None:
    model = TracedChatModel(callbacks=[], tags=["t"], metadata={"k": 1}, name="m", verbose=False, cache=False,
                            engine=None, trainable=False, sampling={"temperature": 0.3})
    assert (model.tags, model.metadata["k"], model.name, model.trainable) == (["t"], 1, "m", False)


# ------------------------------------------------------------------------ the context inside a run


class Untouchable:
    """An engine that must never be called (the model's own context, inside a run that has its own)."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        self.name, self.tokenizer = name, tokenizer

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        raise AssertionError(f"the model's own engine {self.name} was called inside a run")


OWN_CONTEXT: dict[str, AgentContext] = {}  # the context the next own_context_agent() gives its model


def own_context_agent() -> AgentSpec:
    """One TracedChatModel call, made by a model constructed with its own context (OWN_CONTEXT["ctx"])."""
    model = TracedChatModel(context=OWN_CONTEXT["ctx"])

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    return messages_graph_spec(graph.compile(), reward=lambda r, c: 0.0, name="own_context")


@pytest.mark.parametrize("evaluation", [True, False])
def test_in_rl_bridge_the_runs_context_wins_over_the_models_own(long_server: Any, tiny_engine: Any,
                                                                tiny_model_dir: Path, evaluation: bool) -> None:
    # the model's own context names the same policy but its own engine object, sampling and evaluation flag
    own = Untouchable(f"sglang:{long_server.url}", tiny_engine.tokenizer)
    OWN_CONTEXT["ctx"] = AgentContext(policy=own, sampling={"max_new_tokens": 64}, evaluation=not evaluation)
    args = make_args(long_server.url, tiny_model_dir, "tests.test_sampling_edges:own_context_agent")
    s = asyncio.run(rl_bridge.generate(args, Sample(index=0, prompt="Hi", label="x"), SLIME_SAMPLING,
                                       evaluation=evaluation))
    assert long_server.stats.generate_requests == 1  # slime's policy server sampled the turn
    assert long_server.stats.bodies[-1]["sampling_params"]["max_new_tokens"] == SLIME_SAMPLING["max_new_tokens"]
    assert s.status == Sample.Status.TRUNCATED, s.metadata.get("status_reason")  # its one turn hit max_new_tokens
    # the run's evaluation flag decides: evaluation trains nothing, training trains the policy's 16 tokens
    trained = 0 if evaluation else SLIME_SAMPLING["max_new_tokens"]
    assert sum(s.loss_mask) == trained and s.metadata["llm_calls"] == 1


def test_in_rl_bridge_a_model_with_another_policy_is_refused(server: Any, tiny_engine: Any,
                                                             tiny_model_dir: Path) -> None:
    own = RecordingEngine(tiny_engine)
    OWN_CONTEXT["ctx"] = AgentContext(policy=own)
    args = make_args(server.url, tiny_model_dir, "tests.test_sampling_edges:own_context_agent")
    s = asyncio.run(rl_bridge.generate(args, Sample(index=0, prompt="Hi", label="x"), SLIME_SAMPLING))
    assert s.status == Sample.Status.FAILED and sum(s.loss_mask) == 0
    reason = s.metadata["status_reason"]
    assert f"TracedChatModel(context=...) names policy engine {own.name!r}" in reason
    assert f"whose policy engine is 'sglang:{server.url}'" in reason and "drop context= from the model" in reason
    assert server.stats.generate_requests == 0 and own.calls == []  # neither engine sampled anything


async def test_in_run_rollout_evaluation_and_truncation_follow_the_runs_context(tiny_engine: Any) -> None:
    policy = RecordingEngine(ScriptedPolicy(tiny_engine, lambda call: LONG))
    OWN_CONTEXT["ctx"] = AgentContext(policy=policy, sampling={"max_new_tokens": 64})
    run = AgentContext(policy=policy, sampling={"max_new_tokens": 8}, evaluation=True)
    rollout = await run_rollout(own_context_agent(), rollout_input("Hi", "x"), run)
    (turn,) = rollout.turns
    assert len(policy.calls) == 1 and len(turn["output_ids"]) == 8  # the run's max_new_tokens, not the model's
    assert turn["trainable"] is False and rollout.status == "truncated"


async def test_the_models_own_context_serves_a_graph_run_without_one(tiny_engine: Any) -> None:
    policy = RecordingEngine(ScriptedPolicy(tiny_engine, lambda call: LONG))
    OWN_CONTEXT["ctx"] = AgentContext(policy=policy, sampling={"max_new_tokens": 8})
    out = await own_context_agent().build_graph(None).ainvoke({"messages": HI})  # no context=: nothing to conflict
    (turn,) = turns_from_messages(out["messages"])
    assert len(policy.calls) == 1 and len(turn["output_ids"]) == 8 and turn["trainable"] is True

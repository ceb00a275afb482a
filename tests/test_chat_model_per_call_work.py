"""TracedChatModel's work per call is O(new tokens): in a tool loop the tokens it renders and decodes for a call
do not grow with the conversation (counted on the tokenizer it is given, not timed).

64 concurrent create_react_agent rollouts x 10 policy turns; each turn the policy writes ~60 tokens ending in a
tool call and the tool answers ~300 tokens, so call 10 sees a prompt ~3,500 tokens long. The tokenizer counts
the tokens of every text `apply_chat_template` renders and every id list `decode` reads, per call. (Measured:
~640 tokens at call 1, +33 a call after that, vs +690 a call when the whole prompt was rendered and decoded.)
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from transformers import AutoTokenizer

from agentgraphs import history_digest
from agentgraphs.chat_model import TracedChatModel, messages_graph_spec
from agentgraphs.context import AgentContext, Limits
from agentgraphs.engines import SamplingParams
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.fake_engines import FixedLatencyEngine, Reply
from agentgraphs.trace import check_trace

ROLLOUTS, TURNS, TOOL_TOKENS = 64, 10, 300


class CountingTokenizer:
    """Wraps a tokenizer's `apply_chat_template` and `decode` on the instance; counts tokens per engine call."""

    def __init__(self, tok: Any) -> None:
        self.tok, self.calls = tok, 0
        self.rendered: dict[int, int] = {}
        self.decoded: dict[int, int] = {}
        render, decode, encode = tok.apply_chat_template, tok.decode, tok.encode

        def counting_render(*args: Any, **kwargs: Any) -> Any:
            out = render(*args, **kwargs)
            if isinstance(out, str):
                n = len(encode(out, add_special_tokens=False))
                self.rendered[self.calls] = self.rendered.get(self.calls, 0) + n
            return out

        def counting_decode(ids: Any, *args: Any, **kwargs: Any) -> str:
            self.decoded[self.calls] = self.decoded.get(self.calls, 0) + len(ids)
            return decode(ids, *args, **kwargs)

        tok.apply_chat_template, tok.decode = counting_render, counting_decode


class CountingEngine(FixedLatencyEngine):
    """Numbers the calls so the tokenizer knows which call its work belongs to (one rollout at a time)."""

    counter: Any = None

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        self.counter.calls += 1  # work from here to the next call belongs to the next call's successor
        return await super().generate(prompt_ids, params)


def _engine(tok: Any, counter: CountingTokenizer) -> CountingEngine:
    call = ('I will look this up before answering.\n<tool_call>\n{"name": "lookup", "arguments": '
            '{"topic": "stations"}}\n</tool_call>')
    final = "All facts are in. The answer is \\boxed{7}."
    script = lambda text: (*tok.encode(text, add_special_tokens=False), tok.eos_token_id)  # noqa: E731
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    engine = CountingEngine(latency_s=0.0, tokenizer=tok, replies=(
        Reply(scripts=(script(final),), marker=im_start, count=3 + 2 * (TURNS - 1)),
        Reply(scripts=(script(call),))))
    engine.counter = counter
    return engine


def test_tokens_rendered_and_decoded_per_call_do_not_grow_with_the_conversation(tiny_model_dir: Path,
                                                                                monkeypatch: Any) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)  # a fresh instance: its methods are wrapped
    counter = CountingTokenizer(tok)
    hashed: dict[int, int] = {}  # per call, the messages JSON-encoded for the history digests
    dumps = history_digest.dumps

    def counting_dumps(obj: Any) -> str:
        if isinstance(obj, dict) and "role" in obj:
            hashed[counter.calls] = hashed.get(counter.calls, 0) + 1
        return dumps(obj)

    monkeypatch.setattr(history_digest, "dumps", counting_dumps)
    words = " ".join(f"station{k} opened in year {1900 + k}" for k in range(TOOL_TOKENS))
    result = tok.decode(tok.encode(words, add_special_tokens=False)[:TOOL_TOKENS])

    @tool
    async def lookup(topic: str) -> str:
        """Look up the facts recorded about a topic."""
        return result

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        agent = create_react_agent(TracedChatModel(), [lookup], name="react")
    spec = messages_graph_spec(agent, reward=lambda rin, ctx: 0.0, name="react")
    ctx = AgentContext(policy=_engine(tok, counter), tokenizer=tok, sampling=SamplingParams(max_new_tokens=128),
                       limits=Limits(recursion_limit=100))

    async def run(i: int) -> Any:
        return await run_rollout(spec, rollout_input(f"Question {i}: when did the stations open?"), ctx,
                                 compute_reward=False)

    async def all_rollouts() -> list[Any]:
        # the first rollout alone, call by call attributed; then the other 63 at once (the counts above
        # describe one conversation, the concurrent ones must give the same training data)
        first = await run(0)
        return [first, *await asyncio.gather(*(run(i) for i in range(1, ROLLOUTS)))]

    rollouts = asyncio.run(all_rollouts())
    counted = counter.calls  # the reference renders below are not the model's work
    for r in rollouts:
        assert r.status == "completed" and len(r.turns) == TURNS and len(r.sequences) == 1, r.reason
        check_trace(r.turns, "concat")
    turns = rollouts[0].turns
    prompts = [len(t["prompt_ids"]) for t in turns]
    assert prompts[-1] > 3000  # the conversation did grow
    # and every prompt is what plain transformers renders for the conversation so far (own turns as written)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Question 0: when did the stations open?"}]
    schema = [convert_to_openai_tool(lookup)]
    for t in turns:
        expected = tok.apply_chat_template(history, tools=schema, tokenize=False, add_generation_prompt=True)
        assert tok.decode(t["prompt_ids"], skip_special_tokens=False) == expected
        history += [{"role": "assistant", "content": tok.decode(t["output_ids"][:-1], skip_special_tokens=False)},
                    {"role": "tool", "content": result}]

    # work[j]: the tokens rendered and decoded after call j was answered (its AIMessage) up to call j + 1
    # (planning its prompt): counter.calls counts the engine calls made so far
    work = [counter.rendered.get(j, 0) + counter.decoded.get(j, 0) for j in range(TURNS)]
    assert counted == ROLLOUTS * TURNS
    new = [prompts[0]] + [prompts[j] - prompts[j - 1] for j in range(1, TURNS)]  # output + tool result + glue
    for j in range(1, TURNS):
        # O(new tokens): the new ids a few times over, the fixed system prompt with the tool schema, and the
        # template's skeleton of the history (~17 tokens a message: a placeholder per content); a full render
        # + decode of the prompt would be ~2 x prompts[j]
        assert work[j] <= 3 * new[j] + prompts[0] + 20 * (2 * j + 2), (j, work, new, prompts)
    # from call 3 to call 10 the prompt grows by 7 x 345 tokens; the work per call by the skeleton's 14 messages
    growth = (work[-1] - work[2]) / (TURNS - 3)
    assert growth <= 2 * 20 < new[-1] / 8, (work, prompts)
    # the history digests encode only the messages added since the last call: its AIMessage and the tool result
    # (the first call: the question), where the whole history would be 2 j + 1 messages at call j + 1
    assert [hashed.get(j, 0) for j in range(TURNS)] == [1] + [2] * (TURNS - 1), hashed


REPLIES = [
    'Let me look.\n<tool_call>\n{"name": "lookup", "arguments": {"topic": "trains"}}\n</tool_call>',
    "Der Zug fährt um 7 Uhr — 列车七点出发 🙂🚆",
    " leading space and trailing newline\n",
    "a placeholder look-alike \u2063\u20630\u2064 and \u2064 in the text",
    "",
]


def _reference_extension(messages: list[Any], tok: Any, template: Any, tools: Any) -> list[int] | None:
    """The extension the old full check accepts: the last own call's prompt + output + glue, if plain
    transformers renders the whole history to exactly what those ids decode to."""
    from agentgraphs.chat import Conversation
    from agentgraphs.chat_model import _own_turn, to_template_messages

    k = max((i for i, m in enumerate(messages) if m.type == "ai"), default=None)
    if k is None or k == len(messages) - 1 or (turn := _own_turn(messages[k])) is None:
        return None
    dicts = to_template_messages(messages)
    conv = Conversation(template, turn["prompt_ids"])
    conv.add_output(turn["output_ids"], turn["finish_reason"])
    conv.add_messages(dicts[k + 1:])
    text = tok.apply_chat_template(dicts, tools=tools, tokenize=False, add_generation_prompt=True)
    return conv.ids if tok.decode(conv.ids, skip_special_tokens=False) == text else None


def test_the_new_tokens_check_decides_as_the_full_render_does(qwen25: Any, monkeypatch: Any) -> None:
    """Random tool loops with awkward text (multi-byte characters cut by max_new_tokens, empty replies,
    placeholder look-alikes, leading spaces, an edited history): every prompt is the one the full render
    and decode would choose, and extends exactly when they do."""
    import random

    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

    from agentgraphs import chat_model
    from agentgraphs.chat_model import TURN_KEY, plan_prompt, to_template_messages

    decisions: list[bool | None] = []
    check = chat_model._new_text_matches

    def counted(*args: Any) -> bool | None:
        decisions.append(check(*args))
        return decisions[-1]

    monkeypatch.setattr(chat_model, "_new_text_matches", counted)
    tok = qwen25
    scripts = [tuple(tok.encode(r, add_special_tokens=False)) + (tok.eos_token_id,) for r in REPLIES]
    cut = tok.encode("一二三🙂🚆", add_special_tokens=False)
    scripts.append(tuple(cut[:-1]))  # no end of turn: cut by max_new_tokens inside a character
    engine = FixedLatencyEngine(latency_s=0.0, tokenizer=tok, replies=(Reply(scripts=tuple(scripts)),))
    ctx = AgentContext(policy=engine, tokenizer=tok, sampling=SamplingParams(max_new_tokens=len(cut) - 1))
    schema = {"type": "function", "function": {"name": "lookup", "description": "Look up a topic.",
                                              "parameters": {"type": "object", "properties": {
                                                  "topic": {"type": "string"}}, "required": ["topic"]}}}
    model = TracedChatModel(context=ctx).bind_tools([schema])
    template = ctx.template(None)
    rng = random.Random(0)
    extended = fresh = 0

    async def loop() -> None:
        nonlocal extended, fresh
        for conversation in range(6):
            messages: list[Any] = [SystemMessage("Be exact."), HumanMessage(f"Conversation {conversation}: go.")]
            for step in range(8):
                reference = _reference_extension(messages, tok, template, [schema])
                plan = plan_prompt(messages, template, [schema])
                ai = await model.ainvoke(messages)
                turn = ai.response_metadata[TURN_KEY]
                assert turn["prompt_ids"] == plan.ids
                if reference is not None:
                    assert plan.ids == reference
                    extended += 1
                else:
                    text = tok.apply_chat_template(to_template_messages(messages), tools=[schema], tokenize=False,
                                                   add_generation_prompt=True)
                    assert tok.decode(plan.ids, skip_special_tokens=False) == text
                    fresh += 1
                messages.append(ai)
                if ai.tool_calls and rng.random() < 0.7:
                    messages.append(ToolMessage(rng.choice(["12 trains 🚆", "", "none\u2063"]),
                                                tool_call_id=ai.tool_calls[0]["id"]))
                else:
                    messages.append(HumanMessage(rng.choice(["And then?", " spaced ", "ok 🙂"])))
                if step == 5 and conversation % 2:
                    messages[1] = HumanMessage("An edited question.")  # history edited: renders afresh

    asyncio.run(loop())
    assert extended >= 20 and fresh >= 6, (extended, fresh)
    # the new-tokens check decided (it is called twice per step: by the test's plan and by the model's)
    assert decisions.count(True) >= 2 * 20 and None not in decisions, decisions


def test_history_digests_are_the_digests_earlier_versions_stored() -> None:
    """AIMessages in checkpoints written before carry the digest of json.dumps([messages, tools]): the one-pass
    computation must give exactly it, for the whole history and for the part before the last AIMessage."""
    import hashlib
    import json
    import random

    from agentgraphs.history_digest import history_digests

    def reference(obj: Any) -> str:  # the stored format, written out independently
        return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 6)
        dicts = [{"role": rng.choice(["user", "assistant", "tool"]), "content": "".join(
            rng.choice('a\u00e9\u2063x"\\ {}') for _ in range(rng.randint(0, 20)))} for _ in range(n)]
        tools = rng.choice([None, [{"type": "function", "function": {"name": "f", "parameters": {"b": 1}}}]])
        k = rng.choice([None, *range(n + 1)])
        full, before = history_digests(dicts, tools, k)
        assert full == reference([dicts, tools])
        assert before == (None if k is None else reference([dicts[:k], tools]))

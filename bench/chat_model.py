"""TracedChatModel's CPU per call in a long tool loop, against the append-only path `call_llm` takes.

    python bench/chat_model.py [--quick]

A ReAct-style conversation grows by one tool round per call: the model writes a hermes tool call (a fixed
~40-token reply from an instant engine, so all time measured is ours), the tool answers with ~T tokens of
text. Each call goes through `TracedChatModel.ainvoke` (LangChain's machinery, message conversion, the
"extends?" check, glue, tool-call parsing, the AIMessage with its Turn). For a content-opaque template
(Qwen2.5's) the check renders the history's skeleton and decodes only the new ids: O(new tokens); the
digests of the message history stay linear in the context (one JSON encoding of every message per call). The reference is the append-only conversation `call_llm` rebuilds
(`Conversation` + `add_output` + `add_messages`) for the same rounds: the ids are checked identical.
Target: CPU per call at the last round (the longest context) <= 50 ms with a ~32K-token context (a
generation on SGLang takes seconds). The figures at two lengths show the slope (the token counts are
tested, not timed, in tests/test_chat_model_per_call_work.py). Thread CPU time, medians of the repeats.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
from langchain_core.messages import HumanMessage, ToolMessage

from agentgraphs.chat import ChatTemplate, Conversation
from agentgraphs.chat_model import TURN_KEY, TracedChatModel
from agentgraphs.context import AgentContext
from agentgraphs.engines import Completion, SamplingParams

NAME = "chat_model"
TARGET_MS = 50.0
REPLY = '<tool_call>\n{"name": "search", "arguments": {"query": "population of the largest city"}}\n</tool_call>'
TOOL = {"type": "function", "function": {"name": "search", "description": "Search the web.",
                                          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                         "required": ["query"]}}}


class InstantEngine:
    """Returns REPLY's ids at once (log-prob -0.5 each): the engine costs nothing, so the CPU is ours."""

    def __init__(self, tokenizer: Any) -> None:
        self.name = "instant"
        self.tokenizer = tokenizer
        self.ids = tokenizer.encode(REPLY, add_special_tokens=False) + tokenizer.encode("<|im_end|>",
                                                                                       add_special_tokens=False)
        self.text = tokenizer.decode(self.ids, skip_special_tokens=False)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        return Completion(token_ids=list(self.ids), logprobs=[-0.5] * len(self.ids), finish_reason="stop",
                          text=self.text, prompt_tokens=len(prompt_ids), rid=uuid.uuid4().hex)


def tool_text(tokenizer: Any, tokens: int, round_: int) -> str:
    words = [f"fact{round_}-{i}" for i in range(tokens)]
    text = " ".join(words)
    ids = tokenizer.encode(text, add_special_tokens=False)[:tokens]
    return tokenizer.decode(ids)


async def run_model(tokenizer: Any, rounds: int, tool_tokens: int) -> tuple[list[float], list[list[int]]]:
    ctx = AgentContext(policy=InstantEngine(tokenizer), tokenizer=tokenizer)
    model = TracedChatModel(context=ctx).bind_tools([TOOL])
    messages: list[Any] = [HumanMessage("Find the population of the largest city and double it.")]
    cpu: list[float] = []
    prompts: list[list[int]] = []
    for r in range(rounds):
        start = time.thread_time()
        ai = await model.ainvoke(messages)
        cpu.append(time.thread_time() - start)
        prompts.append(ai.response_metadata[TURN_KEY]["prompt_ids"])
        messages += [ai, ToolMessage(tool_text(tokenizer, tool_tokens, r), tool_call_id=ai.tool_calls[0]["id"])]
    return cpu, prompts


def run_append_only(tokenizer: Any, rounds: int, tool_tokens: int, reply_ids: list[int]) -> tuple[list[float],
                                                                                                    list[list[int]]]:
    tpl = ChatTemplate(tokenizer)
    cpu: list[float] = []
    prompts: list[list[int]] = []
    conv: Conversation | None = None
    for r in range(rounds):
        start = time.thread_time()
        if conv is None:
            conv = Conversation.start(tpl, [{"role": "user", "content":
                                             "Find the population of the largest city and double it."}], tools=[TOOL])
        else:
            conv.add_output(reply_ids, "stop")
            conv.add_messages([{"role": "tool", "content": tool_text(tokenizer, tool_tokens, r - 1)}])
        cpu.append(time.thread_time() - start)
        prompts.append(list(conv.ids))
    return cpu, prompts


def measure(tokenizer: Any, rounds: int, tool_tokens: int, repeats: int) -> dict[str, Any]:
    reply_ids = InstantEngine(tokenizer).ids
    ours_last, hand_last, ours_total, hand_total = [], [], [], []
    context = 0
    for _ in range(repeats):
        cpu, prompts = asyncio.run(run_model(tokenizer, rounds, tool_tokens))
        hcpu, hprompts = run_append_only(tokenizer, rounds, tool_tokens, reply_ids)
        if prompts != hprompts:
            raise AssertionError("TracedChatModel's prompts differ from the append-only conversation's")
        context = len(prompts[-1])
        ours_last.append(cpu[-1] * 1e3)
        hand_last.append(hcpu[-1] * 1e3)
        ours_total.append(sum(cpu))
        hand_total.append(sum(hcpu))
    return {"rounds": rounds, "tool_tokens": tool_tokens, "context_tokens": context,
            "ours_last_call_ms": statistics.median(ours_last), "append_only_last_call_ms": statistics.median(hand_last),
            "ours_total_s": statistics.median(ours_total), "append_only_total_s": statistics.median(hand_total)}


def main() -> None:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    tokenizer = _common.tiny_tokenizer()
    sizes = [(4, 200), (8, 200)] if args.quick else [(16, 1000), (32, 1000)]
    repeats = 1 if args.quick else 3
    results: dict[str, Any] = {"target_ms": TARGET_MS, "quick": args.quick, "runs": []}
    for rounds, tool_tokens in sizes:
        row = measure(tokenizer, rounds, tool_tokens, repeats)
        results["runs"].append(row)
        print(f"{rounds:3d} rounds x {tool_tokens} tool tokens -> {row['context_tokens']} tokens: last call "
              f"{row['ours_last_call_ms']:.1f} ms (append-only {row['append_only_last_call_ms']:.1f} ms); whole "
              f"loop {row['ours_total_s']:.2f} s (append-only {row['append_only_total_s']:.2f} s)")
    last = results["runs"][-1]
    passed = last["ours_last_call_ms"] <= TARGET_MS
    results["passed"] = passed
    _common.finish(args.results_dir, NAME, results, passed,
                   f"{last['ours_last_call_ms']:.1f} ms CPU per call at {last['context_tokens']} tokens <= {TARGET_MS} ms")


if __name__ == "__main__":
    main()

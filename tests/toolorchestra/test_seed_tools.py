"""The QA tools under `variant: seed` run as the seed runs them (Takenzz/AgentFlow@4b5aa84,
agentic/ToolOrchestra/orchestra_solver.py:502-640, prompt_builder.py), checked from the outside: the experts are
OpenAI-compatible endpoints on 127.0.0.1 (as the seed serves them, tools/expert_caller/tool.py), every request
body is kept, and the strings below are the seed's, written out literally (file:line beside each). The
orchestrator is scripted over the tiny Qwen3-template model; the retrieval is a stand-in with fixed scores.
`variant: original` is checked to ask what it asked before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines.base import SamplingParams
from agentgraphs.engines.hf import HFEngine
from agentgraphs.errors import ConfigError, RetrievalError
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.tiny_model import ensure_tiny_model
from agentgraphs.toolorchestra import SPEC
from agentgraphs.toolorchestra.prompts import tool_schemas
from agentgraphs.trace import check_trace
from tests.asgi_server import serving
from tests.toolorchestra.test_experts import ChatEndpoint, call

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

QUESTION = "What is the launch code of Zorblax station plus one?"
EXPERTS = {"search": ["searcher"], "enhance_reasoning": ["reasoner"], "answer": ["answerer"]}
USAGE = {"prompt_tokens": 1, "completion_tokens": 1}

# the seed's strings, literally
SYSTEM = ("You are an orchestrator. You must ALWAYS call the appropriate tool to handle user requests. Never answer "
          "directly without using a tool.")  # prompt_builder.py:20
SEARCH_SYSTEM = "You are a search query writer. Generate concise, targeted search queries."  # orchestra_solver.py:589
REASONING_SYSTEM = ("You are an expert reasoning assistant. Break down complex problems step by step. Show your "
                    "thought process clearly.")  # orchestra_solver.py:632-635
ANSWER_SYSTEM = "You are a helpful expert. Provide a clear, accurate answer."  # orchestra_solver.py:519
ASK_QUERY = ("Question: " + QUESTION + "\nInstead of directly answering the question, please write a search query "
             "that would help find the relevant information. Wrap the query within <query> and </query>.")  # :578-583
THINK = "\n\nPlease think through this step by step, showing your reasoning process in detail."  # :626
WRAP = ("\n\nBased on all the information above, provide your final answer. Wrap the final answer within <answer> "
        "and </answer>.")  # :510-513

# the retrieval's two hits, as the seed's search tool writes them (tools/search_retrieval/tool.py:66-80): the
# second cut to the seed's 500 characters
FACT = "The launch code of Zorblax station is 4321."
DOCS = f"[Doc 1] (score=12.5000)\n{FACT}\n\n[Doc 2] (score=3.2500)\n" + "z" * 500


class Retrieval:
    """`ctx.tools["retrieval"]`: keeps every query; answers two passages with fixed scores, or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.queries: list[str] = []
        self.fail = fail

    async def search(self, query: str, topk: int = 3) -> list[dict[str, Any]]:
        self.queries.append(query)
        if self.fail:
            raise RetrievalError("http://127.0.0.1:9", 1, "the retrieval service is down")
        return [{"document": {"id": "1", "contents": f"  {FACT}\n"}, "score": 12.5},
                {"document": {"id": "2", "title": "Z", "contents": "z" * 600}, "score": 3.25}]


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


@pytest.fixture()
def endpoint() -> Iterator[tuple[ChatEndpoint, str]]:
    chat = ChatEndpoint()
    with serving(chat.app()) as url:
        yield chat, f"{url}/v1"


def run(scorer: HFEngine, script: list[str], url: str, retrieval: Retrieval | None = None, question: str = QUESTION,
        label: str = "4322", max_new_tokens: int = 16384, **options: Any) -> tuple[Any, ScriptedPolicy]:
    from agentgraphs.engines.openai import OpenAIChatEngine

    engines = {name: OpenAIChatEngine(url, model=name, max_retries=0) for name in ("searcher", "reasoner", "answerer")}
    policy = ScriptedPolicy(scorer, script, name="orchestrator")
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines=engines,
                       tools={"retrieval": retrieval or Retrieval()},
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens))  # the run's cap
    inp = rollout_input(question, label, {}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"experts": EXPERTS, **options}))
    return rollout, policy


def sent(chat: ChatEndpoint, model: str) -> list[list[dict[str, str]]]:
    """The messages of every request `model` received."""
    return [r["messages"] for r in chat.requests if r["model"] == model]


def tokens(scorer: HFEngine, text: str) -> int:
    return len(scorer.tokenizer.encode(text, add_special_tokens=False))


SCRIPT = [call("search", "searcher"), call("enhance_reasoning", "reasoner"), call("answer", "answerer")]
QUERY_REPLY = "<think>\nThe code is in a document.\n</think>\n\n<query> Zorblax station launch code </query>"
REASONING_REPLY = ("<think>\nadd one\n</think>\n\nThe document says 4321.\n```python\nprint(4321 + 1)\n```\n"
                   "So it is 4322.")
ANSWER_REPLY = "<think>\nIs it <answer>1</answer>? No.\n</think>\n\n<answer> 4322 </answer>"


def test_each_tool_asks_its_expert_what_the_seed_asks_and_the_orchestrator_reads_the_seeds_conversation(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    chat, url = endpoint
    chat.replies = {"searcher": [(QUERY_REPLY, USAGE)], "reasoner": [(REASONING_REPLY, USAGE)],
                    "answerer": [("<think>\nsure\n</think>\n\n<answer> 4322 </answer>", USAGE)]}
    retrieval = Retrieval()
    rollout, policy = run(scorer, SCRIPT, url, retrieval)
    assert rollout.status == "completed", rollout.reason
    # search: the query writer's messages; its tagged query is what was searched
    search_asked = ASK_QUERY
    assert sent(chat, "searcher") == [[{"role": "system", "content": SEARCH_SYSTEM},
                                       {"role": "user", "content": search_asked}]]
    assert retrieval.queries == ["Zorblax station launch code"]
    # enhance_reasoning: the question, the search's context part, the seed's suffix; its reply runs nowhere
    reasoning_asked = f"{QUESTION}\n\n[Search by searcher]\n{DOCS}{THINK}"
    assert sent(chat, "reasoner") == [[{"role": "system", "content": REASONING_SYSTEM},
                                       {"role": "user", "content": reasoning_asked}]]
    # answer: both parts in the order they came, the reasoner's reply whole (its <think> block too)
    answer_asked = f"{QUESTION}\n\n[Search by searcher]\n{DOCS}\n\n[Reasoning by reasoner]\n{REASONING_REPLY}{WRAP}"
    assert sent(chat, "answerer") == [[{"role": "system", "content": ANSWER_SYSTEM},
                                       {"role": "user", "content": answer_asked}]]
    # every expert call: the seed's max_tokens and temperature (orchestra_solver.py:95, tools/expert_caller:89)
    assert {(r["max_tokens"], r["temperature"]) for r in chat.requests} == {(8192, 0.7)}
    # the answer scored is the one inside <answer>, stripped
    assert rollout.answer == "4322" and rollout.reward == 1.0
    # the orchestrator: one conversation, each turn as generated (<|im_end|> kept, slime's default) and each
    # tool's result as a tool message, rendered by transformers' own chat template
    history = [{"role": "assistant", "content": SCRIPT[0] + "<|im_end|>"}, {"role": "tool", "content": DOCS},
               {"role": "assistant", "content": SCRIPT[1] + "<|im_end|>"},
               {"role": "tool", "content": REASONING_REPLY}]
    for n, c in enumerate(policy.calls):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": (
            f"Problem: {QUESTION}\n\nChoose an appropriate tool.")}, *history[:2 * n]]
        reference = scorer.tokenizer.apply_chat_template(messages, tools=tool_schemas(EXPERTS), tokenize=False,
                                                         add_generation_prompt=True)
        assert c.prompt_text == reference, n
        assert c.prompt_ids == scorer.tokenizer(reference, add_special_tokens=False)["input_ids"], n
    # invariants 1-3: each orchestrator turn is its own sequence, token for token the prompt the engine saw and
    # the ids and log-probs it returned; no expert token is trained
    sequences = check_trace(rollout.turns, "per_turn")
    assert len(sequences) == len(policy.calls) == 3
    for n, (seq, c) in enumerate(zip(sequences, policy.calls)):
        response = seq["tokens"][len(c.prompt_ids):]
        assert seq["tokens"][:len(c.prompt_ids)] == c.prompt_ids and seq["response_length"] == len(response), n
        assert scorer.tokenizer.decode(response, skip_special_tokens=False) == SCRIPT[n] + "<|im_end|>", n
        assert seq["loss_mask"] == [1] * len(response) and len(seq["rollout_log_probs"]) == len(response), n
    # the seed's _make_stats: the user message and the tool's result under the orchestrator's tokenizer
    steps = rollout.final_state["steps"]
    assert [(s["expert_input_tokens"], s["expert_output_tokens"]) for s in steps] == [
        (tokens(scorer, search_asked), tokens(scorer, DOCS)),
        (tokens(scorer, reasoning_asked), tokens(scorer, REASONING_REPLY)),
        (tokens(scorer, answer_asked), tokens(scorer, "<think>\nsure\n</think>\n\n<answer> 4322 </answer>"))]


ANSWERS = {  # the answer expert's reply -> the answer the seed scores (orchestra_solver.py:524-568)
    "first <answer>, even inside the reasoning": ("<think>\n<answer>4322</answer>?\n</think>\n\n<answer>1</answer>",
                                                 "4322"),
    "last \\boxed{} with nested braces, <think> removed": (
        "<think>\\boxed{1}</think>\nSo \\boxed{2} then \\boxed{\\text{4322}}", "\\text{4322}"),
    "an unclosed \\boxed{}, then **Final Answer**": ("\\boxed{4322 \n**Final Answer**: **4322**\nDone", "4322"),
    "the answer is X": ("<think>the answer is 1</think> I checked: the answer is 4322, clearly.", "4322"),
    "none: the whole reply, <think> and all": ("<think>\nhm\n</think>\n\n4322", "<think>\nhm\n</think>\n\n4322"),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_the_answer_scored_is_the_seeds_extraction(scorer: HFEngine, endpoint: tuple[ChatEndpoint, str],
                                                    case: str) -> None:
    chat, url = endpoint
    reply, expected = ANSWERS[case]
    chat.replies = {"answerer": [(reply, USAGE)]}
    rollout, _ = run(scorer, [call("answer", "answerer")], url)
    assert rollout.status == "completed" and rollout.answer == expected, rollout.reason
    assert sent(chat, "answerer") == [[{"role": "system", "content": ANSWER_SYSTEM},
                                       {"role": "user", "content": QUESTION + WRAP}]]
    # the seed's correctness rule over that answer: the gold inside it (the whole reply's 5 words too)
    assert rollout.reward == 1.0


@pytest.mark.parametrize("reply", ["Zorblax station launch code", "<query>ab</query>",
                                   "<query>ab</query> <query>Zorblax station launch code</query>", None])
def test_a_search_without_a_query_searches_the_problems_first_200_characters(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str], reply: str | None) -> None:
    """No <query> tag, a first one under 3 characters (a later tag is never read: the seed's re.search), or a
    query writer that fails (its endpoint answers 500):
    the seed searches `question[:200]` (orchestra_solver.py:594, 607-616)."""
    chat, url = endpoint
    question = "Which station? " + "filler " * 40 + "What is its launch code?"
    assert len(question) > 200
    chat.replies = {"searcher": [(reply, USAGE)] if reply is not None else [],
                    "answerer": [("<answer>4322</answer>", USAGE)]}
    retrieval = Retrieval()
    rollout, policy = run(scorer, [call("search", "searcher"), call("answer", "answerer")], url, retrieval,
                          question=question)
    assert rollout.status == "completed", rollout.reason
    assert retrieval.queries == [question[:200]]
    assert rollout.final_state["history"][1] == {"role": "tool", "name": "search", "content": DOCS}
    assert (rollout.final_state["steps"][0]["ok"], rollout.answer) == (reply is not None, "4322")


def test_a_failed_search_is_the_seeds_no_results(scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """The service fails: the part says "No results found.", the orchestrator reads "No relevant documents
    found." (orchestra_solver.py:596-602)."""
    chat, url = endpoint
    chat.replies = {"searcher": [("<query>Zorblax</query>", USAGE)], "answerer": [("<answer>4322</answer>", USAGE)]}
    rollout, policy = run(scorer, [call("search", "searcher"), call("answer", "answerer")], url,
                          Retrieval(fail=True))
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    assert rollout.final_state["history"][1]["content"] == "No relevant documents found."
    assert sent(chat, "answerer")[0][1]["content"] == f"{QUESTION}\n\n[Search by searcher] No results found.{WRAP}"
    assert "the retrieval service is down" in rollout.final_state["steps"][0]["error"]


def test_a_conversation_past_the_seeds_budget_loses_its_oldest_middle_messages(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """The seed's budget is 131072 - max_new_tokens - 32 - the tool list's tokens, at least 1024
    (orchestra_solver.py:363-368); past it the first and last messages stay and the middle ones are kept newest
    first while each fits (:407-444): the problem's message is the first to go. Here max_new_tokens 131072 leaves
    1024, and two long reasoner replies pass it at the third turn."""
    chat, url = endpoint
    long_reply = "step " * 700
    chat.replies = {"reasoner": [(long_reply, USAGE), (long_reply, USAGE)],
                    "answerer": [("<answer>4322</answer>", USAGE)]}
    script = [call("enhance_reasoning", "reasoner"), call("enhance_reasoning", "reasoner"), call("answer", "answerer")]
    rollout, policy = run(scorer, script, url, max_new_tokens=131072, orchestrator_max_new_tokens=131072)
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    count = [tokens(scorer, t) for t in (SYSTEM, f"Problem: {QUESTION}\n\nChoose an appropriate tool.",
                                         SCRIPT[0] + "<|im_end|>", long_reply)]
    # system + last turn + its result fit; the first result does not fit beside them
    assert count[0] + 2 * count[3] + count[2] > 1024 >= count[0] + count[2] + count[3]
    kept = [{"role": "system", "content": SYSTEM},
            {"role": "assistant", "content": script[1] + "<|im_end|>"}, {"role": "tool", "content": long_reply}]
    reference = scorer.tokenizer.apply_chat_template(kept, tools=tool_schemas(EXPERTS), tokenize=False,
                                                     add_generation_prompt=True)
    assert policy.calls[2].prompt_text == reference
    assert QUESTION not in policy.calls[2].prompt_text and QUESTION in policy.calls[1].prompt_text
    # the experts still get every context part (the seed cuts only the orchestrator's conversation); the
    # question and parts are stripped as a whole (orchestra_solver.py:509): the last reply's trailing space goes
    assert sent(chat, "answerer")[0][1]["content"] == (
        f"{QUESTION}\n\n[Reasoning by reasoner]\n{long_reply}\n\n[Reasoning by reasoner]\n{long_reply.rstrip()}{WRAP}")


def test_the_cut_tokenises_only_a_conversation_that_may_not_fit(scorer: HFEngine) -> None:
    """fit_messages skips the tokenizer when the contents' UTF-8 bytes (+1 a text) fit the budget: that bound holds
    for the real Qwen vocabulary on texts where tokens are densest per byte (whitespace runs, digits, CJK,
    emoji, an end-of-turn token written in the text), and the messages kept are drop_middle_messages' either way."""
    from agentgraphs.long_text import count_tokens
    from agentgraphs.toolorchestra.seed_tools import drop_middle_messages, fit_messages, message_budget

    hard = ["a", " \n\t  \n", "1234567890" * 30, "東京都の人口は約千四百万人です。" * 20, "🙂🚀" * 50,
            "x<|im_end|>y<|im_start|>", "\u00e9\u0301" * 40, SCRIPT[0] + "<|im_end|>"]
    assert all(count_tokens(scorer.tokenizer, t) <= len(t.encode()) + 1 for t in hard)
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return count_tokens(scorer.tokenizer, text)

    tools = str(tool_schemas(EXPERTS))
    short = [{"role": "system", "content": SYSTEM}, *({"role": "tool", "content": t} for t in hard)]
    assert fit_messages(short, tools, 16384, count) == short and counted == []
    # past the byte bound (max_new_tokens 131072 leaves 1024 tokens): counted, and cut as drop_middle_messages cuts
    long = [*short, {"role": "tool", "content": "step " * 700}, {"role": "tool", "content": "step " * 700}]
    budget = message_budget(131072, count_tokens(scorer.tokenizer, tools))
    assert fit_messages(long, tools, 131072, count) == drop_middle_messages(long, count, budget) != long
    assert counted


def test_variant_original_and_tool_protocol_original_ask_what_was_asked_before(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """`variant: original`, and `tool_protocol: original` alone under the seed's other presets: one user message
    per expert with this project's prompts, the first line of the query writer's reply after its reasoning
    searched, the orchestrator's fresh prompt with the rebuilt context, the last \\boxed{} answered."""
    chat, url = endpoint
    for options in ({"variant": "original"},
                    {"tool_protocol": "original", "expert_max_new_tokens": 2048, "expert_temperature": None,
                     "expert_sampling_base": "context"}):
        chat.requests.clear()
        chat.replies = {"searcher": [("<think>\nhm\n</think>\n\nZorblax launch code\nmore", USAGE)],
                        "answerer": [("<answer>1</answer> It is \\boxed{4322}.", USAGE)]}
        retrieval = Retrieval()
        rollout, policy = run(scorer, [call("search", "searcher"), call("answer", "answerer")], url, retrieval,
                              **options)
        assert rollout.status == "completed" and rollout.answer == "4322", (options, rollout.reason)
        assert retrieval.queries == ["Zorblax launch code"]
        assert sent(chat, "searcher") == [[{"role": "user", "content": (
            "Write one short web-search query that would find the information needed to solve the problem. Reply "
            f"with the query only.\n\nProblem: {QUESTION}\n\nNo information gathered yet.")}]]
        assert {(r["max_tokens"], r["temperature"]) for r in chat.requests} == {(2048, 1.0)}  # the run's sampling
        second = policy.calls[1].prompt_text  # a fresh prompt: one user message, no earlier turn, no tool message
        assert second.count("<|im_start|>user") == 1 and "<tool_response>" not in second and SYSTEM not in second
        assert f"Documents:\n{FACT}\n(title: Z) " in second
        assert "history" not in rollout.final_state and "context_parts" not in rollout.final_state


def test_the_seeds_conversation_needs_slimes_default_skip_special_tokens() -> None:
    """Each turn goes back into the conversation as SGLang's text with its <|im_end|>: slime's
    --rollout-skip-special-tokens would change every later prompt, so it is refused under the seed's tools."""
    seed, original = SPEC.default_options(), SPEC.resolve_options({"variant": "original"})
    with pytest.raises(ConfigError, match="rollout-skip-special-tokens"):
        SPEC.check_reply_text_keys(seed, {"skip_special_tokens": True})
    SPEC.check_reply_text_keys(seed, {"skip_special_tokens": False})
    SPEC.check_reply_text_keys(original, {"skip_special_tokens": True})


class ContentRetrieval(Retrieval):
    """A stand-in that answers as the seed's own service does: the text under "content" (retrieval_general_thought.py),
    one hit with both keys (the seed's tool reads "content" first)."""

    async def search(self, query: str, topk: int = 3) -> list[dict[str, Any]]:
        self.queries.append(query)
        return [{"document": {"id": "1", "content": f"  {FACT}\n"}, "score": 12.5},
                {"document": {"id": "2", "content": "z" * 600, "contents": "ignored by the seed"}, "score": 3.25}]


def test_a_document_whose_text_is_under_content_is_read_as_the_seeds_search_tool_reads_it(
        scorer: HFEngine, endpoint: tuple[ChatEndpoint, str]) -> None:
    """The seed's search tool reads `doc.get("content", doc.get("contents", ""))` (tools/search_retrieval/tool.py:
    72): a `ctx.tools["retrieval"]` that answers as the seed's service does shows its documents, never "No
    relevant documents found."."""
    chat, url = endpoint
    chat.replies = {"searcher": [("<query>Zorblax</query>", USAGE)], "answerer": [("<answer>4322</answer>", USAGE)]}
    rollout, _ = run(scorer, [call("search", "searcher"), call("answer", "answerer")], url, ContentRetrieval())
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["history"][1]["content"] == DOCS
    assert sent(chat, "answerer")[0][1]["content"] == f"{QUESTION}\n\n[Search by searcher]\n{DOCS}{WRAP}"

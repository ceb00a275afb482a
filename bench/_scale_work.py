"""The workloads of bench/scale.py, each two ways: through agentgraphs and by hand in slime's style.

- react: LangGraph's `create_react_agent` over `TracedChatModel` with one local async tool, `lookup`. The
  server's policy writes ~`gen_tokens` tokens ending in a hermes call of `lookup` (one of 8 queries, picked by
  the prompt's length), the tool answers ~`tool_tokens` tokens of text, and turn `turns` answers instead
  (the server counts <|im_start|> in the prompt: `agentgraphs.testing.fake_engines.Reply`).
  One conversation: the prompt grows by the output + the tool result + glue every turn.
- toolorchestra: ToolOrchestra's QA graph (variant "original": 30 orchestrator turns), the search expert
  and the retrieval service in its own process. Every orchestrator turn chooses `search`, the expert writes
  one of 8 queries, the service returns 3 passages (~170 tokens each) that become notes, so the fresh
  prompt of the next turn is ~500 tokens longer. Two engine calls per turn (orchestrator + expert).

The hand loops make the identical /generate calls (and /retrieve calls) with ONE shared httpx client, as
`slime.utils.http_utils.post` keeps: render the template once, append output ids and hand-written glue
(react), or render each fresh prompt with ToolOrchestra's prompt text and context rule (toolorchestra).
Their training data is compared with ours, token for token, after every timed run.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx

from agentgraphs.engines import SamplingParams

QUESTION = "Question {i}: collect the facts recorded about topic {i} with the lookup tool, then answer."
TO_PROBLEM = "Problem {i}: which station did the courier of parcel {i} leave from, and when?"
QUERIES = 8
FILLER = ("Let me check which fact is still missing before I answer, and look it up carefully so that the "
          "final answer rests on what the records say rather than on a guess. ")
ANSWER = "I have collected the facts I need. The answer is \\boxed{42}."
TO_EXPERTS = {"search": ["search-expert"], "answer": ["answer-expert"]}
WORDS_PER_PASSAGE = 45  # ~170 tokens a passage with its title: 3 passages ~ 500 tokens a turn
_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


def sampling(max_new_tokens: int) -> dict[str, Any]:
    """The /generate sampling_params a hand loop writes out (checked equal to SGLangEngine's)."""
    return {"max_new_tokens": max_new_tokens, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
            "ignore_eos": False, "no_stop_trim": True, "skip_special_tokens": False,
            "spaces_between_special_tokens": False}


def _fill(tok: Any, text_after: str, gen_tokens: int) -> str:
    """Filler text + `text_after`, ~gen_tokens ids in all (+ <|im_end|>)."""
    room = max(0, gen_tokens - 1 - len(tok.encode(text_after, add_special_tokens=False)))
    filler = tok.decode(tok.encode(FILLER * (1 + gen_tokens // 20), add_special_tokens=False)[:room]).strip()
    return f"{filler}\n{text_after}" if filler else text_after


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# -- react ---------------------------------------------------------------------------------------------

def react_replies(tok: Any, turns: int, gen_tokens: int) -> list[dict[str, Any]]:
    """Server rules: turn `turns` answers (its prompt holds 3 + 2 (turns - 1) <|im_start|>), earlier turns call
    `lookup` with one of QUERIES queries."""
    calls = [_fill(tok, _call_text("lookup", {"query": f"topic-{q}"}), gen_tokens) for q in range(QUERIES)]
    return [{"marker": "<|im_start|>", "count": 3 + 2 * (turns - 1), "texts": [ANSWER]},
            {"marker": None, "texts": calls}]


def tool_results(tok: Any, tool_tokens: int) -> dict[str, str]:
    """What `lookup` answers for each query: ~tool_tokens tokens of text."""
    out = {}
    for q in range(QUERIES):
        words = " ".join(f"record{q}-{k} holds value {k * 7 + q} for the station" for k in range(tool_tokens))
        out[f"topic-{q}"] = tok.decode(tok.encode(words, add_special_tokens=False)[:tool_tokens])
    return out


def make_lookup(results: dict[str, str]) -> Any:
    from langchain_core.tools import tool

    @tool
    async def lookup(query: str) -> str:
        """Look up the facts recorded under a topic."""
        return results[query]

    return lookup


def react_spec(results: dict[str, str], model: Any = None) -> Any:
    """The react agent over `model` (default `TracedChatModel()`; the probe passes a subclass with a clock)."""
    import warnings

    from langgraph.prebuilt import create_react_agent

    from agentgraphs.chat_model import TracedChatModel, messages_graph_spec

    with warnings.catch_warnings():  # create_react_agent is deprecated in favour of langchain's create_agent
        warnings.simplefilter("ignore")
        agent = create_react_agent(model or TracedChatModel(), [make_lookup(results)], name="react")
    return messages_graph_spec(agent, reward=lambda rin, ctx: 0.0, name="react")


async def post_generate(http: httpx.AsyncClient, url: str, ids: list[int], max_new_tokens: int
                        ) -> tuple[list[int], list[float], str]:
    body = {"input_ids": ids, "sampling_params": sampling(max_new_tokens), "return_logprob": True,
            "logprob_start_len": -1, "rid": uuid.uuid4().hex}
    resp = await http.post(url + "/generate", json=body)
    resp.raise_for_status()
    out = resp.json()
    pairs = out["meta_info"]["output_token_logprobs"]
    return [p[1] for p in pairs], [p[0] for p in pairs], out["text"]


async def hand_react(http: httpx.AsyncClient, url: str, tok: Any, i: int, results: dict[str, str],
                     tool_schema: dict[str, Any], max_new_tokens: int, marks: list[float] | None = None,
                     ends: list[float] | None = None) -> dict[str, Any]:
    """One conversation by hand: the template rendered once, then output ids + hand-written glue appended.
    The probe's clock (`marks`, `ends`: thread CPU where each call's own work starts and ends): a call's work is
    what TracedChatModel does inside a call, by hand: the prompt ids (the template, then the tool result's
    glue), the /generate request and its parse, the training lists, and the reply's tool call."""
    import time

    if marks is not None:
        marks.append(time.thread_time())
    text = tok.apply_chat_template([{"role": "user", "content": QUESTION.format(i=i)}], tools=[tool_schema],
                                   tokenize=False, add_generation_prompt=True)
    ids: list[int] = tok.encode(text, add_special_tokens=False)
    prompt_len, mask, logprobs, calls = len(ids), [], [], 0
    while True:
        out, lps, reply = await post_generate(http, url, ids, max_new_tokens)
        calls += 1
        ids.extend(out)
        mask += [1] * len(out)
        logprobs += lps
        found = _CALL.search(reply)
        query = json.loads(found.group(1))["arguments"]["query"] if found is not None else None
        if ends is not None:
            ends.append(time.thread_time())
        if query is None:
            break
        result = results[query]  # the tool
        if marks is not None:
            marks.append(time.thread_time())
        glue = tok.encode("\n<|im_start|>user\n<tool_response>\n" + result
                          + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
        ids.extend(glue)
        mask += [0] * len(glue)
        logprobs += [0.0] * len(glue)
    return {"sequences": [{"tokens": ids, "response_length": len(ids) - prompt_len, "loss_mask": mask,
                           "rollout_log_probs": logprobs}], "calls": calls}


# -- toolorchestra -------------------------------------------------------------------------------------

def to_replies(tok: Any, queries: list[str], gen_tokens: int) -> list[dict[str, Any]]:
    """Server rules: a prompt with tools (<tool_call> in its system text) is the orchestrator's: it chooses
    `search`; any other is the search expert's: one query line."""
    choice = _fill(tok, _call_text("search", {"model": TO_EXPERTS["search"][0]}), gen_tokens)
    return [{"marker": "<tool_call>", "count": 1, "texts": [choice]},
            {"marker": None, "texts": [q + "\n" for q in queries]}]


def to_options(retrieval_url: str, turns: int) -> dict[str, Any]:
    return {"variant": "original", "max_turns": turns, "experts": TO_EXPERTS, "context_max_tokens": 200_000,
            "retrieval_url": retrieval_url, "retrieval_topk": 3, "orchestrator_max_new_tokens": 256,
            "expert_max_new_tokens": 64, "retrieval_timeout_s": 120.0}


async def hand_toolorchestra(http: httpx.AsyncClient, url: str, retrieval_url: str, tok: Any, i: int, turns: int,
                             marks: list[float] | None = None) -> dict[str, Any]:
    """ToolOrchestra's loop by hand: per turn a fresh orchestrator prompt, the expert's query, a /retrieve."""
    import time

    from agentgraphs.toolorchestra.notes import Note, render_context
    from agentgraphs.toolorchestra.parsing import parse_choice
    from agentgraphs.toolorchestra.prompts import ORCHESTRATOR_USER, SEARCH_EXPERT, tool_schemas

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    def cut(text: str, n: int) -> str:
        return tok.decode(tok.encode(text, add_special_tokens=False)[:n])

    def render(user: str, tools: Any = None) -> list[int]:
        text = tok.apply_chat_template([{"role": "user", "content": user}], tools=tools, tokenize=False,
                                       add_generation_prompt=True)
        return tok.encode(text, add_special_tokens=False)

    opts = to_options(retrieval_url, turns)
    problem = TO_PROBLEM.format(i=i)
    notes: list[Note] = []
    sequences, calls = [], 0
    for _ in range(turns):
        context = render_context(notes, count, opts["context_max_tokens"], cut)
        prompt = render(ORCHESTRATOR_USER.format(problem=problem, context=context), tool_schemas(TO_EXPERTS))
        if marks is not None:
            marks.append(time.thread_time())
        out, lps, text = await post_generate(http, url, prompt, opts["orchestrator_max_new_tokens"])
        calls += 1
        sequences.append({"tokens": prompt + out, "response_length": len(out), "loss_mask": [1] * len(out),
                          "rollout_log_probs": lps})
        if not parse_choice(text, TO_EXPERTS).ok:
            raise RuntimeError(f"hand loop: the orchestrator's reply did not parse: {text[-200:]!r}")
        context = render_context(notes, count, opts["context_max_tokens"], cut)
        _, _, query_text = await post_generate(http, url, render(SEARCH_EXPERT.format(problem=problem, context=context)),
                                               opts["expert_max_new_tokens"])
        calls += 1
        query = query_text.removesuffix("<|im_end|>").strip().splitlines()[0].strip()
        resp = await http.post(retrieval_url + "/retrieve", json={"queries": [query], "topk": opts["retrieval_topk"],
                                                                  "return_scores": True})
        resp.raise_for_status()
        for hit in resp.json()["result"][0]:
            doc = hit["document"]
            notes.append(Note(kind="document", text=f"(title: {doc['title']}) {doc['contents']}"))
    return {"sequences": sequences, "calls": calls}


def check_sampling() -> None:
    if SamplingParams(max_new_tokens=256).to_sglang() != sampling(256):
        raise SystemExit("the hand loop's sampling_params differ from SGLangEngine's: the comparison is void")

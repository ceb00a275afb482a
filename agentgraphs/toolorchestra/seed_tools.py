"""The seed's QA tools as text (option `tool_protocol: seed`): what each expert is asked, how its reply is read,
and what goes back to the orchestrator. Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/orchestra_solver.py.

The episode accumulates "context parts" (orchestra_solver.py:88): a search adds `[Search by EXPERT]` and the
documents it found, an enhance_reasoning `[Reasoning by EXPERT]` and the reasoner's whole reply. Every expert is
asked with a system message of its own and one user message built from the problem and those parts, joined
by blank lines (`expert_query`); the strings are prompts.SEED_*. The orchestrator reads each tool's result as a
tool message of its one conversation (graph.py). The nodes that call the experts are in graph.py; this module
is the text they build and read, so each rule can be checked alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .prompts import (SEED_ANSWER_SUFFIX, SEED_DOCUMENT, SEED_NO_DOCUMENTS, SEED_ORCHESTRATOR_SYSTEM,
                      SEED_ORCHESTRATOR_USER, SEED_REASONING_SUFFIX, SEED_SEARCH_ASK)

__all__ = ["QUERY_FALLBACK_CHARS", "SEED_CONTEXT_LENGTH", "answer_prompt", "drop_middle_messages", "extract_answer",
           "extract_query", "fit_messages", "format_documents", "message_budget", "orchestrator_messages",
           "reasoning_prompt", "search_prompt", "seed_transcript"]

QUERY_FALLBACK_CHARS = 200  # orchestra_solver.py:594: the query when the expert wrote none
_MIN_QUERY_CHARS = 3  # orchestra_solver.py:614: a shorter <query> is no query

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_QUERY_TAG = re.compile(r"<query>(.*?)</query>", re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_BOXED = "\\boxed{"
# the seed's last two tries, in order (orchestra_solver.py:558-561): a **Final Answer** line, then "the answer is X"
_FINAL_ANSWER_LINES = (re.compile(r"\*\*Final Answer\*\*[:\s]*(.+?)(?:\n|$)", re.IGNORECASE),
                       re.compile(r"(?:final answer|the answer) (?:is|=)[:\s]*(.+?)(?:\.|,|\n|$)", re.IGNORECASE))


def orchestrator_messages(problem: str, history: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The orchestrator's conversation: the seed's system prompt, the problem, then every earlier turn and its
    tool's result (orchestra_solver.py:116, 130, 165; prompt_builder.py:106-116, 138-165).

    >>> [m["role"] for m in orchestrator_messages("2+2?", [{"role": "assistant", "content": "..."},
    ...                                                    {"role": "tool", "content": "4"}])]
    ['system', 'user', 'assistant', 'tool']
    """
    return [{"role": "system", "content": SEED_ORCHESTRATOR_SYSTEM},
            {"role": "user", "content": SEED_ORCHESTRATOR_USER.format(problem=problem)},
            *(dict(m) for m in history)]


SEED_CONTEXT_LENGTH = 131072  # orchestra_solver.py:363: slime's sampling params carry no context_length
_MIN_MESSAGE_BUDGET, _PROMPT_MARGIN = 1024, 32  # orchestra_solver.py:367-368


def message_budget(max_new_tokens: int, tools_tokens: int) -> int:
    """The tokens the orchestrator's message contents may take (orchestra_solver.py:363-368): the seed's context
    length less the turn's max_new_tokens, a margin of 32 and the tool list's tokens, never under 1024.

    >>> message_budget(16384, 500), message_budget(131072, 0)
    (114156, 1024)
    """
    return max(_MIN_MESSAGE_BUDGET, SEED_CONTEXT_LENGTH - max_new_tokens - _PROMPT_MARGIN - tools_tokens)


def drop_middle_messages(messages: Sequence[Mapping[str, str]], count: Callable[[str], int], budget: int
                         ) -> list[dict[str, str]]:
    """The messages whose contents fit in `budget` tokens, as the seed cuts them (orchestra_solver.py:407-444):
    all of them when they fit; else the first and the last, and the middle ones newest first while each fits
    whole; the first that does not ends the walk, so the problem's message goes first of all.

    >>> msgs = [{"role": r, "content": c} for r, c in [("system", "s"), ("user", "q q"), ("assistant", "a"),
    ...                                                ("tool", "t t t"), ("assistant", "b")]]
    >>> words = lambda text: len(text.split())
    >>> [m["content"] for m in drop_middle_messages(msgs, words, 6)]
    ['s', 'a', 't t t', 'b']
    >>> len(drop_middle_messages(msgs, words, 8))
    5
    """
    out = [dict(m) for m in messages]
    sizes = [count(m.get("content") or "") for m in out]
    if len(out) <= 2 or sum(sizes) <= budget:
        return out
    room = budget - sizes[0] - sizes[-1]
    start = len(out) - 1
    while start > 1 and sizes[start - 1] <= room:
        start -= 1
        room -= sizes[start]
    return [out[0], *out[start:]]


def fit_messages(messages: Sequence[Mapping[str, str]], tools_text: str, max_new_tokens: int,
                 count: Callable[[str], int]) -> list[dict[str, str]]:
    """The orchestrator's messages cut to the seed's budget (`message_budget` with the tool list's tokens,
    `drop_middle_messages`), tokenising only when they may not fit: `count` gives at most one token per UTF-8
    byte of a text plus one (byte-level BPE, sentencepiece's added prefix), so contents whose byte bound fits the
    budget the tool list's byte bound leaves fit it in tokens too, and every turn of a short conversation is kept
    without encoding its whole history again.

    >>> asked = []
    >>> def count(text): asked.append(text); return len(text.split())
    >>> msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    >>> len(fit_messages(msgs, "[]", 16384, count)), asked
    (2, [])
    """
    def bound(text: str) -> int:
        return len(text.encode()) + 1 if text else 0

    if sum(bound(m.get("content") or "") for m in messages) <= message_budget(max_new_tokens, bound(tools_text)):
        return [dict(m) for m in messages]
    return drop_middle_messages(messages, count, message_budget(max_new_tokens, count(tools_text) if tools_text else 0))


def _with_context(problem: str, parts: Sequence[str]) -> str:
    # the problem, a blank line and the parts, stripped as a whole; the bare problem without parts
    context = "\n\n".join(parts)
    return f"{problem}\n\n{context}".strip() if context else problem


def reasoning_prompt(problem: str, parts: Sequence[str]) -> str:
    """enhance_reasoning's user message (orchestra_solver.py:624-626).

    >>> reasoning_prompt("2+2?", ["[Reasoning by r-1]\\nfour"]).splitlines()[:3]
    ['2+2?', '', '[Reasoning by r-1]']
    """
    return _with_context(problem, parts) + SEED_REASONING_SUFFIX


def answer_prompt(problem: str, parts: Sequence[str]) -> str:
    """answer's user message (orchestra_solver.py:508-513).

    >>> answer_prompt("2+2?", []).endswith("Wrap the final answer within <answer> and </answer>.")
    True
    """
    return _with_context(problem, parts) + SEED_ANSWER_SUFFIX


def search_prompt(problem: str, parts: Sequence[str]) -> str:
    """search's user message to the query writer: the parts first, then the question (orchestra_solver.py:576-583).

    >>> search_prompt("2+2?", ["[Search by s-1] No results found."]).splitlines()[:3]
    ['[Search by s-1] No results found.', '', 'Question: 2+2?']
    """
    context = "\n\n".join(parts)
    return (f"{context}\n\n" if context else "") + SEED_SEARCH_ASK.format(problem=problem)


def extract_query(reply: str, problem: str) -> str:
    """The query the expert wrote inside its first <query></query> (stripped, at least 3 characters), else the
    problem's first 200 characters (orchestra_solver.py:594, 607-616): a failed expert searches that too.

    >>> extract_query("<think>hm</think><query> Zorblax launch code </query>", "What is it?")
    'Zorblax launch code'
    >>> extract_query("Zorblax launch code", "What is it?"), extract_query("<query>ab</query>", "What is it?")
    ('What is it?', 'What is it?')
    """
    fallback = problem[:QUERY_FALLBACK_CHARS]
    found = _QUERY_TAG.search(reply or "")
    query = found.group(1).strip() if found else ""
    return query if len(query) >= _MIN_QUERY_CHARS else fallback


def format_documents(hits: Sequence[Mapping[str, Any]], max_chars: int) -> str:
    """The documents as the seed's search tool writes them (tools/search_retrieval/tool.py:66-80): `[Doc N]
    (score=S)` and the first `max_chars` characters of the stripped text, blank-line separated; a hit with no
    text is left out but keeps its number; none at all: "No relevant documents found.". The text is the seed's
    `doc.get("content", doc.get("contents", ""))` (tool.py:72): its own service names it "content", ours
    "contents", and a `ctx.tools["retrieval"]` stand-in may answer either way.

    >>> hits = [{"document": {"contents": " Paris is in France. "}, "score": 0.91234},
    ...         {"document": {"contents": ""}, "score": 0.5}, {"document": {"contents": "Lyon"}, "score": 0.4}]
    >>> print(format_documents(hits, 8))
    [Doc 1] (score=0.9123)
    Paris is
    <BLANKLINE>
    [Doc 3] (score=0.4000)
    Lyon
    >>> format_documents([], 500), format_documents([{"document": {"content": "Nice"}, "score": 1}], 500)
    ('No relevant documents found.', '[Doc 1] (score=1.0000)\\nNice')
    """
    docs = []
    for rank, hit in enumerate(hits, 1):
        doc = hit["document"]
        text = str(doc.get("content", doc.get("contents", ""))).strip()
        if text:
            docs.append(SEED_DOCUMENT.format(rank=rank, score=float(hit.get("score", 0.0)), text=text[:max_chars]))
    return "\n\n".join(docs) if docs else SEED_NO_DOCUMENTS


def _last_boxed(text: str) -> str:
    # the text after the last "\boxed{" up to its matching brace, stripped; "" when the brace never closes
    tail = text.split(_BOXED)[-1]
    depth = 1
    for i, ch in enumerate(tail):
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return tail[:i].strip()
    return ""


def extract_answer(reply: str) -> str:
    """The answer in an answer expert's reply, the seed's way (orchestra_solver.py:524, 527-568): the first
    <answer></answer> (even one inside its reasoning); else, with the <think> blocks removed, the last
    \\\\boxed{} (nested braces kept); else a **Final Answer** line or "the answer is X"; else the whole reply.

    >>> extract_answer("<think>maybe 3</think>\\n<answer> 4 </answer>")
    '4'
    >>> extract_answer("<think>\\\\boxed{1}</think> so \\\\boxed{\\\\frac{1}{2}} and \\\\boxed{x^{2}}")
    'x^{2}'
    >>> extract_answer("**Final Answer**: **Paris**\\nDone."), extract_answer("So the answer is 42, surely.")
    ('Paris', '42')
    >>> extract_answer("I do not know")
    'I do not know'
    """
    return _tagged_answer(reply) or reply


def _tagged_answer(reply: str) -> str:
    found = _ANSWER_TAG.search(reply)
    if found:
        return found.group(1).strip()
    cleaned = _THINK_BLOCK.sub("", reply)
    if _BOXED in cleaned:
        boxed = _last_boxed(cleaned)
        if boxed:
            return boxed
    for pattern in _FINAL_ANSWER_LINES:
        line = pattern.search(cleaned)
        answer = line.group(1).strip().strip("*").strip() if line else ""
        if answer:
            return answer
    return ""


_THINK_AND_SPACE = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
_SHOWN_WHEN_ONLY_THOUGHT = 300  # orchestra_solver.py:41: a turn with nothing but reasoning shows its start


def _turn_display(text: str) -> str:
    # every closed <think> block goes with the whitespace after it; a turn left blank shows its raw start
    shown = _THINK_AND_SPACE.sub("", text).strip()
    return shown or text[:_SHOWN_WHEN_ONLY_THOUGHT]


def seed_transcript(history: Sequence[Mapping[str, str]], steps: Sequence[Mapping[str, Any]]) -> str:
    """The text the seed keeps as an unanswered rollout's `response` and scores in place of its empty answer
    (orchestra_solver.py:729-758 builds it, reward.py:386 reads it): per orchestrator turn a `=== Turn N
    [Orchestrator] ===` header over the turn's text without its reasoning, then, when its tool returned text,
    a `--- Tool/Env Result [tool(expert)] ---` header over that text; blocks joined by blank lines. `history` is
    the orchestrator's conversation after its first two messages (assistant turns and tool results), `steps`
    the turns' tool and expert.

    >>> history = [{"role": "assistant", "content": "<think>look</think>\\n<tool_call>s</tool_call><|im_end|>"},
    ...            {"role": "tool", "name": "search", "content": "[Doc 1] (score=1.0000)\\nParis"},
    ...            {"role": "assistant", "content": "<think>only thinking"}]
    >>> print(seed_transcript(history, [{"tool": "search", "model": "search-1"}, {"tool": "", "model": ""}]))
    === Turn 0 [Orchestrator] ===
    <tool_call>s</tool_call><|im_end|>
    <BLANKLINE>
    --- Tool/Env Result [search(search-1)] ---
    [Doc 1] (score=1.0000)
    Paris
    <BLANKLINE>
    === Turn 1 [Orchestrator] ===
    <think>only thinking
    """
    blocks: list[str] = []
    turn = -1
    for message in history:
        content = message.get("content") or ""
        if message.get("role") == "assistant":
            turn += 1
            blocks.append(f"=== Turn {turn} [Orchestrator] ===\n{_turn_display(content)}")
        elif content and 0 <= turn < len(steps):
            step = steps[turn]
            label = f"{step['tool']}({step['model']})" if step.get("model") else str(step.get("tool") or None)
            blocks.append(f"--- Tool/Env Result [{label}] ---\n{content}")
    return "\n\n".join(blocks)

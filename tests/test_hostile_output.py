"""Hostile model output: every parser of model text takes ANY string and returns its documented
fallback, never an exception (a policy in RL training writes anything, and one raise would turn a
trajectory into a crash instead of a zero reward).

Property tests (hypothesis) feed arbitrary unicode and crafted mixes of the markers the parsers look
for; example tests pin the exact rules (methods.md: ToolOrchestra's tool calls, AgentFlow's planner,
verifier and answer tags, MemAgent's boxed answer and RULER metrics).
"""

from __future__ import annotations

import doctest
import json
import re
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentgraphs.agentflow import parsing as af
from agentgraphs.agentflow.parsing import (
    NO_MATCHED_TOOL,
    parse_answer_tags,
    parse_next_step,
    parse_verifier_conclusion,
)
from agentgraphs.memagent import prompts, reward
from agentgraphs import toolcalls
from agentgraphs.toolcalls import ParseResult, parse_tool_calls

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOOLS = ["Python_Coder_Tool", "Base_Generator_Tool", "Google_Search_Tool"]
MARKERS = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<answer>", "</answer>",
    "\\boxed{", "\\boxed ", "\\fbox{", "{", "}", "[", "]", '"', ":", ",", "\\", "$", "=", "/", ".",
    "Conclusion:", "conclusion", "**", "*", " ", "\n", "\n\n", "```", "```json",
    "Context:", "Sub-Goal:", "Tool Name:", "STOP", "CONTINUE", "stop", "continue",
    '{"name": "search", "arguments": {"q": "x"}}', '"name"', '"arguments"', "null", "1e999",
    '{"conclusion": "STOP"}', '{"stop_signal": true}', '{"context": "c", "sub_goal": "s", "tool_name": "t"}',
    "\\frac", "\\dfrac", "\\sqrt", "\\left", "\\right", "^\\circ", "\\text{ ", "\\%", "\\$", "0.5", "\\!",
    "Python_Coder_Tool", "python coder tool", "yes", "no", "the", "a",
]
# surrogate-free unicode (hypothesis' default alphabet for text())
any_text = st.text(max_size=300)
marker_soup = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=12)), max_size=40).map("".join)
nested = st.builds(
    lambda opener, n, closer, m, tail: opener * n + tail + closer * m,
    st.sampled_from(["{", "[", '{"a":', "\\boxed{", "<tool_call>{", "<answer>", "**", "Conclusion:"]),
    st.integers(0, 3000),
    st.sampled_from(["}", "]", "</tool_call>", "</answer>", ""]),
    st.integers(0, 3000),
    st.text(max_size=10),
)
hostile = st.one_of(any_text, marker_soup, nested)
golds = st.one_of(st.text(max_size=30), st.lists(st.text(max_size=30), max_size=3))


# -- every parser, any text: never raises, always its documented type -----------------------------


@PROPERTY
@given(hostile, st.one_of(st.none(), st.lists(st.sampled_from(["search", "answer", "x"]), max_size=3)))
def test_tool_calls_never_raise(text: str, allowed: list[str] | None) -> None:
    r = parse_tool_calls(text, allowed)
    assert isinstance(r, ParseResult) and isinstance(r.ok, bool) and isinstance(r.content, str)
    assert (r.error is None) == r.ok
    assert isinstance(r.error, (str, type(None))) and (r.ok or r.error)
    if r.ok:
        assert r.calls
    for call in r.calls:
        assert set(call) == {"name", "arguments"}
        assert isinstance(call["name"], str) and call["name"] and isinstance(call["arguments"], dict)
        assert allowed is None or call["name"] in allowed


@PROPERTY
@given(hostile, st.lists(st.sampled_from(TOOLS + ["", "x y", "A_b"]), max_size=4))
def test_next_step_never_raises(text: str, tools: list[str]) -> None:
    step = parse_next_step(text, tools)
    assert set(step) == {"context", "sub_goal", "tool_name", "matched"}
    assert all(isinstance(step[k], str) for k in ("context", "sub_goal", "tool_name"))
    assert isinstance(step["matched"], bool)
    if step["matched"]:
        assert step["tool_name"] in tools
    else:
        assert step["tool_name"].startswith(NO_MATCHED_TOOL)


@PROPERTY
@given(hostile)
def test_verifier_and_answer_never_raise(text: str) -> None:
    assert parse_verifier_conclusion(text) in ("STOP", "CONTINUE")
    answer = parse_answer_tags(text)
    assert isinstance(answer, str) and answer in text
    if "</answer>" not in text:
        assert answer == text.strip()


@PROPERTY
@given(hostile, golds)
def test_memagent_parsers_never_raise(text: str, gold: str | list[str]) -> None:
    boxed = reward.last_boxed(text)
    assert boxed is None or (isinstance(boxed, str) and boxed in text)
    assert isinstance(reward.normalize_math(text), str)
    assert reward.memagent_reward(text, gold) in (0.0, 1.0)
    metrics = reward.eval_metrics(text, gold)
    assert set(metrics) == {"em", "sub_em", "f1", "sub_em_strict", "answered"}
    assert metrics["em"] in (0.0, 1.0) and metrics["sub_em"] in (0.0, 1.0) and 0.0 <= metrics["f1"] <= 1.0
    assert reward.em(text, gold) in (0.0, 1.0) and reward.sub_em(text, gold) in (0.0, 1.0)
    assert 0.0 <= reward.f1(text, gold) <= 1.0
    memory = prompts.memory_from_response(text)
    assert isinstance(memory, str) and memory in text
    if "</think>" not in text:
        assert memory == text


@PROPERTY
@given(any_text, st.from_regex(r"[A-Za-z0-9]{1,20}", fullmatch=True))
def test_boxed_gold_at_the_end_scores_one(prefix: str, gold: str) -> None:
    assert reward.memagent_reward(prefix + " so the answer is \\boxed{" + gold + "}", [gold]) == 1.0
    assert reward.eval_metrics("\\boxed{" + gold + "}", gold)["em"] == 1.0


# -- linear time on hostile runs (no catastrophic regex backtracking) -----------------------------


@pytest.mark.parametrize("text", [
    "Conclusion" + " " * 200_000 + "!",
    "conclusion" + "*" * 200_000 + ":",
    "Context:" * 30_000 + "Sub-Goal:" * 30_000,
    "Context: a Sub-Goal: b Tool Name:" + " " * 200_000 + "x",
    "<tool_call>" * 50_000 + "</tool_call>",
    "\\boxed{" * 100_000,
    "{" * 200_000,
    '{"a":' * 200_000,
    "<answer>" * 100_000 + "</answer>" * 10,
])
def test_hostile_runs_are_fast(text: str) -> None:
    parsers: list[Callable[[str], object]] = [
        parse_tool_calls, lambda t: parse_next_step(t, TOOLS), parse_verifier_conclusion, parse_answer_tags,
        reward.last_boxed, reward.normalize_math, lambda t: reward.memagent_reward(t, "x"),
        lambda t: reward.eval_metrics(t, ["x"]), prompts.memory_from_response,
    ]
    # CPU time of this thread, not wall time: a loaded machine makes a parse wait for a core, not
    # work more. Each parse takes ~0.1 s here; a quadratic one on these 200k-character inputs takes
    # minutes, so a 5 s bound tells them apart with a wide margin either way.
    for parse in parsers:
        started = time.thread_time()
        parse(text)
        assert time.thread_time() - started < 5.0, parse


# -- ToolOrchestra: <tool_call> blocks, exactly {name, arguments}, known name -------------------------

CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "capital of France"}}\n</tool_call>'


def test_one_call_after_reasoning() -> None:
    r = parse_tool_calls("<think>I should search.</think>\n\n" + CALL, allowed=["search", "answer"])
    assert r.ok and r.error is None and r.content == ""
    assert r.calls == [{"name": "search", "arguments": {"query": "capital of France"}}]


def test_several_calls_in_order_and_content_kept() -> None:
    text = "Let me look.\n" + CALL + "\nand\n" + CALL.replace("search", "answer").replace("query", "q")
    r = parse_tool_calls(text)
    assert r.ok and [c["name"] for c in r.calls] == ["search", "answer"]
    assert r.content == "Let me look.\n\nand"


def test_calls_inside_reasoning_are_not_calls() -> None:
    assert parse_tool_calls("<think>" + CALL + "</think> The answer is 4.").error == "no tool call"
    unclosed = parse_tool_calls("<think>" + CALL)  # cut by max_new_tokens while thinking
    assert not unclosed.ok and "never closes" in (unclosed.error or "")


@pytest.mark.parametrize("text, error", [
    ("", "no tool call"),
    ("The answer is 4.", "no tool call"),
    ("<tool_call>\n{\"name\": \"search\", \"arguments\": {}}", "never closed"),
    ("</tool_call>" + CALL, "without a matching"),
    (CALL + "</tool_call>", "without a matching"),
    ("<tool_call>{'name': 'search', 'arguments': {}}</tool_call>", "bad JSON"),
    ("<tool_call>{\"name\": \"search\", \"arguments\": {}</tool_call>", "bad JSON"),
    ("<tool_call></tool_call>", "bad JSON"),
    ("<tool_call>[\"search\", {}]</tool_call>", "expected a JSON object, got list"),
    ("<tool_call>{\"name\": \"search\"}</tool_call>", "missing ['arguments']"),
    ("<tool_call>{\"arguments\": {}}</tool_call>", "missing ['name']"),
    ("<tool_call>{\"name\": \"search\", \"arguments\": {}, \"id\": 1}</tool_call>", "extra ['id']"),
    ("<tool_call>{\"name\": \"search\", \"parameters\": {}}</tool_call>",
     "missing ['arguments'], extra ['parameters']"),
    ("<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
     "arguments must be a JSON object, got str"),
    ("<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>", "name must be a non-empty string"),
    ("<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>", "name must be a non-empty string"),
    ("<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", "unknown tool 'rm_rf'"),
    ("<tool_call>{\"name\": \"search\", \"arguments\": " + "[" * 100_000 + "</tool_call>", "bad JSON"),
    ("<tool_call>{\"name\": \"search\", \"arguments\": " + "{\"a\": " * 5_000 + "1" + "}" * 5_001 + "</tool_call>",
     "bad JSON (RecursionError)"),
])
def test_invalid_turns_are_marked_not_raised(text: str, error: str) -> None:
    r = parse_tool_calls(text, allowed=["search", "answer"])
    assert not r.ok and error in (r.error or ""), r.error


def test_one_bad_block_invalidates_the_turn_but_good_calls_are_listed() -> None:
    r = parse_tool_calls(CALL + "<tool_call>{\"name\": \"answer\"}</tool_call>")
    assert not r.ok and r.error and r.error.startswith("tool call 2:")
    assert [c["name"] for c in r.calls] == ["search"]


def test_unknown_name_allowed_when_no_names_given() -> None:
    assert parse_tool_calls(CALL.replace("search", "anything")).ok


def test_not_text_is_a_defined_result() -> None:
    r = parse_tool_calls(None)  # type: ignore[arg-type]
    assert not r.ok and "not text" in (r.error or "")


# -- AgentFlow planner: the last Context/Sub-Goal/Tool Name block -----------------------------------


def test_next_step_strips_bold_and_normalises_the_tool() -> None:
    text = ("Let me plan.\n\n**Context:** We know x = 3.\n**Sub-Goal:** Compute x squared.\n"
            "**Tool Name:** python  coder_TOOL")
    assert parse_next_step(text, TOOLS) == {
        "context": "We know x = 3.", "sub_goal": "Compute x squared.",
        "tool_name": "Python_Coder_Tool", "matched": True,
    }


def test_next_step_takes_the_last_block() -> None:
    block = "Context: {c}\nSub-Goal: {s}\nTool Name: {t}"
    text = (block.format(c="old", s="draft", t="Google_Search_Tool") + "\n\nOn reflection:\n\n"
            + block.format(c="new", s="final", t="Base_Generator_Tool") + "\n\nThat is my plan.")
    step = parse_next_step(text, TOOLS)
    assert (step["context"], step["sub_goal"], step["tool_name"]) == ("new", "final", "Base_Generator_Tool")


def test_tool_name_ends_at_a_blank_line_and_drops_a_fence() -> None:
    text = "```\nContext: c\nSub-Goal: s\nTool Name: Base_Generator_Tool\n```\n\nExplanation follows."
    assert parse_next_step(text, TOOLS)["tool_name"] == "Base_Generator_Tool"


@pytest.mark.parametrize("name, expected, matched", [
    ("Wikipedia_Search", NO_MATCHED_TOOL + "Wikipedia_Search", False),
    ("Python_Coder_Tool.", NO_MATCHED_TOOL + "Python_Coder_Tool.", False),  # exact canonical form only
    ("google search tool", "Google_Search_Tool", True),
    ("GOOGLE__SEARCH _ TOOL", "Google_Search_Tool", True),
    ("", NO_MATCHED_TOOL, False),
])
def test_tool_matching(name: str, expected: str, matched: bool) -> None:
    step = parse_next_step(f"Context: c\nSub-Goal: s\nTool Name: {name}", TOOLS)
    assert (step["tool_name"], step["matched"]) == (expected, matched)


@pytest.mark.parametrize("text", [
    "", "No plan at all.", "Context: c\nTool Name: Python_Coder_Tool", "Sub-Goal: s\nTool Name: Python_Coder_Tool",
    "Tool Name: Python_Coder_Tool\nContext: c\nSub-Goal: s",
])
def test_incomplete_block_is_unmatched(text: str) -> None:
    assert parse_next_step(text, TOOLS) == {"context": "", "sub_goal": "", "tool_name": NO_MATCHED_TOOL,
                                            "matched": False}


def test_next_step_as_json() -> None:
    text = json.dumps({"context": " c ", "sub_goal": "s", "tool_name": "python_coder_tool"})
    assert parse_next_step(text, TOOLS) == {"context": "c", "sub_goal": "s", "tool_name": "Python_Coder_Tool",
                                            "matched": True}


# the original's regexes, for agreement on well-formed text (where their backtracking is cheap)
_ORIGINAL_NEXT_STEP = re.compile(r"Context:\s*(.*?)Sub-Goal:\s*(.*?)Tool Name:\s*(.*?)\s*(?:```)?\s*(?=\n\n|\Z)",
                                 re.DOTALL)
_ORIGINAL_CONCLUSION = re.compile(r"conclusion\**:?\s*\**\s*(\w+)", re.IGNORECASE | re.DOTALL)

field_text = st.text(st.characters(blacklist_characters=":*`\n\r", blacklist_categories=("Cs",)), max_size=30)
tool_text = st.one_of(st.sampled_from(TOOLS + ["python coder tool", "Unknown_Tool"]),
                      st.from_regex(r"[A-Za-z][A-Za-z _]{0,20}", fullmatch=True))


@st.composite
def planner_outputs(draw: st.DrawFn) -> str:
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        c, s, t = draw(field_text), draw(field_text), draw(tool_text)
        bold = draw(st.booleans())
        label = (lambda x: f"**{x}**") if bold else (lambda x: x)
        blocks.append(f"{label('Context:')} {c}\n{label('Sub-Goal:')} {s}\n{label('Tool Name:')} {t}")
    return draw(field_text) + "\n\n" + "\n\n".join(blocks) + draw(st.sampled_from(["", "\n\nDone.", "\n```"]))


@PROPERTY
@given(planner_outputs())
def test_next_step_agrees_with_the_original_regex(text: str) -> None:
    matches = _ORIGINAL_NEXT_STEP.findall(text.replace("**", ""))
    c, s, t = matches[-1]
    expected, matched = af.match_tool(t, TOOLS) if t else (NO_MATCHED_TOOL, False)
    assert parse_next_step(text, TOOLS) == {"context": c.strip(), "sub_goal": s.strip(),
                                            "tool_name": expected, "matched": matched}


# -- AgentFlow verifier ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, verdict", [
    ('{"analysis": "done", "stop_signal": true}', "STOP"),
    ('{"analysis": "go on", "stop_signal": false}', "CONTINUE"),
    ('{"conclusion": "stop"}', "STOP"),
    ('```json\n{"conclusion": "CONTINUE", "note": "stop"}\n```', "CONTINUE"),
    ('{"conclusion": "unsure"} but we should stop', "STOP"),  # not a JSON object as a whole: substring
    ("The memory is complete.\n**Conclusion**: **STOP**", "STOP"),
    ("Conclusion: STOP\n...second thoughts...\nConclusion: CONTINUE", "CONTINUE"),  # the last match
    ("conclusion:continue", "CONTINUE"),
    ("Conclusion ** : CONTINUE, do not stop", "STOP"),  # the colon must follow the word: substring
    ("Conclusion: maybe, but stop now", "STOP"),  # last match not STOP/CONTINUE: substring "stop"
    ("Conclusion: unclear. We continue.", "CONTINUE"),
    ("We continue; or stop?", "STOP"),  # substring: "stop" is checked first
    ("Nothing decisive here.", "CONTINUE"),
    ("", "CONTINUE"),
])
def test_verifier_rules(text: str, verdict: str) -> None:
    assert parse_verifier_conclusion(text) == verdict


def _original_regex_stage(text: str) -> str | None:
    matches = list(_ORIGINAL_CONCLUSION.finditer(text))
    if matches and matches[-1].group(1).upper() in ("STOP", "CONTINUE"):
        return matches[-1].group(1).upper()
    return None


@PROPERTY
@given(st.one_of(marker_soup, st.text(alphabet=" *:\nconclusiSTOPCNTUE_xy", max_size=60)))
def test_verifier_regex_stage_agrees_with_the_original(text: str) -> None:
    assume(af._json_object(text) is None)
    assert af._conclusion_regex(text) == _original_regex_stage(text)


# -- AgentFlow final answer --------------------------------------------------------------------------


@pytest.mark.parametrize("text, answer", [
    ("1. Process Summary ...\n2. Answer: <answer> 42 </answer>", "42"),
    ("<answer>1</answer> then <answer>\n2\n</answer> end", "2"),
    ("<answer>a<answer>b</answer>", "b"),
    ("<answer></answer>", ""),
    ("<answer>cut off by max tokens", "<answer>cut off by max tokens"),
    ("</answer> x <answer>", "</answer> x <answer>"),
    ("  plain answer \n", "plain answer"),
])
def test_answer_tags(text: str, answer: str) -> None:
    assert parse_answer_tags(text) == answer


# -- MemAgent: the shapes a policy produces ----------------------------------------------------------


@pytest.mark.parametrize("text, boxed", [
    ("\\boxed{a} then \\boxed{b}", "b"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{a} and \\boxed{unclosed", None),  # the last box decides, even when truncated
    ("\\boxed{" * 50_000 + "x" + "}" * 50_000, "x"),  # the last box is the innermost
    ("\\boxed{\\fbox{1}+2}", "1"),
    ("\\boxedfoo", None),
    ("", None),
])
def test_last_boxed_rules(text: str, boxed: str | None) -> None:
    assert reward.last_boxed(text) == boxed


def test_memory_from_response_after_last_think() -> None:
    assert prompts.memory_from_response("<think>a</think>b<think>c</think>\n mem") == "mem"
    assert prompts.memory_from_response("<think>never closed") == "<think>never closed"


@pytest.mark.parametrize("module", [toolcalls, af], ids=lambda m: m.__name__)
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0

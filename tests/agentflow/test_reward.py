"""AgentFlow's reward: the seed's boxed rule and math-verify on tricky pairs, a power tower from a
rollout thread, and the LLM judge (scripted judge engine)."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgraphs.agentflow import SPEC, boxed_exact_check, math_verify_reward, parse_judge_verdict, seed_prediction
from agentgraphs.agentflow.prompts import JUDGE_TEMPLATE
from agentgraphs.context import AgentContext
from agentgraphs.errors import ConfigError, InputError
from agentgraphs.math_equivalence import amath_verify_check, math_verify_check, math_verify_pool
from agentgraphs.spec import RewardInput
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy


def rin(answer: str, label: Any, metadata: dict | None = None, **options: Any) -> RewardInput:
    opts = SPEC.resolve_options(options).model_dump()
    question = (metadata or {}).get("question", "What is the answer?")
    return RewardInput(answer=answer, prompt=question, label=label, metadata=metadata or {}, status="completed",
                       trace_summary={}, options=opts)


@pytest.mark.parametrize("answer, gold", [
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("\\boxed{42}", "42"),
    ("42", "\\boxed{42}"),
    ("The answer is \\boxed{\\dfrac{3}{4}}.", "0.75"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("1/2", "\\frac12"),
])
def test_math_verify_accepts_equivalent_forms(answer: str, gold: str) -> None:
    assert math_verify_reward(answer, [gold]) == 1.0


@pytest.mark.parametrize("answer, gold", [("\\frac{1}{3}", "0.5"), ("43", "42"), ("", "42"), ("no idea", "7")])
def test_math_verify_rejects_different_answers(answer: str, gold: str) -> None:
    assert math_verify_reward(answer, [gold]) == 0.0


def test_spec_reward_uses_math_verify_with_judge_null() -> None:
    assert asyncio.run(SPEC.reward(rin("\\frac{1}{2}", "0.5", variant="original", judge=None), None)) == 1.0
    assert asyncio.run(SPEC.reward(rin("0.4", ["0.3", "0.4"], variant="original", judge=None), None)) == 1.0  # any
    # the seed's rule (the default) compares strings: 1/2 is not 0.5 there, 0.4 is 0.4
    assert asyncio.run(SPEC.reward(rin("\\frac{1}{2}", "0.5", judge=None), None)) == 0.0
    assert asyncio.run(SPEC.reward(rin("0.4", ["0.3", "0.4"], judge=None), None)) == 1.0


# (answer, label, seed's boxed_exact, original's math-verify). The seed predicts the LAST \boxed{} after
# slime's DAPO normalisation (else its line rule) and needs string equality with the label; math-verify
# compares values (and reads every box of an answer together, as a set).
TRICKY = [
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0, 1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 0.0, 1.0),              # fraction vs decimal: only the value test
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 0.0, 1.0),      # DAPO keeps \dfrac
    ("\\boxed{\\frac12}", "\\frac{1}{2}", 1.0, 1.0),           # \frac12 -> \frac{1}{2}
    ("\\boxed{0.50}", "0.5", 0.0, 1.0),                      # decimals: no trailing-zero rule
    ("\\boxed{.5}", "0.5", 0.0, 1.0),
    ("\\boxed{3.14}", "3.14", 1.0, 1.0),
    ("2^{10}", "1024", 0.0, 1.0),                            # bare power: LaTeX parse first (was 2)
    ("2^{10}", "2", 0.0, 0.0),                               # ... so it is no longer "2"
    ("\\boxed{2^{10}}", "1024", 0.0, 1.0),
    ("10^{-3}", "0.001", 0.0, 1.0),
    ("$9^{9^{9^{9}}}$", "5", 0.0, 0.0),                      # power tower: math-verify times out
    ("\\boxed{5} then \\boxed{6}", "6", 1.0, 0.0),           # seed: the last box; math-verify: {5, 6}
    ("\\boxed{5} then \\boxed{6}", "5", 0.0, 0.0),
    ("\\boxed{1,16}", "1,16", 0.0, 1.0),                     # DAPO drops the comma of digits: 116
    ("\\boxed{1,16}", "116", 1.0, 0.0),                      # math-verify reads the set {1, 16}
    ("\\boxed{\\{1, 16\\}}", "\\{1,16\\}", 1.0, 1.0),          # a set written as one; spaces dropped
    ("\\boxed{1,000}", "1000", 1.0, 1.0),
    ("\\boxed{(1, 2)}", "(1,2)", 1.0, 1.0),
    ("\\boxed{x = 5}", "5", 1.0, 1.0),                       # DAPO keeps what follows the last "="
    ("\\boxed{90^\\circ}", "90", 1.0, 1.0),
    ("\\boxed{10\\%}", "10", 0.0, 1.0),                      # DAPO keeps \%
    ("\\boxed{\\text{(A)}}", "(A)", 1.0, 1.0),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 0.0, 1.0),
    ("\\boxed{-3}", "-3", 1.0, 1.0),
    ("\\boxed{5", "5", 0.0, 0.0),                            # unbalanced: the seed's fallback line is "\boxed{5"
    ("answer: 5}", "5", 1.0, 1.0),                           # unbalanced the other way: the line rule reads 5
    ("\\boxed{{5}}", "5", 0.0, 1.0),                         # inner braces kept by the seed
    ("The answer is 42.", "42", 1.0, 1.0),                   # no box: "is 42" (line rule)
    ("The answer is 42.", "43", 0.0, 0.0),
    ("I think it is 12 apples", "12", 1.0, 1.0),
    ("x" * 49_990 + " \\boxed{7}", "7", 1.0, 1.0),             # 50,000 characters, the box at the end
    ("\\boxed{7} " + "x" * 49_990, "7", 1.0, 0.0),             # math-verify parses the last 2,000 characters
    ("=" + " " * 50_000 + "x", "0", 0.0, 0.0),               # the seed's own regex takes minutes here
    ("", "5", 0.0, 0.0),                                     # empty
    ("   \n  ", "5", 0.0, 0.0),
    ("\\boxed{}", "", 0.0, 0.0),                              # empty box, empty label: never a match
]


def test_at_least_thirty_tricky_pairs() -> None:
    assert len(TRICKY) >= 30


@pytest.mark.parametrize("answer, label, seed, original", TRICKY, ids=[f"pair{i}" for i in range(len(TRICKY))])
def test_rule_rewards_on_tricky_pairs(answer: str, label: str, seed: float, original: float) -> None:
    assert boxed_exact_check(answer, [label])["score"] == seed
    # 3 s: generous for these (milliseconds each), and the power tower waits for it twice
    assert math_verify_check(answer, [label], timeout_s=3)["score"] == original
    # and through the AgentFlow reward with judge: null (the rule alone), per variant
    if not label.strip():  # a blank gold is a bad row, refused before it can match an empty answer
        with pytest.raises(InputError, match="label"):
            asyncio.run(SPEC.reward(rin(answer, label, judge=None), None))
        return
    assert asyncio.run(SPEC.reward(rin(answer, label, judge=None), None)) == seed
    original_rin = rin(answer, label, variant="original", reward_timeout_s=3.0, judge=None)
    assert asyncio.run(SPEC.reward(original_rin, None)) == original


def test_seed_predictions() -> None:
    assert seed_prediction("Thus \\boxed{\\text{m}} and $\\boxed{ 2,500 }$") == "2500"
    assert seed_prediction("Result:\n= 17 cm\nThat's all") == "17"  # a line rule number is not normalised
    assert seed_prediction("answer is \\boxed{ 1,5 }") == "15"       # a line-rule box is normalised
    assert seed_prediction("no number here\n\nlast line " + "y" * 300) == "last line " + "y" * 190


def test_power_tower_from_a_rollout_thread(caplog: Any) -> None:
    """slime runs rollouts on a background thread with its own event loop: there math-verify's signal
    timeouts do nothing and the tower froze the whole process. The deadline stops it from any thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="rollout-loop", daemon=True)
    thread.start()

    def on_loop(coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=timeout)

    try:
        # a worker starts on first use (an interpreter and math-verify): outside the bounded call
        assert on_loop(SPEC.reward(rin("\\boxed{1}", "1", variant="original", judge=None), None), 120) == 1.0
        tower = rin("$9^{9^{9^{9}}}$", "5", variant="original", reward_timeout_s=2.0, judge=None)
        with caplog.at_level(logging.WARNING, logger="agentgraphs.agentflow"):
            pending = asyncio.run_coroutine_threadsafe(SPEC.reward(tower, None), loop)
            # the event loop keeps serving other rollouts while the worker computes
            assert on_loop(SPEC.reward(rin("\\boxed{3}", "3"), None), 60) == 1.0
            assert pending.result(timeout=5) == 0.0
        assert any("timeout" in r.getMessage() for r in caplog.records)
        # the rollout's metric asks the same question: answered from the recent verdicts, no second wait
        kills = math_verify_pool().kills
        assert on_loop(SPEC.eval_metrics(tower), 5) == {"math_verify": 0.0}
        assert math_verify_pool().kills == kills
        check = on_loop(amath_verify_check("9^{9^{9^{9}}}", ["5"], timeout_s=2.0), 5)
        assert check["score"] == 0.0 and check["reason"].startswith("timeout")
        # the killed worker is replaced: the next answer is verified as usual
        assert on_loop(amath_verify_check("2^{10}", ["1024"], timeout_s=60), 120)["score"] == 1.0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_seed_rule_never_raises_on_model_text(text: str) -> None:
    assert boxed_exact_check(text, ["42"])["score"] in (0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_math_verify_never_raises_on_model_text(text: str) -> None:
    assert math_verify_reward(text, ["42"]) in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_judge_verdict_parser_never_raises(text: str) -> None:
    assert parse_judge_verdict(text) in (True, False, None)


def test_judge_path_with_a_scripted_judge(tiny_engine: Any) -> None:
    """The original's judge path (the judge alone decides when the context has one)."""
    prompts: list[str] = []

    def judge(call: ScriptCall) -> str:
        prompts.append(call.prompt_text)
        same = "Model Response: 0.5" in call.prompt_text and "Ground Truth: \\frac{1}{2}" in call.prompt_text
        return '{"analysis": "compared the values", "true_false": %s}' % ("true" if same else "false")

    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                       engines={"judge": ScriptedPolicy(tiny_engine, judge, name="judge")})
    meta = {"question": "What is one half as a decimal?"}
    assert asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta, variant="original"), ctx)) == 1.0
    assert asyncio.run(SPEC.reward(rin("0.25", "\\frac{1}{2}", meta, variant="original"), ctx)) == 0.0
    assert len(prompts) == 2
    expected = JUDGE_TEMPLATE.format(question=meta["question"], response="0.5", ground_truth="\\frac{1}{2}")
    assert expected.strip() in prompts[0]  # the judge read JUDGE_TEMPLATE, filled in
    # a judge engine under another name is picked by the judge option
    ctx2 = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                        engines={"grader": ScriptedPolicy(tiny_engine, judge, name="grader")})
    assert asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta, variant="original", judge="grader"), ctx2)) == 1.0
    # the default judge without its engine is refused, naming the fixes; judge: null lets math-verify decide
    with pytest.raises(ConfigError, match=r"engine 'judge'.*--helper judge=.*judge: null"):
        asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta, variant="original"), ctx2))
    assert asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta, variant="original", judge=None), ctx2)) == 1.0


def test_seed_rule_comes_before_the_judge(tiny_engine: Any) -> None:
    """The seed asks the judge only when its boxed rule finds no exact match."""
    asked: list[str] = []

    def judge(call: ScriptCall) -> str:
        asked.append(call.prompt_text)
        return "Same value.\nVERDICT: True"  # the seed's judge prompt asks for this line (core/rewarder.py:28-30)

    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                       engines={"judge": ScriptedPolicy(tiny_engine, judge, name="judge")})
    assert asyncio.run(SPEC.reward(rin("so \\boxed{42}", "42"), ctx)) == 1.0
    assert asked == []  # the rule matched: no judge call
    assert asyncio.run(SPEC.reward(rin("\\boxed{\\frac{84}{2}}", "42"), ctx)) == 1.0
    assert len(asked) == 1  # no exact match: the judge said true


def test_judge_verdict_forms() -> None:
    assert parse_judge_verdict('```json\n{"analysis": "x", "true_false": "True"}\n```') is True
    assert parse_judge_verdict('analysis: equal. "true_false": false') is False


# Judge replies that state no verdict. The old parser took the last "true"/"false" word anywhere (an
# analysis cut at max_new_tokens, an echoed instruction, a question back) and scored them 1.0.
NO_VERDICT = [
    '{"analysis": "The model answer 7 is not 8. It would be true only if',  # JSON cut by max_new_tokens
    "Is it true? The response says 5 and the ground truth is 6.",            # no verdict at all
    '{"analysis": "<a brief comparison>", "true_false": true or false}',      # the instruction echoed
    '3. Verdict: "True" only if they are equivalent, otherwise "False".',      # the instruction echoed
    '{"analysis": "cannot tell", "true_false": null}',                         # JSON without a boolean
    "They are equivalent. True",                                             # a sentence, not a verdict line
    "",
]


@pytest.mark.parametrize("reply", NO_VERDICT, ids=[f"reply{i}" for i in range(len(NO_VERDICT))])
def test_a_judge_reply_without_a_verdict_is_none(reply: str) -> None:
    assert parse_judge_verdict(reply) is None


@pytest.mark.parametrize("reply, verdict", [
    ('{"analysis": "same value", "true_false": true}', True),
    ('```json\n{"analysis": "x", "true_false": "False"}\n```', False),
    ('Here it is: {"analysis": "0.5 = 1/2", "true_false": true}', True),
    # the original's own answer format (<analysis>: / <true_false>:) when no structured output enforces JSON
    ('<analysis>: 5 differs from 6, so it is not true.\n<true_false>: "False"', False),
    ('<analysis>: the same value.\n<true_false>: True', True),
    ('analysis: equal. "true_false": false', False),
    ("The answers differ.\nVERDICT: False", False),                           # the seed's judge format
    ("Both are one half.\n**True**", True),                                   # a last line that is the verdict
])
def test_a_judge_verdict_in_a_known_form(reply: str, verdict: bool) -> None:
    assert parse_judge_verdict(reply) is verdict


def test_a_judge_without_a_verdict_fails_the_sample_instead_of_scoring_it(tiny_engine: Any) -> None:
    """No verdict is no reward: a RewardError naming the judge and the fix (the rollout is FAILED, trains
    nothing), never 1.0 from a stray "true" nor a silent 0.0."""
    from agentgraphs.engines import SamplingParams
    from agentgraphs.errors import RewardError

    for reply in NO_VERDICT[:3]:
        ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                           engines={"judge": ScriptedPolicy(tiny_engine, [reply], name="judge")})
        with pytest.raises(RewardError, match="judge 'judge' gave no verdict"):
            asyncio.run(SPEC.reward(rin("0.25", "\\frac{1}{2}", variant="original"), ctx))
    # a verdict cut off by max_new_tokens says so, and which setting to raise
    long_reply = '{"analysis": "' + "the values are compared step by step; " * 40 + '", "true_false": true}'
    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer, sampling=SamplingParams(max_new_tokens=32),
                       engines={"judge": ScriptedPolicy(tiny_engine, [long_reply], name="judge")})
    with pytest.raises(RewardError, match="cut at max_new_tokens"):
        asyncio.run(SPEC.reward(rin("0.25", "\\frac{1}{2}", variant="original"), ctx))


# The instructions of the original's judge (lupantech/AgentFlow, train/utils.py `compute_score`), as its f-string
# renders them. The original gets {analysis, true_false} through structured output (response_format=
# AnswerVerification); a text prompt asks for that JSON object instead of its `<analysis>:` / `<true_false>:` lines.
ORIGINAL_JUDGE_LINES = [
    "You are a precise evaluator. Determine if the Model Response is equivalent to the Ground Truth.",
    "**Instructions:**",
    "1.  **Extract:** Isolate the final answer from the Model Response, ignoring reasoning. Look for `\\boxed{...}` "
    "or concluding statements.",
    "2.  **Normalize & Compare:** The extracted answer and Ground Truth must be equivalent after normalization:",
    "    - **Math:** Mathematically identical (e.g., `\\frac{1}{2}` == `0.5`).",
    "    - **Numbers/Text:** Ignore formatting, case, and currency/units (e.g., `1,000` == `1000`).",
    '    - **MCQ:** Match option content (e.g., "Paris") or number (e.g., `3rd` option) to the correct letter.',
    '3.  **Verdict:** "True" only for semantically or mathematically equivalent answers.',
    "**Inputs:**",
    "Question: What is one half?",
    "Model Response: 0.5",
    "Ground Truth: \\frac{1}{2}",
]


def test_the_judge_reads_the_original_instructions(tiny_engine: Any) -> None:
    prompts: list[str] = []

    def judge(call: ScriptCall) -> str:
        prompts.append(call.prompt_text)
        return '{"analysis": "0.5 is one half", "true_false": true}'

    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                       engines={"judge": ScriptedPolicy(tiny_engine, judge, name="judge")})
    reward = asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", {"question": "What is one half?"},
                                         variant="original"), ctx))
    assert reward == 1.0
    lines = prompts[0].splitlines()
    missing = [line for line in ORIGINAL_JUDGE_LINES if line not in lines]
    assert not missing, missing
    assert lines.index(ORIGINAL_JUDGE_LINES[-1]) > lines.index(ORIGINAL_JUDGE_LINES[3])  # inputs after instructions
    assert '"true_false"' in prompts[0]  # the structured output's fields, asked for in the text

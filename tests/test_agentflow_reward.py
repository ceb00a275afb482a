"""AgentFlow's reward: the LLM judge (scripted judge engine) and math-verify on equivalent forms."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgraphs.agentflow import SPEC, math_verify_reward, parse_judge_verdict
from agentgraphs.agentflow.prompts import JUDGE_TEMPLATE
from agentgraphs.node import AgentContext
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


def test_spec_reward_uses_math_verify_without_a_judge() -> None:
    assert asyncio.run(SPEC.reward(rin("\\frac{1}{2}", "0.5"), None)) == 1.0
    assert asyncio.run(SPEC.reward(rin("0.4", ["0.3", "0.4"]), None)) == 1.0  # any of several golds


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_math_verify_never_raises_on_model_text(text: str) -> None:
    assert math_verify_reward(text, ["42"]) in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_judge_verdict_parser_never_raises(text: str) -> None:
    assert parse_judge_verdict(text) in (True, False)


def test_judge_path_with_a_scripted_judge(tiny_engine: Any) -> None:
    prompts: list[str] = []

    def judge(call: ScriptCall) -> str:
        prompts.append(call.prompt_text)
        same = "Model Response: 0.5" in call.prompt_text and "Ground Truth: \\frac{1}{2}" in call.prompt_text
        return '{"analysis": "compared the values", "true_false": %s}' % ("true" if same else "false")

    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                       engines={"judge": ScriptedPolicy(tiny_engine, judge, name="judge")})
    meta = {"question": "What is one half as a decimal?"}
    assert asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta), ctx)) == 1.0
    assert asyncio.run(SPEC.reward(rin("0.25", "\\frac{1}{2}", meta), ctx)) == 0.0
    assert len(prompts) == 2
    expected = JUDGE_TEMPLATE.format(question=meta["question"], response="0.5", ground_truth="\\frac{1}{2}")
    assert expected.strip() in prompts[0]  # the judge read the original's prompt, filled in
    # a judge engine under another name is picked by the judge_engine option
    ctx2 = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer,
                        engines={"grader": ScriptedPolicy(tiny_engine, judge, name="grader")})
    assert asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta, judge_engine="grader"), ctx2)) == 1.0
    # without that engine, math-verify decides (and agrees here)
    assert asyncio.run(SPEC.reward(rin("0.5", "\\frac{1}{2}", meta), ctx2)) == 1.0


def test_judge_verdict_forms() -> None:
    assert parse_judge_verdict('```json\n{"analysis": "x", "true_false": "True"}\n```') is True
    assert parse_judge_verdict('analysis: equal. "true_false": false') is False
    assert parse_judge_verdict("They are equivalent. True") is True

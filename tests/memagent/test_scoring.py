"""MemAgent prompts, answer extraction, reward and RULER/HotpotQA metrics against hand-worked cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgraphs.memagent.prompts import (
    INITIAL_MEMORY,
    final_prompt,
    memory_from_response,
    memory_update_prompt,
)
from agentgraphs.memagent.reward import (
    em,
    eval_metrics,
    f1,
    last_boxed,
    math_equal,
    memagent_reward,
    normalize_answer,
    normalize_math,
    sub_em,
)

# ------------------------------------------------------------------------------------------------ prompts

ORIGINAL_UPDATE = (
    "You are presented with a problem, a section of an article that may contain the answer to the problem, "
    "and a previous memory. Please read the provided section carefully and update the memory with the new "
    "information that helps to answer the problem. Be sure to retain all relevant details from the previous "
    "memory while adding any new, useful information.\n\n<problem> \nQ?\n</problem>\n\n<memory>\nM\n</memory>"
    "\n\n<section>\nC\n</section>\n\nUpdated memory:\n"
)
ORIGINAL_FINAL = (
    "You are presented with a problem and a previous memory. Please answer the problem based on the previous "
    "memory and put the answer in \\boxed{}.\n\n<problem> \nQ?\n</problem>\n\n<memory>\nM\n</memory>\n\n"
    "Your answer:\n"
)


def test_prompts_render_the_original_text_exactly() -> None:
    assert memory_update_prompt("Q?", "M", "C") == ORIGINAL_UPDATE
    assert final_prompt("Q?", "M") == ORIGINAL_FINAL
    assert INITIAL_MEMORY == "No previous memory"


def test_prompt_values_with_braces_are_not_reinterpreted() -> None:
    assert "<section>\n{x} {memory}\n</section>" in memory_update_prompt("{a}", "{b}", "{x} {memory}")


@pytest.mark.parametrize(
    ("response", "memory"),
    [
        ("plain memory", "plain memory"),
        ("  keeps leading space without think", "  keeps leading space without think"),
        ("<think>a</think>\n\n new", "new"),
        ("<think>a</think>x</think>  last", "last"),
        ("</think>", ""),
    ],
)
def test_memory_from_response(response: str, memory: str) -> None:
    assert memory_from_response(response) == memory


# ------------------------------------------------------------------------------------------------ boxed


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
        ("first \\boxed{1} then \\boxed{{a}{b}} end", "{a}{b}"),
        ("$\\boxed 7$ more", "7"),
        ("\\fbox{x}", "x"),
        ("\\boxed{a} and \\fbox{b}", "b"),
        ("\\boxed{}", ""),
        ("\\boxed{done} \\boxedword", "done"),  # "\boxedword" is not a box
        ("\\boxed{early} then \\boxed{never closed", None),  # the last box is truncated
        ("no box here", None),
        ("", None),
    ],
)
def test_last_boxed(text: str, content: str | None) -> None:
    assert last_boxed(text) == content


# ------------------------------------------------------------------------------------------------ MATH


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("\\frac12", "\\frac{1}{2}"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("\\frac1{72}", "\\frac{1}{72}"),
        ("0.5", "\\frac{1}{2}"),
        (".5", "\\frac{1}{2}"),  # a leading "." gets a 0, then exactly 0.5 becomes \frac{1}{2}
        ("0.50", "0.50"),  # only the exact string 0.5 is rewritten
        (".25", "0.25"),
        ("1/2", "\\frac{1}{2}"),
        ("-3/4", "\\frac{-3}{4}"),
        ("03/4", "03/4"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("\\$5", "5"),
        ("50\\%", "50"),
        ("5\\text{ cm}", "5"),
        ("x = 3", "3"),
        ("abc = 3", "abc=3"),  # the left side is longer than two characters
        ("1\\!000", "1000"),
        ("a\nb", "ab"),
        ("Paris.", "Paris."),  # trailing periods are kept, as in the reference
        ("", ""),
        ("\\frac", "\\frac"),
        ("\\sqrt", "\\sqrt"),
    ],
)
def test_normalize_math(raw: str, normalized: str) -> None:
    assert normalize_math(raw) == normalized


def test_boxed_half_equals_point_five() -> None:
    assert math_equal(last_boxed("\\boxed{\\frac{1}{2}}") or "", "0.5")
    assert math_equal("\\frac12", "1/2")
    assert not math_equal("0.50", "0.5")


# ------------------------------------------------------------------------------------------------ reward


def test_reward_matches_any_ground_truth_case_insensitively() -> None:
    assert memagent_reward("Answer: \\boxed{PARIS}", ["London", "paris"]) == 1.0
    assert memagent_reward("Answer: \\boxed{Paris}", "PARIS") == 1.0
    assert memagent_reward("Answer: \\boxed{Lyon}", ["Paris"]) == 0.0
    assert memagent_reward("Answer: Paris", ["Paris"]) == 0.0  # no box, no reward
    assert memagent_reward("\\boxed{ The Eiffel  Tower }", ["the eiffel tower"]) == 1.0  # every space removed


@pytest.mark.parametrize("response, gold, score", [
    # MemAgent's normalisation (hotpotqa.py's strip_string), worked by hand: these rules only ...
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1.0),      # dfrac -> frac
    ("\\boxed{90^\\circ}", "90", 1.0),                     # degrees dropped
    ("\\boxed{50\\%}", "50", 1.0),                          # \% dropped
    ("\\boxed{\\left( 2, 3 \\right)}", "(2,3)", 1.0),       # \left, \right and spaces dropped
    ("\\boxed{x .5}", "x 0.5", 1.0),                       # " ." -> " 0."
    # ... and none of MATH's others: no fractions, decimals, units or "x =" rewriting
    ("\\boxed{ 1/2 }", "0.5", 0.0),
    ("\\boxed{.5}", "0.5", 0.0),
    ("\\boxed{5 \\text{ feet}}", "5", 0.0),
    ("\\boxed{x = 5}", "5", 0.0),
    # the box: the space form wins wherever it is, \fbox is never unwrapped
    ("so \\boxed 1998$ and finally \\boxed{2001}", "1998", 1.0),
    ("\\fbox{Paris}", "Paris", 0.0),
    ("\\boxedparis", "paris", 0.0),
])
def test_reward_is_memagents_rule(response: str, gold: str, score: float) -> None:
    """MemAgent's code (verl/utils/reward_score/hotpotqa.py) and the seed's (rollout.py:197-297) share this rule."""
    assert memagent_reward(response, [gold]) == score


def test_reward_takes_the_last_box() -> None:
    assert memagent_reward("\\boxed{Paris} no wait \\boxed{Lyon}", ["Paris"]) == 0.0
    assert memagent_reward("\\boxed{Lyon} no wait \\boxed{Paris}", ["Paris"]) == 1.0


def test_reward_reads_only_the_last_300_characters() -> None:
    tail = " x" * 150  # exactly 300 characters
    assert memagent_reward("\\boxed{Paris}" + tail, ["Paris"]) == 0.0
    assert memagent_reward("\\boxed{Paris}" + tail[:-13], ["Paris"]) == 1.0  # box ends inside the window
    # the window cuts into the box: "\boxed{" is gone, so there is no answer
    assert memagent_reward("\\boxed{Paris}" + tail[:-10], ["Paris"]) == 0.0
    # an early correct box does not rescue a later wrong one
    assert memagent_reward("\\boxed{Paris}" + tail + "\\boxed{Rome}", ["Paris"]) == 0.0


# ------------------------------------------------------------------------------------------------ metrics


def test_normalize_answer() -> None:
    assert normalize_answer("An apple a day, the DOCTOR!") == "apple day doctor"
    assert normalize_answer("Theater") == "theater"  # articles only as whole words
    assert normalize_answer("  ") == ""


def test_em() -> None:
    assert em("The Cat!", ["cat"]) == 1.0
    assert em("cat", ["dog", "a cat"]) == 1.0
    assert em("cats", "cat") == 0.0


def test_sub_em_both_directions() -> None:
    assert sub_em("it is Paris, France.", ["paris"]) == 1.0  # gold inside the prediction
    assert sub_em("Paris", ["the city of Paris"]) == 1.0  # prediction inside the gold
    assert sub_em("Lyon", ["Paris", "lyon"]) == 1.0  # any gold
    assert sub_em("Rome", ["Paris"]) == 0.0
    assert sub_em("", ["Paris"]) == 0.0
    assert sub_em("the", ["Paris"]) == 0.0  # normalises to empty
    assert sub_em("Paris", [""]) == 0.0


def test_f1_by_hand() -> None:
    # "the cat sat" -> [cat, sat]; "cat sat on mat" -> [cat, sat, on, mat]; common 2; p = 1, r = 1/2
    assert f1("the cat sat", ["cat sat on mat"]) == pytest.approx(2 / 3)
    # repeated tokens count with multiplicity: [a1, a1, b] vs [a1, b, b]: common a1, b -> p = r = 2/3
    assert f1("a1 a1 b", "a1 b b") == pytest.approx(2 / 3)
    assert f1("the cat sat", ["dog", "cat sat"]) == 1.0  # max over golds
    assert f1("dog", ["cat"]) == 0.0
    assert f1("", ["cat"]) == 0.0


def test_f1_yes_no_rule() -> None:
    assert f1("yes", ["yes"]) == 1.0
    assert f1("Yes.", ["yes"]) == 1.0
    assert f1("no", ["yes"]) == 0.0
    assert f1("yes it is", ["yes"]) == 0.0  # gold is "yes", the prediction differs
    assert f1("yes", ["yes it is"]) == 0.0  # prediction is "yes", the gold differs
    assert f1("noanswer", ["no answer"]) == 0.0


def test_eval_metrics_follow_the_seed_protocol() -> None:
    # the box is scored, never the whole response: tests/memagent/test_ruler_protocol.py has every case
    assert eval_metrics("Reasoning... \\boxed{The Cat}", ["cat"])["em"] == 1.0
    whole = eval_metrics("the cat sat", ["cat sat on mat"])
    assert whole["em"] == 0.0 and whole["f1"] == 0.0 and whole["answered"] == 0.0


# ------------------------------------------------------------------------------------------------ no parser raises

_PIECES = list("\\{}$ ./=^%!0125abx\n") + [
    "\\boxed", "\\boxed{", "\\fbox", "\\frac", "\\sqrt", "\\text{ ", "\\left", "</think>", "yes", "the",
]
_TRICKY = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)
_ANY_TEXT = st.one_of(st.text(max_size=200), _TRICKY)


@settings(max_examples=300, deadline=None)
@given(text=_ANY_TEXT, gold=_ANY_TEXT)
def test_parsers_never_raise(text: str, gold: str) -> None:
    boxed = last_boxed(text)
    assert boxed is None or isinstance(boxed, str)
    assert isinstance(normalize_math(text), str)
    assert memagent_reward(text, [gold]) in (0.0, 1.0)
    metrics = eval_metrics(text, [gold])
    assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert isinstance(memory_from_response(text), str)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(_TRICKY, min_size=1, max_size=8))
def test_tricky_latex_never_raises(parts: list[str]) -> None:
    text = "".join(parts)
    normalize_math(text)
    last_boxed(text)
    memagent_reward(text, text)

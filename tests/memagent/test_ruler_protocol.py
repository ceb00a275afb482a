"""MemAgent's RULER-HQA metrics follow the seed's eval_ruler_hqa.py exactly, on hand-written responses.

Each case states what the seed extracts and scores; the expected numbers are worked out by hand from the
protocol (README: "RULER-HQA scores match the seed's"), not computed with our helpers.
"""

from __future__ import annotations

import pytest

from agentgraphs.memagent import SPEC
from agentgraphs.memagent.reward import eval_metrics, ruler_answer, ruler_metrics

FILLER = " filler" * 50  # 350 characters: pushes anything before it out of the 300-character window


def metrics(em: float, sub_em: float, f1: float, strict: float, answered: float) -> dict[str, float]:
    return {"em": em, "sub_em": sub_em, "f1": f1, "sub_em_strict": strict, "answered": answered}


MISS_EMPTY = metrics(0.0, 1.0, 0.0, 0.0, 0.0)  # empty answer: the seed's sub_em hit, nothing else


@pytest.mark.parametrize(
    ("case", "response", "answer"),
    [
        ("plain box", "Reasoning... so the answer is \\boxed{Paris}.", "paris"),
        ("lower-cased before extraction", "\\boxed{The EIFFEL Tower}", "the eiffel tower"),
        ("answer is stripped", "\\boxed{  paris \n}", "paris"),
        ("nested braces", "\\boxed{\\text{New {York}}}", "\\text{new {york}}"),
        ("last of several boxes", "\\boxed{lyon} no, \\boxed{paris}", "paris"),
        ("truncated box", "I think \\boxed{Paris} or maybe \\boxed{Lyo", ""),
        ("box only before the window", "\\boxed{Paris}" + FILLER, ""),
        ("box cut by the window", "\\boxed{Paris}" + " x" * 145, ""),  # the window starts inside "\boxed"
        ("box starts at the window's first character", "\\boxed{Paris}" + " x" * 143 + "y", "paris"),
        ("trailing whitespace is not in the window", "\\boxed{Paris}" + " x" * 143 + "\n" * 50, "paris"),
        ("bare trailing \\boxed", "\\boxed{paris} and finally \\boxed", ""),
        ("\\boxed word is not a box", "\\boxed{paris} \\boxedword", ""),
        ("space form", "The answer is $\\boxed Paris$ indeed", "paris"),
        ("space form to the end", "so \\boxed Paris", "paris"),
        ("space form wins over a later braced box", "\\boxed paris, not \\boxed{lyon}", "paris, not \\boxed{lyon}"),
        ("empty box", "The answer is \\boxed{}.", ""),
        ("no box", "The answer is Paris.", ""),
        ("fbox is not read", "\\fbox{paris}", ""),
        ("empty response", "", ""),
    ],
)
def test_ruler_answer(case: str, response: str, answer: str) -> None:
    assert ruler_answer(response) == answer, case


@pytest.mark.parametrize(
    ("case", "response", "golds", "expected"),
    [
        ("exact", "\\boxed{Paris}", ["Paris"], metrics(1.0, 1.0, 1.0, 1.0, 1.0)),
        # articles and punctuation vanish on both sides: "eiffel tower" == "eiffel tower"
        ("articles/punctuation", "\\boxed{The Eiffel Tower!}", ["Eiffel tower."], metrics(1.0, 1.0, 1.0, 1.0, 1.0)),
        ("an/a", "\\boxed{an apple, a pie}", ["apple pie"], metrics(1.0, 1.0, 1.0, 1.0, 1.0)),
        # gold "paris" inside "paris france": sub_em; F1 p = 1/2, r = 1 -> 2/3
        ("gold inside answer", "\\boxed{Paris, France}", ["Paris"], metrics(0.0, 1.0, 2 / 3, 1.0, 1.0)),
        # answer "paris" inside gold "city of paris": p = 1, r = 1/3 -> 1/2
        ("answer inside gold", "\\boxed{Paris}", ["the city of Paris"], metrics(0.0, 1.0, 0.5, 1.0, 1.0)),
        ("wrong", "\\boxed{Lyon}", ["Paris"], metrics(0.0, 0.0, 0.0, 0.0, 1.0)),
        # no yes/no rule in the seed's F1: "yes" vs "yes it is" is p = 1, r = 1/3
        ("yes against a longer gold", "\\boxed{yes}", ["yes it is"], metrics(0.0, 1.0, 0.5, 1.0, 1.0)),
        # only the FIRST gold is scored, as the seed does (answers[0])
        ("second gold is not scored", "\\boxed{Lutetia}", ["Paris", "Lutetia"], metrics(0.0, 0.0, 0.0, 0.0, 1.0)),
        ("first gold of several", "\\boxed{Paris}", ["Paris", "Lutetia"], metrics(1.0, 1.0, 1.0, 1.0, 1.0)),
        ("single gold as a string", "\\boxed{Paris}", "Paris", metrics(1.0, 1.0, 1.0, 1.0, 1.0)),
        # the empty answer is "in" every gold: a sub_em hit, never a strict one
        ("truncated box", "\\boxed{Par", ["Paris"], MISS_EMPTY),
        ("box only before the window", "\\boxed{Paris}" + FILLER, ["Paris"], MISS_EMPTY),
        ("bare trailing \\boxed", "\\boxed{Paris} so \\boxed", ["Paris"], MISS_EMPTY),
        ("empty box", "\\boxed{}", ["Paris"], MISS_EMPTY),
        ("no box, right words", "It is Paris.", ["Paris"], MISS_EMPTY),
        ("answer normalises to empty", "\\boxed{The}", ["Paris"], MISS_EMPTY),
        ("space form", "$\\boxed Paris$", ["Paris"], metrics(1.0, 1.0, 1.0, 1.0, 1.0)),
        # no gold at all: the seed compares with "" -> em (both empty) and sub_em hit, f1 0
        ("no gold, no answer", "nothing", [], metrics(1.0, 1.0, 0.0, 0.0, 0.0)),
    ],
)
def test_ruler_metrics(case: str, response: str, golds: list[str] | str, expected: dict[str, float]) -> None:
    got = ruler_metrics(response, golds)
    assert got == pytest.approx(expected), case


def test_sub_em_is_strict_sub_em_plus_unanswered() -> None:
    responses = ["\\boxed{Paris}", "\\boxed{Lyon}", "no box", "\\boxed{Par", "\\boxed{}"]
    rows = [ruler_metrics(r, ["Paris"]) for r in responses]
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}  # type: ignore[literal-required]
    assert mean["sub_em"] == pytest.approx(mean["sub_em_strict"] + 1.0 - mean["answered"])
    assert 100 * mean["sub_em"] == pytest.approx(80.0)  # the run figure: 4 of 5 count for the seed
    assert 100 * mean["sub_em_strict"] == pytest.approx(20.0)


def test_memagent_spec_reports_the_seed_metrics() -> None:
    rin = {"answer": "\\boxed{Par", "prompt": "Capital?", "label": ["Paris"], "metadata": {}, "status": "completed"}
    got = SPEC.eval_metrics(rin)  # type: ignore[misc,arg-type]
    assert "reward" not in got  # the reward is the rollout's, computed once, not repeated as a metric
    assert SPEC.reward(rin, None) == 0.0  # type: ignore[arg-type]
    assert {k: got[k] for k in MISS_EMPTY} == MISS_EMPTY
    assert eval_metrics is ruler_metrics

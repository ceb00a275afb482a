"""AgentFlow's rewards: the seed's boxed-answer rule, math-verify, and the LLM judge.

- `boxed_exact` (the seed's, `answer_check: boxed_exact`): the prediction is the answer's last
  `\\boxed{...}` normalised as slime's DAPO utilities do, else the seed's line rule (the last line
  holding "answer/result/is/=" followed by a `\\boxed{}` (normalised) or a number, else the last non-empty
  line, cut to 200 characters); 1.0 when it equals a gold exactly, else the judge decides (`judge: null`:
  0.0). `\\boxed{5} then \\boxed{6}` predicts 6; `\\boxed{1,16}` predicts 116.
- `math_verify` (the original's rule-based fallback): math-verify equivalence, so `\\frac{1}{2}` equals
  `0.5`; it runs in a worker process killed at `reward_timeout_s` (`agentgraphs.math_equivalence`), so an
  answer such as `9^{9^{9^{9}}}` scores 0.0 with a timeout reason instead of freezing the rollout.
- Judge, `judge_prompt: seed` (the seed variant): the seed's prompt (core/rewarder.py:9-30) with the question,
  the whole final output and the ground truth, asking for a last line `VERDICT: True|False`; read by the seed's
  rule (`parse_seed_judge_verdict`: the first `VERDICT: X`, else `<true_false>: X`, else a last line that is
  only true/false); a reply with none scores 0.0 as the seed's, with a WARNING (`judge_no_verdict: zero`), or
  raises RewardError (`judge_no_verdict: fail`, the original variant's). The seed's judge samples:
  it sends no sampling parameters but max_new_tokens (rollout.py:217-222), so SGLang's /generate defaults
  apply (`judge_sampling: sglang_defaults`, SGLANG_DEFAULT_SAMPLING).
- Judge, `judge_prompt: original`: the judge model reads the question, the model's final answer and the ground
  truth and answers {"analysis": ..., "true_false": ...}; 1.0 if true, else 0.0. The verdict must be
  stated (`parse_judge_verdict`: that JSON object, a `true_false: X` or `VERDICT: X`, a last line that is
  only True / False); a reply without one (cut at max_new_tokens, the instructions echoed) raises
  RewardError, so its sample fails instead of being scored by a stray "true" or a silent 0.0. Asked greedily
  (`judge_sampling: greedy`), as the original's judge engine is (temperature 0).

Every rule is a pure function of (answer, golds) that never raises on model text and always returns.
`reward(RewardInput, ctx)` and `metrics(RewardInput)` are the spec's: the rule `answer_check` names, then
the judge (the `judge` option: an engine the context must have, `agentgraphs.spec.judge_engine`, else a
ConfigError fails the sample; null: the rule alone).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence

from ..answers import last_boxed_group, normalize_final_answer
from ..context import AgentContext
from ..errors import RewardError
from ..math_equivalence import AnswerCheck, amath_verify_check, math_verify_check
from ..node import ask_judge
from ..row_fields import answers_of, question_of
from ..spec import RewardInput, judge_engine, reward_options
from .options import AgentFlowOptions
from .prompts import JUDGE_TEMPLATE, SEED_JUDGE_TEMPLATE

__all__ = ["AnswerCheck", "JUDGE_SAMPLING", "SGLANG_DEFAULT_SAMPLING", "boxed_exact_check", "boxed_exact_reward",
           "seed_prediction", "math_verify_reward", "judge_reward", "metrics", "parse_judge_verdict",
           "parse_seed_judge_verdict", "reward"]

logger = logging.getLogger(__name__)

# What SGLang's /generate samples with when a request sends no sampling parameters (its SamplingParams defaults,
# sglang/srt/sampling/sampling_params.py: the model's generation_config only reaches the OpenAI-compatible routes),
# sent explicitly here: our engines always send every field, so the context's sampling must not fill them in.
SGLANG_DEFAULT_SAMPLING: dict[str, float | int] = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
# option judge_sampling -> the judge call's sampling overrides
JUDGE_SAMPLING: dict[str, dict[str, float | int]] = {"sglang_defaults": SGLANG_DEFAULT_SAMPLING,
                                                      "greedy": {"temperature": 0.0}}

_CUE = r"(?:answer|result|is|=)"
# the seed's line rule. `[\s:]*` stands for the seed's `\s*[:\s]*` (the same strings, without the
# catastrophic backtracking: the seed's form takes minutes on "=" followed by a few thousand spaces)
_LINE_BOXED = re.compile(_CUE + r"[\s:]*\$?\\?boxed\{([^}]+)\}", re.IGNORECASE)
_LINE_NUMBER = re.compile(_CUE + r"[\s:]*(?:\$\s*)?([+-]?\d+(?:\.\d+)?(?:/\d+)?)", re.IGNORECASE)
_LAST_LINE_CHARS = 200


def seed_prediction(text: str) -> str:
    """The seed's prediction from a final output (see the module docstring); "" when there is nothing.

    >>> seed_prediction("so \\\\boxed{5} then \\\\boxed{\\\\dfrac{1}{2}}"), seed_prediction("The answer is 12.")
    ('\\\\dfrac{1}{2}', '12')
    >>> seed_prediction("x = 7\\nDone, I think"), seed_prediction("  ")
    ('7', '')
    """
    if not isinstance(text, str):
        return ""
    boxed = last_boxed_group(text)
    if boxed is not None:
        return normalize_final_answer(boxed)
    lines = [line.strip() for line in text.strip().splitlines()]
    for line in reversed(lines):
        if not line:
            continue
        # a boxed match ends at a "}": searching only up to the line's last one keeps the scan linear
        found = _LINE_BOXED.search(line, 0, line.rfind("}") + 1)
        if found:
            return normalize_final_answer(found.group(1))
        found = _LINE_NUMBER.search(line)
        if found:
            return found.group(1).strip()
    return next((line[:_LAST_LINE_CHARS] for line in reversed(lines) if line), "")


def boxed_exact_check(answer: str, golds: Sequence[str]) -> AnswerCheck:
    """The seed's rule: 1.0 when `seed_prediction(answer)` equals a non-empty gold exactly, with the reason.

    >>> boxed_exact_check("\\\\boxed{1,000}", ["1000"])
    {'score': 1.0, 'reason': "prediction '1000' equals gold 0"}
    >>> boxed_exact_check("\\\\boxed{5} then \\\\boxed{6}", ["5"])["score"]
    0.0
    """
    pred = seed_prediction(answer)
    if not pred:
        return AnswerCheck(score=0.0, reason="no prediction")
    for i, gold in enumerate(golds):
        if gold and pred == gold:
            return AnswerCheck(score=1.0, reason=f"prediction {pred[:80]!r} equals gold {i}")
    return AnswerCheck(score=0.0, reason=f"prediction {pred[:80]!r} equals no gold")


def boxed_exact_reward(answer: str, golds: Sequence[str]) -> float:
    """`boxed_exact_check`'s score."""
    return boxed_exact_check(answer, golds)["score"]


def math_verify_reward(answer: str, golds: Sequence[str], *, timeout_s: float = 10.0) -> float:
    """1.0 when math-verify finds the answer equivalent to any ground truth, else 0.0 (also past
    `timeout_s`: `agentgraphs.math_equivalence.math_verify_check` gives the reason); never raises for what a
    model writes (ConfigError without the `math` extra).

    >>> math_verify_reward("\\\\frac{1}{2}", ["0.5"])
    1.0
    >>> math_verify_reward("The answer is \\\\boxed{42}.", ["42"])
    1.0
    >>> math_verify_reward("41", ["42"])
    0.0
    """
    return math_verify_check(answer, golds, timeout_s=timeout_s)["score"]


# A verdict is stated, never guessed: the JSON object the prompt asks for; else the last `true_false: X`
# (the original's `<true_false>: "True"` format too) whose value ends there (not "true or false"); else the
# seed judge's `VERDICT: X` line; else a last line that is only True / False. Single character classes
# between the anchors keep every scan linear.
_VERDICT_KEY = re.compile(r"true_false[\s*\"'>]*[:=][\s*\"']*(true|false)[*\"']*(?=[ \t]*(?:[,}.]|$))",
                          re.IGNORECASE | re.MULTILINE)
_VERDICT_LINE = re.compile(r"^[ \t*]*verdict[ \t*]*:[ \t*\"']*(true|false)[ \t*\"'.]*$",
                           re.IGNORECASE | re.MULTILINE)
_TRUE_FALSE = {"true": True, "false": False}


def parse_judge_verdict(text: str) -> bool | None:
    """The judge's verdict, or None when its reply states none (see the rules above `_VERDICT_KEY`).

    >>> parse_judge_verdict('{"analysis": "same value", "true_false": true}')
    True
    >>> parse_judge_verdict("The answers differ.\\nVERDICT: False")
    False
    >>> parse_judge_verdict('{"analysis": "7 is not 8; it would be true only if') is None  # cut off
    True
    """
    if not isinstance(text, str):
        return None
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        try:
            obj = json.loads(body[start:end + 1])
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):  # the object asked for: its true_false decides, or nothing does
            value = obj.get("true_false")
            if isinstance(value, bool):
                return value
            return _TRUE_FALSE.get(value.strip().lower()) if isinstance(value, str) else None
    for rule in (_VERDICT_KEY, _VERDICT_LINE):
        found = rule.findall(text)
        if found:
            return _TRUE_FALSE[found[-1].lower()]
    lines = [line.strip(" \t*\"'.").lower() for line in text.splitlines() if line.strip(" \t*\"'.")]
    return _TRUE_FALSE.get(lines[-1]) if lines else None


# The seed judge's reading (core/rewarder.py:34-48), in order: the FIRST "VERDICT: X" anywhere; else the first
# "<true_false>: X"; else the stripped reply's last line, if it is only true / false (a trailing "." allowed).
_SEED_VERDICT = re.compile(r"verdict\s*:\s*(true|false)", re.IGNORECASE)
_SEED_TRUE_FALSE = re.compile(r"<true_false>\s*:?\s*(true|false)", re.IGNORECASE)
_SEED_LAST_LINE = {"true": True, "true.": True, "false": False, "false.": False}


def parse_seed_judge_verdict(text: str) -> bool | None:
    """The seed judge's verdict by the seed's rule (above), or None where the seed would score 0.0 for want of one.

    >>> parse_seed_judge_verdict("Say VERDICT: True or VERDICT: False.\\nVERDICT: False")  # the first one decides
    True
    >>> parse_seed_judge_verdict("They match.\\nTrue."), parse_seed_judge_verdict("I cannot tell.") is None
    (True, True)
    """
    if not isinstance(text, str):
        return None
    for rule in (_SEED_VERDICT, _SEED_TRUE_FALSE):
        found = rule.search(text)
        if found:
            return found.group(1).lower() == "true"
    body = text.strip()
    return _SEED_LAST_LINE.get(body.splitlines()[-1].strip().lower()) if body else None


async def judge_reward(ctx: AgentContext, engine_name: str, question: str, response: str, gold: str,
                       max_new_tokens: int = 1024, prompt_style: str = "original", sampling: str = "greedy",
                       no_verdict: str = "fail") -> float:
    """1.0 / 0.0 from the judge engine `engine_name` of the context (a token or a chat engine), asked through
    `agentgraphs.node.ask_judge` (the rollout's call budget and accounting; never trained) with the sampling
    JUDGE_SAMPLING names (`sampling`: "greedy", or "sglang_defaults" as the seed's judge samples).
    `prompt_style` "original": JUDGE_TEMPLATE read by `parse_judge_verdict`; "seed": SEED_JUDGE_TEMPLATE read
    by `parse_seed_judge_verdict`. A reply that states no verdict (None) raises RewardError (`no_verdict`
    "fail"): the sample fails instead of being scored by a guess; or (`no_verdict` "zero", the seed's
    core/rewarder.py:48) scores 0.0, logged as a WARNING naming the judge, its reply and the cause."""
    if prompt_style == "seed":
        prompt = SEED_JUDGE_TEMPLATE.format(question=question, model_response=response, groundtruth=gold)
    else:
        prompt = JUDGE_TEMPLATE.format(question=question, response=response, ground_truth=gold)
    out = await ask_judge(ctx, engine_name, prompt, max_new_tokens=max_new_tokens, sampling=JUDGE_SAMPLING[sampling])
    verdict = (parse_seed_judge_verdict if prompt_style == "seed" else parse_judge_verdict)(out.text)
    if verdict is None:
        if out.truncated:
            cause = ("its reply was cut at max_new_tokens: raise the context's max_new_tokens (slime: "
                     f"--rollout-max-response-len), which caps the judge's {max_new_tokens}")
        else:
            asked = ("the line 'VERDICT: True|False' SEED_JUDGE_TEMPLATE asks for" if prompt_style == "seed" else
                     'the JSON object JUDGE_TEMPLATE asks for ({"analysis": ..., "true_false": true|false})')
            cause = (f"it must answer {asked}: use a judge model that follows it, or set the option judge: null "
                     "to score by the rule alone")
        said = f"its reply ending {out.text.strip()[-200:]!r}" if out.text.strip() else "an empty reply"
        message = f"AgentFlow reward: judge {engine_name!r} gave no verdict ({said}); {cause}"
        if no_verdict == "zero":
            logger.warning("%s. Scored 0.0, as the seed does (judge_no_verdict: zero; 'fail' fails the sample)",
                           message)
            return 0.0
        raise RewardError(message)
    return 1.0 if verdict else 0.0


def _options(rin: RewardInput) -> AgentFlowOptions:
    return reward_options(rin, AgentFlowOptions, "agentflow")


async def _judged(rin: RewardInput, ctx: AgentContext | None, opts: AgentFlowOptions, golds: list[str]) -> float | None:
    """The judge's 1.0 / 0.0 over the golds, or None when the option says judge: null; ConfigError
    (`judge_engine`) when it names an engine the context does not have."""
    judge = judge_engine(ctx, opts.judge)
    if ctx is None or judge is None:
        return None
    question = question_of(rin["prompt"])
    for gold in golds:
        if await judge_reward(ctx, judge, question, rin["answer"], gold, max_new_tokens=opts.judge_max_new_tokens,
                              prompt_style=opts.judge_prompt, sampling=opts.judge_sampling,
                              no_verdict=opts.judge_no_verdict) == 1.0:
            return 1.0
    return 0.0


async def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """By `answer_check`: boxed_exact (seed) scores 1.0 on an exact boxed match, else asks the judge (0.0
    with judge: null); math_verify (original) asks the judge, else (judge: null) math-verify, whose timeouts
    and errors score 0.0 with the reason logged. A judge the context lacks is a ConfigError, never a rule score."""
    golds = answers_of(rin["label"])
    opts = _options(rin)
    if opts.answer_check == "boxed_exact":
        if boxed_exact_check(rin["answer"], golds)["score"] == 1.0:
            return 1.0
        judged = await _judged(rin, ctx, opts, golds)
        return 0.0 if judged is None else judged
    judged = await _judged(rin, ctx, opts, golds)
    if judged is not None:
        return judged
    check = await amath_verify_check(rin["answer"], golds, timeout_s=opts.reward_timeout_s)
    if check["reason"].startswith(("timeout", "error")):
        logger.warning("AgentFlow reward 0.0: math-verify %s (answer %r)", check["reason"], rin["answer"][:200])
    return check["score"]


async def metrics(rin: RewardInput) -> dict[str, float]:
    """The rule's own verdict, judge or not: {"boxed_exact": ...} or {"math_verify": ...} by `answer_check`."""
    if rin["label"] is None:
        return {}
    try:
        golds = answers_of(rin["label"])
        opts = _options(rin)
        if opts.answer_check == "boxed_exact":
            return {"boxed_exact": boxed_exact_check(rin["answer"], golds)["score"]}
        check = await amath_verify_check(rin["answer"], golds, timeout_s=opts.reward_timeout_s)
        return {"math_verify": check["score"]}
    except Exception:
        return {}

'''The seed variant's judge is the seed's, from slime's side: rl_bridge.generate + rl_bridge.reward_func against
local SGLang-contract servers (the policy, a generator model, a judge model), scripted over the tiny model.

The seed (Takenzz/AgentFlow@4b5aa8410c68c92fe45e2852db5a4c6cfe97d321, agentic/agentflow) asks its judge when the
final output's prediction is not the label (rollout.py:234-244): core/rewarder.py:9-30's prompt, one user message
rendered by core/llm_engine.py:50-56 (enable_thinking=False), with the row's prompt (:226-228), the WHOLE final
output (:232, 242) and str(label) (:230); max_new_tokens 2048 (:217-222). Its reply is read by
core/rewarder.py:34-48: the first "VERDICT: X", else "<true_false>: X", else a last line that is only true/false.
The final output is SGLang's `text` of the generate engine's reply (slime's sampling params keep the end-of-turn
token: it ends with "<|im_end|>"); the judge's own engine has SGLang's defaults, so its reply has none.
'''

from __future__ import annotations

import asyncio
import copy
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.node import MaxNewTokensLowered
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache
from tests.agentflow.test_engines import SLIME_SAMPLING
from tests.agentflow.test_seed_prompts import FINAL, QUESTION, generator, planner, said, seed_ids
from tests.test_multiturn import RecordingEngine

LABEL = "42.0"  # the final output's \boxed{42} is not "42.0": the seed asks its judge


def seed_judge(question: str, model_response: str, groundtruth: str) -> str:  # core/rewarder.py:9-30
    return f"""You are a strict math answer evaluator.

**Task:** Read the Model Response, extract its final answer, and determine if it matches the Ground Truth.

**Steps:**
1. Read the Model Response carefully. Find the final answer — look for \\boxed{{...}}, "the answer is ...", "result: ...", or the last numerical conclusion.
2. Compare the extracted answer to the Ground Truth.
3. They are equivalent ONLY if they represent the same mathematical value (e.g., "1/2" == "0.5", "1,000" == "1000").
4. If the Model Response has no clear final answer, or the answer does not match, output False.
5. Do NOT be lenient. When in doubt, output False.

**Inputs:**
Question: {question}

Model Response:
{model_response}

Ground Truth: {groundtruth}

**You MUST end your response with exactly one of these two lines (no extra text after it):**
VERDICT: True
VERDICT: False"""  # noqa: E501


# judge reply -> the seed's score (core/rewarder.py:36-48)
REPLIES = [
    ("42 and 42.0 are the same value.\nVERDICT: True", 1.0),
    # the FIRST VERDICT decides, even one quoted from the instructions
    ("I must end with VERDICT: False or VERDICT: True. They are equal.\nVERDICT: True", 0.0),
    ("The values agree, so verdict:true holds here (42 = 42.0).", 1.0),  # anywhere in the text
    ("Comparing...\n<true_false>: false", 0.0),
    ("Equivalent.\nTrue.", 1.0),
]


class ParamsEngine(RecordingEngine):
    """RecordingEngine that also keeps the sampling params of each call."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.params: list[Any] = []

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        self.params.append(params)
        return await super().generate(prompt_ids, params)


@pytest.fixture()
def servers(tiny_engine: Any) -> Iterator[dict[str, Any]]:
    reply = {"text": REPLIES[0][0]}

    def judge(call: ScriptCall) -> str:
        return reply["text"]

    engines = {"policy": RecordingEngine(ScriptedPolicy(tiny_engine, planner, name="policy")),
               "generator": RecordingEngine(ScriptedPolicy(tiny_engine, generator, name="generator")),
               "judge": ParamsEngine(ScriptedPolicy(tiny_engine, judge, name="judge"))}
    with SGLangTestServer(engines["policy"], port=0) as p, SGLangTestServer(engines["generator"], port=0) as g, \
            SGLangTestServer(engines["judge"], port=0) as j:
        yield {"policy": p, "generator": g, "judge": j, "scripts": engines, "reply": reply}
    clear_cache()


def bridge_args(servers: dict[str, Any], model_dir: Path, **options: Any) -> SimpleNamespace:
    host, port = servers["policy"].url.removeprefix("http://").rsplit(":", 1)
    return SimpleNamespace(agentgraph="agentflow", hf_checkpoint=str(model_dir), sglang_router_ip=host,
                           sglang_router_port=int(port), agentgraph_max_retries=0, reward_key=None,
                           agentgraph_options={"executor_engine": "generator", "verifier_engine": "generator",
                                               "final_engine": "generator", "tool_engine": "generator", **options},
                           agentgraph_engines={"generator": f"sglang:{servers['generator'].url}",
                                               "judge": f"sglang:{servers['judge'].url}"})


def score(reward: Any) -> float:
    return reward["score"] if isinstance(reward, dict) else reward


def generate_then_judge(args: SimpleNamespace, servers: dict[str, Any], replies: list[str]) -> tuple[Any, list]:
    """One rollout, then rl_bridge.reward_func on a copy of it once per judge reply."""
    clear_cache()
    sample = Sample(group_index=0, index=0, prompt=QUESTION, label=LABEL, metadata={})

    async def go() -> tuple[Any, list]:
        try:
            out = await rl_bridge.generate(args, sample, dict(SLIME_SAMPLING))
            scored = []
            for text in replies:
                servers["reply"]["text"] = text
                s = copy.deepcopy(out)
                scored.append((s, await rl_bridge.reward_func(args, s)))
            return out, scored
        finally:
            await aclose_all()

    return asyncio.run(go())


def test_seed_judge_gets_the_seeds_prompt_and_is_read_by_the_seeds_rule(servers: dict[str, Any],
                                                                      tiny_model_dir: Path, qwen25: Any) -> None:
    args = bridge_args(servers, tiny_model_dir)  # variant: seed, the default; judge: "judge", the default
    out, scored = generate_then_judge(args, servers, [text for text, _ in REPLIES] + ["I cannot decide."])
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    asked = servers["scripts"]["judge"].calls
    assert len(asked) >= len(REPLIES) + 1  # the last len(REPLIES) + 1 are reward_func's
    expected = seed_ids(qwen25, seed_judge(QUESTION, said(FINAL), LABEL))  # the whole final output, not "42"
    for prompt, _ in asked:
        assert prompt == expected, qwen25.decode(prompt)
    for (text, want), (s, reward) in zip(REPLIES, scored):
        assert s.status == Sample.Status.COMPLETED, (text, s.metadata.get("status_reason"))
        assert score(reward) == want, text
    # no verdict by the seed's rule: 0.0 and trained on, as the seed's (core/rewarder.py:48; the default
    # judge_no_verdict: zero); test_a_seed_judge_reply_without_a_verdict_... checks its warning and `fail`
    s, reward = scored[-1]
    assert score(reward) == 0.0 and s.status == Sample.Status.COMPLETED, s.metadata.get("status_reason")


def test_a_seed_judge_reply_without_a_verdict_scores_0_with_a_warning_or_fails_the_sample(
        servers: dict[str, Any], tiny_model_dir: Path, caplog: Any) -> None:
    """The seed scores a judge reply without a verdict 0.0 (core/rewarder.py:48) and trains on it; so does the
    seed variant, saying so in a WARNING that names the judge and its reply. `judge_no_verdict: fail` (the
    original variant's) fails the sample instead, saying why. Before, the seed variant failed it: a sample the
    seed trains on was dropped from its group."""
    with caplog.at_level(logging.WARNING, logger="agentgraphs.agentflow.reward"):
        _, ((s, reward),) = generate_then_judge(bridge_args(servers, tiny_model_dir), servers, ["I cannot decide."])
    assert score(reward) == 0.0 and s.status == Sample.Status.COMPLETED, s.metadata.get("status_reason")
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "agentgraphs.agentflow.reward"]
    assert "judge 'judge' gave no verdict (its reply ending 'I cannot decide.')" in warned
    assert "Scored 0.0, as the seed does (judge_no_verdict: zero" in warned
    args = bridge_args(servers, tiny_model_dir, judge_no_verdict="fail")
    _, ((s, reward),) = generate_then_judge(args, servers, ["I cannot decide."])
    assert score(reward) == 0.0 and s.status == Sample.Status.FAILED
    assert "gave no verdict" in s.metadata["status_reason"] and "VERDICT" in s.metadata["status_reason"]


def test_seed_judge_asks_for_the_seeds_max_new_tokens(servers: dict[str, Any], tiny_model_dir: Path) -> None:
    """rollout.py:221: max_new_tokens=2048 (the run's cap, here slime's default, may lower it, and says so)."""
    args = bridge_args(servers, tiny_model_dir)
    with pytest.warns(Warning, match="node 'judge' asks max_new_tokens=2048"):
        generate_then_judge(args, servers, [REPLIES[0][0]])
    inner = servers["scripts"]["judge"].inner.calls
    assert inner and all("VERDICT: True\nVERDICT: False" in c.prompt_text for c in inner)


def test_original_variant_keeps_the_original_judge(servers: dict[str, Any], tiny_model_dir: Path) -> None:
    args = bridge_args(servers, tiny_model_dir, variant="original", analyzer_engine="generator")
    out, scored = generate_then_judge(args, servers, ['{"analysis": "equal", "true_false": true}'])
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    text = servers["scripts"]["judge"].inner.calls[-1].prompt_text
    assert '"true_false": true or false' in text and "VERDICT" not in text
    assert score(scored[0][1]) == 1.0


@pytest.mark.parametrize(("variant", "sampled"), [
    # rollout.py:217-222: the seed's judge engine is built with sampling_params={} and max_new_tokens=2048, so its
    # /generate request carries no sampling parameter: SGLang's defaults (temperature 1.0, top-p 1.0, no top-k,
    # no min-p; the model's generation_config reaches only SGLang's OpenAI-compatible routes) — the judge samples
    ("seed", {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}),
    # the original AgentFlow's judge engine answers at temperature 0 (greedy: the rest is the context's, unused)
    ("original", {"temperature": 0.0}),
])
def test_the_judge_samples_as_the_variants_judge(servers: dict[str, Any], tiny_model_dir: Path, variant: str,
                                                sampled: dict[str, float]) -> None:
    options = {"variant": variant, "analyzer_engine": "generator"} if variant == "original" else {}
    reply = REPLIES[0][0] if variant == "seed" else '{"analysis": "equal", "true_false": true}'
    args = bridge_args(servers, tiny_model_dir, **options)
    with warnings.catch_warnings():  # the seed judge's 2048 over slime's default cap: test_seed_judge_asks_...
        warnings.simplefilter("ignore", MaxNewTokensLowered)
        out, scored = generate_then_judge(args, servers, [reply])
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    assert score(scored[0][1]) == 1.0
    bodies = servers["judge"].stats.bodies  # what reached the judge's server, as SGLang would read it
    assert bodies and len(bodies) == len(servers["scripts"]["judge"].params)
    for body, params in zip(bodies, servers["scripts"]["judge"].params):
        assert {key: body["sampling_params"][key] for key in sampled} == sampled
        assert {key: getattr(params, key) for key in sampled} == sampled

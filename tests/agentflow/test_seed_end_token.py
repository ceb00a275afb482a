'''The seed variant reads every reply as the seed does, end-of-turn token included, from slime's side:
rl_bridge.generate + rl_bridge.reward_func against local SGLang-contract servers (the policy, a generator model, a
judge model), scripted over the tiny model.

The seed (Takenzz/AgentFlow@4b5aa8410c68c92fe45e2852db5a4c6cfe97d321, agentic/agentflow) reads SGLang's `text`
(core/llm_engine.py:67) of requests sent with slime's sampling params (skip_special_tokens false, no_stop_trim,
spaces_between_special_tokens false): a reply that stopped on the end-of-turn token ends with "<|im_end|>"
(every final_output of its eval_scores.json does). It strips that only from the command (core/executor.py:43) and
the tool name (core/formatters.py:40-43); the analysis, each base_generator answer (tools/base_generator/tool.py:30)
and the final output keep it, and the next prompts show it: rendered to text and tokenized with
tokenizer(text, add_special_tokens=False) (core/llm_engine.py:50-56), where the literal becomes the special token.
The judge gets the whole final output (rollout.py:232, 242). A reply cut at max_new_tokens has no end token.
'''

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.errors import ConfigError
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import clear_cache
from tests.agentflow.test_seed_judge import seed_judge
from tests.agentflow.test_seed_prompts import seed_bridge_run
from tests.agentflow.test_seed_prompts import (
    ANALYSIS, END, FINAL, QUESTION, generator, planner, said, seed_final, seed_ids, seed_memory, seed_next_step,
    seed_verify,
)
from tests.test_multiturn import RecordingEngine

LABEL = "42.0"  # not the boxed "42": the seed asks its judge
LONG_ANALYSIS = "Summary: a product of two numbers, worked out one careful step after another. " * 20
CUT = 64  # the planner's max_new_tokens in the cut test: the long analysis stops there, the plans fit


@pytest.fixture()
def servers(tiny_engine: Any) -> Iterator[dict[str, Any]]:
    analysis = {"text": ANALYSIS}

    def policy(call: ScriptCall) -> str:
        if "Analyze the given query" in call.prompt_text:
            return analysis["text"]
        return planner(call)

    engines = {"policy": RecordingEngine(ScriptedPolicy(tiny_engine, policy, name="policy")),
               "generator": RecordingEngine(ScriptedPolicy(tiny_engine, generator, name="generator")),
               "judge": RecordingEngine(ScriptedPolicy(tiny_engine, ["Same value.\nVERDICT: True"] * 4,
                                                       name="judge"))}
    with SGLangTestServer(engines["policy"], port=0) as p, SGLangTestServer(engines["generator"], port=0) as g, \
            SGLangTestServer(engines["judge"], port=0) as j:
        yield {"policy": p, "generator": g, "judge": j, "scripts": engines, "analysis": analysis}
    clear_cache()


def run(servers: dict[str, Any], model_dir: Path, sampling: dict[str, Any] | None = None,
        **options: Any) -> tuple[Any, Any]:
    return seed_bridge_run(servers, model_dir, ("generator", "judge"), {"judge_max_new_tokens": 256, **options},
                           label=LABEL, sampling=sampling)


def user_content_ends(tokenizer: Any, prompt: list[int]) -> int:
    """How many end-of-turn tokens `prompt` holds beyond the template's own (the system and the user turn)."""
    return prompt.count(tokenizer.convert_tokens_to_ids(END)) - 2


def test_seed_planner_prompts_show_the_replies_with_their_end_token(servers: dict[str, Any], tiny_model_dir: Path,
                                                                   qwen25: Any) -> None:
    out, _ = run(servers, tiny_model_dir)  # variant: seed, the default
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    received = [prompt for prompt, _ in servers["scripts"]["policy"].calls]
    assert len(received) == 3
    # the analysis and the base_generator's answers as the seed's SGLang text: "...<|im_end|>", tokenized as the
    # seed tokenizes its rendered prompt, so the literal is the end-of-turn token's id inside the user's content
    assert received[1] == seed_ids(qwen25, seed_next_step(QUESTION, said(ANALYSIS), seed_memory(0)))
    assert received[2] == seed_ids(qwen25, seed_next_step(QUESTION, said(ANALYSIS), seed_memory(1)))
    assert [user_content_ends(qwen25, p) for p in received] == [0, 1, 2]
    assert seed_memory(1)["Action Step 0"]["result"] == "6 * 7 = 42" + END
    # the trained tokens are still exactly the policy's, whatever text was read
    for row, (prompt, completion) in zip(out.train_metadata["turns"], servers["scripts"]["policy"].calls):
        assert row["tokens"] == prompt + completion.token_ids
        assert row["rollout_log_probs"] == completion.logprobs


def test_seed_helpers_and_judge_get_the_replies_with_their_end_token(servers: dict[str, Any], tiny_model_dir: Path,
                                                                    qwen25: Any) -> None:
    out, reward = run(servers, tiny_model_dir)
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    helper = [prompt for prompt, _ in servers["scripts"]["generator"].calls]
    assert helper[-2] == seed_ids(qwen25, seed_verify(QUESTION, said(ANALYSIS), seed_memory(2)))
    assert helper[-1] == seed_ids(qwen25, seed_final(said(ANALYSIS), QUESTION, seed_memory(2)))
    # the judge reads the whole final output as the seed's judge does: ending with "<|im_end|>"
    judged = [prompt for prompt, _ in servers["scripts"]["judge"].calls]
    assert judged and all(p == seed_ids(qwen25, seed_judge(QUESTION, said(FINAL), LABEL)) for p in judged)
    text = servers["scripts"]["judge"].inner.calls[-1].prompt_text
    assert f"Model Response:\n{FINAL}{END}\n\nGround Truth: {LABEL}" in text
    assert user_content_ends(qwen25, judged[-1]) == 1
    # the judge's own reply is read without one (its engine: SGLang's defaults), and decides
    assert (reward["score"] if isinstance(reward, dict) else reward) == 1.0


def test_a_reply_cut_at_max_new_tokens_has_no_end_token(servers: dict[str, Any], tiny_model_dir: Path,
                                                       qwen25: Any) -> None:
    servers["analysis"]["text"] = LONG_ANALYSIS
    out, _ = run(servers, tiny_model_dir, planner_max_new_tokens=CUT, judge=None)
    assert out.status == Sample.Status.TRUNCATED, out.metadata.get("status_reason")  # the analysis was cut
    analysis_ids = servers["scripts"]["policy"].calls[0][1].token_ids
    assert len(analysis_ids) == CUT and qwen25.convert_tokens_to_ids(END) not in analysis_ids
    cut = qwen25.decode(analysis_ids, skip_special_tokens=False)  # SGLang's text of those ids
    received = [prompt for prompt, _ in servers["scripts"]["policy"].calls]
    assert received[1] == seed_ids(qwen25, seed_next_step(QUESTION, cut, seed_memory(0)))
    assert user_content_ends(qwen25, received[1]) == 0


def test_original_variant_reads_replies_without_the_end_token(servers: dict[str, Any], tiny_model_dir: Path,
                                                             qwen25: Any) -> None:
    out, _ = run(servers, tiny_model_dir, variant="original", analyzer_engine="generator")
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    scripts = servers["scripts"]
    assert scripts["policy"].calls and scripts["judge"].calls
    calls = [*scripts["policy"].calls, *scripts["generator"].calls, *scripts["judge"].calls]
    assert all(user_content_ends(qwen25, prompt) == 0 for prompt, _ in calls)


def test_slime_skipping_special_tokens_is_refused_where_the_seed_variant_reads_reply_text(
        servers: dict[str, Any], tiny_model_dir: Path) -> None:
    """With slime's --rollout-skip-special-tokens the seed's replies (SGLang's text) lose their "<|im_end|>", which
    our engines, returning ids with one text, cannot give: the seed variant refuses it before any request, naming the
    flag; the original variant, whose prompts do not carry reply text as SGLang's, runs."""
    with pytest.raises(ConfigError, match=r"sampling_params\['skip_special_tokens'\] = True.*drop "
                                          r"--rollout-skip-special-tokens"):
        run(servers, tiny_model_dir, sampling={"skip_special_tokens": True})
    assert not any(servers["scripts"][name].calls for name in ("policy", "generator", "judge"))
    out, _ = run(servers, tiny_model_dir, sampling={"skip_special_tokens": True}, variant="original",
                 analyzer_engine="generator")
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")

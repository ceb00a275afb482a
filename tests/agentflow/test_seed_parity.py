"""Seed differences an audit found after the variant table: each reproduced under `variant: seed` (the default)
with the original's behaviour under `variant: original`, checked through the graph.

Seed: Takenzz/AgentFlow@4b5aa84, agentic/agentflow (file:line in README's AgentFlow table).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from agentgraphs.agentflow import SPEC, VARIANTS, Tool
from agentgraphs.agentflow.parsing import parse_verifier_conclusion
from agentgraphs.context import AgentContext
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.batch import run_file
from agentgraphs.cli import app
from agentgraphs.engines import SamplingParams
from agentgraphs.node import MaxNewTokensLowered
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from tests.agentflow.test_graph import helper_script, plan
from tests.agentflow.test_seed import run_flow


# -- 1. the verifier's STOP / CONTINUE --------------------------------------------------------------------

# core/verifier.py:50-65: the LAST `conclusion\**:?\s*\**\s*(STOP|CONTINUE)\b`, else \bstop\b then \bcontinue\b
# in the last 3 lines, else CONTINUE; no JSON. The original: JSON, the last `conclusion...(\w+)` when its word
# is a verdict, then "stop" anywhere in the text.
VERDICTS = [
    # text, seed, original
    ("We must not stop yet.\nA second check would help.\nThe tool can do it.\nNo verdict.", "CONTINUE", "STOP"),
    ("Conclusion: STOP\nThen again, conclusion: unclear.", "STOP", "STOP"),
    ("Conclusion: CONTINUE\nOn reflection the conclusion: maybe, we could stop", "CONTINUE", "STOP"),
    ("**Conclusion**: **STOPPED**", "CONTINUE", "STOP"),  # \b: STOPPED is not STOP, nor in the tail
    ("The memory is complete.\n\nSTOP", "STOP", "STOP"),
    ("The memory is unstoppable.\nmore\nmore\nmore", "CONTINUE", "STOP"),  # a word, not a substring
    ('{"conclusion": "CONTINUE", "why": "stop"}', "STOP", "CONTINUE"),  # the seed reads no JSON
    ('{"analysis": "incomplete", "stop_signal": false}', "CONTINUE", "CONTINUE"),
    ("conclusion:" + " " * 50_000 + "x", "CONTINUE", "CONTINUE"),  # linear time on long whitespace runs
    ("", "CONTINUE", "CONTINUE"),
]


@pytest.mark.parametrize(("text", "seed", "original"), VERDICTS, ids=[str(i) for i in range(len(VERDICTS))])
def test_verifier_conclusion_per_rule(text: str, seed: str, original: str) -> None:
    assert parse_verifier_conclusion(text, rule="seed") == seed
    assert parse_verifier_conclusion(text, rule="original") == original


def test_the_seed_verifier_rule_is_the_variant_default() -> None:
    assert SPEC.resolve_options({}).verifier_rule == "seed"
    assert SPEC.resolve_options({"variant": "original"}).verifier_rule == "original"
    assert VARIANTS["seed"]["verifier_rule"] == "seed"


@pytest.mark.parametrize(("variant", "steps", "reason"), [("seed", 2, "max_steps"), ("original", 1, "verifier")])
def test_a_stop_in_the_reasoning_is_not_a_verdict_for_the_seed(tiny_engine: Any, variant: str, steps: int,
                                                                 reason: str) -> None:
    roles = helper_script()

    def helper(call: ScriptCall) -> str:
        if "Evaluate if the current memory" in call.prompt_text:
            return VERDICTS[0][0]
        return roles(call)

    plans = [plan(f"Compute 6 * 7, attempt {i}.", "Python_Coder_Tool") for i in range(2)]
    rollout, _, _ = run_flow(tiny_engine, plans, helper, variant=variant, max_steps=2)
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["step"] == steps and rollout.final_state["stop_reason"] == reason


# -- 2. python_coder's execution time limit --------------------------------------------------------------


async def _limits_probe(rt: Any, query: str) -> str:
    limits = rt.sandbox_limits
    return f"wall {limits.wall_s:g} cpu {limits.cpu_s:g}"


PROBE = Tool(name="Probe_Tool", description="Reports the sandbox limits.", input_types={"query": "str"},
             output_type="str", run=_limits_probe)


@pytest.mark.parametrize(("variant", "wall"), [("seed", 30), ("original", 10)])
def test_python_code_runs_under_the_variants_time_limit(tiny_engine: Any, variant: str, wall: int) -> None:
    """tools/python_coder/tool.py:12 _EXEC_TIMEOUT = 30 (seed); the original's `with timeout(10)`."""
    rollout, _, _ = run_flow(tiny_engine, [plan("Report the limits.", "Probe_Tool")], helper_script(verdicts=["STOP"]),
                             ctx_tools={"probe": PROBE}, variant=variant, tools=["probe"])
    assert rollout.status == "completed", rollout.reason
    assert f"wall {wall} cpu {wall}" in rollout.final_state["memory"][0]["result"]


# -- 3. "Action Step k" numbering and the memory's cut marker -------------------------------------------


@pytest.mark.parametrize(("variant", "first", "second"), [("seed", 0, 1), ("original", 1, 2)])
def test_memory_action_steps_are_numbered_as_the_variant(tiny_engine: Any, variant: str, first: int,
                                                         second: int) -> None:
    """core/solver.py:91, 128: the seed numbers from step_count in range(max_steps): "Action Step 0" first."""
    plans = [plan(f"Compute 6 * 7, attempt {i}.", "Python_Coder_Tool") for i in range(2)]
    rollout, policy, helper = run_flow(tiny_engine, plans, helper_script(verdicts=["CONTINUE", "STOP"]),
                                       variant=variant)
    assert rollout.status == "completed", rollout.reason
    second_plan = [c.prompt_text for c in policy.calls if "optimal next step" in c.prompt_text][1]
    assert f"'Action Step {first}':" in second_plan and f"'Action Step {second}'" not in second_plan
    verifications = [c.prompt_text for c in helper.calls if "Evaluate if the current memory" in c.prompt_text]
    assert f"'Action Step {second}':" in verifications[1] and f"'Action Step {first}':" in verifications[1]
    finals = [c.prompt_text for c in helper.calls
              if "Generate a concise final answer" in c.prompt_text or "Generate the final output" in c.prompt_text]
    assert f"'Action Step {second}':" in finals[0]


def test_a_long_result_is_cut_with_the_seeds_marker(tiny_engine: Any) -> None:
    """core/memory.py:13-15: the first and last 2,048 characters around "... [truncated N chars] ..."."""
    answer = "Working: " + "6 * 7 is computed by adding 6 seven times. " * 110 + "The final answer is 42."
    roles = helper_script(verdicts=["STOP"])

    def helper(call: ScriptCall) -> str:
        if call.prompt_text.rstrip().endswith("Compute 6 * 7<|im_end|>\n<|im_start|>assistant"):
            return answer  # the base generator's own call
        return roles(call)

    rollout, _, _ = run_flow(tiny_engine, [plan("Compute 6 * 7.", "Base_Generator_Tool")], helper,
                             max_new_tokens=2048)
    assert rollout.status == "completed", rollout.reason
    # the seed's memory keeps str() of the step's one result (core/memory.py:12): the base generator's reply as
    # SGLang's text, with the end-of-turn token (tools/base_generator/tool.py:30, core/llm_engine.py:67)
    full = answer + "<|im_end|>"
    assert rollout.final_state["memory"][0]["result"] == (
        full[:2048] + f"\n... [truncated {len(full) - 4096} chars] ...\n" + full[-2048:])


# -- 4. per-call max_new_tokens against the run's cap ----------------------------------------------------


class AskedTokens:
    """An engine wrapper that records the max_new_tokens each call was given."""

    def __init__(self, inner: ScriptedPolicy) -> None:
        self.inner, self.name, self.tokenizer = inner, inner.name, inner.tokenizer
        self.asked: list[int] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        self.asked.append(params.max_new_tokens)
        return await self.inner.generate(prompt_ids, params)


LONG_PLAN = plan("Compute 6 * 7.", "Python_Coder_Tool", context="The product of six and seven. " * 200)


def _run_file(tiny_engine: Any, tmp_path: Path, **kwargs: Any) -> tuple[dict[str, Any], AskedTokens, AskedTokens]:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": "What is 6 times 7?", "label": "42"}) + "\n")

    def planner(call: ScriptCall) -> str:
        if "Analyze the given query" in call.prompt_text:
            return "Summary: a product."
        return LONG_PLAN

    policy = AskedTokens(ScriptedPolicy(tiny_engine, planner, name="planner"))
    helper = AskedTokens(ScriptedPolicy(tiny_engine, helper_script(verdicts=["STOP"]), name="helper"))
    run_file("agentflow", data, policy, tmp_path / "out", options={"max_steps": 1, "judge": None},
             engines={"helper": helper}, temperature=0.7, **kwargs)
    sample = json.loads((tmp_path / "out" / "samples.jsonl").read_text().splitlines()[0])
    return sample, policy, helper


def test_a_run_without_a_token_cap_gives_each_call_its_methods_own(tiny_engine: Any, tmp_path: Path) -> None:
    """`agentgraphs run agentflow` without --max-new-tokens: the seed's planner asks 4096 tokens per call
    (rollout.py:113), and gets them; a run-level default nobody set lowered it to 1024."""
    assert len(tiny_engine.tokenizer.encode(LONG_PLAN)) > 1024
    sample, policy, helper = _run_file(tiny_engine, tmp_path)
    assert sample["status"] == "completed", sample["metadata"]["status_reason"]
    assert policy.asked == [4096, 4096] and set(helper.asked) == {4096}


def test_a_lower_cap_the_user_set_is_kept_and_named(tiny_engine: Any, tmp_path: Path) -> None:
    """--max-new-tokens 1024 (slime: --rollout-max-response-len) is a real cap: calls asking more get 1024,
    and a call it cuts says so in the sample's status reason."""
    lowered = "node 'plan_next_step' asks max_new_tokens=4096; the run's cap is 1024"
    with pytest.warns(MaxNewTokensLowered, match=lowered):
        sample, policy, _ = _run_file(tiny_engine, tmp_path, max_new_tokens=1024)
    assert policy.asked == [1024, 1024]
    assert sample["status"] == "truncated"
    reason = sample["metadata"]["status_reason"]
    assert "the run's cap of 1024" in reason and "plan_next_step" in reason and "--max-new-tokens" in reason


def test_cli_run_sets_no_token_cap_unless_asked(monkeypatch: Any, tmp_path: Path) -> None:
    seen: list[Any] = []

    def fake_run_file(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs["max_new_tokens"])
        return {"results": 0, "by_status": {}}

    monkeypatch.setattr("agentgraphs.batch.run_file", fake_run_file)
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    base = ["run", "agentflow", "--data", str(data), "--engine", "hf:tiny", "--out", str(tmp_path / "o")]
    for extra, expected in (([], None), (["--max-new-tokens", "512"], 512)):
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code == 0, result.output
        assert seen[-1] == expected


# -- 5. no clock in the seed's loop ----------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "steps", "reason"), [("seed", 3, "max_steps"), ("original", 1, "max_time")])
def test_the_seeds_loop_has_no_clock(tiny_engine: Any, monkeypatch: Any, variant: str, steps: int,
                                     reason: str) -> None:
    """core/solver.py:91-164: only STOP, max_steps and the token budget end the seed's loop; the original stops
    planning after 300 s. Each node here seems to take 200 s (the graph's clock only); fails on the code before
    this test's commit, where the seed variant stopped on max_time_s=300 after its first step."""
    now = iter(range(0, 10**6, 100))
    monkeypatch.setattr("agentgraphs.agentflow.graph.time", SimpleNamespace(monotonic=lambda: float(next(now))))
    plans = [plan(f"Compute 6 * 7, attempt {i}.", "Python_Coder_Tool") for i in range(3)]
    rollout, _, _ = run_flow(tiny_engine, plans, helper_script(verdicts=["CONTINUE"]), variant=variant, max_steps=3)
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["elapsed_s"] > 300
    assert (rollout.final_state["step"], rollout.final_state["stop_reason"]) == (steps, reason)


# -- 6. the question as given ----------------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "shown"), [("seed", "What is 6 times 7?\n\n"), ("original", "What is 6 times 7?")])
def test_the_seeds_prompts_show_the_question_as_given(tiny_engine: Any, variant: str, shown: str) -> None:
    """rollout.py:115: the seed's question is the row's prompt as it is, a trailing newline too, in every prompt
    (the trained ones included); fails on the code before this test's commit, which stripped it."""
    policy = ScriptedPolicy(tiny_engine, lambda call: plan("Compute 6 * 7.", "Python_Coder_Tool"), name="planner")
    helper = ScriptedPolicy(tiny_engine, helper_script(verdicts=["STOP"]), name="helper")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"helper": helper},
                       sampling=SamplingParams(temperature=0.7, max_new_tokens=256))
    inp = rollout_input("What is 6 times 7?\n\n", "42", {}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"judge": None, "variant": variant, "max_steps": 1}))
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["question"] == shown
    if variant == "seed":  # the original's query carries its answer suffix after the stripped question
        trained = [call.prompt_text for call in policy.calls]
        assert "- Query: " + shown + "\n- Available tools:" in trained[0]
        assert "- **Query:** " + shown + "\n- **Query Analysis:**" in trained[1]


# -- 7. tool time limits ----------------------------------------------------------------------------------


def test_the_seeds_tool_calls_have_no_overall_limit() -> None:
    """core/executor.py:225-245 awaits tool.execute without a limit (the original: 120 s); fails on the code before
    this test's commit, where the seed variant cut every tool call at 120 s ("Execution timed out ...")."""
    assert SPEC.resolve_options({}).tool_timeout_s is None
    assert SPEC.resolve_options({"variant": "original"}).tool_timeout_s == 120.0


class SlowCoder:
    """An engine wrapper whose python_coder calls take `delay` seconds."""

    def __init__(self, inner: ScriptedPolicy, delay: float) -> None:
        self.inner, self.name, self.tokenizer, self.delay = inner, inner.name, inner.tokenizer, delay

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        if "You are a Python code generator" in self.tokenizer.decode(prompt_ids):
            await asyncio.sleep(self.delay)
        return await self.inner.generate(prompt_ids, params)


def test_the_seeds_coder_reply_is_waited_for_its_own_limit(tiny_engine: Any, monkeypatch: Any) -> None:
    """tools/python_coder/tool.py:150-155: the seed waits 120 s for its coder model, then returns "Code generation
    error: LLM timed out after 120s" (here 0.2 s); fails on the code before this test's commit (no such limit)."""
    monkeypatch.setattr("agentgraphs.agentflow.tools.SEED_CODER_TIMEOUT_S", 0.2)
    policy = ScriptedPolicy(tiny_engine, lambda call: plan("Compute 6 * 7.", "Python_Coder_Tool"), name="planner")
    helper = SlowCoder(ScriptedPolicy(tiny_engine, helper_script(verdicts=["STOP"]), name="helper"), delay=2.0)
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"helper": helper},
                       sampling=SamplingParams(temperature=0.7, max_new_tokens=256))
    inp = rollout_input("What is 6 times 7?", "42", {}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"judge": None, "max_steps": 1}))
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["memory"][0]["result"] == "Code generation error: LLM timed out after 0.2s"

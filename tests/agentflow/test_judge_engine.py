"""AgentFlow's `judge` option (default "judge") against the engines a run has, from the outside.

The seed's boxed_exact rule asks the judge whenever the boxed answer is not an exact match (`\\boxed{1/2}` for
gold 0.5), so a run without that engine would not score as the seed scores. It is refused before any rollout,
naming both fixes (give the engine, or `judge: null`), on every path: `agentgraphs run`, `run_file`,
`run_rollout`, rl_bridge.generate; and at reward time (rl_bridge.reward_func, a reward called directly) it fails
the sample with that reason instead of scoring by the rule. `judge: null` scores by the rule alone.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.agentflow import SPEC
from agentgraphs.batch import run_file
from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.errors import ConfigError
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache
from tests.agentflow.test_graph import helper_script, plan

# the refusal names the option, the engine and both fixes, on the CLI and in slime's YAML
FIXES = ("`judge` option", "'judge'", "--helper judge=", "agentgraph_engines", "judge: null")


def assert_names_the_fixes(message: str) -> None:
    flat = " ".join(message.split())  # rich wraps the CLI's output
    for needle in FIXES:
        assert needle in flat, (needle, message)


def planner(call: ScriptCall) -> str:
    """The seed's planner: the query analysis (trained turn 0), then one step the verifier stops after."""
    if "Analyze the given query" in call.prompt_text:
        return "Summary: a fraction. Skills: arithmetic. Tools: Python_Coder_Tool."
    return plan("Compute 1 / 2.", "Python_Coder_Tool")


def engines(tiny_engine: Any, answer: str) -> tuple[ScriptedPolicy, ScriptedPolicy]:
    policy = ScriptedPolicy(tiny_engine, planner, name="planner")
    helper = ScriptedPolicy(tiny_engine, helper_script(verdicts=["STOP"], answer=answer), name="helper")
    return policy, helper


def judge_engine(tiny_engine: Any, asked: list[str]) -> ScriptedPolicy:
    def verdict(call: ScriptCall) -> str:
        asked.append(call.prompt_text)  # the seed's judge prompt asks for a last "VERDICT:" line
        return "1/2 is 0.5.\nVERDICT: True"

    return ScriptedPolicy(tiny_engine, verdict, name="judge")


def write_rows(path: Path) -> Path:
    path.write_text(json.dumps({"input": "What is 1 / 2?", "label": "0.5",
                                "metadata": {"question": "What is 1 / 2?"}}) + "\n")
    return path


def test_run_file_refuses_the_default_judge_without_its_engine(tmp_path: Path, tiny_engine: Any) -> None:
    policy, helper = engines(tiny_engine, "\\boxed{1/2}")
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        run_file("agentflow", write_rows(tmp_path / "rows.jsonl"), policy, out, engines={"helper": helper})
    assert_names_the_fixes(str(err.value))
    assert not out.exists()  # refused before any rollout: nothing written
    assert policy.calls == [] and helper.calls == []


def test_judge_null_scores_by_the_rule_and_a_judge_engine_decides(tmp_path: Path, tiny_engine: Any) -> None:
    data = write_rows(tmp_path / "rows.jsonl")
    # judge: null, said explicitly: the seed's rule alone; \boxed{1/2} is not "0.5", so 0.0, and the run says so
    policy, helper = engines(tiny_engine, "\\boxed{1/2}")
    summary = run_file("agentflow", data, policy, tmp_path / "rule", engines={"helper": helper},
                       options={"judge": None})
    sample = json.loads((tmp_path / "rule" / "samples.jsonl").read_text())
    assert sample["status"] == "completed", sample["metadata"]
    assert sample["reward"] == 0.0 and summary["options"]["judge"] is None
    # an exact boxed match scores 1.0 by the rule, judge or not
    policy, helper = engines(tiny_engine, "\\boxed{0.5}")
    run_file("agentflow", data, policy, tmp_path / "exact", engines={"helper": helper}, options={"judge": None})
    assert json.loads((tmp_path / "exact" / "samples.jsonl").read_text())["reward"] == 1.0
    # the default judge with its engine given: the judge decides where the rule misses, as the seed's would
    asked: list[str] = []
    policy, helper = engines(tiny_engine, "\\boxed{1/2}")
    run_file("agentflow", data, policy, tmp_path / "judged",
             engines={"helper": helper, "judge": judge_engine(tiny_engine, asked)})
    sample = json.loads((tmp_path / "judged" / "samples.jsonl").read_text())
    assert sample["status"] == "completed" and sample["reward"] == 1.0, sample["metadata"]
    assert len(asked) == 1 and "What is 1 / 2?" in asked[0]


def test_cli_run_refuses_and_names_the_fix(tmp_path: Path, tiny_model_dir: Path) -> None:
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    data = write_rows(tmp_path / "rows.jsonl")
    base = ["run", "agentflow", "--data", str(data), "--engine", f"hf:{tiny_model_dir}",
            "--helper", f"helper=hf:{tiny_model_dir}", "-o", "max_steps=1", "--max-new-tokens", "4"]
    bad = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2, bad.output
    assert_names_the_fixes(bad.output)
    assert not (tmp_path / "bad").exists()
    ok = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "ok"), "-o", "judge=null"])
    assert ok.exit_code in (0, 1), ok.output  # 1: every row failed, which the tiny model may do; never a refusal
    assert "judge" not in json.loads((tmp_path / "ok" / "samples.jsonl").read_text()).get("metadata", {}).get(
        "status_reason", "")


def test_run_rollout_refuses_before_the_graph_runs(tiny_engine: Any) -> None:
    policy, helper = engines(tiny_engine, "\\boxed{1/2}")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"helper": helper},
                       sampling=SamplingParams(max_new_tokens=128))
    inp = rollout_input("What is 1 / 2?", "0.5", {}, 0)
    with pytest.raises(ConfigError) as err:
        asyncio.run(run_rollout(SPEC, inp, ctx))
    assert_names_the_fixes(str(err.value))
    assert policy.calls == []
    # no reward, no judge needed
    assert asyncio.run(run_rollout(SPEC, inp, ctx, compute_reward=False)).status == "completed"


def test_a_reward_that_would_ask_a_missing_judge_raises(tiny_engine: Any) -> None:
    rin = {"answer": "\\boxed{1/2}", "prompt": "What is 1 / 2?", "label": "0.5", "metadata": {}, "status": "completed",
           "trace_summary": {}, "options": {}}
    ctx = AgentContext(policy=tiny_engine, tokenizer=tiny_engine.tokenizer)
    for where in (ctx, None):
        with pytest.raises(ConfigError) as err:
            asyncio.run(SPEC.reward(rin, where))
        assert_names_the_fixes(str(err.value))
    assert asyncio.run(SPEC.reward({**rin, "options": {"judge": None}}, ctx)) == 0.0
    assert asyncio.run(SPEC.reward({**rin, "answer": "\\boxed{0.5}"}, ctx)) == 1.0  # the rule matched: no judge


def bridge_args(**extra: Any) -> SimpleNamespace:
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    return SimpleNamespace(agentgraph="agentflow", hf_checkpoint=str(ensure_tiny_model(template="qwen2.5")),
                           sglang_router_ip="127.0.0.1", sglang_router_port=9, agentgraph_max_retries=0,
                           reward_key=None, **extra)


def test_rl_bridge_generate_refuses_before_any_rollout() -> None:
    clear_cache()
    sample = Sample(group_index=0, index=0, prompt="What is 1 / 2?", label="0.5", metadata={})
    with pytest.raises(ConfigError) as err:  # port 9: nothing listens, and nothing is asked
        asyncio.run(rl_bridge.generate(bridge_args(), sample, {"temperature": 1.0, "max_new_tokens": 8}))
    assert_names_the_fixes(str(err.value))


def test_rl_bridge_reward_func_fails_a_sample_whose_options_name_a_missing_judge() -> None:
    """The setup says judge: null, but the sample was run with the default judge: no silent rule score."""
    clear_cache()
    args = bridge_args(agentgraph_options={"judge": None})
    s = Sample(group_index=0, index=0, prompt="What is 1 / 2?", label="0.5", status=Sample.Status.COMPLETED,
               metadata={"answer": "\\boxed{1/2}", "options": {"variant": "seed"}})

    async def score() -> Any:
        try:
            return await rl_bridge.reward_func(args, s)
        finally:
            await aclose_all()

    assert asyncio.run(score()) == 0.0
    assert s.status == Sample.Status.FAILED and s.remove_sample
    assert_names_the_fixes(s.metadata["status_reason"])
    s2 = Sample(group_index=0, index=0, prompt="What is 1 / 2?", label="0.5", status=Sample.Status.COMPLETED,
                metadata={"answer": "\\boxed{1/2}", "options": {"variant": "seed", "judge": None}})
    clear_cache()

    async def score2() -> Any:
        try:
            return await rl_bridge.reward_func(args, s2)
        finally:
            await aclose_all()

    assert asyncio.run(score2()) == 0.0 and s2.status == Sample.Status.COMPLETED  # the rule, said explicitly


def test_the_debugger_refuses_to_open_a_run_it_could_not_score(tmp_path: Path, tiny_engine: Any) -> None:
    from agentgraphs.checkpoints.debugger import DebugSession

    row = rollout_input("What is 1 / 2?", "0.5", {}, 0)

    async def run_to_end(options: dict[str, Any] | None) -> Any:
        policy, helper = engines(tiny_engine, "\\boxed{1/2}")
        async with DebugSession.open("agentflow", tmp_path / "debug.sqlite", row=row, engine=policy,
                                     engines={"helper": helper}, options=options) as session:
            await session.run_to_end()
            return await session.rollout()

    with pytest.raises(ConfigError) as err:
        asyncio.run(run_to_end(None))
    assert_names_the_fixes(str(err.value))
    rollout = asyncio.run(run_to_end({"judge": None}))
    assert rollout.status == "completed" and rollout.reward == 0.0  # the seed's rule alone, said explicitly

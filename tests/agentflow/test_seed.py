"""AgentFlow's `variant`: the seed's training (default) against the original's, from options to train rows.

The seed (Takenzz/AgentFlow@4b5aa84, agentic/agentflow) trains the planner's query analysis as turn 0,
runs 5 steps, and its converter divides each trajectory's group-normalised advantage by the trajectory's
number of turns; the original broadcasts it. Train rows below are checked against values computed by
hand from those formulas.
"""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentgraphs.agentflow import SOURCES, SPEC, VARIANTS, AgentFlowOptions
from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.errors import ConfigError
from agentgraphs.records import sample_fields
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.trace import check_trace
from rl_bridge.convert import convert
from tests.agentflow.test_graph import helper_script, plan

ROOT = Path(__file__).resolve().parents[2]
EPS = 1e-6


# -- options ------------------------------------------------------------------------------------------


def test_the_default_is_the_seed_and_each_variant_sets_its_preset() -> None:
    for name, preset in VARIANTS.items():
        opts = SPEC.resolve_options({} if name == "seed" else {"variant": name}).model_dump()
        assert {k: opts[k] for k in preset} == preset, name
    seed = SPEC.resolve_options({})
    assert (seed.variant, seed.max_steps, seed.train_analysis, seed.reward_split, seed.answer_check) == (
        "seed", 5, True, "divide", "boxed_exact")
    assert SPEC.reward_split_for(seed) == "divide"
    assert SPEC.reward_split_for(SPEC.resolve_options({"variant": "original"})) == "broadcast"


def test_an_explicit_option_beats_the_preset() -> None:
    opts = SPEC.resolve_options({"variant": "seed", "max_steps": 3, "reward_split": "broadcast"})
    assert (opts.max_steps, opts.reward_split, opts.train_analysis) == (3, "broadcast", True)
    opts = SPEC.resolve_options({"variant": "original", "answer_check": "boxed_exact", "helper_temperature": None})
    assert (opts.answer_check, opts.helper_temperature, opts.max_steps) == ("boxed_exact", None, 3)
    # resolved options survive a JSON round trip unchanged (sample metadata, checkpoints)
    again = SPEC.resolve_options(AgentFlowOptions.model_validate_json(opts.model_dump_json()).model_dump())
    assert again == opts


def test_bad_variant_and_an_untrainable_analysis_are_refused() -> None:
    with pytest.raises(ConfigError, match="variant"):
        SPEC.resolve_options({"variant": "paper"})
    with pytest.raises(ConfigError, match="analyzer_engine"):
        SPEC.resolve_options({"analyzer_engine": "helper"})  # the seed trains the analysis: on the policy only
    assert not SPEC.resolve_options({"analyzer_engine": "helper", "train_analysis": False}).train_analysis


def test_readme_table_is_the_variants_table() -> None:
    """README's AgentFlow table: one row per preset option, values and seed lines as in variants.py."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## AgentFlow"):text.index("## ToolOrchestra")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].strip("`") in SOURCES:
            rows[cells[0].strip("`")] = cells[1:]
    assert set(rows) == set(SOURCES) == set(VARIANTS["seed"])
    for option, (seed, original, source) in rows.items():
        assert seed.strip("`") == _yaml(VARIANTS["seed"][option]), option
        assert original.strip("`") == _yaml(VARIANTS["original"][option]), option
        assert SOURCES[option][0] in source, option


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def test_examples_set_the_seed_variant_explicitly() -> None:
    yaml_text = (ROOT / "examples/agentflow/agentflow.yaml").read_text()
    assert re.search(r"^\s+variant: seed\b", yaml_text, re.MULTILINE)


# -- the graph ----------------------------------------------------------------------------------------


def run_flow(tiny_engine: Any, plans: list[str], helper: Any, *, ctx_tools: dict[str, Any] | None = None,
             max_new_tokens: int = 256, **options: Any) -> tuple[Any, Any, Any]:
    """The seed's roles: the policy analyses the query and plans (`plans`, in order); the helper engine answers
    by the script `helper`. Scored by the seed's rule alone (`judge: null` unless given: the judge's path is in
    test_reward.py and test_judge_engine.py)."""
    replies = iter(plans)

    def planner(call: ScriptCall) -> str:
        if "Analyze the given query" in call.prompt_text:
            return "Summary: a product. Skills: arithmetic. Tools: Python_Coder_Tool."
        return next(replies)

    policy = ScriptedPolicy(tiny_engine, planner, name="planner")
    helper_engine = ScriptedPolicy(tiny_engine, helper, name="helper")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"helper": helper_engine},
                       sampling=SamplingParams(temperature=0.7, max_new_tokens=max_new_tokens), tools=ctx_tools or {})
    inp = rollout_input("What is 6 times 7?", "42", {}, 0)
    return asyncio.run(run_rollout(SPEC, inp, ctx, options={"judge": None, **options})), policy, helper_engine


def run_seed(tiny_engine: Any, plans: list[str], verdicts: list[str], **options: Any) -> tuple[Any, Any, Any]:
    """`run_flow` with the helper's verifier answering `verdicts` in order."""
    return run_flow(tiny_engine, plans, helper_script(verdicts=verdicts), **options)


def test_seed_trains_the_analysis_as_turn_zero_and_runs_five_steps(tiny_engine: Any) -> None:
    plans = [plan(f"Compute 6 * 7, attempt {i}.", "Python_Coder_Tool") for i in range(5)]
    rollout, policy, _ = run_seed(tiny_engine, plans, ["CONTINUE"])
    assert rollout.status == "completed", rollout.reason
    nodes = [t["node"] for t in rollout.turns]
    assert nodes.count("plan_next_step") == 5 and rollout.final_state["stop_reason"] == "max_steps"
    trained = [i for i, t in enumerate(rollout.turns) if t["trainable"]]
    assert [nodes[i] for i in trained] == ["analyze_query"] + ["plan_next_step"] * 5
    assert trained[0] == 0 and rollout.turns[0]["engine"] == policy.name  # the planner engine, turn 0
    seqs = check_trace(rollout.turns, SPEC.layout)
    assert [s["turn_indices"] for s in seqs] == [[i] for i in trained]
    for seq, i in zip(seqs, trained):
        turn = rollout.turns[i]
        assert seq["tokens"] == turn["prompt_ids"] + turn["output_ids"]
        assert seq["loss_mask"] == [1] * len(turn["output_ids"])
        assert seq["rollout_log_probs"] == turn["output_logprobs"]
    # helpers sample at the rollout's temperature (the seed passes its sampling params to every engine)
    assert {t["temperature"] for t in rollout.turns if not t["trainable"]} == {0.7}
    assert rollout.reward == 1.0  # <answer>42</answer>: the seed's rule predicts "42" from the answer
    fields = sample_fields(rollout, SPEC)
    assert fields["train_metadata"]["reward_split"] == "divide"
    assert len(fields["train_metadata"]["turns"]) == 6  # what the converter divides by


def test_original_variant_keeps_the_analysis_on_the_helper(tiny_engine: Any) -> None:
    plans = [plan("Compute 6 * 7.", "Python_Coder_Tool")]
    rollout, _, helper = run_seed(tiny_engine, plans, ["STOP"], variant="original")
    assert rollout.status == "completed", rollout.reason
    assert rollout.turns[0]["node"] == "analyze_query" and not rollout.turns[0]["trainable"]
    assert rollout.turns[0]["engine"] == helper.name and rollout.turns[0]["temperature"] == 0.0
    assert [t["node"] for t in rollout.turns if t["trainable"]] == ["plan_next_step"]
    assert sample_fields(rollout, SPEC)["train_metadata"]["reward_split"] == "broadcast"


def test_planner_token_budget_ends_the_loop(tiny_engine: Any) -> None:
    plans = [plan(f"Attempt {i}.", "Python_Coder_Tool") for i in range(5)]
    rollout, _, _ = run_seed(tiny_engine, plans, ["CONTINUE"], planner_token_budget=1)
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["stop_reason"] == "token_budget" and rollout.final_state["step"] == 1


# -- the train rows -----------------------------------------------------------------------------------


def seq(n: int, start: int) -> dict[str, Any]:
    return {"tokens": list(range(start, start + 3 + n)), "response_length": n, "loss_mask": [1] * n,
            "rollout_log_probs": [-0.5] * n}


def trajectories(variant: str) -> list[Any]:
    """Two prompt groups of four trajectories: (reward, trained turns) fixed, the split from the variant."""
    split = SPEC.reward_split_for(SPEC.resolve_options({"variant": variant}))
    spec = [(0, 1.0, 2), (0, 0.0, 3), (0, 0.0, 1), (0, 1.0, 4),   # group A
            (1, 1.0, 1), (1, 1.0, 2), (1, 1.0, 5), (1, 0.0, 3)]   # group B
    out = []
    for index, (group, reward, turns) in enumerate(spec):
        meta = {"turns": [seq(2 + k, 100 * index + 10 * k) for k in range(turns)], "reward_split": split,
                "layout": "per_turn"}
        out.append(Sample(group_index=group, index=index, reward=reward, status=Sample.Status.COMPLETED,
                          train_metadata=meta))
    return out


ARGS = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
                       n_samples_per_prompt=4, rollout_batch_size=2, global_batch_size=None, reward_key=None,
                       disable_rollout_trim_samples=True)

# By hand. Group A: rewards 1, 0, 0, 1: mean 1/2, deviations +-1/2, unbiased std sqrt((4 * 1/4) / 3) = sqrt(1/3).
A = 0.5 / (math.sqrt(1 / 3) + EPS)
# Group B: rewards 1, 1, 1, 0: mean 3/4, deviations 1/4 (x3) and -3/4, unbiased std sqrt((3/16 + 9/16) / 3) = 1/2.
B_HI, B_LO = 0.25 / (0.5 + EPS), -0.75 / (0.5 + EPS)
# trajectory advantages and trained-turn counts, in sample order
ADVANTAGES = [A, -A, -A, A, B_HI, B_HI, B_HI, B_LO]
TURNS = [2, 3, 1, 4, 1, 2, 5, 3]
# the seed's converter: every turn of trajectory i gets advantage_i / T_i
SEED_ROWS = ([A / 2] * 2 + [-A / 3] * 3 + [-A] + [A / 4] * 4
             + [B_HI] + [B_HI / 2] * 2 + [B_HI / 5] * 5 + [B_LO / 3] * 3)
ORIGINAL_ROWS = [A] * 2 + [-A] * 3 + [-A] + [A] * 4 + [B_HI] * 1 + [B_HI] * 2 + [B_HI] * 5 + [B_LO] * 3


def test_seed_rows_are_the_normalised_advantage_divided_by_the_turn_count() -> None:
    assert A == pytest.approx(0.8660254, abs=1e-5) and (B_HI, B_LO) == pytest.approx((0.5, -1.5), abs=1e-5)
    data = convert(ARGS, trajectories("seed"))
    assert len(data["rewards"]) == sum(TURNS) == 21
    assert data["rewards"] == pytest.approx(SEED_ROWS, abs=1e-9)
    assert data["raw_reward"] == [1.0] * 2 + [0.0] * 3 + [0.0] + [1.0] * 4 + [1.0] * 8 + [0.0] * 3
    assert data["sample_indices"] == [i for i, t in enumerate(TURNS) for _ in range(t)]
    # the rows themselves pass through untouched: tokens, masks, log-probs of every turn in order
    expected = [s for traj in trajectories("seed") for s in traj.train_metadata["turns"]]
    assert data["tokens"] == [s["tokens"] for s in expected]
    assert data["loss_masks"] == [s["loss_mask"] for s in expected]
    assert data["rollout_log_probs"] == [s["rollout_log_probs"] for s in expected]
    # a trajectory's turns sum to its advantage: the seed's mean over turns of J_Flow-GRPO
    sums, row = [], 0
    for t in TURNS:
        sums.append(sum(data["rewards"][row:row + t]))
        row += t
    assert sums == pytest.approx(ADVANTAGES, abs=1e-9)


def test_original_rows_broadcast_the_advantage() -> None:
    data = convert(ARGS, trajectories("original"))
    assert data["rewards"] == pytest.approx(ORIGINAL_ROWS, abs=1e-9)
    seed = convert(ARGS, trajectories("seed"))["rewards"]
    turns = [t for t in TURNS for _ in range(t)]
    assert [s * t for s, t in zip(seed, turns)] == pytest.approx(data["rewards"], abs=1e-9)


def test_seed_rows_from_real_rollouts(tiny_engine: Any) -> None:
    """Two rollouts of one question (one right, one wrong, 3 and 2 planner steps) through sample_fields and
    rl_bridge.convert: rows +-(1/2)/(1/sqrt(2)) / T, T = 1 + planner steps."""
    samples = []
    for index, (plans_n, answer) in enumerate([(3, "42"), (2, "41")]):
        replies = iter([plan(f"Step {i}.", "Python_Coder_Tool") for i in range(plans_n)])

        def planner(call: ScriptCall, replies: Any = replies) -> str:
            return "Summary." if "Analyze the given query" in call.prompt_text else next(replies)

        verdicts = ["CONTINUE"] * (plans_n - 1) + ["STOP"]
        ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, planner, name="planner"),
                           tokenizer=tiny_engine.tokenizer, sampling=SamplingParams(max_new_tokens=128),
                           engines={"helper": ScriptedPolicy(tiny_engine, helper_script(verdicts=verdicts,
                                                                                        answer=answer))})
        rollout = asyncio.run(run_rollout(SPEC, rollout_input("What is 6 times 7?", "42", {}, index), ctx,
                                          options={"judge": None}))  # 41 scores 0 by the seed's rule alone
        assert rollout.status == "completed", rollout.reason
        samples.append(Sample(group_index=0, index=index, **sample_fields(rollout, SPEC)))
        samples[-1].status = Sample.Status.COMPLETED
    assert [s.reward for s in samples] == [1.0, 0.0]
    args = SimpleNamespace(**{**vars(ARGS), "n_samples_per_prompt": 2, "rollout_batch_size": 1})
    data = convert(args, samples)
    adv = 0.5 / (math.sqrt(0.5) + EPS)  # rewards 1, 0: mean 1/2, unbiased std sqrt(1/2)
    assert data["rewards"] == pytest.approx([adv / 4] * 4 + [-adv / 3] * 3, abs=1e-9)

"""Seed-format rows through slime's hooks: what the toolorchestra graph does with every per-row field.

The seed (Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/) trains on rows of data/data_slime_full.jsonl,
launched with --input-key problem --label-key answer --metadata-key metadata --tool-key tools
(train_orchestra.sh:61-65); slime copies the row's top-level `tools` into the Sample's metadata (slime v0.2.2
slime/utils/data.py:193-200), and rollout.py:40-41 reads from sample.metadata: category, tools, model_mapping,
eid, pref_vec, tool_pricing. The rows below are built by hand from the seed's read paths (prepare_eval_data.py
:153-165 and 241-251 write the same shape for its eval rows).

- `pref_vec` (custom_convert.py:199-211, 53-111): the per-row weights of the group reward. Honoured: they replace
  the `preference` option for that row's rollouts.
- `tools`, `model_mapping`, `tool_pricing` and `trained_model_type`: the row runs as the seed runs it
  (tests/toolorchestra/test_seed_format_rows.py).
- a non-empty `eid` (orchestra_solver.py:90-91 -> tools/search_retrieval/tool.py:92-97 ->
  retrieval_general_thought.py:239-241): the row's searches go with it to a service started with the seed's
  example-id file (tests/toolorchestra/test_seed_eid.py); a non-string eid is refused.
- `category: func_call` (orchestra_solver.py:106-107: tau^2): this graph cannot run it, so a row that carries one
  is refused with an InputError naming the field and the fix, never run as a QA task in its place.

Every test drives `rl_bridge.generate` and `rl_bridge.reward_func` against SGLang-contract HTTP servers on
127.0.0.1 (a scripted orchestrator and a scripted expert over the tiny Qwen3-template model).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agentgraphs.engines.hf import HFEngine
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.testing.tiny_model import ensure_tiny_model

EXPERTS = {"search": ["search-expert"], "answer": ["answer-expert"]}
PREF_VEC = {"accuracy": 1.0, "cost": -0.3, "latency": -0.1}  # prepare_eval_data.py:162, 202, 249
MODEL_MAPPING = {"search-1": "Qwen/Qwen3-32B", "answer-1": "Qwen/Qwen3-32B", "answer-math-1": "Qwen/Qwen2.5-Math-7B"}
TOOL_PRICING = {"Qwen/Qwen3-32B": {"input_tokens_per_million": 6e-7, "output_tokens_per_million": 1.2e-6},
                "Qwen/Qwen2.5-Math-7B": {"input_tokens_per_million": 2e-7, "output_tokens_per_million": 2e-7}}
SEED_TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"the seed's {name} tool",
    "parameters": {"type": "object", "required": ["model"], "properties": {"model": {
        "type": "string", "description": f"Choices: {choices}"}}}}}
    for name, choices in (("search", ["search-1"]), ("answer", ["answer-1", "answer-math-1"]))]


def seed_metadata(**fields: Any) -> dict[str, Any]:
    """A QA row's metadata as the seed's data carries it, with `fields` replacing (None: dropping) some."""
    meta = {"eid": "stem____17", "category": "qa", "tools": SEED_TOOLS, "model_mapping": MODEL_MAPPING,
            "tool_pricing": TOOL_PRICING, "pref_vec": PREF_VEC}
    meta.update(fields)
    return {k: v for k, v in meta.items() if v is not None}


def call(name: str, model: str) -> str:
    body = json.dumps({"name": name, "arguments": {"model": model}})
    return f"<think>plan</think>\n<tool_call>\n{body}\n</tool_call>"


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


class Slime:
    """slime's side: the servers, the args of the seed's launch, and the hooks called as slime calls them."""

    def __init__(self, scorer: HFEngine, orchestrator: list[str], expert: list[str]) -> None:
        from agentgraphs.testing.server import SGLangTestServer

        self.policy = ScriptedPolicy(scorer, orchestrator, name="orchestrator")
        self.expert = ScriptedPolicy(scorer, expert, name="expert")
        self.servers = (SGLangTestServer(self.policy, port=0), SGLangTestServer(self.expert, port=0))

    def __enter__(self) -> "Slime":
        for s in self.servers:
            s.__enter__()
        host, port = self.servers[0].url.removeprefix("http://").rsplit(":", 1)
        helper = f"sglang:{self.servers[1].url}"
        self.args = SimpleNamespace(
            agentgraph="toolorchestra", hf_checkpoint=str(ensure_tiny_model(template="qwen3")),
            sglang_router_ip=host, sglang_router_port=int(port), agentgraph_max_retries=0, reward_key=None,
            input_key="problem", label_key="answer", metadata_key="metadata", tool_key="tools",
            n_samples_per_prompt=3, advantage_estimator="grpo", global_batch_size=None,
            custom_convert_samples_to_train_data_path="rl_bridge.convert",
            agentgraph_engines={"search-expert": helper, "answer-expert": helper},
            agentgraph_options={"variant": "seed", "experts": EXPERTS, "retrieval_url": "http://127.0.0.1:9",
                                "retrieval_retries": 0})
        return self

    def __exit__(self, *exc: Any) -> None:
        from rl_bridge.setup import clear_cache

        clear_cache()
        for s in reversed(self.servers):
            s.__exit__(*exc)

    def rollouts(self, metadata: dict[str, Any], n: int) -> list[Sample]:
        """n rollouts of one seed row (problem / answer / metadata), one after another; each scored by
        reward_func as slime's rm would be."""
        import rl_bridge
        from tests.test_bridge import SLIME_SAMPLING

        out = []
        for i in range(n):
            sample = Sample(group_index=0, index=i, prompt="Who wrote the letter?", label="Ilse Marrow",
                            metadata=json.loads(json.dumps(metadata)))
            sample = asyncio.run(rl_bridge.generate(self.args, sample, dict(SLIME_SAMPLING, max_new_tokens=64)))
            sample.reward = asyncio.run(rl_bridge.reward_func(self.args, sample))
            out.append(sample)
        return out


def seed_scores(correct: list[bool], features: list[dict[str, float]], pref_vec: dict[str, float]) -> list[float]:
    """The seed's group score (custom_convert.py:53-111), written from its definition as the oracle: each
    weighted feature (accuracy 0/1; cost and latency negated) min-max normalised over the group (a constant one
    adds nothing); an incorrect rollout scores 0."""
    columns = {"accuracy": [float(c) for c in correct],
               **{k: [-f[k] for f in features] for k in ("cost", "latency")}}
    scores = []
    for i, ok in enumerate(correct):
        total = 0.0
        for key, weight in pref_vec.items():
            lo, hi = min(columns[key]), max(columns[key])
            if hi > lo:
                total += weight * (columns[key][i] - lo) / (hi - lo)
        scores.append(total if ok else 0.0)
    return scores


def seed_advantages(scores: list[float]) -> list[float]:
    """custom_convert.py:135-148: population std, kept when std > 0.1, (s - mean) / (std + 1e-6) clipped to 3."""
    mean = sum(scores) / len(scores)
    std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
    return [max(-3.0, min(3.0, (s - mean) / (std + 1e-6))) if std > 0.1 else 0.0 for s in scores]


def test_a_rows_pref_vec_weighs_its_group_reward_as_the_seeds_convert_does(scorer: HFEngine) -> None:
    """Three rollouts of a seed row whose pref_vec is the seed's (accuracy 1.0, cost -0.3, latency -0.1; its
    other fields are the ones this graph can honour: category qa, an empty eid): answer at once (right),
    search then answer (right, dearer), answer (wrong). The converter's values are the seed's formula over the
    features the rollouts recorded; with the `preference` option's weights instead (accuracy only) they would
    be +0.707, +0.707, -1.414."""
    meta = seed_metadata(eid="", tools=None, model_mapping=None, tool_pricing=None)
    orchestrator = [call("answer", "answer-expert"), call("search", "search-expert"), call("answer", "answer-expert"),
                    call("answer", "answer-expert")]
    expert = ["It was \\boxed{Ilse Marrow}.", "who wrote the letter", "\\boxed{Ilse Marrow}", "\\boxed{Tom Reed}"]
    with Slime(scorer, orchestrator, expert) as slime:
        samples = slime.rollouts(meta, 3)
        from rl_bridge.convert import convert

        data = convert(slime.args, samples)
    assert [s.status.value for s in samples] == ["completed"] * 3, [s.metadata.get("status_reason") for s in samples]
    assert [s.reward for s in samples] == [1.0, 1.0, 0.0]
    shaping = [s.train_metadata["reward_shaping"] for s in samples]
    assert [sh["weights"] for sh in shaping] == [PREF_VEC] * 3
    assert samples[1].metadata["trace_summary"]["tool_calls"]["search"] == 1
    scores = seed_scores([True, True, False], [sh["features"] for sh in shaping], PREF_VEC)
    assert scores[0] != 1.0 and scores[0] != scores[1]  # the cost and latency weights made a difference
    per_row = [v for s, v in zip(samples, seed_advantages(scores)) for _ in s.train_metadata["turns"]]
    np.testing.assert_allclose(data["rewards"], per_row, atol=1e-9)


REFUSED = {
    "eid": (seed_metadata(tools=None, model_mapping=None, tool_pricing=None, eid=["stem____17"]), "as a string"),
    "category": (seed_metadata(eid="", tools=None, model_mapping=None, tool_pricing=None, category="func_call"),
                 "toolorchestra-tau2"),
    "pref_vec": (seed_metadata(eid="", tools=None, model_mapping=None, tool_pricing=None,
                               pref_vec={**PREF_VEC, "answer-1": 0.2}), "expert:NAME"),
    "pref_vec (not a number)": (seed_metadata(eid="", tools=None, model_mapping=None, tool_pricing=None,
                                              pref_vec={"accuracy": "high"}), "a number"),
}


@pytest.fixture(scope="module")
def slime(scorer: HFEngine) -> Iterator[Slime]:
    """A policy that would answer (right) every time it is asked: a refused row never asks it."""
    with Slime(scorer, [call("answer", "answer-expert")] * 20, ["\\boxed{Ilse Marrow}"] * 20) as slime:
        yield slime


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_seed_field_this_graph_cannot_honour_refuses_the_row(slime: Slime, case: str) -> None:
    """The row FAILS before any generation, its reason the InputError naming `metadata.<field>` and the fix;
    it scores 0 and trains no token (never a tau^2 task run as QA)."""
    metadata, fix = REFUSED[case]
    field = case.split(" ")[0]
    calls = len(slime.policy.calls)
    (sample,) = slime.rollouts(metadata, 1)
    reason = sample.metadata.get("status_reason") or ""
    assert sample.status.value == "failed", (case, sample.status, reason)
    assert f"input field 'metadata.{field}'" in reason and fix in reason, reason
    assert len(slime.policy.calls) == calls and sample.reward == 0.0 and not any(sample.loss_mask or [])


def test_a_row_without_seed_fields_uses_the_options(slime: Slime) -> None:
    """Our own rows (no pref_vec, no seed fields; a null eid, the seed's `category: qa`) run with the options."""
    (sample,) = slime.rollouts({"id": "17", "category": "qa", "eid": None}, 1)
    assert sample.status.value == "completed" and sample.reward == 1.0
    assert sample.train_metadata["reward_shaping"]["weights"] == {"accuracy": 1.0, "cost": 0.0, "latency": 0.0}

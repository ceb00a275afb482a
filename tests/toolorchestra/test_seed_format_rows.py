"""A seed-format row runs as the seed runs it, through slime's hooks (rl_bridge.generate / reward_func / convert).

The rows are built as the seed's data-prep script writes them (Takenzz/AgentFlow@4b5aa84,
agentic/ToolOrchestra/prepare_eval_data.py:22-52 and 153-165: top-level problem / answer / tools, the metadata
eid / category / model_mapping / tool_pricing / pref_vec), and turned into a Sample as slime's loader does with
the seed's launch flags (train_orchestra.sh:61-65: --input-key problem --label-key answer --metadata-key metadata
--tool-key tools; the loader copies the row's top-level `tools` into the metadata). Each expert model the rows map
to is an SGLang-contract HTTP server on 127.0.0.1 served under the MODEL's name (agentgraph_engines
{"Qwen/Qwen3-32B": "sglang:http://..."}), so a call reaching a server is the mapped engine called. What the seed
does, by file:line:
- `tools`: given to the chat template as they are (orchestra_solver.py:115-116, prompt_builder.py:115, :371);
- `model_mapping`: the chosen expert name -> the model called (tools/expert_caller/tool.py:159-179);
- `tool_pricing` / `trained_model_type`: the cost (reward.py:259-273, 299-328), checked here against numbers
  computed by hand from the token counts the servers saw.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentgraphs.engines.hf import HFEngine
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.testing.tiny_model import ensure_tiny_model
from tests.toolorchestra.test_seed_rows import call, scorer  # noqa: F401  (a fixture)

BIG, MATH, UNSERVED = "Qwen/Qwen3-32B", "Qwen/Qwen2.5-Math-7B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"
MODEL_MAPPING = {"search-1": BIG, "answer-1": BIG, "answer-math-2": MATH}  # prepare_eval_data.py:30-40
TOOL_PRICING = {  # prepare_eval_data.py:42-50: per-token prices under the seed's "per_million" keys
    BIG: {"input_tokens_per_million": 6e-7, "output_tokens_per_million": 1.2e-6},
    MATH: {"input_tokens_per_million": 2e-7, "output_tokens_per_million": 2e-7},
    UNSERVED: {"input_tokens_per_million": 8e-7, "output_tokens_per_million": 8e-7},
}
PREF_VEC = {"accuracy": 1.0, "cost": -0.3, "latency": -0.1}  # prepare_eval_data.py:162


def seed_tool(name: str, choices: list[str]) -> dict[str, Any]:
    """A tool as the seed's evaluation/tools.json gives it (no enum: the choices are in the description)."""
    return {"type": "function", "function": {
        "name": name, "description": f"the seed's own {name} tool, offered by the row",
        "parameters": {"properties": {"model": {"description": f"The model to use. Choices: {choices}.",
                                                "type": "string"}},
                       "required": ["model"], "title": "parameters", "type": "object"}}}


SEED_TOOLS = [seed_tool("search", ["search-1"]), seed_tool("answer", ["answer-1", "answer-math-2"])]


def seed_row(**metadata: Any) -> dict[str, Any]:
    """One QA row as prepare_eval_data.py writes it; `metadata` fields replace (None: drop) the seed's."""
    meta = {"eid": "", "category": "qa", "model_mapping": MODEL_MAPPING, "tool_pricing": TOOL_PRICING,
            "pref_vec": PREF_VEC}
    tools = metadata.pop("tools", SEED_TOOLS)
    meta.update(metadata)
    return {"problem": "Who wrote the letter?", "answer": "Ilse Marrow", "tools": tools,
            "metadata": {k: v for k, v in meta.items() if v is not None}}


def slime_sample(row: dict[str, Any], index: int) -> Sample:
    """The Sample slime's loader makes of a row with the seed's launch keys (its top-level tools copied into the
    metadata under the --tool-key flag)."""
    metadata = json.loads(json.dumps(row["metadata"]))
    if "tools" in row:
        metadata["tools"] = json.loads(json.dumps(row["tools"]))
    return Sample(group_index=0, index=index, prompt=row["problem"], label=row["answer"], metadata=metadata)


class SeedRun:
    """slime's side: the orchestrator's server, one expert server per served model, the seed's launch args."""

    def __init__(self, scorer: HFEngine, orchestrator: list[str], experts: dict[str, list[str]],
                 options: dict[str, Any] | None = None) -> None:
        from agentgraphs.testing.server import SGLangTestServer

        self.options = options or {}
        self.policy = ScriptedPolicy(scorer, orchestrator, name="orchestrator")
        self.experts = {model: ScriptedPolicy(scorer, replies, name=model) for model, replies in experts.items()}
        self.servers = [SGLangTestServer(self.policy, port=0),
                        *(SGLangTestServer(p, port=0) for p in self.experts.values())]

    def __enter__(self) -> "SeedRun":
        for s in self.servers:
            s.__enter__()
        host, port = self.servers[0].url.removeprefix("http://").rsplit(":", 1)
        engines = {model: f"sglang:{s.url}" for model, s in zip(self.experts, self.servers[1:])}
        self.args = SimpleNamespace(
            agentgraph="toolorchestra", hf_checkpoint=str(ensure_tiny_model(template="qwen3")),
            sglang_router_ip=host, sglang_router_port=int(port), agentgraph_max_retries=0, reward_key=None,
            input_key="problem", label_key="answer", metadata_key="metadata", tool_key="tools",
            n_samples_per_prompt=2, advantage_estimator="grpo", global_batch_size=None,
            custom_convert_samples_to_train_data_path="rl_bridge.convert",
            agentgraph_engines=engines,  # the experts served under their models' names only
            # `experts` names the served models, so the run checks them before any rollout
            agentgraph_options={"variant": "seed", "experts": {"search": [BIG], "answer": [MATH]},
                                "retrieval_url": "http://127.0.0.1:9", "retrieval_retries": 0, **self.options})
        return self

    def __exit__(self, *exc: Any) -> None:
        from rl_bridge.setup import clear_cache

        clear_cache()
        for s in reversed(self.servers):
            s.__exit__(*exc)

    def rollout(self, row: dict[str, Any], index: int = 0) -> Sample:
        import rl_bridge
        from tests.test_bridge import SLIME_SAMPLING

        sample = slime_sample(row, index)
        sample = asyncio.run(rl_bridge.generate(self.args, sample, dict(SLIME_SAMPLING, max_new_tokens=64)))
        sample.reward = asyncio.run(rl_bridge.reward_func(self.args, sample))
        return sample


def rendered_tools(prompt_text: str) -> list[dict[str, Any]] | None:
    """The tool list inside the prompt's <tools></tools> block (Qwen3's hermes rendering), None without one."""
    block = re.search(r"<tools>\n(.*?)\n</tools>", prompt_text, re.DOTALL)
    return None if block is None else [json.loads(line) for line in block.group(1).splitlines()]


def reply_tokens(policy: ScriptedPolicy, reply: str) -> int:
    """Output tokens of a scripted reply: its ids and the end-of-turn id."""
    return len(policy.tokenizer.encode(reply, add_special_tokens=False)) + 1


def text_tokens(policy: ScriptedPolicy, text: str) -> int:
    """Tokens of a text under the orchestrator's tokenizer, as the seed counts an expert call's."""
    return len(policy.tokenizer.encode(text, add_special_tokens=False))


ORCHESTRATOR = [call("search", "search-1"), call("answer", "answer-math-2")]
EXPERTS = {BIG: ["who wrote the letter"], MATH: ["It was \\boxed{Ilse Marrow}."]}


@pytest.mark.parametrize("trained_model_type", [None, MATH, BIG])
def test_a_seed_row_offers_its_tools_calls_its_mapped_models_and_costs_what_the_seed_computes(
        scorer: HFEngine, trained_model_type: str | None) -> None:
    """The orchestrator searches with `search-1` (mapped to Qwen3-32B), then answers with `answer-math-2` (mapped to
    Qwen2.5-Math-7B): each call reaches the server served under that model's name, the orchestrator's prompt
    offers exactly the row's tools, and the cost is the seed's formula over the tokens the servers saw, with
    the orchestrator priced at trained_model_type's price, or (absent) at the cheapest model's."""
    row = seed_row(trained_model_type=trained_model_type)
    with SeedRun(scorer, ORCHESTRATOR, EXPERTS) as run:
        sample = run.rollout(row)
        policy, big, math_ = run.policy, run.experts[BIG], run.experts[MATH]
    assert sample.status.value == "completed", sample.metadata.get("status_reason")
    assert sample.reward == 1.0 and sample.metadata["answer"] == "Ilse Marrow"
    # the row's own tools, rendered through the chat template as the seed gives them, in every orchestrator turn
    assert len(policy.calls) == 2
    for c in policy.calls:
        assert rendered_tools(c.prompt_text) == SEED_TOOLS
        assert "Search for missing knowledge" not in c.prompt_text  # never the options' tool schemas
    # the chosen expert names reached the engines served under the models they map to, once each
    assert len(big.calls) == 1 and len(math_.calls) == 1
    assert "Who wrote the letter?" in big.calls[0].prompt_text and "Who wrote the letter?" in math_.calls[0].prompt_text
    # the seed's cost (reward.py:299-328), by hand: every orchestrator turn's prompt and output tokens at the
    # orchestrator's price, each expert call's input and output tokens at its mapped model's, no / 1e6. An
    # expert's tokens are the seed's _make_stats (orchestra_solver.py:446-456, 605, 525): its user message and
    # the tool's result under the orchestrator's tokenizer; the search found nothing (the service is down)
    orch_in = sum(len(c.prompt_ids) for c in policy.calls)
    orch_out = sum(reply_tokens(policy, r) for r in ORCHESTRATOR)
    search_asked = ("Question: Who wrote the letter?\nInstead of directly answering the question, please write a "
                    "search query that would help find the relevant information. Wrap the query within <query> "
                    "and </query>.")
    answer_asked = ("Who wrote the letter?\n\n[Search by search-1] No results found.\n\nBased on all the "
                    "information above, provide your final answer. Wrap the final answer within <answer> and "
                    "</answer>.")
    big_in, big_out = text_tokens(policy, search_asked), text_tokens(policy, "No relevant documents found.")
    math_in, math_out = text_tokens(policy, answer_asked), text_tokens(policy, EXPERTS[MATH][0])
    orch_price = {None: (2e-7, 2e-7), MATH: (2e-7, 2e-7), BIG: (6e-7, 1.2e-6)}[trained_model_type]
    expected = (orch_in * orch_price[0] + orch_out * orch_price[1]
                + big_in * 6e-7 + big_out * 1.2e-6 + math_in * 2e-7 + math_out * 2e-7)
    features = sample.train_metadata["reward_shaping"]["features"]
    assert features["cost"] == pytest.approx(expected, rel=1e-12)
    assert 1e-4 < features["cost"] < 1e-2  # per-token prices: a few thousand tokens cost a fraction of a cent
    # the seed's features count the calls of each mapped expert name (custom_convert.py:78-81)
    assert {k: v for k, v in features.items() if k.startswith("expert:")} == {
        "expert:search-1": 1.0, "expert:answer-1": 0.0, "expert:answer-math-2": 1.0}
    assert sample.train_metadata["reward_shaping"]["weights"] == PREF_VEC


def test_a_seed_rows_empty_tool_list_offers_none_and_its_call_still_runs(scorer: HFEngine) -> None:
    """The seed's QA rows carry `"tools": []` (data/eval_combined.jsonl): the template gets no tools (the seed
    passes `tools if tools else None`), and the call the orchestrator makes still runs with its mapped model."""
    with SeedRun(scorer, [call("answer", "answer-math-2")], {BIG: [], MATH: ["\\boxed{Ilse Marrow}"]}) as run:
        sample = run.rollout(seed_row(tools=[]))
        prompt = run.policy.calls[0].prompt_text
        assert len(run.experts[MATH].calls) == 1
    assert sample.status.value == "completed" and sample.reward == 1.0, sample.metadata.get("status_reason")
    assert "<tools>" not in prompt and rendered_tools(prompt) is None


REFUSED = {
    "an eid that is not a string": (seed_row(eid=17), "metadata.eid", "as a string"),
    "a tool this graph cannot run": (seed_row(tools=[*SEED_TOOLS, seed_tool("call_expert", ["expert-1"])]),
                                     "metadata.tools[2]", "'call_expert'"),
    "a mapped model the run does not serve": (
        seed_row(model_mapping={**MODEL_MAPPING, "answer-2": UNSERVED}), "metadata.model_mapping.answer-2",
        f"--helper '{UNSERVED}=ENGINE'"),
    "tools left at the top level": ({k: v for k, v in seed_row().items() if k != "tools"}, "metadata.tools",
                                    "--tool-key tools"),
    "no model_mapping": (seed_row(model_mapping=None), "metadata.model_mapping", "{expert name: model name}"),
    "a price that is not a number": (seed_row(tool_pricing={BIG: {"input_tokens_per_million": "cheap"}}),
                                     f"metadata.tool_pricing.{BIG}", "numbers >= 0"),
}


@pytest.fixture(scope="module")
def refusing(scorer: HFEngine) -> Iterator[SeedRun]:
    """A run whose orchestrator would answer at once: a refused row never asks it (nor any expert)."""
    with SeedRun(scorer, [call("answer", "answer-math-2")] * 10, {BIG: [], MATH: ["\\boxed{Ilse Marrow}"] * 10}) as run:
        yield run


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_seed_row_that_cannot_run_as_the_seed_runs_it_fails_loudly_before_generation(
        refusing: SeedRun, case: str) -> None:
    """The row FAILS before any engine call, its reason naming the field and the fix; it trains no token."""
    row, field, fix = REFUSED[case]
    before = len(refusing.policy.calls), len(refusing.experts[MATH].calls)
    sample = refusing.rollout(row)
    reason = sample.metadata.get("status_reason") or ""
    assert sample.status.value == "failed", (case, reason)
    assert f"input field '{field}'" in reason and fix in reason, reason
    assert (len(refusing.policy.calls), len(refusing.experts[MATH].calls)) == before
    assert sample.reward == 0.0 and not any(sample.loss_mask or [])


def test_a_seed_rows_group_is_shaped_by_its_pref_vec_over_the_seeds_features(scorer: HFEngine) -> None:
    """Two right rollouts of one seed row whose pref_vec also weighs an expert name's calls (the seed's features
    count calls per mapped name, custom_convert.py:78-81): answer with answer-math-2 at once, or search with
    search-1 then answer with answer-1. The converter's values are the seed's (custom_convert.py:53-148: each
    weighted feature min-max normalised over the group, cost and latency negated; then (s - mean) / (std + 1e-6)
    with the population std, clipped to 3) over the seed's costs."""
    from rl_bridge.convert import convert

    pref_vec = {**PREF_VEC, "answer-math-2": 1.0}
    row = seed_row(pref_vec=pref_vec)
    orchestrator = [call("answer", "answer-math-2"), call("search", "search-1"), call("answer", "answer-1")]
    experts = {BIG: ["who wrote the letter", "\\boxed{Ilse Marrow}"], MATH: ["\\boxed{Ilse Marrow}"]}
    with SeedRun(scorer, orchestrator, experts) as run:
        samples = [run.rollout(row, i) for i in range(2)]
        data = convert(run.args, samples)
    assert [s.status.value for s in samples] == ["completed"] * 2 and [s.reward for s in samples] == [1.0, 1.0]
    features = [s.train_metadata["reward_shaping"]["features"] for s in samples]
    assert [s.train_metadata["reward_shaping"]["weights"] for s in samples] == [
        {**PREF_VEC, "expert:answer-math-2": 1.0}] * 2
    assert features[1]["cost"] > features[0]["cost"]  # a search and the dearer model
    columns = {"cost": [-f["cost"] for f in features], "latency": [-f["latency"] for f in features],
               "answer-math-2": [f["expert:answer-math-2"] for f in features]}
    scores = []
    for i in range(2):
        total = 0.0
        for key, values in columns.items():
            if max(values) > min(values):
                total += pref_vec[key] * (values[i] - min(values)) / (max(values) - min(values))
        scores.append(total)
    mean = sum(scores) / 2
    std = (sum((s - mean) ** 2 for s in scores) / 2) ** 0.5
    assert std > 0.1
    values = [max(-3.0, min(3.0, (s - mean) / (std + 1e-6))) for s in scores]
    per_row = [v for s, v in zip(samples, values) for _ in s.train_metadata["turns"]]
    assert len(per_row) == 3
    assert data["rewards"] == pytest.approx(per_row, abs=1e-9)


def test_agentgraphs_run_refuses_seed_rows_mapping_an_unserved_model_before_any_rollout(
        scorer: HFEngine, tmp_path: Path) -> None:
    """`agentgraphs run` has the whole file at hand: every model its seed rows map to is checked before the first
    rollout, and a missing one is a ConfigError naming the model, the first line naming it and the flag."""
    from agentgraphs.batch import run_file
    from agentgraphs.errors import ConfigError

    rows = [seed_row(), seed_row(model_mapping={**MODEL_MAPPING, "answer-2": UNSERVED})]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"input": r["problem"], "label": r["answer"],
                                        "metadata": {**r["metadata"], "tools": r["tools"]}}) + "\n" for r in rows))
    policy = ScriptedPolicy(scorer, [], name="orchestrator")  # never asked
    with pytest.raises(ConfigError) as caught:
        run_file("toolorchestra", data, policy, tmp_path / "out", engines={BIG: policy, MATH: policy},
                 options={"experts": {"answer": [BIG]}})
    message = str(caught.value)
    assert f"'{UNSERVED}' (line 2, metadata.model_mapping.answer-2)" in message, message
    assert f"--helper '{UNSERVED}=ENGINE'" in message and not policy.calls
    assert not (tmp_path / "out" / "samples.jsonl").exists()

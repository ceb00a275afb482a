"""ToolOrchestra's `variant`: the same fixed rollouts give the seed's rows with `seed` and today's with
`original`, computed by hand below; the options reach the converter through the sample (`sample_fields`,
`agentgraphs run`, slime's hooks).

Options (both groups): experts search -> [search-expert], answer -> [answer-expert, big-expert]; prices
search-expert 1.0, answer-expert 1.0, big-expert 3.0 (USD per million tokens); the orchestrator's price is
not set, so it is the cheapest expert's, 1.0.

Group 0 (one never-answered rollout). Preference: accuracy 1.0, cost 1.0, expert:big-expert 0.5.
    rollout  turns                                      orchestrator tok  expert tokens (in, out)   correct
    a        search(search-expert), answer(answer-e.)   300 + 40          s-e 100+10, a-e 200+20     1
    b        answer(big-expert)                         150 + 20          big 200+20                 1
    c        search, search, format-invalid: no answer  450 + 60          s-e 300+30                 0
    d        answer(answer-expert), wrong               150 + 20          a-e 200+20                 0
  seed cost (orchestrator + experts, x 1e-6 USD): a 340+330 = 670, b 170+660 = 830, c 510+330 = 840,
    d 170+220 = 390; -cost min-max (range 450): a 17/45, b 1/45, c 0, d 1; big-expert calls: b 1, others 0.
    scores (incorrect -> 0): a = 1 + 17/45 = 62/45, b = 1 + 1/45 + 0.5 = 137/90, c = d = 0.
    mean 29/40; population variance 68459/129600, std 0.7267964; advantages (s - mean) / (std + 1e-6):
    a 0.898156, b 1.096897, c -0.997527, d -0.997527. c never answered: its 3 rows keep -0.997527 with
    all-zero masks (it still counts in mean and std). d answered (wrongly): trained.
  original cost (experts only): a 110+220 = 330, b 660, c 330, d 220; -cost min-max (range 440):
    a 3/4, b 0, c 3/4, d 1. scores a = 7/4, b = 3/2, c = d = 0. mean 13/16; sample variance 57/64,
    std 0.9437293; advantages a 0.993398, b 0.728492, c -0.860945 (trained), d -0.860945.
Group 1 (std at the 0.1 boundary). Preference: accuracy 0.2. Four one-turn answers, correct 1, 0, 1, 0.
    scores 0.2, 0, 0.2, 0; mean 0.1.
  seed: population std sqrt(4 * 0.01 / 4) = 0.1, not > 0.1: dropped (rows 0, masks zero).
  original: sample std sqrt(0.04 / 3) = 0.1154701 >= 0.1: kept, +-0.1 / 0.1154711 = +-0.866018.
  seed with drop_group_at_min_std: false (an explicit option over its variant): kept, +-0.1 / 0.100001.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines.hf import HFEngine
from agentgraphs.errors import ConfigError
from agentgraphs.records import Rollout, sample_fields
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.spec import RewardInput
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.testing.tiny_model import ensure_tiny_model
from agentgraphs.toolorchestra import SPEC, ToolOrchestraOptions
from agentgraphs.toolorchestra.reward import contains_match
from rl_bridge.convert import convert

ROOT = Path(__file__).resolve().parents[2]
EXPERTS = {"search": ["search-expert"], "answer": ["answer-expert", "big-expert"]}
PRICES = {"search-expert": 1.0, "answer-expert": 1.0, "big-expert": 3.0}
PREF0 = {"accuracy": 1.0, "cost": 1.0, "expert:big-expert": 0.5}
PREF1 = {"accuracy": 0.2, "cost": 0.0, "latency": 0.0}


def step(tool: str, model: str, orch: tuple[int, int], expert: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    return {"tool": tool, "model": model, "ok": bool(model), "orchestrator_input_tokens": orch[0],
            "orchestrator_output_tokens": orch[1], "expert_input_tokens": expert[0],
            "expert_output_tokens": expert[1], "expert_tokens": sum(expert), "latency_s": 1.0}


def fixed_sample(options: dict[str, Any], group: int, index: int, steps: list[dict[str, Any]], answer: str,
                 reward: float) -> Sample:
    """A finished rollout as the graph leaves it (its steps), through the spec's summary and `sample_fields`."""
    opts = SPEC.resolve_options(options)
    state = {"steps": steps, "answer": answer, "done": bool(answer)}
    if not answer:
        state["stopped"] = "format-invalid tool call"
    seqs = [{"tokens": [100 * index + 10 * k + j for j in range(6)], "response_length": 2, "loss_mask": [1, 1],
             "rollout_log_probs": [-0.5, -0.25]} for k in range(len(steps))]
    rollout = Rollout(status="completed", reason="ok", answer=answer, sequences=seqs,  # type: ignore[arg-type]
                      reward=reward, options=opts, summary=SPEC.summarize(state))
    fields = sample_fields(rollout, SPEC)
    return Sample(group_index=group, index=index, reward=fields["reward"], status=Sample.Status.COMPLETED,
                  metadata=fields["metadata"], train_metadata=fields["train_metadata"])


def batch(**options: Any) -> list[Sample]:
    base = {"experts": EXPERTS, "prices": PRICES, **options}
    g0 = {**base, "preference": PREF0}
    g1 = {**base, "preference": PREF1}
    return [
        fixed_sample(g0, 0, 0, [step("search", "search-expert", (150, 20), (100, 10)),
                                step("answer", "answer-expert", (150, 20), (200, 20))], "4321", 1.0),
        fixed_sample(g0, 0, 1, [step("answer", "big-expert", (150, 20), (200, 20))], "4321", 1.0),
        fixed_sample(g0, 0, 2, [step("search", "search-expert", (150, 20), (100, 10)),
                                step("search", "search-expert", (150, 20), (200, 20)),
                                step("", "", (150, 20))], "", 0.0),
        fixed_sample(g0, 0, 3, [step("answer", "answer-expert", (150, 20), (200, 20))], "17", 0.0),
        *[fixed_sample(g1, 1, 4 + i, [step("answer", "answer-expert", (150, 20), (200, 20))], "x", r)
          for i, r in enumerate([1.0, 0.0, 1.0, 0.0])],
    ]


def args() -> SimpleNamespace:
    return SimpleNamespace(advantage_estimator="grpo", n_samples_per_prompt=4, global_batch_size=None,
                           reward_key=None)


def test_seed_variant_gives_the_seeds_rows() -> None:
    assert math.sqrt(sum((x - 0.1) ** 2 for x in [0.2, 0.0, 0.2, 0.0]) / 4) == 0.1  # the boundary, in floats
    data = convert(args(), batch())  # variant: seed is the default
    a, b, c = 0.898156, 1.096897, -0.997527
    np.testing.assert_allclose(data["rewards"], [a, a, b, c, c, c, c, 0, 0, 0, 0], atol=1e-6)
    assert data["loss_masks"] == [[1, 1]] * 3 + [[0, 0]] * 3 + [[1, 1]] + [[0, 0]] * 4
    assert data["rollout_log_probs"][3:6] == [[0.0, 0.0]] * 3 and data["rollout_log_probs"][6] == [-0.5, -0.25]
    assert data["sample_indices"] == [0, 0, 1, 2, 2, 2, 3, 4, 5, 6, 7]
    assert data["raw_reward"] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert data["agentgraph_dropped_trajectories"] == 4 and data["agentgraph_untrained_trajectories"] == 1


def test_original_variant_gives_todays_rows() -> None:
    data = convert(args(), batch(variant="original"))
    a, b, c = 0.993398, 0.728492, -0.860945
    k = 0.1 / (math.sqrt(0.04 / 3) + 1e-6)
    np.testing.assert_allclose(data["rewards"], [a, a, b, c, c, c, c, k, -k, k, -k], atol=1e-6)
    assert data["loss_masks"] == [[1, 1]] * 11  # the unanswered rollout trains with its negative value
    assert data["agentgraph_dropped_trajectories"] == 0 and data["agentgraph_untrained_trajectories"] == 0


def test_an_explicit_option_overrides_its_variant_in_the_converter() -> None:
    data = convert(args(), batch(drop_group_at_min_std=False))  # seed, but keep std == 0.1
    k = 0.1 / (0.1 + 1e-6)
    np.testing.assert_allclose(data["rewards"][7:], [k, -k, k, -k], atol=1e-9)
    assert data["loss_masks"][7:] == [[1, 1]] * 4 and data["loss_masks"][3:6] == [[0, 0]] * 3
    mixed = batch()[:3] + batch(variant="original")[3:4]
    with pytest.raises(ConfigError, match="disagree on 'std'"):
        convert(args(), mixed)


def test_a_group_whose_members_weigh_the_features_differently_is_refused() -> None:
    """The weights came from the group's first member: a member made with another `preference` was shaped
    with weights it never had. The converter refuses the group, naming the field."""
    mixed = batch()[:4]
    other = {"experts": EXPERTS, "prices": PRICES, "preference": {"accuracy": 1.0, "cost": 0.0}}
    mixed[2] = fixed_sample(other, 0, 2, [step("answer", "answer-expert", (150, 20), (200, 20))], "17", 0.0)
    with pytest.raises(ConfigError, match=r"disagree on 'weights'.*member 2.*preference"):
        convert(args(), mixed)


def test_variant_presets_defaults_overrides_and_errors() -> None:
    seed, original = SPEC.default_options(), SPEC.resolve_options({"variant": "original"})
    assert seed == SPEC.resolve_options({"variant": "seed"}) == ToolOrchestraOptions()
    assert (seed.max_turns, seed.eval_max_turns, seed.invalid_call, seed.correctness) == (12, 12, "end", "contains")
    assert (seed.cost_counts_orchestrator, seed.train_unanswered, seed.group_std, seed.drop_group_at_min_std) == \
        (True, False, "population", True)
    assert (original.max_turns, original.eval_max_turns, original.invalid_call, original.correctness) == \
        (30, 50, "continue", "exact")
    assert (original.cost_counts_orchestrator, original.train_unanswered, original.group_std,
            original.drop_group_at_min_std) == (False, True, "sample", False)
    assert SPEC.resolve_options({"variant": "original", "max_turns": 12}).max_turns == 12
    assert SPEC.resolve_options(original.model_dump()) == original  # a dump resolves to itself
    for bad in ("paper", ["seed"]):  # a YAML list is an error naming the option, not a TypeError
        with pytest.raises(ConfigError, match="variant"):
            SPEC.resolve_options({"variant": bad})
    with pytest.raises(ConfigError, match="expert:nobody"):
        SPEC.resolve_options({"preference": {"expert:nobody": 1.0}})
    with pytest.raises(ConfigError, match="prices"):
        SPEC.resolve_options({"prices": {"answer-expert": [1.0]}})


def test_readme_table_lists_every_option_a_variant_sets() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## ToolOrchestra and the retrieval service")[1].split("\n## ")[0]
    rows = {m.group(1): (m.group(2).strip(), m.group(3).strip(), m.group(4))
            for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.MULTILINE)}
    table = ToolOrchestraOptions.variant_table()
    assert set(table) <= set(rows)
    for option, values in table.items():
        assert rows[option][0] == f"`{json.dumps(values['seed'])}`", option
        assert rows[option][1] == f"`{json.dumps(values['original'])}`", option
        assert re.search(r"\w+\.py:\d+", rows[option][2]), option  # the seed's file:line


def test_seed_correctness_is_substring_then_judge() -> None:
    assert contains_match("It was Ilse Marrow.", "Ilse Marrow")
    assert not contains_match("Paris", "Paris.")  # "paris " (no strip after punctuation) is not in "paris"
    assert contains_match("The answer is 1,024 bytes", "1024") is False and contains_match("1 024", "1,024")
    assert not contains_match("one two three four five six seven eight nine ten eleven", "eleven")
    assert contains_match("one two three four five six seven eight nine ten", "ten")
    assert contains_match("Café au lait", "CAFE AU LAIT") and not contains_match("", "x")

    def rin(answer: str, **options: Any) -> RewardInput:
        return RewardInput(answer=answer, prompt="Who did it?", label=["Ilse Marrow"], metadata={},
                           status="completed", trace_summary={}, options=SPEC.resolve_options(options).model_dump())

    assert asyncio.run(SPEC.reward(rin("It was Ilse Marrow."), None)) == 1.0
    assert asyncio.run(SPEC.reward(rin("It was Ilse Marrow.", variant="original"), None)) == 0.0
    assert asyncio.run(SPEC.reward(rin("Ilse Marrow!", variant="original"), None)) == 1.0
    assert SPEC.eval_metrics(rin("It was Ilse Marrow.")) == {"em": 0.0, "contains": 1.0}  # type: ignore[misc]


# ---- the graph under the seed variant, and the two paths to the converter ----

def call(name: str, model: str) -> str:
    return f'<think>plan</think>\n<tool_call>\n{json.dumps({"name": name, "arguments": {"model": model}})}\n</tool_call>'


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


def rollout_of(scorer: HFEngine, orchestrator: list[str], experts: dict[str, list[str]], **options: Any) -> Any:
    policy = ScriptedPolicy(scorer, orchestrator, name="orchestrator")
    engines = {name: ScriptedPolicy(scorer, replies, name=name) for name, replies in experts.items()}
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines=engines)
    opts = {"experts": EXPERTS, "retrieval_url": "http://127.0.0.1:9", "retrieval_retries": 0, **options}
    inp = rollout_input("Who wrote the letter?", ["Ilse Marrow"], {}, 0)
    return asyncio.run(run_rollout(SPEC, inp, ctx, options=opts)), policy, engines


def test_seed_ends_the_episode_at_the_first_format_invalid_call_and_masks_it(scorer: HFEngine) -> None:
    experts = {"search-expert": [], "answer-expert": ["It was \\boxed{Ilse Marrow}."], "big-expert": []}
    script = [call("answer", "gpt-9"), call("answer", "answer-expert")]
    rollout, policy, _ = rollout_of(scorer, script, experts)
    assert rollout.status == "completed" and len(policy.calls) == 1 and rollout.answer == ""
    assert rollout.reward == 0.0 and len(rollout.sequences) == 1
    assert rollout.summary["ended"] == "format_invalid" and not rollout.summary["answered"]
    assert "not allowed" in rollout.final_state["stopped"]
    assert sample_fields(rollout, SPEC)["train_metadata"]["reward_shaping"]["train"] is False
    again, policy, _ = rollout_of(scorer, script, experts, variant="original")  # notes it and goes on
    assert len(policy.calls) == 2 and again.reward == 1.0 and again.summary["ended"] == "answered"


def _tokens(rollout: Any, node: str) -> tuple[int, int]:
    turns = [t for t in rollout.turns if t["node"] == node]
    return sum(len(t["prompt_ids"]) for t in turns), sum(len(t["output_ids"]) for t in turns)


# what the seed's experts are asked here (orchestra_solver.py:577-583, 508-513): the search found nothing
SEARCH_ASKED = ("Question: Who wrote the letter?\nInstead of directly answering the question, please write a search "
                "query that would help find the relevant information. Wrap the query within <query> and </query>.")
ANSWER_ASKED = ("Who wrote the letter?\n\n[Search by search-expert] No results found.\n\nBased on all the "
                "information above, provide your final answer. Wrap the final answer within <answer> and </answer>.")


def _text_tokens(scorer: HFEngine, text: str) -> int:
    return len(scorer.tokenizer.encode(text, add_special_tokens=False))


def test_seed_cost_counts_the_orchestrators_tokens_and_calls_per_expert(scorer: HFEngine) -> None:
    """search (its retrieval service is down: a note), then answer with big-expert. Prices: search-expert
    [0.5 in, 2.0 out], big-expert 3.0; the orchestrator's: the cheapest expert, answer-expert at 1.0. The seed
    counts an expert's tokens as its _make_stats does; the original, as the expert's engine reports them."""
    script = [call("search", "search-expert"), call("answer", "big-expert")]
    experts = {"search-expert": ["who wrote the letter"], "answer-expert": [], "big-expert": ["\\boxed{Ilse Marrow}"]}
    prices = {"search-expert": [0.5, 2.0], "big-expert": 3.0}
    for variant in ("seed", "original"):
        rollout, _, _ = rollout_of(scorer, script, experts, prices=prices, variant=variant)
        assert rollout.reward == 1.0 and rollout.summary["expert_calls"] == {"search-expert": 1, "big-expert": 1}
        orch, search, big = (_tokens(rollout, n) for n in ("orchestrator", "search_expert", "answer_expert"))
        if variant == "seed":  # _make_stats (orchestra_solver.py:446-456): the user message and the tool's result
            search = (_text_tokens(scorer, SEARCH_ASKED), _text_tokens(scorer, "No relevant documents found."))
            big = (_text_tokens(scorer, ANSWER_ASKED), _text_tokens(scorer, "\\boxed{Ilse Marrow}"))
        assert rollout.summary["orchestrator_tokens"] == list(orch)
        experts_usd = search[0] * 0.5 + search[1] * 2.0 + (big[0] + big[1]) * 3.0
        by_hand = (experts_usd + orch[0] * 1.0 + orch[1] * 1.0) / 1e6 if variant == "seed" else experts_usd / 1e6
        shaping = sample_fields(rollout, SPEC)["train_metadata"]["reward_shaping"]
        assert shaping["features"]["cost"] == pytest.approx(by_hand, rel=1e-12), variant
        assert shaping["features"]["expert:big-expert"] == 1.0 and shaping["features"]["expert:answer-expert"] == 0.0
        assert shaping["features"]["tool:search"] == 1.0 and shaping["train"] is True
        assert (shaping["std"], shaping["drop_at_min_std"]) == (("population", True) if variant == "seed"
                                                                else ("sample", False))


def test_agentgraphs_run_writes_samples_the_converter_shapes_by_the_variant(scorer: HFEngine, tmp_path: Path
                                                                           ) -> None:
    """`agentgraphs run` (run_file) with two rollouts of one row: one answers, one makes a format-invalid
    call. The samples it writes carry the variant's rules; converting them gives the seed's rows."""
    from agentgraphs.batch import run_file

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": "Who wrote the letter?", "label": ["Ilse Marrow"]}) + "\n")
    for variant in ("seed", "original"):
        policy = ScriptedPolicy(scorer, [call("answer", "answer-expert"), "I will not call a tool.",
                                         call("answer", "answer-expert")], name="orchestrator")
        helpers = {"answer-expert": ScriptedPolicy(scorer, ["It was \\boxed{Ilse Marrow}."] * 2),
                   "search-expert": ScriptedPolicy(scorer, []), "big-expert": ScriptedPolicy(scorer, [])}
        out = tmp_path / variant
        run_file("toolorchestra", data, policy, out, engines=helpers, n_samples=2, concurrency=1,
                 options={"variant": variant, "experts": EXPERTS, "retrieval_url": "http://127.0.0.1:9"})
        records = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        samples = [Sample(group_index=r["group_index"], index=i, reward=r["reward"], status=Sample.Status(r["status"]),
                          metadata=r["metadata"], train_metadata=r["train_metadata"]) for i, r in enumerate(records)]
        data_rows = convert(SimpleNamespace(advantage_estimator="grpo", n_samples_per_prompt=2), samples)
        if variant == "seed":  # answered 1 vs never answered 0: population std 0.5, z = +-1; the second masked
            assert [len(s.train_metadata["turns"]) for s in samples] == [1, 1]
            np.testing.assert_allclose(data_rows["rewards"], [0.5 / 0.500001, -0.5 / 0.500001], atol=1e-9)
            assert [sum(m) for m in data_rows["loss_masks"]] == [len(data_rows["loss_masks"][0]), 0]
        else:  # the invalid turn is noted and the next one answers: both correct, nothing tells them apart
            assert [len(s.train_metadata["turns"]) for s in samples] == [1, 2]
            assert records[1]["reward"] == 1.0 and data_rows["agentgraph_dropped_trajectories"] == 2


def test_slimes_hooks_carry_the_variant_from_the_yaml_options_to_the_converter(scorer: HFEngine) -> None:
    """slime's path: `agentgraph_options` -> rl_bridge.generate (an SGLang-contract server plays the policy,
    another the expert) -> the Sample's train_metadata -> rl_bridge.convert. Two rollouts of one prompt:
    one answers correctly, one writes no tool call (the seed ends it unanswered and masks it)."""
    import rl_bridge
    from agentgraphs.testing.server import SGLangTestServer
    from rl_bridge.setup import clear_cache
    from tests.test_bridge import SLIME_SAMPLING

    model_dir = ensure_tiny_model(template="qwen3")
    for variant in ("seed", "original"):
        policy = ScriptedPolicy(scorer, [call("answer", "answer-expert"), "No tool.", call("answer", "answer-expert")])
        expert = ScriptedPolicy(scorer, ["It was \\boxed{Ilse Marrow}."] * 2)
        with SGLangTestServer(policy, port=0) as orchestrator, SGLangTestServer(expert, port=0) as helper:
            host, port = orchestrator.url.removeprefix("http://").rsplit(":", 1)
            args = SimpleNamespace(
                agentgraph="toolorchestra", hf_checkpoint=str(model_dir), sglang_router_ip=host,
                sglang_router_port=int(port), agentgraph_max_retries=0, reward_key=None, label_key="label",
                n_samples_per_prompt=2, advantage_estimator="grpo",
                custom_convert_samples_to_train_data_path="rl_bridge.convert",
                agentgraph_engines={"answer-expert": f"sglang:{helper.url}"},
                agentgraph_options={"variant": variant, "experts": {"answer": ["answer-expert"]}})
            try:
                samples = [asyncio.run(rl_bridge.generate(args, Sample(group_index=0, index=i, prompt="Who wrote it?",
                                                                        label="Ilse Marrow", metadata={}),
                                                          dict(SLIME_SAMPLING, max_new_tokens=64)))
                           for i in range(2)]
            finally:
                clear_cache()
        shaping = [s.train_metadata["reward_shaping"] for s in samples]
        data = convert(args, samples)
        if variant == "seed":
            assert [s.reward for s in samples] == [1.0, 0.0] and [sh["train"] for sh in shaping] == [True, False]
            assert shaping[0]["std"] == "population" and shaping[0]["drop_at_min_std"] is True
            np.testing.assert_allclose(data["rewards"], [0.5 / 0.500001, -0.5 / 0.500001], atol=1e-9)
            assert sum(data["loss_masks"][0]) > 0 and sum(data["loss_masks"][1]) == 0
        else:  # the no-tool turn is noted, the next answers: two correct rollouts, nothing between them
            assert [s.reward for s in samples] == [1.0, 1.0] and [sh["train"] for sh in shaping] == [True, True]
            assert shaping[0]["std"] == "sample" and data["agentgraph_dropped_trajectories"] == 2


class LongDocuments:
    """`ctx.tools["retrieval"]`: records the depth it is asked for and answers `topk` 900-character documents,
    each ending in a marker that only a document kept whole would show."""

    def __init__(self) -> None:
        self.topks: list[int] = []

    async def search(self, query: str, topk: int = 3) -> list[dict[str, Any]]:
        self.topks.append(topk)
        return [{"document": {"id": str(i), "contents": f"  doc{i} " + "x" * 880 + f" TAIL{i}"}, "score": 1.0}
                for i in range(topk)]


@pytest.mark.parametrize("variant, topk, chars", [("seed", 5, 500), ("original", 30, 4000)])
def test_search_depth_and_document_cut_follow_the_variant(scorer: HFEngine, variant: str, topk: int, chars: int
                                                          ) -> None:
    """The seed's SearchRetrievalTool asks topk=5 and keeps the first 500 characters of each (stripped)
    document; the original asks topk_doc=30 and keeps 4000. The orchestrator's next prompt shows that."""
    retrieval = LongDocuments()
    policy = ScriptedPolicy(scorer, [call("search", "search-expert"), call("answer", "answer-expert")],
                            name="orchestrator")
    engines = {"search-expert": ScriptedPolicy(scorer, ["launch code"], name="search-expert"),
               "answer-expert": ScriptedPolicy(scorer, ["\\boxed{Ilse Marrow}"], name="answer-expert"),
               "big-expert": ScriptedPolicy(scorer, [], name="big-expert")}
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines=engines,
                       tools={"retrieval": retrieval})
    opts = {"experts": EXPERTS, "variant": variant, "context_max_tokens": 100_000}
    rollout = asyncio.run(run_rollout(SPEC, rollout_input("Who wrote the letter?", ["Ilse Marrow"], {}, 0), ctx,
                                      options=opts))
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    assert retrieval.topks == [topk]
    shown = policy.calls[1].prompt_text
    document = ("doc0 " + "x" * 880 + " TAIL0")[:chars]
    assert document in shown and len(re.findall(r"doc\d+ x", shown)) == topk
    assert ("TAIL0" in shown) is (chars > 900)
    assert SPEC.resolve_options({"variant": variant, "retrieval_topk": 2}).retrieval_topk == 2  # explicit wins

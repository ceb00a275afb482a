"""MemAgent's `variant`: the seed's training (default) and the original's, on the graph and in the converter.

Converter rows, hand-computed. One GRPO group of four rollouts over documents of 2, 1, 3 and 1 chunks (so
T = chunks + the final answer = 3, 2, 4, 2 trained sequences); only the first answers right: rewards
1, 0, 0, 0. Mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5; advantages (r - mean) /
(std + 1e-6): 0.75 / 0.500001 = 1.4999970 and -0.25 / 0.500001 = -0.4999990.
  seed (divide by T, the final answer counted): 0.4999990 x3, -0.2499995 x2, -0.12499975 x4, -0.2499995 x2
  original (broadcast):                          1.4999970 x3, -0.4999990 x2, -0.4999990 x4, -0.4999990 x2
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.errors import ConfigError
from agentgraphs.memagent import FINAL_TEMPLATE, MEMORY_UPDATE_TEMPLATE, SOURCES, SPEC, VARIANTS, MemAgentOptions
from agentgraphs.memagent.synthetic import make_needle_example
from agentgraphs.records import sample_fields
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.trace import check_trace
from agentgraphs.train_data import TrainDataSettings, to_train_data

ROOT = Path(__file__).resolve().parents[2]
C = 40  # chunk tokens in the graph runs


# -- presets ------------------------------------------------------------------------------------------


def test_presets_fill_what_is_not_set_and_an_explicit_option_wins() -> None:
    seed, original = SPEC.default_options(), SPEC.resolve_options({"variant": "original"})
    assert seed == SPEC.resolve_options({"variant": "seed"}) == MemAgentOptions()
    assert seed.variant == "seed" and original.variant == "original"
    for name, opts in (("seed", seed), ("original", original)):
        assert {k: getattr(opts, k) for k in VARIANTS[name]} == VARIANTS[name]
    assert (seed.reward_split, seed.max_chunks, seed.eval_max_chunks, seed.truncation) == ("divide", 512, 512, "tail")
    assert (seed.final_max_new_tokens, seed.question_max_tokens, seed.chunk_as, seed.strip_responses) == \
        (256, None, "text", True)
    assert (original.reward_split, original.max_chunks, original.eval_max_chunks, original.truncation) == \
        ("broadcast", 8, None, "middle")
    assert (original.final_max_new_tokens, original.question_max_tokens, original.chunk_as,
            original.strip_responses) == (1024, 1024, "ids", False)
    for opts in (seed, original):  # what the two share
        assert (opts.chunk_tokens, opts.memory_max_new_tokens, opts.train_final_answer) == (5000, 1024, True)
    assert SPEC.reward_split_for(seed) == "divide" and SPEC.reward_split_for(original) == "broadcast"
    mixed = SPEC.resolve_options({"variant": "original", "truncation": "tail", "reward_split": "divide"})
    assert (mixed.truncation, mixed.reward_split, mixed.max_chunks, mixed.chunk_as) == ("tail", "divide", 8, "ids")
    assert SPEC.resolve_options({"max_chunks": None}).max_chunks is None  # null: no cap, over the seed's 512
    assert SPEC.resolve_options(original.model_dump()) == original  # a dump resolves to itself
    assert MemAgentOptions.variant_table() == {k: {"seed": VARIANTS["seed"][k], "original": VARIANTS["original"][k]}
                                               for k in VARIANTS["seed"]}
    assert set(VARIANTS["seed"]) == set(VARIANTS["original"]) == set(SOURCES)


@pytest.mark.parametrize("bad, words", [
    ({"variant": "paper"}, "variant"),
    ({"variant": ["seed"]}, "variant"),
    ({"truncation": "head"}, "option truncation: input should be 'middle' or 'tail'"),
    ({"chunk_as": "tokens"}, "option chunk_as: input should be 'ids' or 'text'"),
    ({"strip_responses": "yes"}, "option strip_responses: input should be a valid boolean"),
    ({"question_max_tokens": 0}, "option question_max_tokens: input should be greater than or equal to 1"),
])
def test_bad_values_name_the_option(bad: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        SPEC.resolve_options(bad)


def _cell(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def test_readme_table_is_the_variants_table() -> None:
    """README's MemAgent table: one row per preset option, values and seed lines as in memagent/variants.py."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## MemAgent"):text.index("### RULER-HQA scores match the seed's")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].strip("`") in SOURCES:
            rows[cells[0].strip("`")] = cells[1:]
    assert set(rows) == set(SOURCES)
    for option, (seed, original, source) in rows.items():
        assert seed == f"`{_cell(VARIANTS['seed'][option])}`", option
        assert original == f"`{_cell(VARIANTS['original'][option])}`", option
        assert SOURCES[option][0] in source, option
    assert "loss_mask" in section and "rollout.py:145-150" in section  # the seed README's claim, corrected


def test_the_example_config_selects_the_seed_and_overrides_none_of_its_preset() -> None:
    cfg = yaml.safe_load((ROOT / "examples/memagent/memagent.yaml").read_text(encoding="utf-8"))
    options = cfg["agentgraph_options"]
    assert options["variant"] == "seed"
    assert not set(options) & set(VARIANTS["seed"]), "an option written in the YAML would override the preset"
    resolved = SPEC.resolve_options(options)
    assert {k: getattr(resolved, k) for k in VARIANTS["seed"]} == VARIANTS["seed"]
    # the seed reads up to 512 chunks: a rollout must be allowed its 512 updates and the answer
    assert cfg["agentgraph_max_llm_calls"] >= resolved.max_chunks + 1
    assert cfg["agentgraph_eval_max_llm_calls"] >= resolved.eval_max_chunks + 1


# -- the graph, per variant ---------------------------------------------------------------------------

REPLIES = [" Alice is 30.<|endoftext|>\n", "", "Alice is 30."]


def script(call: ScriptCall) -> str:
    """Memory updates: a reply with stop-token text and whitespace, then an empty one, then plain text."""
    if "Your answer:" in call.prompt_text:
        return "She is \\boxed{30}.\n"
    return REPLIES[min(call.index, len(REPLIES) - 1)]


def document(tok: Any, n_tokens: int) -> tuple[str, list[int]]:
    text = make_needle_example(tok, n_tokens, seed=3, needle_position=0.5, chunk_size=C)["document"]
    return text, tok.encode(text, add_special_tokens=False)


def run_variant(tiny_engine: Any, text: str, **options: Any) -> Any:
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, script), tokenizer=tiny_engine.tokenizer,
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=64))
    inp = rollout_input("How old is Alice?", ["30"], {"context": text}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"chunk_tokens": C, **options}))
    assert rollout.status == "completed", rollout.reason
    check_trace(rollout.turns, SPEC.layout)
    return rollout


def user_prompt_ids(tok: Any, content: str) -> list[int]:
    """The seed's rendering (core/llm_engine.py:50-56): the chat template as text, tokenized whole."""
    text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def spliced_prompt_ids(tok: Any, question: str, memory: str, chunk: list[int]) -> list[int]:
    """The original's: the text around the chunk tokenized, the chunk's ids in between, verbatim."""
    mark = "\u2063CHUNK\u2063"
    text = tok.apply_chat_template([{"role": "user", "content": MEMORY_UPDATE_TEMPLATE.format(
        prompt=question, memory=memory, chunk=mark)}], tokenize=False, add_generation_prompt=True)
    before, after = text.split(mark)
    return tok.encode(before, add_special_tokens=False) + chunk + tok.encode(after, add_special_tokens=False)


def test_seed_reads_the_head_as_text_strips_memory_and_trains_every_turn(tiny_engine: Any) -> None:
    tok = tiny_engine.tokenizer
    text, ids = document(tok, 10 * C - 10)
    n_chunks = -(-len(ids) // C)
    assert n_chunks >= 8
    rollout = run_variant(tiny_engine, text, max_chunks=4)  # 4 of the document's chunks: the FIRST four
    turns = rollout.turns
    assert [t["node"] for t in turns] == ["memory_update"] * 4 + ["final_answer"]
    assert all(t["trainable"] for t in turns) and len(rollout.sequences) == 5  # the final answer is trained
    # memory: stop-token text and whitespace gone; an empty update keeps the previous memory
    memories = ["No previous memory", "Alice is 30.", "Alice is 30.", "Alice is 30.", "Alice is 30."]
    for k in range(4):
        chunk_text = tok.decode(ids[k * C:(k + 1) * C], skip_special_tokens=True)
        content = MEMORY_UPDATE_TEMPLATE.format(prompt="How old is Alice?", memory=memories[k], chunk=chunk_text)
        assert turns[k]["prompt_ids"] == user_prompt_ids(tok, content), k
    final = FINAL_TEMPLATE.format(prompt="How old is Alice?", memory=memories[4])
    assert turns[4]["prompt_ids"] == user_prompt_ids(tok, final)
    assert rollout.answer == "She is \\boxed{30}." and rollout.reward == 1.0
    assert rollout.summary["chunks_read"] == 4 and rollout.summary["tokens_read"] == 4 * C
    fields = sample_fields(rollout, SPEC)
    assert fields["train_metadata"]["reward_split"] == "divide" and len(fields["train_metadata"]["turns"]) == 5
    # without an explicit cap, the seed's 512 chunks read the whole document
    assert run_variant(tiny_engine, text).summary["chunks_read"] == n_chunks


def test_original_cuts_the_middle_splices_ids_and_keeps_the_response(tiny_engine: Any) -> None:
    tok = tiny_engine.tokenizer
    text, ids = document(tok, 10 * C - 10)
    n = len(ids)
    rollout = run_variant(tiny_engine, text, variant="original", max_chunks=4)
    turns = rollout.turns
    assert [t["node"] for t in turns] == ["memory_update"] * 4 + ["final_answer"]
    assert all(t["trainable"] for t in turns) and len(rollout.sequences) == 5
    # the first two and the last two chunks of the document (4 * C ids: 2 * C from each end)
    read = [ids[0:C], ids[C:2 * C], ids[n - 2 * C:n - C], ids[n - C:n]]
    memories = ["No previous memory", " Alice is 30.<|endoftext|>\n", "", "Alice is 30.", "Alice is 30."]
    for k in range(4):
        assert turns[k]["prompt_ids"] == spliced_prompt_ids(tok, "How old is Alice?", memories[k], read[k]), k
    assert turns[4]["prompt_ids"] == user_prompt_ids(tok, FINAL_TEMPLATE.format(prompt="How old is Alice?",
                                                                                memory=memories[4]))
    assert rollout.answer == "She is \\boxed{30}.\n" and rollout.reward == 1.0
    fields = sample_fields(rollout, SPEC)
    assert fields["train_metadata"]["reward_split"] == "broadcast" and len(fields["train_metadata"]["turns"]) == 5
    # the original's own cap: 8 chunks, 4 from each end
    capped = run_variant(tiny_engine, text, variant="original")
    assert capped.summary["chunks_read"] == 8 and capped.final_state["chunks"][4] == [[n - 4 * C, n - 3 * C]]


def test_train_final_answer_false_masks_the_answer_under_either_variant(tiny_engine: Any) -> None:
    text, _ = document(tiny_engine.tokenizer, 2 * C - 10)
    for variant in ("seed", "original"):
        rollout = run_variant(tiny_engine, text, variant=variant, train_final_answer=False)
        assert rollout.turns[-1]["node"] == "final_answer" and not rollout.turns[-1]["trainable"]
        assert len(rollout.sequences) == len(rollout.turns) - 1 == 2


# -- the converter ------------------------------------------------------------------------------------


def group_samples(tiny_engine: Any, variant: str) -> list[Sample]:
    """Four rollouts of one prompt group, documents of 2, 1, 3, 1 chunks; the first answers right."""
    tok = tiny_engine.tokenizer
    samples = []
    for i, (n_tokens, reply) in enumerate([(int(1.6 * C), "30"), (C - 8, "31"), (int(2.6 * C), "29"),
                                           (C - 8, "3")]):
        text, ids = document(tok, n_tokens)
        assert -(-len(ids) // C) == [2, 1, 3, 1][i]

        def answer(call: ScriptCall, reply: str = reply) -> str:
            return f"\\boxed{{{reply}}}" if "Your answer:" in call.prompt_text else "Alice is 30."

        ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, answer), tokenizer=tok,
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=32))
        inp = rollout_input("How old is Alice?", ["30"], {"context": text}, i)
        rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"chunk_tokens": C, "variant": variant}))
        fields = sample_fields(rollout, SPEC)
        fields["status"] = Sample.Status(fields["status"])
        samples.append(Sample(group_index=0, index=i, **fields))
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0, 0.0]
    return samples


@pytest.mark.parametrize("variant, rows", [
    ("seed", [0.4999990] * 3 + [-0.2499995] * 2 + [-0.12499975] * 4 + [-0.2499995] * 2),
    ("original", [1.4999970] * 3 + [-0.4999990] * 8),
])
def test_converter_rows_by_hand(tiny_engine: Any, variant: str, rows: list[float]) -> None:
    samples = group_samples(tiny_engine, variant)
    data = to_train_data(samples, TrainDataSettings(n_samples_per_prompt=4))
    np.testing.assert_allclose(data["rewards"], rows, rtol=0, atol=1e-7)
    assert data["sample_indices"] == [0] * 3 + [1] * 2 + [2] * 4 + [3] * 2
    assert data["raw_reward"] == [1.0] * 3 + [0.0] * 8
    assert all(mask == [1] * n for mask, n in zip(data["loss_masks"], data["response_lengths"]))
    # every trajectory's last row is its final answer, trained: \boxed{..} then the end of turn
    tok = tiny_engine.tokenizer
    lasts = [max(r for r, i in enumerate(data["sample_indices"]) if i == k) for k in range(4)]
    assert [tok.decode(data["tokens"][r][-data["response_lengths"][r]:]) for r in lasts] == \
        ["\\boxed{30}<|im_end|>", "\\boxed{31}<|im_end|>", "\\boxed{29}<|im_end|>", "\\boxed{3}<|im_end|>"]

"""MemAgent's graph with a scripted policy over the tiny model (real ids and log-probs)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.memagent import SPEC, build_graph, chunk_spans
from agentgraphs.memagent.graph import chunk_ids
from agentgraphs.memagent.synthetic import make_needle_example
from agentgraphs.records import sample_fields
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.trace import check_trace

CHUNK = 400


def needle_row(tok: Any, chunk_index: int = 2, n_tokens: int = 8 * CHUNK - 50) -> dict:
    return make_needle_example(tok, n_tokens, seed=5, needle_position=chunk_index, chunk_size=CHUNK)


def remembering_script(answer_override: str | None = None):
    """Memory keeps any 'secret code' sentence seen in the section; the final answer boxes it."""

    def script(call: ScriptCall) -> str:
        text = call.prompt_text
        if "Your answer:" in text:
            found = re.search(r"secret code of [A-Za-z ]+ is (\d+)", text.split("<memory>")[-1])
            value = answer_override or (found.group(1) if found else "unknown")
            return f"From memory, the code is \\boxed{{{value}}}."
        memory = text.split("<memory>\n")[-1].split("\n</memory>")[0]
        section = text.split("<section>\n")[-1].split("\n</section>")[0]
        fact = re.search(r"The secret code of [A-Za-z ]+ is \d+\.", section)
        if fact:
            return fact.group(0)
        return memory if memory != "No previous memory" else "Nothing relevant yet."

    return script


def run(tiny_engine: Any, row: dict, script: Any, **options: Any):
    policy = ScriptedPolicy(tiny_engine, script)
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer,
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=128))
    inp = rollout_input(row["question"], row["answers"], {"context": row["document"]}, 0)
    opts = {"chunk_tokens": CHUNK, **options}
    return asyncio.run(run_rollout(SPEC, inp, ctx, options=opts)), policy


def test_fact_from_chunk_3_of_8_reaches_the_boxed_answer(tiny_engine: Any) -> None:
    row = needle_row(tiny_engine.tokenizer, chunk_index=2)
    rollout, policy = run(tiny_engine, row, remembering_script())
    assert rollout.status == "completed", rollout.reason
    nodes = [t["node"] for t in rollout.turns]
    assert nodes == ["memory_update"] * 8 + ["final_answer"]
    assert rollout.reward == 1.0
    assert rollout.metrics["sub_em"] == 1.0
    assert len(rollout.sequences) == 9  # every update and the final answer: own sequence
    assert rollout.summary["chunks_read"] == rollout.summary["chunks_planned"] == 8
    assert rollout.summary["turns_by_node"] == {"memory_update": 8, "final_answer": 1}
    check_trace(rollout.turns, "per_turn")
    # the fact enters memory at chunk 3 (index 2) and is carried to the end
    memories = [t["text"] for t in rollout.turns[:8]]
    assert "secret code" not in memories[1] and "secret code" in memories[2] and "secret code" in memories[7]


def test_wrong_memory_scores_zero(tiny_engine: Any) -> None:
    row = needle_row(tiny_engine.tokenizer)
    rollout, _ = run(tiny_engine, row, remembering_script(answer_override="0000000"))
    assert rollout.status == "completed" and rollout.reward == 0.0


def test_chunks_are_exact_slices_of_the_document_ids(tiny_engine: Any) -> None:
    """The original's splice (`chunk_as: ids`); the seed's text chunks: tests/memagent/test_variants.py."""
    tok = tiny_engine.tokenizer
    row = needle_row(tok)
    doc_ids = tok.encode(row["document"], add_special_tokens=False)
    spans = chunk_spans(len(doc_ids), CHUNK, None)
    assert sum((chunk_ids(doc_ids, s) for s in spans), []) == doc_ids
    rollout, _ = run(tiny_engine, row, remembering_script(), variant="original")
    for turn, span in zip(rollout.turns, spans):
        ids = chunk_ids(doc_ids, span)
        p = turn["prompt_ids"]
        assert any(p[i:i + len(ids)] == ids for i in range(len(p) - len(ids) + 1))


@pytest.mark.parametrize("variant, truncation", [("original", "middle"), ("seed", "tail")])
def test_training_cap_cuts_the_middle_or_the_tail(tiny_engine: Any, variant: str, truncation: str) -> None:
    tok = tiny_engine.tokenizer
    row = needle_row(tok, chunk_index=0, n_tokens=12 * CHUNK)
    rollout, _ = run(tiny_engine, row, remembering_script(), max_chunks=4, variant=variant)
    assert [t["node"] for t in rollout.turns].count("memory_update") == 4
    assert rollout.summary["tokens_read"] == 4 * CHUNK < rollout.summary["doc_tokens"]  # recorded
    n = len(tok.encode(row["document"], add_special_tokens=False))
    read = [[0, CHUNK], [CHUNK, 2 * CHUNK]]
    read += [[n - 2 * CHUNK, n - CHUNK], [n - CHUNK, n]] if truncation == "middle" else [[2 * CHUNK, 3 * CHUNK],
                                                                                         [3 * CHUNK, 4 * CHUNK]]
    assert rollout.final_state["chunks"] == [[span] for span in read]
    assert chunk_spans(n, CHUNK, 4, truncation) == [[span] for span in read]


def test_explicit_options_mask_the_final_answer_and_divide(tiny_engine: Any) -> None:
    row = needle_row(tiny_engine.tokenizer)
    rollout, _ = run(tiny_engine, row, remembering_script(), train_final_answer=False, reward_split="divide")
    assert rollout.turns[-1]["node"] == "final_answer" and not rollout.turns[-1]["trainable"]
    assert len(rollout.sequences) == 8
    fields = sample_fields(rollout, SPEC)
    assert fields["train_metadata"]["reward_split"] == "divide"
    assert len(fields["train_metadata"]["turns"]) == 8


def test_evaluation_reads_everything_and_trains_nothing(tiny_engine: Any) -> None:
    row = needle_row(tiny_engine.tokenizer, n_tokens=10 * CHUNK - CHUNK // 2)
    chunks = -(-len(tiny_engine.tokenizer.encode(row["document"], add_special_tokens=False)) // CHUNK)
    assert chunks == 10
    policy = ScriptedPolicy(tiny_engine, remembering_script())
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, evaluation=True,
                       sampling=SamplingParams(temperature=0.0, max_new_tokens=128))
    inp = rollout_input(row["question"], row["answers"], {"context": row["document"]}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"chunk_tokens": CHUNK}))
    assert [t["node"] for t in rollout.turns].count("memory_update") == chunks  # no max_chunks cap
    assert not any(t["trainable"] for t in rollout.turns) and rollout.sequences == []


@pytest.mark.parametrize("bad, field", [
    ({"context": ""}, "metadata.context"),
    ({}, "metadata.context"),
])
def test_bad_input_fails_with_the_field_named(tiny_engine: Any, bad: dict, field: str) -> None:
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, []), tokenizer=tiny_engine.tokenizer)
    rollout = asyncio.run(run_rollout(SPEC, rollout_input("Q?", ["a"], bad, 0), ctx))
    assert rollout.status == "failed" and field in rollout.reason
    fields = sample_fields(rollout, SPEC)
    assert fields["remove_sample"] and not any(fields["loss_mask"])


def test_graph_draws_offline() -> None:
    text = build_graph().get_graph().draw_mermaid()
    assert "memory_update" in text and "final_answer" in text


def test_448k_token_document_end_to_end(qwen25: Any) -> None:
    """The full RULER length through the graph with a fast engine: 90 chunks, one copy of the ids."""
    from agentgraphs.testing.fake_engines import FixedLatencyEngine

    row = make_needle_example(qwen25, 448_000, seed=1, needle_position=0.5)
    reply = qwen25.encode("Nothing relevant yet.", add_special_tokens=False) + [151645]
    engine = FixedLatencyEngine(latency_s=0.0, script=tuple(reply), tokenizer=qwen25)
    ctx = AgentContext(policy=engine, tokenizer=qwen25, evaluation=True,
                       sampling=SamplingParams(max_new_tokens=64))
    inp = rollout_input(row["question"], row["answers"], {"context": row["document"]}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx))
    assert rollout.status == "completed", rollout.reason
    s = rollout.summary
    assert s["chunks_read"] == s["chunks_planned"] == -(-s["doc_tokens"] // 5000) >= 89
    assert s["tokens_read"] == s["doc_tokens"] and abs(s["doc_tokens"] - 448_000) <= 0.02 * 448_000
    final = rollout.final_state
    assert final["document"] == "" and len(final["doc_ids"]) == s["doc_tokens"]  # text dropped, ids kept once


def test_evaluation_rollout_cut_by_max_new_tokens_is_truncated(tiny_engine: Any) -> None:
    row = needle_row(tiny_engine.tokenizer, chunk_index=0, n_tokens=2 * CHUNK)
    policy = ScriptedPolicy(tiny_engine, remembering_script())
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, evaluation=True,
                       sampling=SamplingParams(temperature=0.0, max_new_tokens=128))
    inp = rollout_input(row["question"], row["answers"], {"context": row["document"]}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"chunk_tokens": CHUNK, "final_max_new_tokens": 3}))
    assert not any(t["trainable"] for t in rollout.turns)
    assert rollout.status == "truncated" and "max_new_tokens" in rollout.reason


def test_a_crashing_make_input_is_a_failed_rollout(tiny_engine: Any) -> None:
    from dataclasses import replace

    spec = replace(SPEC, make_input=lambda row, opts: row["metadata"]["missing"], _graphs={})
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, []), tokenizer=tiny_engine.tokenizer)
    rollout = asyncio.run(run_rollout(spec, rollout_input("Q?", ["a"], {"context": "x"}, 0), ctx))
    assert rollout.status == "failed" and "make_input raised KeyError" in rollout.reason


def test_context_max_new_tokens_caps_every_call(tiny_engine: Any) -> None:
    row = needle_row(tiny_engine.tokenizer, chunk_index=0, n_tokens=2 * CHUNK)
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, remembering_script()), tokenizer=tiny_engine.tokenizer,
                       sampling=SamplingParams(max_new_tokens=4))  # slime's --rollout-max-response-len
    inp = rollout_input(row["question"], row["answers"], {"context": row["document"]}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"chunk_tokens": CHUNK}))  # per-call caps: 1024
    assert rollout.turns and all(len(t["output_ids"]) <= 4 for t in rollout.turns)

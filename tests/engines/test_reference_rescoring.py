"""`agentgraphs run memagent --engine hf:DIR` output re-scored without trusting any agentgraphs code.

The run goes through the CLI's library function and writes samples.jsonl / traces.jsonl. The scoring
below uses only json, torch and transformers: a plain AutoModelForCausalLM forward pass over each WHOLE
training sequence in float32, log_softmax(logits / temperature), read at the next token. Every trained
position must match the rollout's log-prob within 1e-4, every masked position must carry 0.0, and the
prompt of every sequence must be exactly the ids the engine was sent (traces.jsonl's prompt_ids).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentgraphs.batch import run_file
from agentgraphs.dataset_io import write_jsonl
from agentgraphs.memagent.data import to_slime_row
from agentgraphs.memagent.synthetic import make_needle_example

TEMPERATURE = 0.7
TOLERANCE = 1e-4


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _reference_logprobs(model: Any, tokens: list[int], prompt_len: int, temperature: float) -> list[float]:
    """log p(tokens[i] | tokens[:i]) for every response position i, from one plain forward pass.

    The pass runs over the whole sequence; `logits_to_keep` only skips the vocabulary projection of the
    prompt positions, whose logits are not read.
    """
    n = len(tokens) - prompt_len
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens]), logits_to_keep=n + 1).logits[0].to(torch.float32)
    logprobs = torch.log_softmax(logits[:n] / temperature, dim=-1)  # row k predicts tokens[prompt_len + k]
    return [float(logprobs[k, tokens[prompt_len + k]]) for k in range(n)]


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir: Path, qwen25: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rescoring")
    rows = [to_slime_row(make_needle_example(qwen25, 400, seed=i)) for i in range(2)]
    write_jsonl(rows, root / "rows.jsonl")
    with open(root / "rows.jsonl", "a", encoding="utf-8") as fh:  # a FAILED sample: its mask is all 0
        fh.write('{"input": "Q?", "label": ["a"], "metadata": {}}\n')
    options = {"chunk_tokens": 200, "memory_max_new_tokens": 12, "final_max_new_tokens": 12}
    run_file("memagent", root / "rows.jsonl", f"hf:{tiny_model_dir}", root / "out", options=options,
             n_samples=2, concurrency=4, temperature=TEMPERATURE, max_new_tokens=16)
    return root / "out"


def test_trained_log_probs_match_a_plain_transformers_forward_pass(run_dir: Path, tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    samples = _jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 6 and sum(s["status"] == "failed" for s in samples) == 2
    trained = masked = 0
    worst = 0.0
    for sample in samples:
        for seq in sample["train_metadata"]["turns"]:
            tokens, n = seq["tokens"], seq["response_length"]
            assert len(seq["loss_mask"]) == len(seq["rollout_log_probs"]) == n and len(tokens) > n
            mask, recorded = seq["loss_mask"], seq["rollout_log_probs"]
            for m, lp in zip(mask, recorded):
                if m == 0:
                    assert lp == 0.0
                    masked += 1
            if not any(mask):
                continue
            reference = _reference_logprobs(model, tokens, len(tokens) - n, TEMPERATURE)
            for m, lp, ref in zip(mask, recorded, reference):
                if m:
                    worst = max(worst, abs(lp - ref))
                    trained += 1
    assert worst <= TOLERANCE, f"largest |rollout - reference| log-prob gap {worst:.2e}"
    assert trained >= 4 * 3 * 4 and masked >= 2  # 4 rollouts x >= 3 calls x >= 4 tokens; 2 failed samples


def test_sequence_prompts_are_the_ids_the_engine_was_sent(run_dir: Path) -> None:
    samples = _jsonl(run_dir / "samples.jsonl")
    traces = _jsonl(run_dir / "traces.jsonl")
    assert len(samples) == len(traces)
    checked = 0
    for sample, trace in zip(samples, traces):
        assert sample["index"] == trace["index"]
        sent = [t for t in trace["turns"] if t["trainable"]]
        sequences = sample["train_metadata"]["turns"] if sent else []
        assert len(sequences) == len(sent)  # per_turn layout: one sequence per trained engine call
        for seq, call in zip(sequences, sent):
            prompt_len = len(seq["tokens"]) - seq["response_length"]
            assert seq["tokens"][:prompt_len] == call["prompt_ids"]
            assert seq["tokens"][prompt_len:] == call["output_ids"]
            checked += 1
        # the top-level fields are the first sequence (slime reads them)
        if sequences:
            assert sample["tokens"] == sequences[0]["tokens"]
    assert checked >= 12  # 4 rollouts x (2 memory updates + the final answer)

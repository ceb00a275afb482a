"""Synthetic run directories' records, shaped like a MemAgent run, for viewer tests and benchmarks.

>>> recs = synthetic_records(3, 1000, [100, 200, 300])
>>> [r.sample["status"] for r in recs], len(recs[0].turns), len(recs[0].sequences[0]["tokens"])
(['completed', 'truncated', 'failed'], 40, 161)
"""

from __future__ import annotations

from typing import Sequence

from ..viewer.run_data import RunRecord

IM_START, IM_END, NEWLINE, USER, ASSISTANT = 151644, 151645, 198, 872, 77091


def synthetic_records(n: int, doc_tokens: int, words: Sequence[int], *, turns_per_rollout: int = 10,
                      prompt_tokens: int = 512, output_tokens: int = 128, long_turns: int = 40) -> list[RunRecord]:
    """`n` rollouts of `turns_per_rollout` per_turn turns; rollout 0 reads a `doc_tokens` document in
    `long_turns` chunks. Ids cycle through `words`; statuses cycle completed / truncated / failed."""
    out = []
    for i in range(n):
        pieces = long_turns if i == 0 else turns_per_rollout
        size = doc_tokens // pieces if i == 0 else prompt_tokens
        turns, seqs = [], []
        for k in range(pieces):
            prompt = [IM_START, USER, NEWLINE] + [words[(i + k + j) % len(words)] for j in range(size)] + \
                [IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE]
            output = [words[(7 * k + j) % len(words)] for j in range(output_tokens - 1)] + [IM_END]
            lps = [-0.25 - 0.001 * j for j in range(len(output))]
            turns.append({"node": "memory" if k < pieces - 1 else "final", "conversation": "", "prompt_ids": prompt,
                          "output_ids": output, "output_logprobs": lps, "trainable": True, "finish_reason": "stop",
                          "temperature": 1.0, "engine": "hf:synthetic", "weight_version": None, "rid": f"{i}-{k}",
                          "text": "", "retries": 0})
            seqs.append({"tokens": prompt + output, "response_length": len(output), "loss_mask": [1] * len(output),
                         "rollout_log_probs": lps})
        status = ("completed", "truncated", "failed")[i % 3]
        reward = float(i % 2)
        sample = {"index": i, "status": status, "reward": reward,
                  "metadata": {"status_reason": "ok", "metrics": {"em": reward}},
                  "train_metadata": {"turns": seqs, "layout": "per_turn"}}
        trace = {"index": i, "status": status, "reason": "ok", "answer": "x", "reward": reward,
                 "metrics": {"em": reward}, "turns": turns, "time_s": 0.5}
        out.append(RunRecord(i + 1, sample, trace))
    return out

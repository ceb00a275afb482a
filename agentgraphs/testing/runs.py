"""Synthetic run directories' records, shaped like a MemAgent run, for viewer tests and benchmarks.

>>> recs = synthetic_records(3, 1000, [100, 200, 300])
>>> [r.sample["status"] for r in recs], len(recs[0].turns), len(recs[0].sequences[0]["tokens"])
(['completed', 'truncated', 'failed'], 40, 161)
>>> import tempfile
>>> sorted(p.name for p in write_run_dir(recs, tempfile.mkdtemp()).iterdir())
['samples.jsonl', 'summary.json', 'traces.jsonl']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..records import mask_out
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
        if status == "failed":  # as records.fail_fields leaves it: nothing trains
            for seq in seqs:
                mask_out(seq)
        reward = float(i % 2)
        sample = {"index": i, "status": status, "reward": reward,
                  **{k: seqs[0][k] for k in ("tokens", "response_length", "loss_mask", "rollout_log_probs")},
                  "metadata": {"status_reason": "ok", "metrics": {"em": reward}},
                  "train_metadata": {"turns": seqs, "layout": "per_turn"}}
        trace = {"index": i, "status": status, "reason": "ok", "answer": "x", "reward": reward,
                 "metrics": {"em": reward}, "turns": turns, "time_s": 0.5}
        out.append(RunRecord(i + 1, sample, trace))
    return out


def write_run_dir(records: Iterable[RunRecord], out_dir: str | Path,
                  summary: Mapping[str, Any] | None = None) -> Path:
    """Write records as a run directory (samples.jsonl, traces.jsonl, summary.json), as `agentgraphs run` does."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(out / "samples.jsonl", "w", encoding="utf-8") as s, open(out / "traces.jsonl", "w", encoding="utf-8") as t:
        for rec in records:
            s.write(json.dumps(rec.sample) + "\n")
            t.write(json.dumps(rec.trace) + "\n")
            n += 1
    (out / "summary.json").write_text(json.dumps({"agent": "synthetic", "results": n, **(summary or {})}) + "\n",
                                      encoding="utf-8")
    return out

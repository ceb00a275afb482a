"""The main job on the embedded default: MemAgent on the tiny model, no server needed.

Builds the tiny Qwen2 model (real Qwen2.5 vocabulary) if needed, writes a small synthetic
long-document QA set, runs MemAgent through HFEngine and writes slime samples and traces.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

from .batch import JsonlWriter, check_out_dir, clear_run_files, lead_with_headline, run_rows
from .context import AgentContext
from .engines import SamplingParams
from .rollout_inputs import RowKeys, read_rollout_inputs

DEMO_OPTIONS: dict[str, Any] = {
    "chunk_tokens": 1000,
    "memory_max_new_tokens": 48,
    "final_max_new_tokens": 32,
    "max_chunks": 8,
}


def write_demo_data(path: Path, tokenizer: Any, *, lengths: tuple[int, ...] = (2000, 4000), per_length: int = 2,
                    seed: int = 0) -> int:
    from .dataset_io import write_jsonl
    from .memagent.data import to_slime_row
    from .memagent.synthetic import make_dataset

    rows = make_dataset(tokenizer, lengths, per_length=per_length, seed=seed)
    return write_jsonl((to_slime_row(r) for r in rows), path)


def run_demo(out_dir: str | Path, *, model_dir: str | Path | None = None, seed: int = 0,
             n_samples: int = 2, on_result: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
             ) -> dict[str, Any]:
    """Run the demo and return its summary (also written to OUT/summary.json).

    `seed` seeds the data and every engine call (`run_rows(seed=...)`): the same seed writes the same
    samples.jsonl. A rerun into the same `out_dir` replaces the earlier demo's files (`batch.RUN_FILES`: its
    report.html too, which would no longer match). The summary leads with MemAgent's headline metric,
    `sub_em_strict`: a random model scores ~0 on it, while the seed's `sub_em` (kept, with its note) gives it 1.0
    for never answering.

    >>> summary = run_demo("/tmp/agentgraphs-demo")  # doctest: +SKIP
    >>> summary["by_status"]  # doctest: +SKIP
    """
    from .engines.hf import HFEngine
    from .memagent import SPEC
    from .testing.tiny_model import ensure_tiny_model

    out = Path(out_dir)
    check_out_dir(out)
    engine = HFEngine.from_dir(model_dir or ensure_tiny_model(), seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    clear_run_files(out)  # a rerun (README: `agentgraphs demo --out out/demo`) replaces the demo's run, report too
    data = out / "data.jsonl"
    write_demo_data(data, engine.tokenizer, seed=seed)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=64)

    def make_context() -> AgentContext:
        return AgentContext(policy=engine, tokenizer=engine.tokenizer, sampling=sampling)

    with JsonlWriter(out) as writer:
        def sink(sample: dict[str, Any], trace: dict[str, Any]) -> None:
            writer(sample, trace)
            if on_result is not None:
                on_result(sample, trace)

        rows = read_rollout_inputs(data, RowKeys(), n_samples=n_samples)
        summary = asyncio.run(run_rows(SPEC, rows, make_context, options=DEMO_OPTIONS, concurrency=4,
                                       on_result=sink, seed=seed))
    result = {"agent": SPEC.name, "engine": engine.name, "data": str(data), "seed": seed,
              **lead_with_headline(SPEC, summary.as_dict())}
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result

"""GPU checks: HFEngine on CUDA keeps the exactness contract. Skipped cleanly without CUDA."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def cuda_engine(tiny_model_dir: Path) -> Any:
    from agentgraphs.engines.hf import HFEngine

    return HFEngine.from_dir(tiny_model_dir, device="cuda", dtype=torch.float32, seed=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_cuda_logprobs_match_teacher_forcing(cuda_engine: Any, temperature: float) -> None:
    from agentgraphs.engines import SamplingParams

    prompt = cuda_engine.tokenizer.encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                                          add_special_tokens=False)
    out = asyncio.run(cuda_engine.generate(prompt, SamplingParams(temperature=temperature, max_new_tokens=32,
                                                                  sampling_seed=1)))
    forced = cuda_engine.score(prompt, out.token_ids, temperature)
    assert max(abs(a - b) for a, b in zip(forced, out.logprobs)) <= 1e-4


def test_memagent_rollout_on_cuda(cuda_engine: Any) -> None:
    from agentgraphs.context import AgentContext
    from agentgraphs.engines import SamplingParams
    from agentgraphs.memagent import SPEC
    from agentgraphs.memagent.synthetic import make_needle_example
    from agentgraphs.rollout import rollout_input, run_rollout
    from agentgraphs.trace import check_trace

    row = make_needle_example(cuda_engine.tokenizer, 3000, seed=0, needle_position=0.5)
    ctx = AgentContext(policy=cuda_engine, tokenizer=cuda_engine.tokenizer,
                       sampling=SamplingParams(temperature=0.7, max_new_tokens=24, sampling_seed=2))
    inp = rollout_input(row["question"], row["answers"], {"context": row["document"]}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"chunk_tokens": 1000}))
    assert rollout.status in ("completed", "truncated"), rollout.reason
    for seq in check_trace(rollout.turns, SPEC.layout):
        start = len(seq["tokens"]) - seq["response_length"]
        forced = cuda_engine.score(seq["tokens"][:start], seq["tokens"][start:], 0.7)
        assert max(abs(a - b) for a, b in zip(forced, seq["rollout_log_probs"])) <= 1e-4

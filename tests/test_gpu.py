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


def test_cuda_engine_batches_by_default(cuda_engine: Any) -> None:
    assert cuda_engine.batching is True


def test_batched_cuda_requests_match_teacher_forcing(tiny_model_dir: Path) -> None:
    """32 concurrent requests of mixed lengths and temperatures on CUDA: each recorded log-prob equals a plain
    transformers re-score of the request's own output (fp32), and the decode forwards were shared."""
    from transformers import AutoModelForCausalLM

    from agentgraphs.engines import SamplingParams
    from agentgraphs.engines.hf import HFEngine

    engine = HFEngine.from_dir(tiny_model_dir, device="cuda", dtype=torch.float32, batching=True, seed=0)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).to("cuda").eval()
    tok = engine.tokenizer
    prompts = [tok.encode(f"<|im_start|>user\n{'word ' * (3 + 7 * i)}<|im_end|>\n<|im_start|>assistant\n",
                          add_special_tokens=False) for i in range(32)]
    temps = [(0.0, 0.7, 1.0, 1.3)[i % 4] for i in range(32)]
    params = [SamplingParams(temperature=t, top_p=0.95 if i % 3 == 0 else 1.0, max_new_tokens=8 + i,
                             sampling_seed=i) for i, t in enumerate(temps)]

    async def run_all() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, params))))

    outs = asyncio.run(run_all())
    for prompt, t, out in zip(prompts, temps, outs):
        with torch.inference_mode():
            logits = reference(torch.tensor([prompt + out.token_ids], device="cuda")).logits[0].float()
        scale = t if t > 0 else 1.0
        lps = torch.log_softmax(logits[len(prompt) - 1: -1] / scale, dim=-1)
        forced = lps.gather(1, torch.tensor(out.token_ids, device="cuda").unsqueeze(1)).squeeze(1).tolist()
        assert max(abs(a - b) for a, b in zip(forced, out.logprobs)) <= 1e-4
    stats = engine.batcher.stats
    assert stats.max_rows >= 16 and stats.steps < sum(len(o.token_ids) for o in outs)

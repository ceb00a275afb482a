"""HFEngine with continuous batching (`batching=True`), on CPU: every request's recorded log-probs are what
a plain transformers model gives its own output by teacher forcing, whatever ran beside it; finish
reasons, stop tokens, per-request limits and temperatures, joining, leaving and cancellation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgraphs.engines import Completion, SamplingParams
from agentgraphs.engines.hf import HFEngine
from agentgraphs.engines.sampling import GREEDY_BELOW, sample_rows, sample_token


@pytest.fixture(scope="module")
def batched(tiny_model_dir: Path) -> HFEngine:
    return HFEngine.from_dir(tiny_model_dir, device="cpu", batching=True, seed=0)


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path) -> Any:
    """A plain transformers model loaded on its own: the independent re-scorer."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def prompts(engine: HFEngine) -> list[list[int]]:
    """Chat prompts of different lengths."""
    texts = ["Hi.", "Tell me about rivers and the sea, please.", "Count: one two three four five six seven eight.",
             "x", "A longer question about gardens, bridges, lamps and the quiet harbor near the old tower?"]
    tok = engine.tokenizer
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                               add_generation_prompt=True), add_special_tokens=False) for t in texts]


def rescore(model: Any, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """log_softmax(logits / T) of each output token after the prompt, in one plain forward (T=0: unscaled)."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    scale = temperature if temperature >= GREEDY_BELOW else 1.0
    logprobs = torch.log_softmax(logits[len(prompt) - 1: -1] / scale, dim=-1)
    return logprobs.gather(1, torch.tensor(output).unsqueeze(1)).squeeze(1).tolist()


def assert_matches(model: Any, prompt: list[int], out: Completion, temperature: float) -> None:
    assert len(out.token_ids) == len(out.logprobs)
    forced = rescore(model, prompt, out.token_ids, temperature)
    assert max(abs(a - b) for a, b in zip(forced, out.logprobs)) <= 1e-4


def test_default_is_one_at_a_time_on_cpu(tiny_engine: HFEngine, batched: HFEngine) -> None:
    assert tiny_engine.batching is False and tiny_engine.batcher is None
    assert batched.batching is True


@pytest.mark.parametrize("sampler", ["multinomial", "inverse_cdf"])
@pytest.mark.parametrize("seed", [0, 1])
def test_sample_rows_draws_as_sample_token(seed: int, sampler: str) -> None:
    """Row by row, the batched sampler picks what `sample_token` picks from the same generator state."""
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(seed)) * 3
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.8),
              SamplingParams(temperature=1.3, top_k=5), SamplingParams(temperature=0.9, min_p=0.2),
              SamplingParams(temperature=0.5, top_k=1)]
    gens = [torch.Generator().manual_seed(100 + i) for i in range(6)]
    _, ids, lps = sample_rows(logits, params, gens, sampler=sampler)
    for i, p in enumerate(params):
        token, lp = sample_token(logits[i], p, torch.Generator().manual_seed(100 + i), sampler)
        assert ids[i] == token
        assert lps[i] == pytest.approx(lp, abs=1e-6)


async def test_concurrent_mixed_requests_match_teacher_forcing(batched: HFEngine, reference: Any) -> None:
    """Mixed prompt lengths, temperatures, filters and limits in one batch: each row is its own request."""
    ps = prompts(batched)
    settings = [SamplingParams(temperature=1.0, max_new_tokens=12, sampling_seed=1),
                SamplingParams(temperature=0.0, max_new_tokens=7),
                SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=20, sampling_seed=2),
                SamplingParams(temperature=1.3, top_k=20, max_new_tokens=1, sampling_seed=3),
                SamplingParams(temperature=0.5, min_p=0.05, max_new_tokens=16, ignore_eos=True, sampling_seed=4)]
    before = batched.batcher.stats.steps
    outs = await asyncio.gather(*(batched.generate(p, s) for p, s in zip(ps, settings)))
    for prompt, params, out in zip(ps, settings, outs):
        assert out.finish_reason in ("length", "stop")
        if out.finish_reason == "length":
            assert len(out.token_ids) == params.max_new_tokens
        else:
            assert out.token_ids[-1] in batched.eos_token_ids and len(out.token_ids) <= params.max_new_tokens
        assert out.text == batched.decode(out.token_ids)
        assert_matches(reference, prompt, out, params.temperature)
    steps = batched.batcher.stats.steps - before
    # batched: fewer decode forwards than tokens generated (each forward served several requests)
    assert steps < sum(len(o.token_ids) for o in outs)
    assert batched.batcher.stats.max_rows >= 2


async def test_stop_token_id_and_stop_string_end_their_request(batched: HFEngine, reference: Any) -> None:
    ps = prompts(batched)
    probe = await batched.generate(ps[1], SamplingParams(temperature=0.0, max_new_tokens=10))
    stop_id = probe.token_ids[4]
    probe_text = batched.decode(probe.token_ids)
    stop_string = batched.decode(probe.token_ids[3:5])
    by_id, by_string, free = await asyncio.gather(
        batched.generate(ps[1], SamplingParams(temperature=0.0, max_new_tokens=10, stop_token_ids=(stop_id,))),
        batched.generate(ps[1], SamplingParams(temperature=0.0, max_new_tokens=10, stop=(stop_string,))),
        batched.generate(ps[2], SamplingParams(temperature=1.0, max_new_tokens=10, ignore_eos=True, sampling_seed=5)))
    assert by_id.finish_reason == "stop" and by_id.meta["matched"] == stop_id
    assert by_id.token_ids[-1] == stop_id and stop_id not in by_id.token_ids[:-1]  # kept, and the first one
    assert by_string.finish_reason == "stop" and by_string.meta["matched"] == stop_string
    assert stop_string in by_string.text and stop_string not in batched.decode(by_string.token_ids[:-1])
    assert probe_text.startswith(by_string.text)
    assert free.finish_reason == "length" and len(free.token_ids) == 10
    for prompt, out, t in ((ps[1], by_id, 0.0), (ps[1], by_string, 0.0), (ps[2], free, 1.0)):
        assert_matches(reference, prompt, out, t)


async def test_requests_join_and_leave_between_steps(batched: HFEngine, reference: Any) -> None:
    """A long request is in flight when others join; they leave first; all stay exact."""
    ps = prompts(batched)
    stats = batched.batcher.stats
    long_params = SamplingParams(temperature=1.0, max_new_tokens=40, ignore_eos=True, sampling_seed=7)
    long_task = asyncio.create_task(batched.generate(ps[0], long_params))
    start = stats.steps
    while stats.steps < start + 5:  # the long request is decoding on its own
        await asyncio.sleep(0.005)
    short = await asyncio.gather(*(batched.generate(p, SamplingParams(temperature=0.8, max_new_tokens=6,
                                                                    ignore_eos=True, sampling_seed=20 + i))
                                   for i, p in enumerate(ps[1:4])))
    assert not long_task.done()  # the short ones joined a running batch and left it before the long one
    long = await long_task
    assert len(long.token_ids) == 40
    assert_matches(reference, ps[0], long, 1.0)
    for p, out in zip(ps[1:4], short):
        assert len(out.token_ids) == 6
        assert_matches(reference, p, out, 0.8)


async def test_seeded_request_does_not_depend_on_its_neighbours(batched: HFEngine) -> None:
    ps = prompts(batched)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True, sampling_seed=42)
    alone = await batched.generate(ps[2], params)
    crowd = await asyncio.gather(batched.generate(ps[2], params),
                                 *(batched.generate(p, params.replace(sampling_seed=i)) for i, p in enumerate(ps)))
    assert crowd[0].token_ids == alone.token_ids
    assert crowd[0].logprobs == pytest.approx(alone.logprobs, abs=1e-5)


async def test_cancelled_request_leaves_the_batch(batched: HFEngine, reference: Any) -> None:
    ps = prompts(batched)
    endless = asyncio.create_task(batched.generate(ps[0], SamplingParams(max_new_tokens=100_000, ignore_eos=True)))
    done = await asyncio.gather(*(batched.generate(p, SamplingParams(max_new_tokens=5, ignore_eos=True,
                                                                      sampling_seed=i)) for i, p in enumerate(ps[1:3])))
    assert all(len(o.token_ids) == 5 for o in done) and not endless.done()
    endless.cancel()
    with pytest.raises(asyncio.CancelledError):
        await endless
    while batched.batcher.in_flight:  # dropped before the next step; then the driver goes idle
        await asyncio.sleep(0.005)
    after = await batched.generate(ps[3], SamplingParams(temperature=0.9, max_new_tokens=6, sampling_seed=3))
    assert_matches(reference, ps[3], after, 0.9)


async def test_a_failing_step_reaches_every_waiter_and_the_engine_recovers(
        tiny_model_dir: Path, reference: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = HFEngine.from_dir(tiny_model_dir, device="cpu", batching=True, seed=0)
    ps = prompts(engine)

    def broken(tokens: Any) -> None:
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(engine.batcher, "_decode", broken)
    results = await asyncio.gather(*(engine.generate(p, SamplingParams(max_new_tokens=4)) for p in ps[:3]),
                                   return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "simulated" in str(r) for r in results)
    monkeypatch.undo()
    out = await engine.generate(ps[0], SamplingParams(max_new_tokens=4, ignore_eos=True, sampling_seed=1))
    assert_matches(reference, ps[0], out, 1.0)


async def test_batched_scores_are_teacher_forcing(batched: HFEngine, reference: Any) -> None:
    ps = prompts(batched)
    outputs = [[9707, 11, 1879], [151645], [16, 17, 18, 19, 20, 21], [785]]
    temps = [1.0, 0.7, 0.0, 1.5]
    got = await asyncio.gather(*(batched.score_async(p, o, t) for p, o, t in zip(ps, outputs, temps)))
    for p, o, t, g in zip(ps, outputs, temps, got):
        assert g == pytest.approx(rescore(reference, p, o, t), abs=1e-4)
    assert await batched.score_async(ps[0], [], 1.0) == []


async def test_max_new_tokens_zero_and_bad_ids(batched: HFEngine) -> None:
    from agentgraphs.errors import InputError

    out = await batched.generate(prompts(batched)[0], SamplingParams(max_new_tokens=0))
    assert (out.token_ids, out.finish_reason) == ([], "length")
    with pytest.raises(InputError):
        await batched.generate([10**9], SamplingParams(max_new_tokens=2))

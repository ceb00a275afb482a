"""HFEngine: real sampling on the tiny model, log-probs that match teacher forcing, safe concurrency."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentgraphs.engines import Completion, Engine, SamplingParams
from agentgraphs.errors import InputError
from agentgraphs.engines.hf import HFEngine
from agentgraphs.engines.sampling import sample_token


@pytest.fixture(scope="module")
def prompt(tiny_engine: HFEngine) -> list[int]:
    rendered = tiny_engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hello."}], tokenize=False, add_generation_prompt=True
    )
    return tiny_engine.tokenizer.encode(rendered, add_special_tokens=False)


def greedy(max_new_tokens: int, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, **kw)  # type: ignore[arg-type]


def test_is_an_engine(tiny_engine: HFEngine) -> None:
    assert isinstance(tiny_engine, Engine)
    assert tiny_engine.name.startswith("hf:")
    # SGLang stops on the tokenizer's eos and on generation_config's: Qwen2.5 has both
    assert tiny_engine.eos_token_ids == {151645, 151643}


async def test_respects_max_new_tokens(tiny_engine: HFEngine, prompt: list[int]) -> None:
    out = await tiny_engine.generate(prompt, SamplingParams(max_new_tokens=5, sampling_seed=3))
    assert len(out.token_ids) == len(out.logprobs) == 5
    assert out.finish_reason == "length"
    assert out.prompt_tokens == len(prompt)
    assert out.text == tiny_engine.tokenizer.decode(out.token_ids)
    empty = await tiny_engine.generate(prompt, SamplingParams(max_new_tokens=0))
    assert (empty.token_ids, empty.finish_reason) == ([], "length")


async def test_greedy_is_deterministic(tiny_engine: HFEngine, prompt: list[int]) -> None:
    a = await tiny_engine.generate(prompt, greedy(8))
    b = await tiny_engine.generate(prompt, greedy(8))
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    with torch.inference_mode():
        logits = tiny_engine.model(torch.tensor([prompt])).logits[0, -1]
    assert a.token_ids[0] == int(logits.argmax())


async def test_seeded_sampling_is_reproducible(tiny_engine: HFEngine, prompt: list[int]) -> None:
    params = SamplingParams(max_new_tokens=8, sampling_seed=11)
    a = await tiny_engine.generate(prompt, params)
    b = await tiny_engine.generate(prompt, params)
    c = await tiny_engine.generate(prompt, params.replace(sampling_seed=12))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


async def test_stop_token_id_stays_in_output(tiny_engine: HFEngine, prompt: list[int]) -> None:
    free = await tiny_engine.generate(prompt, SamplingParams(max_new_tokens=12, sampling_seed=5))
    stop_id = free.token_ids[4]
    first = free.token_ids.index(stop_id)
    out = await tiny_engine.generate(
        prompt, SamplingParams(max_new_tokens=12, sampling_seed=5, stop_token_ids=(stop_id,))
    )
    assert out.token_ids == free.token_ids[: first + 1]
    assert out.logprobs == free.logprobs[: first + 1]
    assert (out.finish_reason, out.meta["matched"]) == ("stop", stop_id)
    # ignore_eos turns off every token-based stop, stop_token_ids included (as in SGLang)
    ignored = await tiny_engine.generate(
        prompt, SamplingParams(max_new_tokens=12, sampling_seed=5, stop_token_ids=(stop_id,), ignore_eos=True)
    )
    assert ignored.token_ids == free.token_ids and ignored.finish_reason == "length"
    # SGLang checks the length limit first: a stop id that is also the last allowed token is "length"
    at_limit = await tiny_engine.generate(
        prompt, SamplingParams(max_new_tokens=first + 1, sampling_seed=5, stop_token_ids=(stop_id,))
    )
    assert at_limit.finish_reason == "length" and at_limit.token_ids[-1] == stop_id


async def test_eos_stops_generation(tiny_engine: HFEngine, prompt: list[int]) -> None:
    free = await tiny_engine.generate(prompt, greedy(4))
    engine = HFEngine(tiny_engine.model, tiny_engine.tokenizer, device="cpu")
    engine.eos_token_ids = frozenset({free.token_ids[0]})  # pretend the model's first pick is its eos
    out = await engine.generate(prompt, greedy(4))
    assert out.token_ids == free.token_ids[:1] and out.finish_reason == "stop"


async def test_stop_string_checked_on_decoded_text(tiny_engine: HFEngine, prompt: list[int]) -> None:
    params = SamplingParams(max_new_tokens=12, sampling_seed=9)
    free = await tiny_engine.generate(prompt, params)
    decode = tiny_engine.decode
    piece = next(decode([t]) for t in free.token_ids[3:] if decode([t]).strip() and "\ufffd" not in decode([t]))
    stop = piece.strip()[-2:]  # a stop string that may end inside a token
    n = next(i for i in range(1, len(free.token_ids) + 1) if stop in decode(free.token_ids[:i]))
    out = await tiny_engine.generate(prompt, params.replace(stop=(stop,)))
    assert out.token_ids == free.token_ids[:n]
    assert (out.finish_reason, out.meta["matched"]) == ("stop", stop)
    assert stop in out.text  # no trimming: text is the decode of the ids


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
async def test_logprobs_match_teacher_forcing(
    tiny_engine: HFEngine, prompt: list[int], temperature: float
) -> None:
    out = await tiny_engine.generate(
        prompt, SamplingParams(temperature=temperature, max_new_tokens=24, sampling_seed=1)
    )
    scored = tiny_engine.score(prompt, out.token_ids, temperature)
    assert scored == pytest.approx(out.logprobs, abs=1e-4)
    assert await tiny_engine.score_async(prompt, out.token_ids, temperature) == scored


async def test_logprob_is_of_the_unfiltered_distribution(tiny_engine: HFEngine, prompt: list[int]) -> None:
    params = SamplingParams(temperature=0.7, top_p=0.5, top_k=50, min_p=0.01, max_new_tokens=10, sampling_seed=2)
    out = await tiny_engine.generate(prompt, params)
    assert tiny_engine.score(prompt, out.token_ids, 0.7) == pytest.approx(out.logprobs, abs=1e-4)


def test_sample_token_filters() -> None:
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    gen = torch.Generator().manual_seed(0)
    picks = {sample_token(logits, SamplingParams(top_k=2), gen)[0] for _ in range(200)}
    assert picks == {0, 1}
    picks = {sample_token(logits, SamplingParams(top_p=0.5), gen)[0] for _ in range(50)}
    assert picks == {0}
    picks = {sample_token(logits, SamplingParams(min_p=0.3), gen)[0] for _ in range(200)}
    assert picks == {0, 1}  # p1/p0 = e^-1 > 0.3 > e^-2
    token, logprob = sample_token(logits, SamplingParams(temperature=0))
    assert token == 0 and logprob == pytest.approx(float(torch.log_softmax(logits, -1)[0]))


async def test_concurrent_calls_match_sequential(tiny_engine: HFEngine, prompt: list[int]) -> None:
    params = [SamplingParams(max_new_tokens=6 + i, temperature=0.8, sampling_seed=100 + i) for i in range(8)]
    sequential = [await tiny_engine.generate(prompt, p) for p in params]
    concurrent = await asyncio.gather(*(tiny_engine.generate(prompt, p) for p in params))

    def key(c: Completion) -> tuple[list[int], list[float], str]:
        return c.token_ids, c.logprobs, c.finish_reason

    assert [key(c) for c in concurrent] == [key(c) for c in sequential]


async def test_generation_does_not_block_the_event_loop(tiny_engine: HFEngine, prompt: list[int]) -> None:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await tiny_engine.generate(prompt, SamplingParams(max_new_tokens=16, sampling_seed=0, ignore_eos=True))
    done.set()
    await task
    assert ticks >= 16


async def test_rejects_bad_prompts(tiny_engine: HFEngine) -> None:
    with pytest.raises(InputError, match="prompt_ids"):
        await tiny_engine.generate([], SamplingParams())
    with pytest.raises(InputError, match="outside"):
        await tiny_engine.generate([10**7], SamplingParams())

"""The inverse-CDF sampler (`sampler="inverse_cdf"`): the exact distribution, filtered-out tokens never drawn,
the batched and one-at-a-time paths in agreement, one seed one sequence, and a clear refusal of unknown
samplers. Expected probabilities are computed here by hand (plain Python), not by the library."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from agentgraphs.engines import SamplingParams
from agentgraphs.engines.factory import make_engine
from agentgraphs.engines.hf import HFEngine
from agentgraphs.engines.sampling import sample_rows, sample_token
from agentgraphs.errors import ConfigError, EngineError

# a small vocabulary, listed out of order so that the filters' sort matters
PROBS = [0.10, 0.03, 0.40, 0.07, 0.25, 0.15]
LOGITS = torch.tensor([math.log(p) for p in PROBS])
# chi-square 0.999 quantiles by degrees of freedom: a correct sampler exceeds one for 1 seed in 1000; the
# seeds are fixed, so the test is deterministic. In 20,000 draws a token's share off by 0.02 alone adds
# (400^2) / (20000 p) = 8 / p >= 20 (p <= 0.4 here), before what the tokens that made up for it add
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


def expected(temperature: float, keep: set[int]) -> dict[int, float]:
    """p_i^(1/T) over the kept tokens, renormalised: the distribution a filtered draw must follow."""
    weights = {i: PROBS[i] ** (1 / temperature) for i in keep}
    total = sum(weights.values())
    return {i: w / total for i, w in weights.items()}


# (params, the tokens SGLang's filter keeps, worked out by hand on PROBS sorted: .40 .25 .15 .10 .07 .03)
CASES = [
    (SamplingParams(temperature=1.0), {0, 1, 2, 3, 4, 5}),
    (SamplingParams(temperature=0.7), {0, 1, 2, 3, 4, 5}),
    (SamplingParams(temperature=1.0, top_k=3), {2, 4, 5}),
    # mass before each sorted token: 0, .40, .65, .80: kept while it is <= top_p
    (SamplingParams(temperature=1.0, top_p=0.7), {2, 4, 5}),
    # kept while p >= 0.2 * 0.40 = 0.08
    (SamplingParams(temperature=1.0, min_p=0.2), {2, 4, 5, 0}),
    # at T=2 the probabilities go as sqrt(p): .632 .5 .387 .316 .265 .173 (over their sum); top_k=5 drops
    # the last, min_p=0.45 whatever is under 0.45 * .632 = .285
    (SamplingParams(temperature=2.0, top_k=5, min_p=0.45), {2, 4, 5, 0}),
]


def chi_square(counts: Counter[int], probs: dict[int, float], n: int) -> float:
    return sum((counts[i] - n * p) ** 2 / (n * p) for i, p in probs.items())


@pytest.mark.parametrize("params,keep", CASES)
def test_batched_draws_follow_the_filtered_distribution(params: SamplingParams, keep: set[int]) -> None:
    """20,000 rows, each with its own seeded generator, one batched call."""
    n = 20_000
    gens = [torch.Generator().manual_seed(i) for i in range(n)]
    _, ids, lps = sample_rows(LOGITS.expand(n, -1), [params] * n, gens, sampler="inverse_cdf")
    counts = Counter(ids)
    assert set(counts) <= keep  # a filtered-out token is never drawn
    probs = expected(params.temperature, keep)
    assert chi_square(counts, probs, n) < CHI2_999[len(keep) - 1], (counts, probs)
    # the recorded log-prob: log_softmax(logits / T) at the token, before filtering (hand computed)
    norm = math.log(sum(p ** (1 / params.temperature) for p in PROBS))
    for token, lp in list(zip(ids, lps))[:50]:
        assert lp == pytest.approx(math.log(PROBS[token]) / params.temperature - norm, abs=1e-5)


def test_tokens_across_search_blocks_follow_the_distribution() -> None:
    """The same six probabilities placed in a 2,500-id vocabulary at the edges of the sampler's 1,024-id
    search blocks (the last block partial), every other id at probability 0: never drawn."""
    positions = [5, 1023, 1024, 2047, 2048, 2499]
    logits = torch.full((2500,), float("-inf"))
    logits[positions] = LOGITS
    n = 20_000
    gens = [torch.Generator().manual_seed(i) for i in range(n)]
    _, ids, _ = sample_rows(logits.expand(n, -1), [SamplingParams(temperature=1.0)] * n, gens, sampler="inverse_cdf")
    counts = Counter(ids)
    assert set(counts) <= set(positions)
    probs = {pos: p for pos, p in zip(positions, PROBS)}
    assert chi_square(counts, probs, n) < CHI2_999[5], (counts, probs)


@pytest.mark.parametrize("params,keep", CASES[::2])
def test_one_generator_drawn_token_after_token_follows_the_distribution(params: SamplingParams,
                                                                          keep: set[int]) -> None:
    """The one-at-a-time path: successive draws from ONE generator, as a request's tokens are drawn."""
    n = 5_000
    gen = torch.Generator().manual_seed(7)
    counts = Counter(sample_token(LOGITS, params, gen, "inverse_cdf")[0] for _ in range(n))
    assert set(counts) <= keep
    assert chi_square(counts, expected(params.temperature, keep), n) < CHI2_999[len(keep) - 1]


def test_same_seed_same_tokens_and_the_draws_are_the_samplers_own() -> None:
    logits = torch.randn(4, 1000, generator=torch.Generator().manual_seed(3)) * 2
    params = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_p=0.9)] * 2

    def run(sampler: str, seed: int) -> list[int]:
        gens = [torch.Generator().manual_seed(seed + i) for i in range(4)]
        return [tok for _ in range(8) for tok in sample_rows(logits, params, gens, sampler=sampler)[1]]

    assert run("inverse_cdf", 0) == run("inverse_cdf", 0)
    assert run("inverse_cdf", 0) != run("inverse_cdf", 100)
    assert run("inverse_cdf", 0) != run("multinomial", 0)  # one uniform per row, not multinomial's draws


def test_non_finite_logits_are_refused() -> None:
    logits = torch.tensor([[0.0, float("nan"), 1.0]])
    with pytest.raises(EngineError, match="nan"):
        sample_rows(logits, [SamplingParams(temperature=1.0)], [torch.Generator().manual_seed(0)],
                    sampler="inverse_cdf")


def test_an_unknown_sampler_is_refused(tiny_model_dir: Path) -> None:
    for call in (lambda: HFEngine.from_dir(tiny_model_dir, device="cpu", sampler="gumbel"),
                 lambda: make_engine(f"hf:{tiny_model_dir}", device="cpu", sampler="gumbel"),
                 lambda: sample_token(LOGITS, SamplingParams(), None, "gumbel"),
                 lambda: sample_rows(LOGITS.unsqueeze(0), [SamplingParams()], [None], sampler="gumbel")):
        with pytest.raises(ConfigError) as info:
            call()
        message = str(info.value)
        assert "sampler='gumbel'" in message and "'multinomial'" in message and "'inverse_cdf'" in message


def test_the_default_sampler_is_multinomial(tiny_engine: HFEngine) -> None:
    assert tiny_engine.sampler == "multinomial"
    gen = torch.Generator().manual_seed(5)
    picks = [sample_token(LOGITS, SamplingParams(top_k=4), gen)[0] for _ in range(20)]
    gen = torch.Generator().manual_seed(5)
    sorted_probs, order = torch.log_softmax(LOGITS, -1).exp().sort(descending=True)
    sorted_probs[4:] = 0.0
    assert picks == [int(order[torch.multinomial(sorted_probs, 1, generator=gen)]) for _ in range(20)]


@pytest.mark.parametrize("sampler", ["multinomial", "inverse_cdf"])
async def test_batched_and_one_at_a_time_engines_agree(tiny_model_dir: Path, sampler: str) -> None:
    """The same seeded requests through both of HFEngine's ways, one model: the same tokens, and log-probs
    equal up to the batched forward's float rounding.

    No top_p here: the tiny random model's next-token distribution is nearly flat, so a top_p=0.9 cut sorts
    ~100K near-equal probabilities, and the batched forward's rounding (1e-7) reorders neighbours; either
    sampler then draws another token from the same distribution. Identical logits give identical picks
    with every filter (tests/engines/test_batching.py::test_sample_rows_draws_as_sample_token)."""
    serial = HFEngine.from_dir(tiny_model_dir, device="cpu", batching=False, sampler=sampler)
    batched = HFEngine(serial.model, serial.tokenizer, device="cpu", batching=True, sampler=sampler)
    tok = serial.tokenizer
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                                  add_generation_prompt=True), add_special_tokens=False)
               for t in ("Hi.", "Tell me about rivers and the sea, please.", "x", "Count: one two three four.")]
    settings = [SamplingParams(temperature=1.0, max_new_tokens=12, ignore_eos=True, sampling_seed=1),
                SamplingParams(temperature=0.7, max_new_tokens=10, sampling_seed=2),
                SamplingParams(temperature=1.3, top_k=20, min_p=0.01, max_new_tokens=8, sampling_seed=3),
                SamplingParams(temperature=0.0, max_new_tokens=6)]
    one = await asyncio.gather(*(serial.generate(p, s) for p, s in zip(prompts, settings)))
    many = await asyncio.gather(*(batched.generate(p, s) for p, s in zip(prompts, settings)))
    assert batched.batcher.stats.max_rows >= 2
    for a, b in zip(one, many):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


@pytest.mark.parametrize("batching", [False, True])
async def test_inverse_cdf_records_each_tokens_own_log_prob_as_plain_transformers_scores_it(
        tiny_model_dir: Path, batching: bool) -> None:
    """Invariant 1 under inverse_cdf: every recorded log-prob is log_softmax(logits / T) of the plain
    transformers forward over the prompt and the tokens before it, at the id the engine returned."""
    engine = HFEngine.from_dir(tiny_model_dir, device="cpu", batching=batching, sampler="inverse_cdf")
    prompts = [[151644, 872, 198, 9707, 13], [151644, 872, 198, 40, 1075, 14796, 323, 279, 9396, 13]]
    settings = [SamplingParams(temperature=0.8, max_new_tokens=9, ignore_eos=True, sampling_seed=4),
                SamplingParams(temperature=1.2, top_k=50, max_new_tokens=7, ignore_eos=True, sampling_seed=5)]
    outs = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, settings)))
    for prompt, params, out in zip(prompts, settings, outs):
        assert len(out.token_ids) == params.max_new_tokens
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = engine.model(input_ids=ids).logits[0].float() / params.temperature
        expected = torch.log_softmax(logits, -1)[len(prompt) - 1:-1].gather(
            1, torch.tensor(out.token_ids).unsqueeze(1)).squeeze(1)
        assert out.logprobs == pytest.approx(expected.tolist(), abs=1e-4)

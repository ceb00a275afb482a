"""Token sampling in SGLang's convention, shared by both of HFEngine's ways to run requests.

A sampled token's log-prob is log_softmax(logits / temperature) at that token, in float32, before
top-k/top-p/min-p filtering (at temperature ~0: greedy, unscaled log_softmax). `GenerationRequest` is one
generation in flight, as the one-at-a-time path (`agentgraphs.engines.hf`) and the batch driver
(`agentgraphs.engines.batching`) both hold it.

Two ways to draw a sampled row's token from its (filtered) probabilities, each from the row's own generator
(`SAMPLERS`; HFEngine's `sampler` option picks one for both of its paths):
- "multinomial" (the default): `torch.multinomial`, one exponential draw per vocabulary entry;
- "inverse_cdf": ONE uniform u per row; the token is the first index whose cumulative probability exceeds
  u * total (total: the row's cumulative sum's last value, so rounding in the sum cannot bias the top
  end). The sum and u are float64: a float32 running sum (units of ~6e-8 near 1) would give each token
  of a 152K-id tail a width of zero or whole units, not its probability. The search runs in two levels:
  the masses of blocks of `BLOCK` ids (each summed in the probabilities' dtype, so to their own rounding,
  ~1e-7 relative in float32; cumulated in float64), then the float64 running sum of the chosen block's
  ids: one fast reduction over the vocabulary instead of a slow float64 running sum over all of it.
  Tokens of zero probability (filtered out) have no width and are never picked. The same exact
  distribution as "multinomial", other draws (seeded results differ between the two, not within one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, EngineError
from .base import FinishReason, SamplingParams

if TYPE_CHECKING:
    import torch


# SGLang samples greedily (and reports unscaled log-probs) below this temperature
GREEDY_BELOW = 1e-6

# how a sampled row draws its token (see the module docstring); the first is the default
SAMPLERS = ("multinomial", "inverse_cdf")
DEFAULT_SAMPLER = SAMPLERS[0]
# inverse_cdf searches the mass of blocks of this many ids, then the ids of the chosen block
BLOCK = 1024


def check_sampler(sampler: object) -> str:
    """`sampler` if it names one of SAMPLERS, else a ConfigError naming the field and the choices.

    >>> check_sampler("inverse_cdf")
    'inverse_cdf'
    """
    if sampler not in SAMPLERS:
        raise ConfigError(f"sampler={sampler!r} is not a sampler; choose one of {', '.join(map(repr, SAMPLERS))} "
                          f"(default {DEFAULT_SAMPLER!r})")
    return str(sampler)


def draw(probs: "torch.Tensor", generators: list[Any], sampler: str = DEFAULT_SAMPLER) -> "torch.Tensor":
    """One index per row of a [rows, n] tensor of (unnormalised, filtered) probabilities, row i drawing from
    `generators[i]` (None: torch's default generator) with `sampler` (see the module docstring).

    >>> import torch
    >>> draw(torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]), [None, None], "inverse_cdf").tolist()
    [2, 1]
    """
    import torch

    if check_sampler(sampler) == "multinomial":
        return torch.cat([torch.multinomial(probs[j], 1, generator=g) for j, g in enumerate(generators)])
    rows, n = probs.shape
    whole = n // BLOCK * BLOCK
    # the mass of each block of BLOCK ids (the last one partial): a reduction in the probabilities' own
    # dtype (fast; a float64 pass over the vocabulary costs several times more on CPU), exact to that
    # dtype's rounding, i.e. to the precision the probabilities have anyway; summed over blocks in float64
    blocks = probs[:, :whole].reshape(rows, whole // BLOCK, BLOCK).sum(dim=-1)
    if whole < n:
        blocks = torch.cat([blocks, probs[:, whole:].sum(dim=-1, keepdim=True)], dim=1)
    blocks = blocks.double()
    before_block = blocks.cumsum(dim=-1)
    total = before_block[:, -1:].contiguous()
    if not bool(torch.isfinite(total).all() and (total > 0).all()):
        raise EngineError(f"inverse_cdf sampling: a row's probabilities sum to {total.flatten().tolist()} (nan, inf "
                          "or no mass): the logits hold nan/inf; check the model's dtype and inputs")
    # one uniform per row, drawn on its generator's device (that is what keeps a seed's draws its own)
    u = torch.cat([torch.rand(1, dtype=torch.float64, generator=g, device=g.device if g is not None else probs.device)
                   .to(probs.device) for g in generators]).unsqueeze(1)
    target = u * total
    block = _first_above(before_block, target)
    start = before_block.gather(1, block) - blocks.gather(1, block)  # the mass before the chosen block
    columns = block * BLOCK + torch.arange(BLOCK, device=probs.device)
    inside = probs.gather(1, columns.clamp(max=n - 1)).masked_fill(columns >= n, 0.0)
    return (columns.gather(1, _first_above(inside.cumsum(dim=-1, dtype=torch.float64), target - start))).squeeze(1)


def _first_above(cumulative: "torch.Tensor", target: "torch.Tensor") -> "torch.Tensor":
    """Per row, the first index whose cumulative sum exceeds `target` ([rows, 1]), or, where rounding puts
    `target` at or past the row's total, the first index where the sum reaches its total: the last one of
    non-zero width. A zero-probability entry adds nothing to the sum, so neither search lands on one."""
    import torch

    above = torch.searchsorted(cumulative, target, right=True)
    last = torch.searchsorted(cumulative, cumulative[:, -1:].contiguous(), right=False)
    return torch.minimum(above, last)


def sample_token(
    logits: "torch.Tensor", params: SamplingParams, generator: "torch.Generator | None" = None,
    sampler: str = DEFAULT_SAMPLER,
) -> tuple[int, float]:
    """Pick the next token from one row of logits; return (token id, its log-prob). `sampler`: one of SAMPLERS.

    >>> import torch
    >>> sample_token(torch.tensor([0.0, 2.0, 1.0]), SamplingParams(temperature=0))[0]
    1
    >>> sample_token(torch.tensor([0.0, 9.0, 1.0]), SamplingParams(top_k=1), sampler="inverse_cdf")[0]
    1
    """
    import torch

    check_sampler(sampler)

    logits = logits.float()
    if params.temperature < GREEDY_BELOW or params.top_k == 1:
        # SGLang turns temperature ~0 into top_k=1 at temperature 1, so the log-prob is unscaled.
        temperature = 1.0 if params.temperature < GREEDY_BELOW else params.temperature
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        token = int(torch.argmax(logits))
        return token, float(logprobs[token])
    logprobs = torch.log_softmax(logits / params.temperature, dim=-1)
    probs = logprobs.exp()
    if params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0:
        # The filter SGLang's torch fallback applies: on probabilities sorted high to low.
        sorted_probs, order = probs.sort(descending=True)
        if params.top_k > 0:
            sorted_probs[params.top_k:] = 0.0
        cumulative = sorted_probs.cumsum(dim=-1)
        sorted_probs[(cumulative - sorted_probs) > params.top_p] = 0.0
        if params.min_p > 0.0:
            sorted_probs[sorted_probs < sorted_probs[0] * params.min_p] = 0.0
        token = int(order[draw(sorted_probs.unsqueeze(0), [generator], sampler)[0]])
    else:
        token = int(draw(probs.unsqueeze(0), [generator], sampler)[0])
    return token, float(logprobs[token])


def sample_rows(
    logits: "torch.Tensor", params: list[SamplingParams], generators: list[Any], sampler: str = DEFAULT_SAMPLER
) -> tuple["torch.Tensor", list[int], list[float]]:
    """`sample_token` for every row of a [rows, vocab] logits batch: (ids on the device, ids, log-probs).

    Row i follows `params[i]` and draws from `generators[i]` with the same rules and `sampler` as
    `sample_token` (the greedy rule, log_softmax(logits / T) in float32 before filtering, SGLang's
    top-k/top-p/min-p filter on sorted probabilities); the softmax, sort and filter run once for all rows,
    the draw once per row ("multinomial") or once for all rows from one uniform per row ("inverse_cdf").

    >>> import torch
    >>> sample_rows(torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]]), [SamplingParams(temperature=0)] * 2, [None] * 2)[1]
    [1, 0]
    """
    import torch

    check_sampler(sampler)
    logits = logits.float()
    rows, vocab = logits.shape
    device = logits.device
    greedy = [p.temperature < GREEDY_BELOW or p.top_k == 1 for p in params]
    temps = torch.tensor([1.0 if p.temperature < GREEDY_BELOW else p.temperature for p in params],
                         dtype=torch.float32, device=device)
    logprobs = torch.log_softmax(logits / temps.unsqueeze(1), dim=-1)
    tokens = torch.argmax(logits, dim=-1)  # the greedy rows' answer; sampled rows are overwritten below
    drawn = [i for i in range(rows) if not greedy[i]]
    if drawn:
        filtered = [i for i in drawn if params[i].top_k > 0 or params[i].top_p < 1.0 or params[i].min_p > 0.0]
        plain = [i for i in drawn if i not in filtered]
        picks: dict[int, Any] = {}
        if plain:
            plain_picks = draw(logprobs[plain].exp(), [generators[i] for i in plain], sampler)
            picks.update(zip(plain, plain_picks.split(1)))
        if filtered:
            sorted_probs, order = logprobs[filtered].exp().sort(dim=-1, descending=True)
            ranks = torch.arange(vocab, device=device).unsqueeze(0)
            top_k = torch.tensor([params[i].top_k if params[i].top_k > 0 else vocab for i in filtered], device=device)
            top_p = torch.tensor([params[i].top_p for i in filtered], dtype=torch.float32, device=device)
            min_p = torch.tensor([params[i].min_p for i in filtered], dtype=torch.float32, device=device)
            sorted_probs = sorted_probs.masked_fill(ranks >= top_k.unsqueeze(1), 0.0)
            cumulative = sorted_probs.cumsum(dim=-1)
            sorted_probs = sorted_probs.masked_fill((cumulative - sorted_probs) > top_p.unsqueeze(1), 0.0)
            sorted_probs = sorted_probs.masked_fill(sorted_probs < sorted_probs[:, :1] * min_p.unsqueeze(1), 0.0)
            ranked = draw(sorted_probs, [generators[i] for i in filtered], sampler)
            picks.update(zip(filtered, order.gather(1, ranked.unsqueeze(1)).squeeze(1).split(1)))
        index = torch.tensor(drawn, device=device)
        tokens = tokens.index_put((index,), torch.cat([picks[i] for i in drawn]))
    chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, tokens.tolist(), chosen.tolist()


@dataclass
class GenerationRequest:
    """One generation in flight: its cache, RNG and outputs. Touched only under the engine lock
    (`cancelled` excepted: the caller sets it, the batch driver reads it between steps)."""

    prompt_ids: list[int]
    params: SamplingParams
    generator: Any
    stop_ids: frozenset[int]
    cache: Any = None
    logits: Any = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    matched: int | str | None = None
    cancelled: bool = False

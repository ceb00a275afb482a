"""Token sampling in SGLang's convention, shared by both of HFEngine's ways to run requests.

A sampled token's log-prob is log_softmax(logits / temperature) at that token, in float32, before
top-k/top-p/min-p filtering (at temperature ~0: greedy, unscaled log_softmax). `GenerationRequest` is one
generation in flight, as the one-at-a-time path (`agentgraphs.engines.hf`) and the batch driver
(`agentgraphs.engines.batching`) both hold it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .base import FinishReason, SamplingParams

if TYPE_CHECKING:
    import torch


# SGLang samples greedily (and reports unscaled log-probs) below this temperature
GREEDY_BELOW = 1e-6


def sample_token(
    logits: "torch.Tensor", params: SamplingParams, generator: "torch.Generator | None" = None
) -> tuple[int, float]:
    """Pick the next token from one row of logits; return (token id, its log-prob).

    >>> import torch
    >>> sample_token(torch.tensor([0.0, 2.0, 1.0]), SamplingParams(temperature=0))[0]
    1
    """
    import torch

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
        token = int(order[torch.multinomial(sorted_probs, 1, generator=generator)])
    else:
        token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logprobs[token])


def sample_rows(
    logits: "torch.Tensor", params: list[SamplingParams], generators: list[Any]
) -> tuple["torch.Tensor", list[int], list[float]]:
    """`sample_token` for every row of a [rows, vocab] logits batch: (ids on the device, ids, log-probs).

    Row i follows `params[i]` and draws from `generators[i]` with the same rules as `sample_token` (the
    greedy rule, log_softmax(logits / T) in float32 before filtering, SGLang's top-k/top-p/min-p filter on
    sorted probabilities); the softmax, sort and filter run once for all rows, the draw once per row.

    >>> import torch
    >>> sample_rows(torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]]), [SamplingParams(temperature=0)] * 2, [None] * 2)[1]
    [1, 0]
    """
    import torch

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
            probs = logprobs[plain].exp()
            for j, i in enumerate(plain):
                picks[i] = torch.multinomial(probs[j], 1, generator=generators[i])
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
            for j, i in enumerate(filtered):
                picks[i] = order[j][torch.multinomial(sorted_probs[j], 1, generator=generators[i])]
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

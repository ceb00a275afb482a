"""The seed's own row format (Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/), run as the seed runs it.

A seed-format row carries, in its metadata (slime's --tool-key copies the row's top-level `tools` there;
rollout.py:40-41 reads them from sample.metadata):

    tools               the orchestrator's tool list, given to the chat template as it is (orchestra_solver.py
                        :115-116, prompt_builder.py:115, :371 `tools if tools else None`: an empty list offers none);
    model_mapping       {expert name the orchestrator chooses: model name} (tools/expert_caller/tool.py:159-179);
                        the model is called through the run's engine of that name (agentgraph_engines /
                        --helper MODEL=ENGINE), checked before the row generates (`row_engines`);
    tool_pricing        {model name: {"input_tokens_per_million": p, "output_tokens_per_million": q}};
    trained_model_type  the model whose price the orchestrator's own tokens pay (else the cheapest).

The cost of a rollout of such a row is the seed's number (reward.py:299-328, `seed_cost`): each orchestrator
turn's prompt and output tokens at the orchestrator's price, each expert call's input and output tokens at
the price of the model its expert name maps to, each token times the price AS GIVEN (the seed does not divide
by a million: its rows give per-token prices, 6e-07 for $0.6 per million), a missing price counting 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from typing_extensions import NotRequired, TypedDict

from ..errors import InputError
from .options import TOOLS

__all__ = ["SEED_FIELDS", "SeedRow", "orchestrator_pricing", "row_engines", "seed_cost", "seed_row"]

SEED_FIELDS = ("tools", "model_mapping", "tool_pricing", "trained_model_type")
_PRICE_KEYS = ("input_tokens_per_million", "output_tokens_per_million")


class SeedRow(TypedDict):
    """A seed-format row's own settings, checked (JSON primitives: it travels in the graph's state)."""

    tools: list[dict[str, Any]]
    model_mapping: dict[str, str]
    tool_pricing: dict[str, dict[str, float]]
    trained_model_type: NotRequired[str]


def seed_row(metadata: Mapping[str, Any]) -> SeedRow | None:
    """The row's seed settings, or None when it carries none of SEED_FIELDS (it runs with the options).
    InputError names the field and the fix for a row the seed could not run either, or this graph cannot.

    >>> seed_row({"category": "qa"}) is None
    True
    >>> tools = [{"type": "function", "function": {"name": "answer", "parameters": {}}}]
    >>> row = seed_row({"tools": tools, "model_mapping": {"answer-1": "Qwen/Qwen3-32B"}})
    >>> row["model_mapping"], row["tool_pricing"]
    ({'answer-1': 'Qwen/Qwen3-32B'}, {})
    >>> try:
    ...     seed_row({"tools": [{"type": "function", "function": {"name": "call_expert"}}], "model_mapping": {}})
    ... except InputError as exc:
    ...     print(exc.field)
    metadata.tools[0]
    """
    if not any(metadata.get(k) is not None for k in SEED_FIELDS):
        return None
    row = SeedRow(tools=_tools(metadata.get("tools")), model_mapping=_mapping(metadata.get("model_mapping")),
                  tool_pricing=_pricing(metadata.get("tool_pricing")))
    model = metadata.get("trained_model_type")
    if model is not None:
        if not isinstance(model, str):
            raise InputError("metadata.trained_model_type", f"expected a model name, got {model!r:.80}",
                             "give the name of a model in tool_pricing, or drop the field (the cheapest's price)")
        row["trained_model_type"] = model
    return row


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        raise InputError("metadata.tools", "missing from a seed-format row (it carries model_mapping, tool_pricing "
                         "or trained_model_type): the seed's rows give their tool list at the top level, which "
                         "slime copies into the metadata only when launched with --tool-key tools",
                         "launch slime with --tool-key tools (for `agentgraphs run`, move `tools` into the row's "
                         "metadata); give [] to offer the orchestrator no tools")
    if isinstance(tools, Mapping):  # the seed takes one tool given alone as a list of it (prompt_builder.py:23-32)
        tools = [tools]
    if not isinstance(tools, list):
        raise InputError("metadata.tools", f"expected a list of tool definitions, got {tools!r:.80}",
                         "give the tools as a list of OpenAI function definitions ([] offers none)")
    out = []
    for i, tool in enumerate(tools):
        spec = tool.get("function", tool) if isinstance(tool, Mapping) else None
        name = spec.get("name") if isinstance(spec, Mapping) else None
        if name not in TOOLS:
            raise InputError(f"metadata.tools[{i}]", f"the tool {name!r:.80} is not one this QA graph can run "
                             f"({', '.join(TOOLS)})",
                             "drop it from the row's tools (a tau^2 task's call_expert runs with the "
                             "toolorchestra-tau2 spec), or give it as {\"type\": \"function\", \"function\": "
                             "{\"name\": ..., ...}} with one of those names")
        out.append(dict(tool))
    return out


def _mapping(mapping: Any) -> dict[str, str]:
    if mapping is None:
        raise InputError("metadata.model_mapping", "missing from a seed-format row: the seed calls the model it "
                         "maps the chosen expert name to, and finds none without it",
                         "give {expert name: model name} for every expert the row's tools offer")
    if not isinstance(mapping, Mapping) or not mapping or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in mapping.items()):
        raise InputError("metadata.model_mapping", f"expected a non-empty mapping of expert name -> model name, "
                         f"got {mapping!r:.80}", "give {expert name: model name}, e.g. {\"answer-1\": "
                         "\"Qwen/Qwen3-32B\"}")
    return dict(mapping)


def _pricing(pricing: Any) -> dict[str, dict[str, float]]:
    if pricing is None:  # the seed's default (reward.py:405): every price 0
        return {}
    fix = ("give {model name: {\"input_tokens_per_million\": p, \"output_tokens_per_million\": q}} with numbers "
           ">= 0, or drop 'tool_pricing' (every price 0, as the seed)")
    if not isinstance(pricing, Mapping):
        raise InputError("metadata.tool_pricing", f"expected a mapping, got {pricing!r:.80}", fix)
    out: dict[str, dict[str, float]] = {}
    for model, prices in pricing.items():
        if not isinstance(prices, Mapping) or not all(
                _price(prices[k]) for k in _PRICE_KEYS if k in prices):
            raise InputError(f"metadata.tool_pricing.{model}", f"expected prices, got {prices!r:.80}", fix)
        out[str(model)] = {k: float(prices[k]) for k in _PRICE_KEYS if k in prices}
    return out


def _price(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def row_engines(row: SeedRow) -> dict[str, str]:
    """{field: engine name} of every model the row maps an expert to: the run must serve each under its name.

    >>> row_engines({"tools": [], "model_mapping": {"answer-1": "Qwen/Qwen3-32B"}, "tool_pricing": {}})
    {'metadata.model_mapping.answer-1': 'Qwen/Qwen3-32B'}
    """
    return {f"metadata.model_mapping.{name}": model for name, model in row["model_mapping"].items()}


def orchestrator_pricing(row: Mapping[str, Any]) -> tuple[float, float]:
    """(input, output) price of the orchestrator's tokens (reward.py:259-273, 303-307): trained_model_type's
    entry of tool_pricing when it has a non-empty one, else the entry with the least input + output price
    (the first of equals), else nothing (0, 0).

    >>> pricing = {"a": {"input_tokens_per_million": 2e-7, "output_tokens_per_million": 4e-7},
    ...            "b": {"input_tokens_per_million": 1e-7, "output_tokens_per_million": 5e-7}}
    >>> orchestrator_pricing({"tool_pricing": pricing}), orchestrator_pricing({"tool_pricing": pricing,
    ...                                                                         "trained_model_type": "b"})
    ((2e-07, 4e-07), (1e-07, 5e-07))
    """
    pricing = row.get("tool_pricing") or {}
    own = pricing.get(row.get("trained_model_type") or "", {})
    if not own:
        cheapest = math.inf
        for prices in pricing.values():
            total = prices.get(_PRICE_KEYS[0], 0) + prices.get(_PRICE_KEYS[1], 0)
            if total < cheapest:
                cheapest, own = total, prices
    return float(own.get(_PRICE_KEYS[0], 0)), float(own.get(_PRICE_KEYS[1], 0))


def seed_cost(row: Mapping[str, Any], orchestrator_tokens: tuple[int, int] | list[int],
              expert_tokens: Mapping[str, tuple[int, int] | list[int]], *, orchestrator: bool = True) -> float:
    """The seed's total_cost (reward.py:299-328) of one rollout: the orchestrator's (prompt, output) tokens of
    all its turns at `orchestrator_pricing`, and per expert name the (input, output) tokens of its calls at
    the price of the model the row maps it to (an unmapped name or unpriced model: 0); tokens times the price
    as the row gives it. `orchestrator=False` leaves out the orchestrator's part (option
    cost_counts_orchestrator: false).

    >>> row = {"model_mapping": {"answer-1": "big"}, "trained_model_type": "small",
    ...        "tool_pricing": {"big": {"input_tokens_per_million": 6e-7, "output_tokens_per_million": 1.2e-6},
    ...                         "small": {"input_tokens_per_million": 1e-7, "output_tokens_per_million": 1e-7}}}
    >>> round(seed_cost(row, (1000, 50), {"answer-1": (300, 20)}), 12)  # 1050 * 1e-7 + 300 * 6e-7 + 20 * 1.2e-6
    0.000309
    """
    total = 0.0
    if orchestrator:
        p_in, p_out = orchestrator_pricing(row)
        total += orchestrator_tokens[0] * p_in + orchestrator_tokens[1] * p_out
    pricing, mapping = row.get("tool_pricing") or {}, row.get("model_mapping") or {}
    for name, (n_in, n_out) in sorted(expert_tokens.items()):
        prices = pricing.get(mapping.get(name, ""), {})
        total += n_in * prices.get(_PRICE_KEYS[0], 0) + n_out * prices.get(_PRICE_KEYS[1], 0)
    return total

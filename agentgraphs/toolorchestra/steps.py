"""What every ToolOrchestra tool node shares, whichever `tool_protocol` runs it: the expert the last
orchestrator turn chose, the sampling of an expert call, the circuit breaker, and closing the turn's Step."""

from __future__ import annotations

from typing import Any

from .options import Step, ToolOrchestraOptions, ToolOrchestraState

__all__ = ["breaker_error", "chosen_expert", "expert_sampling", "finish_step"]


def chosen_expert(state: ToolOrchestraState) -> tuple[str, str]:
    """(the expert name the last orchestrator turn chose, the engine that serves it): a seed-format row maps
    the name to its model, served under that model's name; otherwise the name is the engine's."""
    name = (state.get("steps") or [])[-1]["model"]
    row = state.get("seed_row")
    return name, (row["model_mapping"][name] if row is not None else name)


def expert_sampling(opts: ToolOrchestraOptions) -> dict[str, Any]:
    """call_llm's sampling keywords of an expert call: its token cap, its temperature when set, and what they
    apply to (`expert_sampling_base`: the server's defaults in the seed, the run's sampling in the original).

    >>> expert_sampling(ToolOrchestraOptions())
    {'sampling_base': 'server', 'max_new_tokens': 8192, 'temperature': 0.7}
    >>> expert_sampling(ToolOrchestraOptions(variant="original"))
    {'sampling_base': 'context', 'max_new_tokens': 2048}
    """
    sampling: dict[str, Any] = {"sampling_base": opts.expert_sampling_base,
                                "max_new_tokens": opts.expert_max_new_tokens}
    if opts.expert_temperature is not None:
        sampling["temperature"] = opts.expert_temperature
    return sampling


def finish_step(state: ToolOrchestraState, tokens: tuple[int, int], latency_s: float, error: str | None
                ) -> list[Step]:
    """The steps with the last one closed: the expert's (input, output) tokens, the tool's latency, its error."""
    steps = [dict(s) for s in (state.get("steps") or [])]
    last = steps[-1]
    last["expert_input_tokens"], last["expert_output_tokens"] = tokens
    last["expert_tokens"] = tokens[0] + tokens[1]
    last["latency_s"] = round(latency_s, 4)
    if error is not None:
        last["ok"] = False
        last["error"] = error
    return steps  # type: ignore[return-value]


def breaker_error(state: ToolOrchestraState, opts: ToolOrchestraOptions) -> str | None:
    """Why the tool is skipped when the seed's circuit breaker is open (orchestra_solver.py:469-480), else None.
    The seed counts consecutive tool results carrying the expert's error; in QA only enhance_reasoning's can
    (its search falls back to the question, its answer ends the episode), and any other tool that runs resets
    the count; a skipped tool leaves it as it is."""
    limit = opts.expert_circuit_breaker
    failures = state.get("expert_failures", 0)
    if limit is None or failures < limit:
        return None
    return f"expert circuit breaker open: {failures} consecutive failed enhance_reasoning experts"

"""ToolOrchestra's AgentSpec: slime row -> graph input, the episode's summary; the reward is in `reward.py`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InputError
from ..row_fields import question_input
from ..spec import AgentSpec, RolloutInput, register
from .data import row_eid, row_preference
from .graph import build_graph
from .options import TOOLS, ToolOrchestraOptions, named_engines
from .reward import metrics, reward, reward_shaping
from .seed_rows import row_engines, seed_row
from .seed_tools import seed_transcript


def make_input(row: RolloutInput, options: ToolOrchestraOptions) -> dict[str, Any]:
    """The graph's input; a seed row's pref_vec becomes the rollout's preference, its tools, model_mapping and
    prices its `seed_row` (`seed_rows`), its non-empty eid (a seed row without one: its id) the example its
    searches are filtered to (`search`), and a seed field the graph cannot honour refuses the row (InputError:
    `data.row_preference`)."""
    metadata = row.get("metadata") or {}
    # the seed writes the problem into its prompts as the row gives it, surrounding whitespace and all (rollout.py:60)
    problem = question_input(row, strip=options.tool_protocol != "seed")
    state: dict[str, Any] = {"problem": problem, "turns": [], "notes": [], "steps": []}
    preference = row_preference(metadata, options)
    if preference is not None:
        state["preference"] = preference
    seed = seed_row(metadata)
    if seed is not None:
        state["seed_row"] = dict(seed)
    eid = row_eid(metadata, seed_format=seed is not None)
    if eid is not None:
        state["eid"] = eid
    return state


def engines_of_row(row: RolloutInput, options: ToolOrchestraOptions) -> dict[str, str]:
    """{field: engine name} of the models a seed-format row maps its experts to (`AgentSpec.row_engines`): a
    row naming one the run does not serve fails before it generates. A row the graph refuses names none
    (make_input says why)."""
    try:
        seed = seed_row(row.get("metadata") or {})
    except InputError:
        return {}
    return row_engines(seed) if seed is not None else {}


def reply_text_keys(options: ToolOrchestraOptions) -> dict[str, object]:
    """`tool_protocol: seed` puts each orchestrator turn back into its conversation as SGLang's text with
    slime's default skip_special_tokens=False (its `<|im_end|>` kept: orchestra_solver.py:130, 392 with
    rollout.py:46-49's sampling params): another value is refused before the rollout."""
    return {"skip_special_tokens": False} if options.tool_protocol == "seed" else {}


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """The rollout's facts: for the cost-aware reward's features, its masking, and for reading a run."""
    steps = state.get("steps") or []
    tokens: dict[str, int] = {}
    io_tokens: dict[str, list[int]] = {}
    calls: dict[str, int] = {}
    for s in steps:
        model = s.get("model")
        if model:
            calls[model] = calls.get(model, 0) + 1
            tokens[model] = tokens.get(model, 0) + int(s.get("expert_tokens", 0))
            pair = io_tokens.setdefault(model, [0, 0])
            pair[0] += int(s.get("expert_input_tokens", 0))
            pair[1] += int(s.get("expert_output_tokens", 0))
    answered = bool(state.get("done")) and bool(str(state.get("answer", "")).strip())
    row = {"preference": dict(state["preference"])} if state.get("preference") is not None else {}
    seed = state.get("seed_row")
    if seed is not None:  # what the seed's cost reads (reward.features)
        row["seed_pricing"] = {k: seed[k] for k in ("model_mapping", "tool_pricing", "trained_model_type")
                               if k in seed}
    if state.get("answer", "") == "" and state.get("history") is not None:
        # tool_protocol seed: the text the seed scores in place of an empty answer (reward.scored_text)
        row["seed_transcript"] = seed_transcript(state["history"], steps)
    return {**row,
        "orchestrator_turns": len(steps),
        "format_invalid_turns": sum(1 for s in steps if not s["ok"] and not s.get("model")),
        "failed_tools": sum(1 for s in steps if not s["ok"] and s.get("model")),
        "tool_calls": {t: sum(1 for s in steps if s["tool"] == t and s.get("model")) for t in TOOLS},
        "expert_calls": calls,
        "expert_tokens": tokens,
        "expert_io_tokens": io_tokens,
        "orchestrator_tokens": [sum(int(s.get("orchestrator_input_tokens", 0)) for s in steps),
                                sum(int(s.get("orchestrator_output_tokens", 0)) for s in steps)],
        "latency_s": round(sum(float(s.get("latency_s", 0.0)) for s in steps), 4),
        "answered": answered,
        "ended": "answered" if state.get("done") else ("format_invalid" if state.get("stopped") else "max_turns"),
    }


SPEC = AgentSpec(
    name="toolorchestra",
    build_graph=build_graph,
    make_input=make_input,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    reward_shaping=reward_shaping,
    layout="per_turn",
    reward_split="broadcast",
    options=ToolOrchestraOptions,
    description="ToolOrchestra (QA): an orchestrator routes search / code / answer to expert models",
    named_engines=named_engines,  # every expert engine: refused before any rollout when the run lacks one
    reply_text_keys=reply_text_keys,  # slime's --rollout-skip-special-tokens under tool_protocol seed: refused
    row_engines=engines_of_row,  # a seed row's mapped models: the row fails before it generates without one
)
register(SPEC)  # `load_spec("toolorchestra")`, langgraph.json

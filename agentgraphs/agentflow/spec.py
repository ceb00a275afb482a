"""AgentFlow's AgentSpec: slime row -> graph input, the reward (`reward.py`: rule, judge), Flow-GRPO layout.

Flow-GRPO: the planner's turns are trained; `per_turn` makes each its own sequence (its prompt masked, its
response trained). `reward_split` (an option; the variant sets it) gives each sequence the trajectory's
normalised advantage (`broadcast`, the original) or that advantage divided by the trajectory's number of
trained sequences (`divide`, the seed); rl_bridge.convert normalises per prompt group, then divides.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..row_fields import question_input
from ..spec import AgentSpec, RolloutInput, register
from .graph import build_graph
from .options import AgentFlowOptions, named_engines
from .reward import metrics, reward


def make_input(row: RolloutInput, options: AgentFlowOptions) -> dict[str, Any]:
    """The graph's input; under `prompts: seed` the question is the row's prompt as given, unstripped, as the
    seed's prompts show it (rollout.py:115)."""
    return {"question": question_input(row, strip=options.prompts != "seed"), "turns": []}




def reply_text_keys(options: AgentFlowOptions) -> dict[str, object]:
    """The seed variant reads each reply as SGLang's text with slime's default skip_special_tokens=False (its
    `<|im_end|>` kept, core/llm_engine.py:67), and builds later prompts from it: another value is refused."""
    return {"skip_special_tokens": False} if options.prompts == "seed" else {}


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """Steps taken, why the loop stopped, the tools used (per step), and the helper calls that failed and were
    gone past (`helper_failure: seed`): `helper_failures` ({node, step, error} each) and their count.

    >>> summarize({"step": 2, "helper_failures": [{"node": "verify", "step": 2, "error": "EngineUnavailableError"}]})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'steps': 2, 'stop_reason': '', 'tools_used': [], 'helper_failure_count': 1,
     'helper_failures': [{'node': 'verify', 'step': 2, 'error': 'EngineUnavailableError'}]}
    """
    memory = state.get("memory") or []
    failures = [dict(f) for f in state.get("helper_failures") or []]
    return {"steps": int(state.get("step", 0)), "stop_reason": state.get("stop_reason", ""),
            "tools_used": [m.get("tool_name", "") for m in memory], "helper_failure_count": len(failures),
            "helper_failures": failures}


SPEC = AgentSpec(
    name="agentflow",
    build_graph=build_graph,
    make_input=make_input,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    layout="per_turn",
    reward_split="broadcast",
    options=AgentFlowOptions,
    named_engines=named_engines,  # a role engine the run lacks: refused before any rollout
    reply_text_keys=reply_text_keys,  # slime's --rollout-skip-special-tokens under the seed variant: refused
    description="AgentFlow: planner -> executor -> verifier with tools (python_coder in a sandbox); Flow-GRPO",
)
register(SPEC)  # `load_spec("agentflow")`, langgraph.json

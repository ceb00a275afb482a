"""AgentFlow (planner -> executor -> verifier, Flow-GRPO) as a LangGraph graph.

plan_next_step is trained (and the query analysis in the seed's variant, the default); command
generation, verification, the final output and the tools' own calls use role engines from the context.
Tools come from a registry users extend (`register_tool`); python_coder runs its code in
`agentgraphs.sandbox`. `variant: seed | original` selects the seed's training or the paper's.

>>> from agentgraphs.agentflow import SPEC
>>> seed, original = SPEC.resolve_options({}), SPEC.resolve_options({"variant": "original"})
>>> seed.max_steps, seed.reward_split, original.max_steps, original.reward_split, SPEC.layout
(5, 'divide', 3, 'broadcast', 'per_turn')
"""

from .graph import NODES, build_graph
from .options import AgentFlowOptions, AgentFlowState, role_engine
from .parsing import (
    NO_MATCHED_TOOL, NextStep, ToolCall, extract_command, parse_answer_tags, parse_command, parse_next_step,
    parse_verifier_conclusion,
)
from .reward import (
    boxed_exact_check, boxed_exact_reward, judge_reward, math_verify_reward, parse_judge_verdict, seed_prediction,
)
from .spec import SPEC, make_input
from .tools import BASE_GENERATOR, PYTHON_CODER, Tool, register_tool, registered_tools
from .variants import SOURCES, VARIANTS

__all__ = [
    "AgentFlowOptions", "AgentFlowState", "BASE_GENERATOR", "NODES", "NO_MATCHED_TOOL", "NextStep", "PYTHON_CODER",
    "SOURCES", "SPEC", "Tool", "ToolCall", "VARIANTS", "boxed_exact_check", "boxed_exact_reward",
    "build_graph", "extract_command", "judge_reward", "make_input", "seed_prediction",
    "math_verify_reward", "parse_answer_tags", "parse_command", "parse_judge_verdict", "parse_next_step",
    "parse_verifier_conclusion", "register_tool", "registered_tools", "role_engine",
]

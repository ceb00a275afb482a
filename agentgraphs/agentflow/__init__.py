"""AgentFlow (planner -> executor -> verifier, Flow-GRPO) as a LangGraph graph.

plan_next_step is the only trainable call; analysis, command generation, verification, the final
output and the tools' own calls use role engines from the context. Tools come from a registry users
extend (`register_tool`); python_coder runs its code in `agentgraphs.sandbox`.

>>> from agentgraphs.agentflow import SPEC
>>> SPEC.options().max_steps, SPEC.layout, SPEC.reward_split
(3, 'per_turn', 'broadcast')
"""

from .graph import NODES, AgentFlowOptions, AgentFlowState, build_graph, role_engine
from .parsing import (
    NO_MATCHED_TOOL, NextStep, ToolCall, extract_command, parse_answer_tags, parse_command, parse_next_step,
    parse_verifier_conclusion,
)
from .reward import judge_reward, math_verify_reward, parse_judge_verdict
from .spec import SPEC, answers_of, make_input, question_of
from .tools import BASE_GENERATOR, PYTHON_CODER, Tool, register_tool, registered_tools

__all__ = [
    "AgentFlowOptions", "AgentFlowState", "BASE_GENERATOR", "NODES", "NO_MATCHED_TOOL", "NextStep", "PYTHON_CODER",
    "SPEC", "Tool", "ToolCall", "answers_of", "build_graph", "extract_command", "judge_reward", "make_input",
    "math_verify_reward", "parse_answer_tags", "parse_command", "parse_judge_verdict", "parse_next_step",
    "parse_verifier_conclusion", "question_of", "register_tool", "registered_tools", "role_engine",
]

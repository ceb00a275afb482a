"""MemAgent: read a document of any length chunk by chunk into a fixed-size memory, then answer.

>>> from agentgraphs.memagent import SPEC
>>> SPEC.default_options().chunk_tokens
5000
"""

from .graph import MemAgentOptions, MemAgentState, build_graph, chunk_spans
from .prompts import FINAL_TEMPLATE, INITIAL_MEMORY, MEMORY_UPDATE_TEMPLATE
from ..row_fields import answers_of, question_of
from .reward import eval_metrics, memagent_reward
from .spec import SPEC, make_input

__all__ = [
    "FINAL_TEMPLATE",
    "INITIAL_MEMORY",
    "MEMORY_UPDATE_TEMPLATE",
    "MemAgentOptions",
    "MemAgentState",
    "SPEC",
    "answers_of",
    "build_graph",
    "chunk_spans",
    "eval_metrics",
    "make_input",
    "memagent_reward",
    "question_of",
]

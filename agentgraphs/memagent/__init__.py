"""MemAgent: read a document of any length chunk by chunk into a fixed-size memory, then answer.

`variant: seed | original` selects what the seed's code trains (the default) or the MemAgent paper's.

>>> from agentgraphs.memagent import SPEC
>>> seed, original = SPEC.resolve_options({}), SPEC.resolve_options({"variant": "original"})
>>> seed.chunk_tokens, seed.max_chunks, seed.truncation, seed.reward_split, seed.train_final_answer
(5000, 512, 'tail', 'divide', True)
>>> original.max_chunks, original.truncation, original.reward_split, original.train_final_answer
(8, 'middle', 'broadcast', True)
"""

from .graph import MemAgentOptions, MemAgentState, build_graph, chunk_spans
from .prompts import FINAL_TEMPLATE, INITIAL_MEMORY, MEMORY_UPDATE_TEMPLATE
from .reward import eval_metrics, memagent_reward
from .spec import SPEC, make_input
from .variants import SOURCES, VARIANTS

__all__ = [
    "FINAL_TEMPLATE",
    "INITIAL_MEMORY",
    "MEMORY_UPDATE_TEMPLATE",
    "MemAgentOptions",
    "MemAgentState",
    "SOURCES",
    "SPEC",
    "VARIANTS",
    "build_graph",
    "chunk_spans",
    "eval_metrics",
    "make_input",
    "memagent_reward",
]

"""ToolOrchestra (QA mode): a trained orchestrator picks a tool and an expert model each turn.

Tools: `search` (an expert writes a query for the retrieval service), `enhance_reasoning` (an expert
writes Python that runs), `answer` (an expert answers; the episode ends). Rewards: correctness, shaped
per group by cost, latency and tool use (agentgraphs.shaping "cost_aware") in the converter.

>>> from agentgraphs.toolorchestra import SPEC
>>> opts = SPEC.default_options()
>>> opts.max_turns, opts.eval_max_turns, SPEC.layout
(30, 50, 'per_turn')
"""

from .graph import DEFAULT_OPTIONS, TOOLS, ToolOrchestraOptions, ToolOrchestraState, build_graph
from .parsing import Choice, parse_choice
from .spec import SPEC, answers_of, features, make_input, problem_of

__all__ = ["Choice", "DEFAULT_OPTIONS", "SPEC", "TOOLS", "ToolOrchestraOptions", "ToolOrchestraState", "answers_of", "build_graph",
           "features", "make_input", "parse_choice", "problem_of"]

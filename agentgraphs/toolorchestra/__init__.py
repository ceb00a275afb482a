"""ToolOrchestra: a trained orchestrator routes work to tools and expert models, each turn.

QA mode (this package's SPEC, `toolorchestra`). Tools: `search` (an expert writes a query for the retrieval
service), `enhance_reasoning` (an expert reasons in text, as the seed; or writes Python that runs in the sandbox,
as the original: option `tool_protocol`), `answer` (an expert answers; the episode ends). Rewards: correctness, shaped
per group by cost, latency and tool use (agentgraphs.shaping "cost_aware") in the converter. The option
`variant` (`seed`, the default, or `original`) presets what the seed reproduction and the paper do differently.
tau^2 mode (`agentgraphs.toolorchestra.tau2`, spec `toolorchestra-tau2`; the `tau2` extra) drives the real
tau^2-bench: the orchestrator is the agent, scored by tau^2's own evaluator.

>>> from agentgraphs.toolorchestra import SPEC
>>> opts = SPEC.default_options()  # the seed's variant
>>> opts.variant, opts.max_turns, opts.invalid_call, SPEC.layout
('seed', 12, 'end', 'per_turn')
>>> SPEC.resolve_options({"variant": "original"}).max_turns
30
"""

from .graph import build_graph
from .options import TOOLS, ToolOrchestraOptions, ToolOrchestraState
from .parsing import Choice, parse_choice
from .reward import features
from .spec import SPEC, make_input

__all__ = ["Choice", "SPEC", "TOOLS", "ToolOrchestraOptions", "ToolOrchestraState", "build_graph",
           "features", "make_input", "parse_choice"]

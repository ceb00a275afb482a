"""agentgraphs examples: a new agent in one file (`new_agent.py`) and per-method launch material.

The package exists so slime can load an example agent by dotted path from the repository root
(`agentgraph: examples.new_agent:SPEC`). slime's own checkout also has a package named `examples`;
the docstring of `new_agent.py` says when that matters and how to sidestep it.
"""

"""`python -m agentgraphs.cli`: the `agentgraphs` command line."""

from . import main

main()

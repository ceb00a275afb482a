"""`python -m agentgraphs.cli`: the `agentgraphs` command line."""

from . import main

if __name__ == "__main__":
    main()

"""Moved to `agentgraphs.engines.hf`; this name stays for code that imported it."""

from .engines.hf import *  # noqa: F401,F403

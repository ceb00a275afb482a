"""Moved to `agentgraphs.engines.sglang`; this name stays for code that imported it."""

from .engines.sglang import *  # noqa: F401,F403

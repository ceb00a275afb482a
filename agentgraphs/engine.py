"""Moved to `agentgraphs.engines.base`; this name stays for code that imported it."""

from .engines.base import *  # noqa: F401,F403

"""Typed errors. Every message names what went wrong and what to do about it."""

from __future__ import annotations


class AgentGraphsError(Exception):
    """Base class of every error raised by agentgraphs."""


class ConfigError(AgentGraphsError, ValueError):
    """A configuration value (CLI flag, slime arg, YAML key) is missing or wrong."""


class InputError(AgentGraphsError, ValueError):
    """A dataset row or graph input is malformed. The message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"input field {field!r}: {problem}. Fix: {fix}")


class EngineError(AgentGraphsError):
    """A generation call failed."""


class EngineRequestError(EngineError):
    """The server rejected the request (HTTP 4xx). Retrying the same body cannot help."""

    def __init__(self, status_code: int, detail: str) -> None:
        self.status_code = status_code
        self.detail = detail
        super().__init__(
            f"engine rejected the request with HTTP {status_code}: {detail}. "
            "Check the sampling parameters: SGLang accepts only its documented keys."
        )


class EngineUnavailableError(EngineError):
    """Connection errors, timeouts or 5xx that outlasted every retry."""

    def __init__(self, url: str, attempts: int, last_error: str) -> None:
        self.url = url
        self.attempts = attempts
        self.last_error = last_error
        super().__init__(
            f"engine at {url} failed after {attempts} attempt(s): {last_error}. "
            "Check that the server is up (GET /health) and reachable from this process."
        )


class EngineProtocolError(EngineError):
    """The server answered, but the body breaks the /generate contract (ids vs log-probs, JSON)."""


class TraceError(AgentGraphsError, AssertionError):
    """A recorded trace breaks one of DESIGN.md's invariants."""


class TemplateError(AgentGraphsError):
    """A chat template cannot be extended append-only the way it was asked to."""

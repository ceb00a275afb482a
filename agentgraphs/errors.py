"""Typed errors. Every message names what went wrong and what to do about it."""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable, Mapping


def did_you_mean(key: str, known: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """" (did you mean 'x'?)" for a misspelt `key`: its alias, else the closest of `known`; "" when none is close.

    >>> did_you_mean("max_llm_call", ["max_llm_calls", "max_time_s"]), did_you_mean("zzz", ["max_time_s"])
    (" (did you mean 'max_llm_calls'?)", '')
    """
    match = (aliases or {}).get(key) or next(iter(difflib.get_close_matches(key.replace("-", "_"), list(known), n=1)),
                                             None)
    return f" (did you mean {match!r}?)" if match else ""


class AgentGraphsError(Exception):
    """Base class of every error raised by agentgraphs."""


class ConfigError(AgentGraphsError, ValueError):
    """A configuration value (CLI flag, slime arg, YAML key) is missing or wrong."""


class SamplingMismatchError(ConfigError):
    """A trainable turn was sampled with another temperature / top_p / top_k / min_p than the trainer assumes."""


class InputError(AgentGraphsError, ValueError):
    """A dataset row or graph input is malformed. The message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"input field {field!r}: {problem}. Fix: {fix}")


class RewardError(AgentGraphsError, ValueError):
    """A reward that cannot be trained on: missing, not a finite number, without its key, or never returned."""


class EngineError(AgentGraphsError):
    """A generation call failed."""


class EngineRequestError(EngineError):
    """The server rejected the request (HTTP 4xx). Retrying the same body cannot help."""

    def __init__(self, status_code: int, detail: str, url: str = "") -> None:
        self.status_code = status_code
        self.detail = detail
        self.url = url
        super().__init__(f"engine{' at ' + url if url else ''} rejected the request with HTTP {status_code}: "
                         f"{detail}. {_hint(status_code)}")


def _hint(status_code: int) -> str:
    if status_code in (404, 405):
        return "Point the engine at the server root (http://host:port), not at /v1 or /generate."
    if status_code in (401, 403):
        return "The server wants credentials this client does not send; check the router's auth settings."
    if status_code == 413:
        return "The request is too large for the server; shorten the prompt or raise the server's limit."
    return ("Check the sampling parameters (SGLang accepts only its documented keys) and the prompt length "
            "(it must fit the server's context length).")


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


class RetrievalError(AgentGraphsError):
    """The retrieval service could not answer: unreachable, timed out, a 5xx that outlasted the retries,
    a rejected request (4xx) or a body outside its contract. Tools turn it into an error observation.
    `field` is the request field a 400 named (e.g. "eid": the service cannot filter by example)."""

    def __init__(self, url: str, attempts: int, reason: str, field: str | None = None) -> None:
        self.url = url
        self.attempts = attempts
        self.reason = reason
        self.field = field
        super().__init__(f"retrieval service at {url} failed after {attempts} attempt(s): {reason}. "
                         "Check that it is up (GET /health); start one with `agentgraphs retrieval serve DIR`.")


class CallCancelled(AgentGraphsError):
    """A sync engine call (TracedChatModel.invoke() in a `def` node) outlived its run: the rollout ended (its
    deadline, a cancellation, its end) or the debugger step was cancelled (interrupted, timed out, its session
    closed) while the call waited, so the request was aborted and nothing is recorded."""


class StepCancelled(AgentGraphsError):
    """A debugger step still running when its session closed: it was cancelled (its engine calls aborted) and
    wrote no checkpoint; open the session again on the same thread and step again."""


class CheckpointError(AgentGraphsError, LookupError):
    """A thread or checkpoint that is not in the checkpoints database (the message lists what is)."""


def validation_message(exc: Any, *, label: Callable[[str], str] = str,
                       unknown: Callable[[str], str] | None = None) -> str:
    """A pydantic ValidationError as one line: `label(field): message (got value)` per error, joined by "; "
    (`field` is the error's dotted location, "" for the model itself); an unknown key (`extra="forbid"`) is
    `unknown(field)` when given. Options, slime args and converter settings all report errors this way.

    >>> from pydantic import BaseModel, ConfigDict
    >>> class Settings(BaseModel):
    ...     model_config = ConfigDict(extra="forbid")
    ...     retries: int = 3
    >>> try:
    ...     Settings(retries=-1.5, retry=2)
    ... except ValueError as exc:
    ...     print(validation_message(exc, label=lambda key: f"args.{key}", unknown=lambda key: f"unknown {key!r}"))
    args.retries: input should be a valid integer, got a number with a fractional part (got -1.5); unknown 'retry'
    """
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if unknown is not None and err["type"] == "extra_forbidden":
            lines.append(unknown(key))
        else:
            lines.append(f"{label(key)}: {err['msg'].lower()} (got {err.get('input')!r:.80})")
    return "; ".join(lines)

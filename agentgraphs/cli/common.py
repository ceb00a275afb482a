"""What the command modules share: the console, flag parsers, and the one way a command fails on bad input."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import ConfigError

__all__ = ["console", "engine_arg", "fail", "parse_helpers", "parse_options", "progress_bar", "tokenizer_arg"]

console = Console(stderr=True)


def parse_options(pairs: list[str], flag: str = "--option") -> dict[str, Any]:
    """`key=value` pairs; values parsed as JSON when they parse (numbers, true/false, null), else strings.

    A key given twice, and a value that starts as JSON does (`[`, `{`, `"`) but does not parse, raise
    ConfigError naming `flag`: the first would drop a value, the second turn a list or object into its text.

    >>> parse_options(["max_chunks=4", "train_final_answer=false", "name=x"])
    {'max_chunks': 4, 'train_final_answer': False, 'name': 'x'}
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. --option max_chunks=8")
        if key in out:
            raise ConfigError(f"{flag} {key!r} is given twice ({out[key]!r} and {raw!r}): give each key once")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError as exc:
            if raw.lstrip().startswith(("[", "{", '"')):
                raise ConfigError(f"{flag} {key}={raw!r}: not valid JSON ({exc.msg} at column {exc.colno}); fix "
                                  f"the JSON, or write a text that starts with [, {{ or \" as a JSON string "
                                  f"({key}='\"...\"')") from None
            out[key] = raw
    return out


def parse_helpers(pairs: list[str]) -> dict[str, str]:
    """`--helper NAME=SPEC` flags as {name: engine spec}.

    >>> parse_helpers(["helper=sglang:http://127.0.0.1:30001"])
    {'helper': 'sglang:http://127.0.0.1:30001'}
    """
    helpers: dict[str, str] = {}
    for pair in pairs:
        name, sep, spec = pair.partition("=")
        if not sep or not name.strip() or not spec.strip() or name.strip() == "policy":
            raise ConfigError(f"--helper {pair!r}: expected NAME=SPEC with a name other than 'policy', e.g. "
                              "helper=sglang:http://127.0.0.1:30001")
        if name.strip() in helpers:
            raise ConfigError(f"--helper {name.strip()!r} is given twice ({helpers[name.strip()]!r} and "
                              f"{spec.strip()!r}): give each helper once")
        helpers[name.strip()] = spec.strip()
    return helpers


def fail(exc: BaseException) -> typer.Exit:
    """Print `error: ...` (no traceback) and return the exit (status 2) to raise: a bad flag, file or engine."""
    console.print("[red]error:[/red]", escape(str(exc)))
    return typer.Exit(2)


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console)


def engine_arg(engine: Optional[str]) -> Any:
    """--engine as an Engine, or None for a thread's stored engine."""
    if engine is None:
        return None
    from ..engines import make_engine

    try:
        return make_engine(engine)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"--engine: {exc}") from exc


def tokenizer_arg(path: Optional[str]) -> Any:
    """--tokenizer as a tokenizer, or None for a thread's stored engine's own."""
    from ..batch import tokenizer_for

    return tokenizer_for(None, path) if path else None

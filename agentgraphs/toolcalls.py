"""Hermes / Qwen-style tool calls in model text, parsed with ToolOrchestra's strict rule.

A Qwen2.5 / Qwen3 model given tools through its chat template answers with zero or more blocks

    <think>...</think>                       (reasoning models only)
    <tool_call>
    {"name": "search", "arguments": {"query": "..."}}
    </tool_call>

ToolOrchestra's rule, which `parse_tool_calls` implements: split on <tool_call>...</tool_call>,
`json.loads` each block, require EXACTLY the keys {name, arguments} with a string name and an
object of arguments, and (when the known tool names are given) a known name. A turn that breaks
the rule is marked format-invalid and the loop goes on: the parser returns a `ParseResult` with
`ok=False` and an `error` saying why, never an exception, whatever the model wrote.

Defined edge cases (each one is a test):
- Blocks inside the reasoning are not calls: only the text after the LAST `</think>` is read, and a
  `<think>` that never closes (a response cut by max_new_tokens) means there is no call at all.
- A `<tool_call>` without its `</tool_call>` makes the turn invalid ("unclosed"), so does a stray
  `</tool_call>` without an opening tag; text between blocks is kept in `ParseResult.content`.
- Several blocks are several calls, in order; ONE invalid block makes the whole turn invalid
  (the calls that did parse are still listed, for debugging, but `ok` is False).
- JSON that nests too deep for Python's parser is "bad JSON", not a RecursionError.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, TypedDict

__all__ = ["TOOL_CALL_OPEN", "TOOL_CALL_CLOSE", "THINK_OPEN", "THINK_CLOSE", "ToolCall", "ParseResult",
           "parse_tool_calls", "split_reasoning"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_REQUIRED_KEYS = frozenset({"name", "arguments"})
_SHOWN = 80  # characters of offending text quoted in an error message


class ToolCall(TypedDict):
    """One call as the model wrote it: a tool name and its JSON-object arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParseResult:
    """What a turn asked for.

    - `ok`: at least one call, every block valid (ToolOrchestra's "format-valid" turn);
    - `calls`: the valid calls in order (possibly some even when `ok` is False);
    - `error`: why the turn is invalid (the first problem found), None when `ok`;
    - `content`: the visible text outside the tool-call blocks and the reasoning, stripped.
    """

    ok: bool
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None
    content: str = ""


def parse_tool_calls(text: str, allowed: Collection[str] | None = None) -> ParseResult:
    """Parse hermes-style `<tool_call>` blocks from a model's text; never raises.

    `allowed`: the known tool names; a call to any other name makes the turn invalid.

    >>> r = parse_tool_calls('<think>x</think>\\n<tool_call>\\n{"name": "search", "arguments": {"q": 1}}\\n'
    ...                      '</tool_call>')
    >>> r.ok, r.calls
    (True, [{'name': 'search', 'arguments': {'q': 1}}])
    >>> parse_tool_calls('<tool_call>{"name": "x"}</tool_call>').error
    "tool call 1: keys must be exactly ['arguments', 'name'], missing ['arguments']"
    >>> parse_tool_calls("just an answer").error
    'no tool call'
    """
    if not isinstance(text, str):
        return ParseResult(ok=False, error=f"model output is a {type(text).__name__}, not text")
    visible = split_reasoning(text)[1]
    if visible is None:
        return ParseResult(ok=False, error="no tool call (the <think> block never closes)")
    calls: list[ToolCall] = []
    errors: list[str] = []
    outside: list[str] = []
    pieces = visible.split(TOOL_CALL_OPEN)
    _check_stray_close(pieces[0], errors)
    outside.append(pieces[0])
    for n, piece in enumerate(pieces[1:], start=1):
        body, closed, rest = piece.partition(TOOL_CALL_CLOSE)
        if not closed:
            errors.append(f"tool call {n}: {TOOL_CALL_OPEN} is never closed by {TOOL_CALL_CLOSE}")
            continue
        _check_stray_close(rest, errors)
        outside.append(rest)
        call = _parse_block(body, n, allowed, errors)
        if call is not None:
            calls.append(call)
    content = "".join(outside).strip()
    if not errors and not calls:
        errors.append("no tool call")
    return ParseResult(ok=not errors, calls=calls, error=errors[0] if errors else None, content=content)


def split_reasoning(text: str) -> tuple[str | None, str | None]:
    """(reasoning, answer) of a reasoning model's text: the answer is the text after the LAST `</think>`
    (the whole text when there is no think block); the reasoning is what precedes it, after `<think>`,
    stripped (None without a think block). A `<think>` that never closes (a response cut by max_new_tokens)
    has no answer: None.

    >>> split_reasoning("<think>hm</think>\\n42"), split_reasoning("42"), split_reasoning("<think>cut")
    (('hm', '\\n42'), (None, '42'), ('cut', None))
    """
    if THINK_CLOSE in text:
        head, tail = text.rsplit(THINK_CLOSE, 1)
        return head.split(THINK_OPEN, 1)[-1].strip(), tail
    if THINK_OPEN in text:
        return text.split(THINK_OPEN, 1)[1].strip(), None
    return None, text


def _check_stray_close(segment: str, errors: list[str]) -> None:
    if TOOL_CALL_CLOSE in segment:
        errors.append(f"{TOOL_CALL_CLOSE} without a matching {TOOL_CALL_OPEN}")


def _parse_block(body: str, n: int, allowed: Collection[str] | None, errors: list[str]) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        errors.append(f"tool call {n}: bad JSON ({reason}): {body.strip()[:_SHOWN]!r}")
        return None
    if not isinstance(obj, dict):
        errors.append(f"tool call {n}: expected a JSON object, got {type(obj).__name__}")
        return None
    keys = set(obj)
    if keys != _REQUIRED_KEYS:
        missing, extra = sorted(_REQUIRED_KEYS - keys), sorted(keys - _REQUIRED_KEYS)
        detail = ", ".join(p for p in (f"missing {missing}" if missing else "",
                                       f"extra {extra[:5]}" if extra else "") if p)
        errors.append(f"tool call {n}: keys must be exactly {sorted(_REQUIRED_KEYS)}, {detail}")
        return None
    name, arguments = obj["name"], obj["arguments"]
    if not isinstance(name, str) or not name:
        errors.append(f"tool call {n}: name must be a non-empty string, got {name!r:.{_SHOWN}}")
        return None
    if not isinstance(arguments, dict):
        errors.append(f"tool call {n}: arguments must be a JSON object, got {type(arguments).__name__}")
        return None
    if allowed is not None and name not in allowed:
        errors.append(f"tool call {n}: unknown tool {name[:_SHOWN]!r}; known: {sorted(allowed)}")
        return None
    return ToolCall(name=name, arguments=arguments)

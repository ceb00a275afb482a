"""Strict parsing of an orchestrator turn (ToolOrchestra's rule) on top of `agentgraphs.toolcalls`.

A turn is valid when the text after its reasoning holds exactly one hermes `<tool_call>` whose JSON has
exactly `name` and `arguments`, the name is a known tool, and `arguments.model` is one of that tool's
allowed experts. Anything else is a format-invalid turn: `Choice.error` says why, and the loop goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..toolcalls import parse_tool_calls

__all__ = ["Choice", "parse_choice"]


@dataclass(frozen=True)
class Choice:
    """The tool and expert a turn chose, or the error that makes it format-invalid."""

    tool: str = ""
    model: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def parse_choice(text: str, experts: Mapping[str, Sequence[str]]) -> Choice:
    """Parse one orchestrator turn; `experts` maps each tool to its allowed models. Never raises.

    >>> ex = {"search": ["expert-a"], "answer": ["expert-a", "expert-b"]}
    >>> parse_choice('<think>hm</think>\\n<tool_call>\\n{"name": "answer", "arguments": {"model": "expert-b"}}'
    ...              '\\n</tool_call>', ex)
    Choice(tool='answer', model='expert-b', error=None)
    >>> parse_choice('<tool_call>{"name": "search", "arguments": {"model": "gpt-9"}}</tool_call>', ex).error
    "tool 'search': model 'gpt-9' is not allowed; allowed: ['expert-a']"
    """
    parsed = parse_tool_calls(text, allowed=list(experts))
    if not parsed.ok:
        return Choice(error=parsed.error)
    if len(parsed.calls) != 1:
        return Choice(error=f"expected exactly one tool call, got {len(parsed.calls)}")
    call = parsed.calls[0]
    model = call["arguments"].get("model")
    allowed = list(experts[call["name"]])
    if not isinstance(model, str) or model not in allowed:
        return Choice(tool=call["name"], error=f"tool {call['name']!r}: model {model!r:.80} is not allowed; "
                                               f"allowed: {allowed}")
    extra = sorted(set(call["arguments"]) - {"model"})
    if extra:
        return Choice(tool=call["name"], error=f"tool {call['name']!r}: unknown arguments {extra[:5]}")
    return Choice(tool=call["name"], model=model)

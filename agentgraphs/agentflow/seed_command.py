"""The seed's executor reading its command (`prompts: seed`; Takenzz/AgentFlow@4b5aa84, agentic/agentflow/
core/executor.py), in linear scans and never executed.

- `seed_command`: the command taken from the command generator's reply (:40-82): the first ```python block after
  the first "Generated Command:", else the longest ```python block, else the text from the first
  `execution = tool.execute(` to the last ")", else "No command found."; then the seed's `normalize_code`.
- `seed_command_kwargs`: the keyword arguments its tool is called with (:130-176), or the seed's error text. The
  seed executes the command against a recording tool; ours reads it with `parsing.parse_command` (`ast`), so a
  command that computes its query (an f-string, an import) falls to the seed's regex readings instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .parsing import parse_command, strip_seed_command

__all__ = ["SEED_NO_COMMAND", "seed_command", "seed_command_kwargs"]

_GENERATED = "Generated Command:"
_FENCE = "```"
_SPACES = re.compile(r"\s*")
SEED_NO_COMMAND = "No command found."
_SEED_GENERATED = re.compile(re.escape(_GENERATED), re.IGNORECASE)
_SEED_PY_FENCE = re.compile(r"```python(\s*)", re.IGNORECASE)
_SEED_DIRECT = re.compile(r"execution\s*=\s*tool\.execute\(")
_SEED_PID = re.compile(r"pid=\d")


def _seed_python_blocks(text: str, pos: int = 0) -> Iterator[str]:
    """The seed's ```python blocks (core/executor.py:56-71): a "```python" tag whose following whitespace holds a
    newline, the code from after that run's last newline to the next ``` (unstripped), left to right."""
    while True:
        tag = _SEED_PY_FENCE.search(text, pos)
        if tag is None:
            return
        newline = tag.group(1).rfind("\n")
        if newline < 0:
            pos = tag.start() + 1
            continue
        start = tag.start(1) + newline + 1
        close = text.find(_FENCE, start)
        if close < 0:
            return
        yield text[start:close]
        pos = close + len(_FENCE)


def seed_command(text: str) -> str:
    """The command the seed's executor takes from its reply (core/executor.py:40-82), in linear scans: the first
    ```python block after the first "Generated Command:", else the longest ```python block, else the text from the
    first `execution = tool.execute(` to the last ")", else "No command found."; then its `normalize_code`: a
    trailing "<|im_end|>", a leading ```python / ``` and a trailing ``` dropped, a leading "(... pid=N ...)" too.

    >>> seed_command('Generated Command:\\n```python\\nexecution = tool.execute(query="2+2")\\n```<|im_end|>')
    'execution = tool.execute(query="2+2")'
    >>> seed_command('Sure: execution = tool.execute(query="2+2") is it.<|im_end|>')
    'execution = tool.execute(query="2+2")'
    >>> seed_command("I cannot.<|im_end|>")
    'No command found.'
    """
    if not isinstance(text, str):
        return "Invalid response type."
    text = text.strip()
    generated = _SEED_GENERATED.search(text)
    command = next(_seed_python_blocks(text, generated.end()), None) if generated else None
    if command is None:
        blocks = list(_seed_python_blocks(text))
        command = max(blocks, key=lambda block: len(block.strip())) if blocks else None
    if command is None:
        direct = _SEED_DIRECT.search(text)
        last = text.rfind(")")
        command = text[direct.start():last + 1] if direct and last >= direct.end() else SEED_NO_COMMAND
    return _seed_normalize(command.strip())


def _seed_normalize(code: str) -> str:
    code = strip_seed_command(code)
    if code[:9].lower() == "```python":
        code = code[9:].lstrip()
    if code.startswith(_FENCE):
        code = code[len(_FENCE):].strip()
    if code.endswith(_FENCE):
        code = code[:-len(_FENCE)].strip()
    close = code.find(")")
    if code.startswith("(") and close > 0 and _SEED_PID.search(code, 1, close):
        code = code[close + 1:].lstrip()
    return code.strip()


_SEED_QUERY = re.compile(r"tool\.execute\(\s*query\s*=")
_SEED_DELIMS = ('"""', "'''", '"', "'")


def seed_command_kwargs(command: str) -> dict[str, Any] | str:
    """The keyword arguments the seed calls its tool with (core/executor.py:130-176), or its error text. Its first
    reading executes the command against a recording tool; ours reads it with `parse_command` (never executed):
    the arguments of its valid calls, a later call's overriding an earlier's. Without one, the seed's regex
    readings: `tool.execute(query=<quoted>)` closing the command, tried with triple then single quotes, else
    everything from `query=` to the last ")" (one quote mark stripped from its ends). Else
    "Cannot parse command: <repr>".

    >>> seed_command_kwargs('execution = tool.execute(query="He said "hi" now")')
    {'query': 'He said "hi" now'}
    >>> seed_command_kwargs("No command found.")
    "Cannot parse command: 'No command found.'"
    """
    valid = [call for call in parse_command(command) if not call["error"]]
    if valid:
        return {key: value for call in valid for key, value in call["kwargs"].items()}
    body = command.rstrip()
    openings = list(_SEED_QUERY.finditer(body))
    if not openings or not body.endswith(")"):
        return f"Cannot parse command: {command!r}"
    inner = body[:-1].rstrip()
    for delim in _SEED_DELIMS:  # the quoted value must close the command: its end is fixed, its start the first
        close = len(inner) - len(delim)
        if not inner.endswith(delim):
            continue
        for opening in openings:
            value_at = _SPACES.match(body, opening.end()).end()  # type: ignore[union-attr]
            if body.startswith(delim, value_at):
                if close >= value_at + len(delim):
                    return {"query": body[value_at + len(delim):close]}
                break
    opening = openings[0]
    if len(body) - 1 <= opening.end():
        return f"Cannot parse command: {command!r}"
    value = body[opening.end():-1].strip()
    for delim in _SEED_DELIMS:
        if value.startswith(delim):
            value = value[len(delim):]
            value = value[:-len(delim)] if value.endswith(delim) else value
            break
    return {"query": value}

"""Fenced code blocks in model text: the one reader of a model's ```python block (AgentFlow's command and
python_coder, ToolOrchestra's enhance_reasoning). Plain Python.

A block opens with three backticks and a language tag (possibly none) ending its line, and closes at the next
three backticks. Fences are paired in order, so a JSON block before a Python block cannot swallow it.
"""

from __future__ import annotations

import re

__all__ = ["PYTHON_TAGS", "fenced_blocks", "python_blocks"]

_FENCED = re.compile(r"```([\w+.-]*)[ \t]*\n(.*?)```", re.DOTALL)
PYTHON_TAGS = frozenset({"python", "py"})  # compared in lower case


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, code) of every fenced block of `text`, in order; the code as written.

    >>> fenced_blocks("Run:\\n```json\\n{}\\n```\\nthen\\n```Python\\nprint(1)\\n```")
    [('json', '{}\\n'), ('Python', 'print(1)\\n')]
    """
    return [(m.group(1), m.group(2)) for m in _FENCED.finditer(text)] if isinstance(text, str) else []


def python_blocks(text: str, *, untagged: bool = False) -> list[str]:
    """The code of every Python block of a model's reply (tagged ```python or ```py, any case), in order,
    stripped; `untagged=True` counts a block without a tag as Python too.

    >>> python_blocks("Here:\\n```python\\nprint(2 + 2)\\n```\\n```\\nx = 1\\n```")
    ['print(2 + 2)']
    >>> python_blocks("```\\nx = 1\\n```", untagged=True)
    ['x = 1']
    """
    return [code.strip() for tag, code in fenced_blocks(text)
            if tag.lower() in PYTHON_TAGS or (untagged and not tag)]

"""One reader of fenced Python in model text, used alike by AgentFlow (the command, python_coder) and
ToolOrchestra (enhance_reasoning)."""

from __future__ import annotations

import pytest

from agentgraphs.agentflow.parsing import extract_command
from agentgraphs.agentflow.tools import extract_python_block
from agentgraphs.codeblocks import fenced_blocks, python_blocks
from agentgraphs.toolorchestra.coderun import extract_code

JSON_THEN_PYTHON = 'First the data:\n```json\n{"n": 3}\n```\nthen the code:\n```python\nprint(3 * 7)\n```\n'


def test_fences_pair_in_order_so_a_json_block_cannot_swallow_the_python_one() -> None:
    assert fenced_blocks(JSON_THEN_PYTHON) == [("json", '{"n": 3}\n'), ("python", "print(3 * 7)\n")]
    assert python_blocks(JSON_THEN_PYTHON) == ["print(3 * 7)"]
    # every method reads that reply the same way
    assert extract_python_block(JSON_THEN_PYTHON) == extract_code(JSON_THEN_PYTHON) == "print(3 * 7)"


@pytest.mark.parametrize("tag", ["python", "Python", "PY", "py"])
def test_a_python_tag_in_any_case_is_python(tag: str) -> None:
    reply = f"```{tag}\nx = 1\n```"
    assert python_blocks(reply) == ["x = 1"] and extract_python_block(reply) == extract_code(reply) == "x = 1"


def test_untagged_blocks_count_only_where_asked() -> None:
    reply = "```\nprint(1)\n```"
    assert python_blocks(reply) == [] and python_blocks(reply, untagged=True) == ["print(1)"]
    assert extract_python_block(reply) is None  # python_coder wants a python block ...
    assert extract_code(reply) == "print(1)"  # ... ToolOrchestra's expert may leave the tag out


def test_inline_backticks_open_no_block() -> None:
    reply = "Use ``` fences ``` like this:\n```python\ny = 2\n```"
    assert python_blocks(reply) == ["y = 2"]


def test_the_command_after_generated_command_wins_then_the_longest() -> None:
    reply = ("```python\nexecution = tool.execute(query='a much longer query than the other one')\n```\n"
             "Generated Command:\n```python\nexecution = tool.execute(query='b')\n```")
    assert extract_command(reply) == "execution = tool.execute(query='b')"
    assert extract_command(reply.replace("Generated Command:", "")) == \
        "execution = tool.execute(query='a much longer query than the other one')"

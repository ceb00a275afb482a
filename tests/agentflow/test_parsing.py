"""The command parser (new with the graph): never raises, never executes, reads only literals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentgraphs.agentflow import extract_command, parse_command


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_command_parsers_never_raise(text: str) -> None:
    code = extract_command(text)
    calls = parse_command(code)
    assert calls and all(isinstance(c["kwargs"], dict) and isinstance(c["error"], str) for c in calls)


def test_original_formats_and_refusals() -> None:
    text = ('Analysis: easy.\nGenerated Command:\n```python\nexecution = tool.execute(query=["a", "b"], n=3)\n```\n'
            'Example:\n```python\nexecution = tool.execute(query="ignored example")\n```')
    assert parse_command(extract_command(text)) == [{"kwargs": {"query": ["a", "b"], "n": 3}, "error": ""}]
    # no "Generated Command:": the longest python block
    assert extract_command("```python\nx = 1\n```\n```python\nexecution = tool.execute(query='long')\n```") \
        == "execution = tool.execute(query='long')"
    refused = parse_command("execution = tool.execute(query=__import__('os').system('id'))")
    assert refused[0]["error"].endswith("argument 'query' is not a literal or a name assigned one")
    assert parse_command("tool.execute('positional')")[0]["error"].endswith("keyword arguments only")
    assert parse_command("def f(:")[0]["error"].startswith("the command is not valid Python")
    assert parse_command("")[0]["error"] == "No command was generated."
    assert parse_command("x = 1")[0]["error"] == "No tool.execute(...) call found in the command."
    deep = "execution = tool.execute(query=" + "[" * 5000 + "]" * 5000 + ")"
    assert parse_command(deep)[0]["error"]  # too deep for ast: an error entry, not a crash

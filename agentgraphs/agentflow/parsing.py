"""AgentFlow's output parsers: the planner's next step, the verifier's verdict, the final answer.

Rules from the public AgentFlow code (reference/methods.md); every function accepts any text and
returns its documented fallback instead of raising, because a policy in training writes anything.
The original uses backtracking regexes; these scan with str.find/rfind so a hostile output (long
whitespace or marker runs) costs linear time, and they agree with the original on well-formed text.

- `parse_next_step`: a JSON object {context, sub_goal, tool_name}, else after removing every `**`
  the LAST block "Context: ... Sub-Goal: ... Tool Name: ..."; the tool name (text up to the first
  blank line, a closing ``` fence dropped) is matched against the available tools by AgentFlow's
  canonical form (lower-case, runs of spaces/underscores -> "_"); unknown -> "No matched tool
  given: X" with `matched=False`.
- `parse_next_step_seed` (`prompts: seed`): the seed's `extract_context_subgoal_and_tool`
  (core/formatters.py:4-44): the text after the last "<|im_start|>assistant" and the first "</think>",
  every `**` removed, the LAST block "Context: ... Sub-Goal: ... Tool Name: ..." (each the first after the
  one before, the name up to the next blank line, a closing ``` dropped, cut at "<|im_end|>"); no JSON. The
  name, stripped of spaces and backticks, must be one the seed resolves exactly (core/executor.py:178-195:
  the planner-facing name, the tool's class name or its registry key); unknown -> "No matched tool given: X".
- `parse_verifier_conclusion`: "STOP" or "CONTINUE". The original's rule: a JSON object (a `conclusion`
  string, or the original's MemoryVerification `stop_signal` boolean); the LAST match of
  `conclusion\\**:?\\s*\\**\\s*(\\w+)` (case-insensitive) when its word is STOP/CONTINUE; the substring
  "stop", then "continue" (case-insensitive, as the original); else CONTINUE. The seed's rule
  (core/verifier.py:50-65): the LAST match of `conclusion\\**:?\\s*\\**\\s*(STOP|CONTINUE)\\b`; else the
  word "stop", then "continue", in the last 3 lines; else CONTINUE (no JSON).
- `parse_answer_tags`: the content of the last <answer>...</answer>, else the whole output, stripped.
- `extract_command` / `parse_command`: the command generator's ```python block, read with `ast` into
  `tool.execute(...)` keyword arguments. Unlike the original, the command is never executed.
  `strip_seed_command` (`prompts: seed`): the seed's cut of a trailing "<|im_end|>" off the command
  (core/executor.py:42-43); the seed's whole reading of the command is `agentflow.seed_command`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from typing_extensions import NotRequired

from ..codeblocks import python_blocks

__all__ = [
    "NO_MATCHED_TOOL",
    "NextStep",
    "Conclusion",
    "VerifierRule",
    "canonical_tool_name",
    "match_tool",
    "parse_next_step",
    "parse_next_step_seed",
    "parse_verifier_conclusion",
    "parse_answer_tags",
    "ToolCall",
    "extract_command",
    "strip_seed_command",
    "parse_command",
]

NO_MATCHED_TOOL = "No matched tool given: "
Conclusion = Literal["STOP", "CONTINUE"]
VerifierRule = Literal["seed", "original"]

_CONTEXT, _SUB_GOAL, _TOOL_NAME = "Context:", "Sub-Goal:", "Tool Name:"
_FENCE = "```"
_SEPARATORS = re.compile(r"[ _]+")


class NextStep(TypedDict):
    """The planner's next step. `matched` is False when the tool is not an available one."""

    context: str
    sub_goal: str
    tool_name: str
    matched: bool
    written: NotRequired[str]  # the tool name as the planner wrote it (parse_next_step_seed: the seed's memory)
    fallback: NotRequired[bool]  # an unknown name, run by the base generator (the option unknown_tool)


# -- the planner's next step --------------------------------------------------------------------


def canonical_tool_name(name: str) -> str:
    """AgentFlow's canonical tool name: lower-case, each run of spaces/underscores one "_".

    >>> canonical_tool_name("Python  Coder_tool")
    'python_coder_tool'
    """
    return "_".join(part.lower() for part in _SEPARATORS.split(name.strip()))


def match_tool(name: str, available_tools: Sequence[str]) -> tuple[str, bool]:
    """The available tool `name` denotes, or ("No matched tool given: name", False).

    >>> match_tool("python coder tool", ["Python_Coder_Tool"])
    ('Python_Coder_Tool', True)
    >>> match_tool("Google_Search", ["Python_Coder_Tool"])
    ('No matched tool given: Google_Search', False)
    """
    wanted = canonical_tool_name(name)
    for tool in available_tools:
        if isinstance(tool, str) and canonical_tool_name(tool) == wanted:
            return tool, True
    return NO_MATCHED_TOOL + name, False


def parse_next_step(text: str, available_tools: Sequence[str]) -> NextStep:
    """Context, sub-goal and tool of the planner's `generate_next_step` output; never raises.

    Without a complete Context/Sub-Goal/Tool Name block, context and sub_goal are "" and the tool
    is "No matched tool given: " (nothing named).

    >>> out = "**Context:** x = 2\\n**Sub-Goal:** square it\\n**Tool Name:** python_coder_tool"
    >>> parse_next_step(out, ["Python_Coder_Tool", "Base_Generator_Tool"])
    {'context': 'x = 2', 'sub_goal': 'square it', 'tool_name': 'Python_Coder_Tool', 'matched': True}
    >>> parse_next_step("I will think more.", ["Python_Coder_Tool"])["tool_name"]
    'No matched tool given: '
    """
    if not isinstance(text, str):
        return _next_step("", "", "", available_tools)
    from_json = _next_step_json(text)
    if from_json is not None:
        return _next_step(*from_json, available_tools)
    plain = text.replace("**", "")
    # the last Sub-Goal: that has a Tool Name: after it, then the last Context: before that Sub-Goal
    last_tool = plain.rfind(_TOOL_NAME)
    last_goal = plain.rfind(_SUB_GOAL, 0, max(last_tool, 0))
    ctx = plain.rfind(_CONTEXT, 0, max(last_goal, 0))
    if last_tool < 0 or last_goal < 0 or ctx < 0:
        return _next_step("", "", "", available_tools)
    goal = plain.find(_SUB_GOAL, ctx + len(_CONTEXT))  # the first of each after it, as the
    tool = plain.find(_TOOL_NAME, goal + len(_SUB_GOAL))  # original's lazy groups take
    context = plain[ctx + len(_CONTEXT):goal].strip()
    sub_goal = plain[goal + len(_SUB_GOAL):tool].strip()
    name = plain[tool + len(_TOOL_NAME):].lstrip().split("\n\n", 1)[0].rstrip()
    if name.endswith(_FENCE):
        name = name[: -len(_FENCE)].rstrip()
    return _next_step(context, sub_goal, name, available_tools)


def _next_step_json(text: str) -> tuple[str, str, str] | None:
    obj = _json_object(text)
    if obj is None:
        return None
    fields = (obj.get("context"), obj.get("sub_goal"), obj.get("tool_name"))
    if not all(isinstance(f, str) for f in fields):
        return None
    return fields[0].strip(), fields[1].strip(), fields[2].strip()  # type: ignore[union-attr]


def _next_step(context: str, sub_goal: str, name: str, available_tools: Sequence[str]) -> NextStep:
    tool_name, matched = match_tool(name, available_tools) if name else (NO_MATCHED_TOOL, False)
    return NextStep(context=context, sub_goal=sub_goal, tool_name=tool_name, matched=matched)


_SPACES = re.compile(r"\s*")
_ASSISTANT, _THINK_END, _IM_END = "<|im_start|>assistant", "</think>", "<|im_end|>"


def parse_next_step_seed(text: str, names: Mapping[str, str]) -> NextStep:
    """The seed's reading of the planner's next step; never raises. `names` maps each name the seed resolves
    exactly (planner-facing, class and registry key) to the planner-facing name; `written` is the name as
    written (the seed stores it in its memory).

    >>> names = {name: "Python_Code_Generator_Tool" for name in ("Python_Code_Generator_Tool", "python_coder")}
    >>> out = "**Context:** x = 2\\n**Sub-Goal:** square it\\n**Tool Name:** `python_coder`\\n\\nDone."
    >>> step = parse_next_step_seed(out, names)
    >>> step["context"], step["sub_goal"], step["tool_name"], step["written"]
    ('x = 2', 'square it', 'Python_Code_Generator_Tool', '`python_coder`')
    >>> parse_next_step_seed("Tool Name: python code generator tool", names)["tool_name"]
    'No matched tool given: '
    """
    if not isinstance(text, str):
        text = ""
    if _ASSISTANT in text:
        text = text.rsplit(_ASSISTANT, 1)[1]
    if _THINK_END in text:
        text = text.split(_THINK_END, 1)[1]
    plain = text.replace("**", "")
    found: tuple[str, str, str] | None = None
    pos = 0
    while True:  # the regex's non-overlapping matches, each piece the first after the one before (lazy groups)
        ctx = plain.find(_CONTEXT, pos)
        goal = plain.find(_SUB_GOAL, ctx + len(_CONTEXT)) if ctx >= 0 else -1
        tool = plain.find(_TOOL_NAME, goal + len(_SUB_GOAL)) if goal >= 0 else -1
        if tool < 0:
            break
        start = tool + len(_TOOL_NAME)
        start = _SPACES.match(plain, start).end()  # type: ignore[union-attr]
        end = plain.find("\n\n", start)
        end = len(plain) if end < 0 else end
        name = plain[start:end].rstrip()
        if name.endswith(_FENCE):
            name = name[: -len(_FENCE)].rstrip()
        found = (plain[ctx + len(_CONTEXT):goal].strip(), plain[goal + len(_SUB_GOAL):tool].strip(), name)
        pos = max(end, start + 1)
    if found is None:
        context, sub_goal, written = "", "", ""
    else:
        context, sub_goal, written = found
        written = written.split(_IM_END, 1)[0].strip()
    cleaned = written.strip().strip("`").strip()
    if cleaned in names:
        return NextStep(context=context, sub_goal=sub_goal, tool_name=names[cleaned], matched=True, written=written)
    return NextStep(context=context, sub_goal=sub_goal, tool_name=NO_MATCHED_TOOL + written, matched=False,
                    written=written)


# -- the verifier's verdict ---------------------------------------------------------------------

_CONCLUSION = re.compile("conclusion", re.IGNORECASE)
# `conclusion\**:?\s*\**\s*(\w+)` in greedy pieces: each can match in only one way, so reading
# them in turn is the regex without its quadratic backtracking on long runs of spaces or stars.
_LEAD = re.compile(r"\**:?\s*")
_STARS = re.compile(r"(?:\*+\s*)?")
_WORD = re.compile(r"\w+")


def parse_verifier_conclusion(text: str, rule: VerifierRule = "original") -> Conclusion:
    """STOP or CONTINUE from the verifier's output by the seed's or the original's `rule`; CONTINUE when
    nothing says otherwise.

    >>> parse_verifier_conclusion("The memory answers the query.\\n**Conclusion**: **STOP**")
    'STOP'
    >>> parse_verifier_conclusion('{"analysis": "incomplete", "stop_signal": false}')
    'CONTINUE'
    >>> parse_verifier_conclusion("Conclusion: maybe. We must not stop yet.\\nMore steps.\\nAnd more.\\nSo.")
    'STOP'
    >>> parse_verifier_conclusion("Conclusion: maybe. We must not stop yet.\\nMore steps.\\nAnd more.\\nSo.", "seed")
    'CONTINUE'
    """
    if not isinstance(text, str):
        return "CONTINUE"
    if rule == "seed":
        return _seed_conclusion(text)
    verdict = _conclusion_json(text)
    if verdict is None:
        verdict = _conclusion_regex(text)
    if verdict is not None:
        return verdict
    lowered = text.lower()
    if "stop" in lowered:
        return "STOP"
    return "CONTINUE"  # "continue" in the text, or nothing at all: both continue


_VERDICT = re.compile(r"(STOP|CONTINUE)\b", re.IGNORECASE)
_TAIL_STOP = re.compile(r"\bstop\b")
_TAIL_CONTINUE = re.compile(r"\bcontinue\b")


def _seed_conclusion(text: str) -> Conclusion:
    """The seed's `Verifier.parse_conclusion`: its regex read in the greedy pieces of `_conclusion_regex`."""
    verdict: Conclusion | None = None
    end = 0
    for m in _CONCLUSION.finditer(text):
        if m.start() < end:
            continue
        pos = _LEAD.match(text, m.end()).end()  # type: ignore[union-attr]
        pos = _STARS.match(text, pos).end()  # type: ignore[union-attr]
        w = _VERDICT.match(text, pos)
        if w is not None:
            verdict, end = w.group(1).upper(), w.end()  # type: ignore[assignment]
    if verdict is not None:
        return verdict
    tail = "\n".join(text.strip().splitlines()[-3:]).lower()
    if _TAIL_STOP.search(tail):
        return "STOP"
    return "CONTINUE"  # "continue" in the tail, or nothing at all: both continue


def _conclusion_json(text: str) -> Conclusion | None:
    obj = _json_object(text)
    if obj is None:
        return None
    value = obj.get("conclusion")
    if isinstance(value, str) and value.strip().upper() in ("STOP", "CONTINUE"):
        return value.strip().upper()  # type: ignore[return-value]
    signal = obj.get("stop_signal")
    if isinstance(signal, bool):
        return "STOP" if signal else "CONTINUE"
    return None


def _conclusion_regex(text: str) -> Conclusion | None:
    word: str | None = None
    end = 0
    for m in _CONCLUSION.finditer(text):
        if m.start() < end:
            continue  # inside the previous match: finditer's matches do not overlap
        pos = _LEAD.match(text, m.end()).end()  # type: ignore[union-attr]
        pos = _STARS.match(text, pos).end()  # type: ignore[union-attr]
        w = _WORD.match(text, pos)
        if w is not None:
            word, end = w.group(), w.end()
    if word is not None and word.upper() in ("STOP", "CONTINUE"):
        return word.upper()  # type: ignore[return-value]
    return None


# -- the final answer ---------------------------------------------------------------------------

_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"


def parse_answer_tags(text: str) -> str:
    """The last <answer>...</answer>'s content, else the whole output; both stripped.

    >>> parse_answer_tags("Summary... <answer> 42 </answer>")
    '42'
    >>> parse_answer_tags("  no tags, so all of it ")
    'no tags, so all of it'
    """
    if not isinstance(text, str):
        return ""
    close = text.rfind(_ANSWER_CLOSE)
    open_ = text.rfind(_ANSWER_OPEN, 0, max(close, 0))
    if close < 0 or open_ < 0:
        return text.strip()
    return text[open_ + len(_ANSWER_OPEN):close].strip()


def _json_object(text: str) -> dict[str, Any] | None:
    """`text` (or the one ``` fenced block it consists of) as a JSON object, else None."""
    body = text.strip()
    if body.startswith(_FENCE) and body.endswith(_FENCE) and len(body) >= 2 * len(_FENCE):
        body = body[len(_FENCE):-len(_FENCE)]
        body = body[4:] if body.startswith("json") else body
        body = body.strip()
    if not body.startswith("{"):
        return None
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


# -- the executor's command ---------------------------------------------------------------------

_GENERATED = "Generated Command:"
_MAX_COMMAND_CHARS = 20_000


class ToolCall(TypedDict):
    """One `execution = tool.execute(...)` of a command: its keyword arguments, or why it cannot run."""

    kwargs: dict[str, Any]
    error: str


def extract_command(text: str) -> str:
    """The code of the command generator's answer, with the original's fallbacks; never raises.

    The ```python block after "Generated Command:", else the longest ```python block anywhere, else
    the text itself when it calls tool.execute, else "" (no command).

    >>> extract_command('Generated Command:\\n```python\\nexecution = tool.execute(query="2+2")\\n```')
    'execution = tool.execute(query="2+2")'
    >>> extract_command("I cannot help.")
    ''
    """
    if not isinstance(text, str):
        return ""
    at = text.rfind(_GENERATED)
    after = python_blocks(text[at:]) if at >= 0 else []
    if after:
        return after[0]
    blocks = python_blocks(text)
    if blocks:
        return max(blocks, key=len)
    return text.strip() if "tool.execute(" in text else ""


_SEED_END = re.compile(r"<\|im_end\|>\s*$")


def strip_seed_command(code: str) -> str:
    """`code` stripped, less one trailing "<|im_end|>" (and the spaces after it), stripped again: the seed's
    `normalize_code` (core/executor.py:42-43) on the command it extracted from a reply that keeps its end token.

    >>> strip_seed_command('execution = tool.execute(query="2+2")<|im_end|>')
    'execution = tool.execute(query="2+2")'
    """
    return _SEED_END.sub("", code.strip()).strip()


def parse_command(code: str) -> list[ToolCall]:
    """The tool calls of a command, read with `ast` (the code is never executed); never raises.

    Allowed: `execution = tool.execute(name=<literal>, ...)` (a bare `tool.execute(...)` too) and
    `name = <literal>` assignments whose names later calls use. Anything else becomes an error entry,
    so nothing is dropped silently; no call at all gives one error entry.

    >>> parse_command('query = "sum 1..10"\\nexecution = tool.execute(query=query)')
    [{'kwargs': {'query': 'sum 1..10'}, 'error': ''}]
    >>> parse_command("import os")[0]["error"]
    'line 1: only `execution = tool.execute(...)` and literal assignments are allowed'
    """
    if not isinstance(code, str) or not code.strip():
        return [ToolCall(kwargs={}, error="No command was generated.")]
    if len(code) > _MAX_COMMAND_CHARS:
        return [ToolCall(kwargs={}, error=f"the command is longer than {_MAX_COMMAND_CHARS} characters")]
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [ToolCall(kwargs={}, error=f"the command is not valid Python: {type(exc).__name__}: {exc}")]
    env: dict[str, Any] = {}
    calls: list[ToolCall] = []
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
        target = stmt.targets[0].id if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                                        and isinstance(stmt.targets[0], ast.Name)) else None
        if value is not None and _is_tool_execute(value):
            calls.append(_tool_call(value, env))  # type: ignore[arg-type]
        elif target is not None and value is not None:
            ok, literal = _literal(value, env)
            if ok:
                env[target] = literal
            else:
                calls.append(ToolCall(kwargs={}, error=f"line {stmt.lineno}: {target} is not assigned a literal"))
        else:
            calls.append(ToolCall(kwargs={}, error=f"line {getattr(stmt, 'lineno', '?')}: only `execution = "
                                  "tool.execute(...)` and literal assignments are allowed"))
    if not calls:
        calls.append(ToolCall(kwargs={}, error="No tool.execute(...) call found in the command."))
    return calls


def _is_tool_execute(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "execute"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "tool")


def _tool_call(node: ast.Call, env: dict[str, Any]) -> ToolCall:
    if node.args:
        return ToolCall(kwargs={}, error=f"line {node.lineno}: tool.execute takes keyword arguments only")
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            return ToolCall(kwargs={}, error=f"line {node.lineno}: **kwargs is not allowed in tool.execute")
        ok, value = _literal(kw.value, env)
        if not ok:
            return ToolCall(kwargs={}, error=f"line {node.lineno}: argument {kw.arg!r} is not a literal or a "
                                             "name assigned one")
        kwargs[kw.arg] = value
    return ToolCall(kwargs=kwargs, error="")


def _literal(node: ast.expr, env: dict[str, Any]) -> tuple[bool, Any]:
    if isinstance(node, ast.Name):
        return (True, env[node.id]) if node.id in env else (False, None)
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False, None

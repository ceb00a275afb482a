"""The seed's python_coder result, from a sandboxed execution (`prompts: seed`).

The seed (Takenzz/AgentFlow@4b5aa84, agentic/agentflow/tools/python_coder/tool.py) takes the coder model's
first ```python block (else its first ``` block, else the whole reply), turns `exit(...)`-like calls into
`pass`, runs the code with `python -c` in a bare subprocess for 30 s and returns ONE string: the printed
output (stripped, its middle cut past 4,000 characters), or "Execution error: ..." / "(no stdout, stderr:
...)" / "(no output)". Here the code runs in `agentgraphs.sandbox` instead (isolated; a policy in training
must not get a bare subprocess), and `seed_result` writes what the sandbox reports in the seed's words:

- a wall-clock or CPU-time kill is the seed's timeout, "Execution error: code timed out after 30s";
- an exit of its own (0 or not, or by a signal) reads as the seed's subprocess would: the non-zero exit's
  whole stderr, else "exit code N" (a signal: -N, as `Popen.returncode` gives it); the code's name in a
  traceback is `python -c`'s "<string>", and the frames of the code show no source lines (the sandbox's own
  tracebacks print them; `python -c` has no file to read them from);
- a limit the seed does not have (memory, processes, output size) is "Execution error: " and the sandbox's
  account of it (`agentgraphs.sandbox.explain`).

>>> seed_code("Sure:\\n```python\\nprint(2)\\n```\\n```python\\nprint(3)\\n```")
'print(2)'
>>> seed_sanitize("import sys\\nsys.exit(0)")  # the seed's rule: `exit(...)` inside `sys.exit(...)` too
'import sys\\nsys.pass'
>>> seed_result({"status": "ok", "exit_code": 0, "signal": None, "stdout": "42\\n", "stderr": "",
...              "truncated": False, "limits_hit": []}, exec_timeout=30)
'42'
"""

from __future__ import annotations

import re
import signal

from ..sandbox import ExecutionResult, explain

__all__ = ["SEED_OUTPUT_CHARS", "seed_code", "seed_sanitize", "seed_cut", "seed_traceback", "seed_result"]

SEED_OUTPUT_CHARS = 4000  # tools/python_coder/tool.py:16 _MAX_OUTPUT_LENGTH

# tools/python_coder/tool.py:96-104: the first ```python block, else the first ``` block (lazy, fences and
# the whitespace inside them dropped), else the whole reply
_PYTHON_FENCE = re.compile(r"```python\s*(.*?)\s*```", re.DOTALL)
_ANY_FENCE = re.compile(r"```\s*(.*?)\s*```", re.DOTALL)
# tools/python_coder/tool.py:14, 72-77: each name in this order, with its parenthesised arguments (no ")" inside)
_STOPPING_CALLS = tuple(re.compile(re.escape(name) + r"\s*\([^)]*\)") for name in ("exit", "quit", "sys.exit",
                                                                                   "os._exit"))
_CUT_MARKER = "\n... (truncated) ...\n"  # tools/python_coder/tool.py:65-69
_CODE_FRAME = re.compile(r'^  File "<code>", line \d+, in ')  # a traceback frame in the sandbox's code
_SEED_TIMEOUTS = ("timeout", "cpu_limit")  # the seed's one time limit is the wall clock; CPU time trails it


def seed_code(reply: str) -> str:
    """The code the seed runs from the coder model's reply (see `_PYTHON_FENCE`)."""
    for fence in (_PYTHON_FENCE, _ANY_FENCE):
        found = fence.search(reply)
        if found:
            return found.group(1).strip()
    return reply.strip()


def seed_sanitize(code: str) -> str:
    """`code` with each exit(...), quit(...), sys.exit(...), os._exit(...) replaced by `pass`, in that order
    (so `sys.exit(1)` becomes `sys.pass`, a syntax error, as in the seed)."""
    for call in _STOPPING_CALLS:
        code = call.sub("pass", code)
    return code


def seed_cut(text: str, limit: int = SEED_OUTPUT_CHARS) -> str:
    """`text`, or past `limit` characters its first and last `limit // 2 - 30` around the seed's marker.

    >>> seed_cut("x" * 10 + "y" * 10, limit=80)
    'xxxxxxxxxxyyyyyyyyyy'
    >>> len(seed_cut("z" * 5000)), seed_cut("a" * 3000 + "b" * 3000)[1968:1993]
    (3961, 'aa\\n... (truncated) ...\\nbb')
    """
    if len(text) <= limit:
        return text
    keep = limit // 2 - 30
    return text[:keep] + _CUT_MARKER + text[-keep:]


def seed_traceback(stderr: str) -> str:
    """The sandbox's stderr as `python -c` writes it: the code is "<string>", and its frames' source lines
    (each indented 4 spaces under the frame line, carets included) are not shown.

    >>> print(seed_traceback('Traceback (most recent call last):\\n  File "<code>", line 2, in <module>\\n'
    ...                      '    1 / 0\\n    ~~^~~\\nZeroDivisionError: division by zero\\n'), end="")
    Traceback (most recent call last):
      File "<string>", line 2, in <module>
    ZeroDivisionError: division by zero
    """
    lines, in_code_frame = [], False
    for line in stderr.splitlines(keepends=True):
        if in_code_frame and line.startswith("    "):
            continue
        in_code_frame = bool(_CODE_FRAME.match(line))
        lines.append(line.replace('File "<code>"', 'File "<string>"', 1) if line.startswith("  File ") else line)
    return "".join(lines)


def _exit_code(result: ExecutionResult) -> int:
    code = result.get("exit_code")
    if code is not None:
        return code
    name = result.get("signal")
    try:
        return -int(signal.Signals[name]) if name else 1
    except KeyError:
        return 1


def seed_result(result: ExecutionResult, *, exec_timeout: float) -> str:
    """The seed's one result string for a sandboxed execution (the module docstring's mapping);
    `exec_timeout` is the wall-clock limit the code ran under, in the seed's timeout text."""
    status = result["status"]
    if status in _SEED_TIMEOUTS:
        return f"Execution error: code timed out after {exec_timeout:g}s"
    if status not in ("ok", "error"):
        return f"Execution error: {explain(result)}"
    output = result["stdout"].strip()
    err = seed_traceback(result["stderr"]).strip()
    code = _exit_code(result) if status == "error" else 0
    if code != 0:
        return f"Execution error: {err or f'exit code {code}'}"
    if not output:
        return f"(no stdout, stderr: {seed_cut(err)})" if err else "(no output)"
    return seed_cut(output)

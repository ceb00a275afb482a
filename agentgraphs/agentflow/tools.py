"""AgentFlow's tools and the registry users extend with their own.

A tool is metadata the planner and the command generator read (name, description, input types, output
type, demo commands, limitations) plus an async `run(rt, **kwargs)`. The command generator's
`execution = tool.execute(query=...)` lines are parsed (never executed) into keyword arguments for
`run`; `rt` gives a tool its LLM (the `tools` role's engine, recorded as untrained turns) and the
run's options. Built in: `base_generator` (an LLM answers a sub-task) and `python_coder` (an LLM writes
Python, which runs in `agentgraphs.sandbox`; the code's own errors and limits are its result, a sandbox that
cannot run on the machine is a ConfigError that fails the rollout). A tool may also carry `seed_run`, what it
does under `prompts: seed`: python_coder's asks with the seed's own prompt and returns the seed's one string
(`agentgraphs.agentflow.seed_coder`); base_generator's asks any query as it is.

>>> from agentgraphs.agentflow.tools import Tool, register_tool, registered_tools
>>> async def shout(rt, text: str) -> str:
...     return text.upper()
>>> register_tool("shouter", Tool(name="Shouter_Tool", description="Upper-cases a text.",
...                               input_types={"text": "str - the text"}, output_type="str", run=shout))
>>> "shouter" in registered_tools()
True
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..codeblocks import python_blocks
from ..errors import ConfigError
from ..sandbox import SandboxLimits, explain
from ..tool_code import run_tool_code
from .prompts import PYTHON_CODER_TEMPLATE, SEED_PYTHON_CODER_SYSTEM
from .seed_coder import seed_code, seed_result, seed_sanitize

__all__ = ["Tool", "ToolRuntime", "register_tool", "registered_tools", "resolve_tools", "BASE_GENERATOR",
           "PYTHON_CODER", "extract_python_block", "seed_signature", "seed_view"]


class ToolRuntime(Protocol):
    """What a tool's `run` gets: an LLM call (the `tools` role's engine, recorded, never trained: `prompt` is
    the user message, after the system message `system` when given) and the sandbox limits of this run's
    options. `llm` returns the reply's text; under `prompts: seed` as the seed's tools read it, SGLang's whole
    text: a reply that stopped on the end-of-turn token ends with it ("<|im_end|>" on Qwen)."""

    sandbox_limits: SandboxLimits

    async def llm(self, prompt: str, *, node: str, system: str | None = None) -> str: ...


ToolRun = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    """One tool: what the planner sees (metadata) and what runs (`run(rt, **kwargs)`; under `prompts: seed`
    `seed_run` instead, when the tool has one)."""

    name: str
    description: str
    input_types: Mapping[str, str]
    output_type: str
    run: ToolRun
    demo_commands: tuple[Mapping[str, str], ...] = ()
    limitations: str = ""
    best_practices: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    seed_run: ToolRun | None = None

    def metadata(self) -> dict[str, Any]:
        """The original's tool metadata shape (what the planner and command generator read)."""
        meta: dict[str, Any] = {
            "tool_name": self.name,
            "tool_description": self.description,
            "input_types": dict(self.input_types),
            "output_type": self.output_type,
            "demo_commands": [dict(d) for d in self.demo_commands],
        }
        user = {k: v for k, v in (("limitations", self.limitations), ("best_practices", self.best_practices)) if v}
        if user:
            meta["user_metadata"] = user
        meta.update(self.extra)
        return meta


_REGISTRY: dict[str, Tool] = {}


def register_tool(key: str, tool: Tool) -> None:
    """Make `tool` selectable as `tools=[..., key]` in AgentFlow's options (process-wide).

    A tool can also be given per run in `AgentContext.tools[key]`, which wins over the registry.
    """
    if not isinstance(tool, Tool):
        raise ConfigError(f"register_tool({key!r}): expected an agentgraphs.agentflow.tools.Tool, got "
                          f"{type(tool).__name__}")
    _REGISTRY[key] = tool


def registered_tools() -> list[str]:
    return sorted(_REGISTRY)


def resolve_tools(keys: tuple[str, ...] | list[str], context_tools: Mapping[str, Any]) -> dict[str, Tool]:
    """{planner-facing tool name: Tool} for the selected keys (context first, then the registry)."""
    tools: dict[str, Tool] = {}
    for key in keys:
        tool = context_tools.get(key, _REGISTRY.get(key))
        if not isinstance(tool, Tool):
            raise ConfigError(f"AgentFlow option tools: unknown tool {key!r}; registered: {registered_tools()}, "
                              f"in the context: {sorted(k for k, v in context_tools.items() if isinstance(v, Tool))}."
                              " Fix: register_tool(key, Tool(...)) or AgentContext(tools={key: Tool(...)})")
        tools[tool.name] = tool
    return tools


# -- base_generator -----------------------------------------------------------------------------------


async def _base_generator(rt: ToolRuntime, query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        return "Error: query must be a non-empty string"
    return await rt.llm(query, node="tool:base_generator")


async def _seed_base_generator(rt: ToolRuntime, query: Any) -> str:
    """The seed's base generator (tools/base_generator/tool.py:27-30): the query as the user message, whatever it
    is (an empty one too; a non-string as the chat template prints it, str())."""
    return await rt.llm(query if isinstance(query, str) else str(query), node="tool:base_generator")


BASE_GENERATOR = Tool(
    name="Base_Generator_Tool",
    description=("A generalized tool that takes a query from the user and answers the question step by step to "
                 "the best of its ability."),
    input_types={"query": "str - The query that includes the question and any necessary context."},
    output_type="str - The generated response to the original query",
    run=_base_generator,
    demo_commands=(
        {"command": 'execution = tool.execute(query="Summarize the following text in a few lines")',
         "description": "Generate a short summary given the query from the user."},
    ),
    limitations=("The Base_Generator_Tool may provide hallucinated or incorrect responses; it does not check its "
                 "answers with any other source."),
    best_practices=("Use it for general queries or tasks that need no specialized knowledge or tool; give a clear, "
                    "specific query with all the context it needs."),
    seed_run=_seed_base_generator,
)


# -- python_coder ----------------------------------------------------------------------------------------

_OUTPUT_CHARS = 3500  # the original's printed-output cap (middle cut)


def extract_python_block(text: str) -> str | None:
    """The first ```python block's code (the original takes the first), or None.

    >>> extract_python_block("Here:\\n```python\\nprint(2 + 2)\\n```")
    'print(2 + 2)'
    >>> extract_python_block("no code") is None
    True
    """
    blocks = python_blocks(text)
    return blocks[0] if blocks else None


def _middle_cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = limit // 2 - 50
    return text[:keep] + " ... (truncated: middle content omitted) ... " + text[-keep:]


async def _python_coder(rt: ToolRuntime, query: Any) -> dict[str, str]:
    if not isinstance(query, str) or not query.strip():
        return {"error": "query must be a non-empty string"}
    reply = await rt.llm(PYTHON_CODER_TEMPLATE.format(query=query), node="tool:python_coder")
    code = extract_python_block(reply)
    if code is None:
        return {"error": "No Python code block found in the response"}
    result = await run_tool_code(code, rt.sandbox_limits, tool="AgentFlow python_coder",
                                 drop="drop python_coder from the option tools")
    if result["status"] == "ok":
        return {"printed_output": _middle_cut(result["stdout"].strip(), _OUTPUT_CHARS), "execution_code": code}
    return {"error": _middle_cut(explain(result), _OUTPUT_CHARS), "execution_code": code}


SEED_CODER_TIMEOUT_S = 120.0  # the seed's limit on its coder model's reply (tools/python_coder/tool.py:150-155)


async def _seed_python_coder(rt: ToolRuntime, query: Any) -> str:
    """The seed's python_coder (tools/python_coder/tool.py:131-170): its system prompt with the query as the user
    message, its code extraction and exit-call rewrite, its one result string; the code runs in the sandbox. The
    reply keeps its end-of-turn token (`rt.llm` under `prompts: seed`), so an unfenced reply runs with it, as the
    seed's does."""
    wall_s = rt.sandbox_limits.wall_s
    try:
        reply = await asyncio.wait_for(
            rt.llm(query if isinstance(query, str) else str(query), node="tool:python_coder",
                   system=SEED_PYTHON_CODER_SYSTEM.format(exec_timeout=f"{wall_s:g}")),
            SEED_CODER_TIMEOUT_S)
    except asyncio.TimeoutError:  # the seed's own limit on its coder model (tools/python_coder/tool.py:150-155)
        return f"Code generation error: LLM timed out after {SEED_CODER_TIMEOUT_S:g}s"
    code = seed_sanitize(seed_code(reply))
    result = await run_tool_code(code, rt.sandbox_limits, tool="AgentFlow python_coder",
                                 drop="drop python_coder from the option tools")
    return seed_result(result, exec_timeout=wall_s)


PYTHON_CODER = Tool(
    name="Python_Coder_Tool",
    description=("A tool that generates and executes Python code snippets for calculations and math-related "
                 "problems. The code runs in an isolated sandbox with a time limit."),
    input_types={"query": "str - A clear, specific description of the calculation or math problem to be solved, "
                          "including any necessary numerical inputs."},
    output_type="dict - The printed output and the generated code, or an error message.",
    run=_python_coder,
    demo_commands=(
        {"command": 'execution = tool.execute(query="Find the sum of prime numbers up to 50")',
         "description": "Generate a Python code snippet to find the sum of prime numbers up to 50."},
        {"command": ('query="Given the list [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], calculate the sum of squares of odd '
                     'numbers"\nexecution = tool.execute(query=query)'),
         "description": "Generate Python code for a specific operation on a given list of numbers."},
    ),
    limitations=("Runs in an isolated sandbox: no network, no files outside a temporary directory, limited time "
                 "and memory. Only the printed output is returned, so the code must print its result."),
    best_practices=("Provide clear and specific queries with all numerical inputs in the query string; ask for the "
                    "final result to be printed with a descriptive message."),
    seed_run=_seed_python_coder,
)

register_tool("base_generator", BASE_GENERATOR)
register_tool("python_coder", PYTHON_CODER)


# How the seed's planner lists its two tools (`prompts: seed`): TOOL_NAME and TOOL_DESCRIPTION of
# tools/base_generator/tool.py:5-9 and tools/python_coder/tool.py:19, 35-38, in that order (core/planner.py:58
# loads them sorted by directory).
_SEED_VIEWS = (
    (BASE_GENERATOR, "Generalist_Solution_Generator_Tool",
     "\nA generalized tool that takes query from the user, and answers the question step by step to the best of "
     "its ability.\n"),
    (PYTHON_CODER, "Python_Code_Generator_Tool",
     "\nA tool that generates and executes Python code snippets for calculations and math-related problems.\n"
     "It returns the printed output from the executed code.\n"),
)


def seed_signature(tool: Tool) -> Callable[..., None]:
    """A function that raises, for keyword arguments the seed's `tool.execute(self, query)` would refuse
    (tools/*/tool.py), the seed's TypeError, naming its class (ours share the seed's class names); for any other
    tool a function that accepts anything (its own `run` raises its own).

    >>> seed_signature(BASE_GENERATOR)(context="x")
    Traceback (most recent call last):
    TypeError: Base_Generator_Tool.execute() got an unexpected keyword argument 'context'
    """
    if not any(tool is builtin for builtin, _, _ in _SEED_VIEWS):
        return lambda **kwargs: None

    def execute(query: Any) -> None:
        return None

    execute.__qualname__ = f"{tool.name}.execute"
    return execute


def seed_view(tool: Tool) -> tuple[str, str]:
    """(name, description) the seed's planner sees for `tool`: the seed's own for the two built-in tools, the
    tool's name and description for any other.

    >>> seed_view(PYTHON_CODER)[0], seed_view(Tool("My_Tool", "Does it.", {}, "str", _base_generator))
    ('Python_Code_Generator_Tool', ('My_Tool', 'Does it.'))
    """
    for builtin, name, description in _SEED_VIEWS:
        if tool is builtin:
            return name, description
    return tool.name, tool.description

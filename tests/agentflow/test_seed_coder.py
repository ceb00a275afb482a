'''The seed variant's python_coder is the seed's, from slime's side: rl_bridge.generate against three local
SGLang-contract servers (the policy, a fixed generator model, a fixed coder model), scripted over the tiny model.

The seed (Takenzz/AgentFlow@4b5aa8410c68c92fe45e2852db5a4c6cfe97d321, agentic/agentflow/tools/python_coder/tool.py)
asks its coder model with its own system prompt (:139-146, with LIMITATION :21-26 and BEST_PRACTICE :28-33) and the
query as the user message (:147-150), takes the first ```python block (else the first ``` block, else the whole reply,
:96-104), turns exit/quit/sys.exit/os._exit calls into `pass` (:72-77), runs the code with `python -c` for 30 s
(:12, 107-128) and returns ONE string: the stripped output, its middle cut past 4,000 characters (:16, 62-69), or
"Execution error: <stderr>" / "Execution error: code timed out after 30s" / "(no stdout, stderr: ...)" /
"(no output)". The executor keeps str() of it (core/executor.py:238-242), and every later prompt shows it. The
reply it reads is SGLang's `text`, which keeps the end-of-turn token (core/llm_engine.py:67, slime's sampling
params): a reply without a fence is run whole, "<|im_end|>" included, a syntax error.
Here the code runs in agentgraphs.sandbox; the stderr the seed's string carries comes from a real `python -c`
run by this test (the seed's subprocess).
'''

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.agentflow import VARIANTS
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import clear_cache
from tests.agentflow.test_seed_prompts import seed_bridge_run
from tests.agentflow.test_seed_prompts import (
    ANALYSIS,
    END,
    FINAL,
    QUESTION,
    said,
    seed_final,
    seed_ids,
)
from tests.test_multiturn import RecordingEngine

SEED_MIRROR = Path("/work/.mirror/Takenzz+AgentFlow/repo")
SEED_COMMIT = "4b5aa8410c68c92fe45e2852db5a4c6cfe97d321"
SEED_TOOL = "agentic/agentflow/tools/python_coder/tool.py"
TOOL_NAME = "Python_Code_Generator_Tool"


def seed_system_prompt(exec_timeout: int) -> str:  # tools/python_coder/tool.py:21-33, 140-146
    limitation = f"""
The {TOOL_NAME} has the following limitations:
1. Code execution is time-limited to {exec_timeout} seconds; avoid infinite loops or extremely slow algorithms.
2. No GUI output (matplotlib.pyplot.show() has no effect); use print() to output results.
3. File and network I/O may not work in the sandbox environment.
"""
    best_practice = f"""
For optimal results with the {TOOL_NAME}:
1. Describe the calculation or problem in plain language; do not include Python code in the query.
2. The tool will generate and run Python code automatically — just state what needs to be computed.
3. Always end the generated code with a print() statement so the result is captured.
"""
    return ("You are a Python code generator. "
            "Write a self-contained Python script that solves the problem and prints the final result.\n"
            f"{limitation}\n"
            f"{best_practice}\n"
            "Return ONLY a single Python code block wrapped in ```python ... ```.")


def coder_ids(tokenizer: Any, query: str, exec_timeout: int = 30) -> list[int]:
    """core/llm_engine.py:50-56 over the seed's two messages."""
    messages = [{"role": "system", "content": seed_system_prompt(exec_timeout)}, {"role": "user", "content": query}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def python_c_stderr(code: str) -> str:
    """What the seed's subprocess (`python -c code`) writes to stderr, stripped (tool.py:109-122)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    return done.stderr.strip()


LONG = ", ".join(str(i) for i in range(1500))  # 6,889 characters printed


def _cases() -> dict[str, tuple[str, str]]:
    """query -> (coder reply, the seed's result string)."""
    zero = "x = 6 * 7\nprint('before')\nprint(x / 0)"
    exits = "import sys\nprint('done')\nsys.pass"  # tool.py:72-77 rewrote sys.exit(0): `exit(...)` matched first
    return {
        "Print the product": ("Here you go:\n```python\nprint('The product is', 6 * 7)\n```", "The product is 42"),
        "List the numbers": ("```python\nprint(', '.join(str(i) for i in range(1500)))\n```\nIt prints them.",
                             LONG[:1970] + "\n... (truncated) ...\n" + LONG[-1970:]),
        "Divide by zero": (f"```\n{zero}\n```", "Execution error: " + python_c_stderr(zero)),
        "Exit early": ("```python\nimport sys\nprint('done')\nsys.exit(0)\n```",
                       "Execution error: " + python_c_stderr(exits)),
        "Warn only": ("```python\nimport sys\nsys.stderr.write('careful\\n')\n```", "(no stdout, stderr: careful)"),
        # no fence: the seed runs its whole reply, which ends with the end-of-turn token it kept (tool.py:99, 160)
        "Print unfenced": ("print(6 * 7)", "Execution error: " + python_c_stderr("print(6 * 7)" + END)),
    }


def plan(k: int, query: str, tool: str = TOOL_NAME) -> str:
    return (f"**Justification:** step {k}.\n**Context:** 6 and 7\n**Sub-Goal:** {query}.\n"
            f"**Tool Name:** {tool}")


def command(query: str) -> str:
    return f'execution = tool.execute(query="""{query}""")'


@pytest.fixture()
def servers(tiny_engine: Any) -> Iterator[dict[str, Any]]:
    cases = _cases()
    queries = list(cases)
    wall = {"queries": queries}

    def planner(call: ScriptCall) -> str:
        if "Analyze the given query" in call.prompt_text:
            return ANALYSIS
        k = call.prompt_text.count("'Action Step ")
        tool = TOOL_NAME if TOOL_NAME in call.prompt_text else "Python_Coder_Tool"  # the seed's name, the original's
        return plan(k, wall["queries"][k], tool)

    def generator(call: ScriptCall) -> str:
        text = call.prompt_text
        if "Analyze the given query" in text:  # the original's analysis is a helper's
            return ANALYSIS
        if "Generate a precise command" in text:
            query = next(q for q in wall["queries"] if f"**Sub-Goal:** {q}." in text)
            return f"Generated Command:\n```python\n{command(query)}\n```"
        if "Evaluate if the current memory" in text:
            return "More.\nConclusion: CONTINUE"
        assert "Generate the final output" in text or "Generate a concise final answer" in text, text[-300:]
        return FINAL

    def coder(call: ScriptCall) -> str:
        if "generate a Python code snippet" in call.prompt_text:  # the original's prompt (variant original)
            return "```python\nprint('The product is', 6 * 7)\n```"
        for query, (reply, _) in cases.items():
            if call.prompt_text.endswith(f"{query}<|im_end|>\n<|im_start|>assistant\n"):
                return reply
        if call.prompt_text.endswith("Loop forever<|im_end|>\n<|im_start|>assistant\n"):
            return "```python\nwhile True:\n    pass\n```"
        if call.prompt_text.endswith("Print nothing<|im_end|>\n<|im_start|>assistant\n"):
            return "```python\nx = 6 * 7\n```"
        raise AssertionError(f"unexpected coder prompt: {call.prompt_text[-300:]}")

    engines = {"policy": RecordingEngine(ScriptedPolicy(tiny_engine, planner, name="policy")),
               "generator": RecordingEngine(ScriptedPolicy(tiny_engine, generator, name="generator")),
               "coder": RecordingEngine(ScriptedPolicy(tiny_engine, coder, name="coder"))}
    with SGLangTestServer(engines["policy"], port=0) as p, SGLangTestServer(engines["generator"], port=0) as g, \
            SGLangTestServer(engines["coder"], port=0) as c:
        yield {"policy": p, "generator": g, "coder": c, "scripts": engines, "cases": cases, "wall": wall}
    clear_cache()


def run(servers: dict[str, Any], model_dir: Path, **options: Any) -> Any:
    return seed_bridge_run(servers, model_dir, ("generator", "coder"),
                           {"judge": None, "tool_engines": {"python_coder": "coder"}, **options}, reward=False)


def memory(results: list[tuple[str, str]]) -> dict[str, dict[str, str]]:
    """Memory.get_actions() after these (query, result) steps (core/memory.py:11-22, core/solver.py:115, 127-128)."""
    return {f"Action Step {k}": {"tool_name": TOOL_NAME, "sub_goal": f"{query}.", "command": command(query),
                                 "result": result} for k, (query, result) in enumerate(results)}


def test_seed_python_coder_asks_the_seeds_prompt_and_returns_the_seeds_string(servers: dict[str, Any],
                                                                            tiny_model_dir: Path, qwen25: Any) -> None:
    out = run(servers, tiny_model_dir, max_steps=6)  # variant: seed, the default; one python_coder case a step
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    cases = servers["cases"]
    asked = [prompt for prompt, _ in servers["scripts"]["coder"].calls]
    assert asked == [coder_ids(qwen25, query) for query in cases]  # the seed's system + user messages, token for token
    # every result is the seed's one string: the final output's prompt shows the whole memory
    expected = memory([(query, result) for query, (_, result) in cases.items()])
    final_prompt = servers["scripts"]["generator"].calls[-1][0]
    assert final_prompt == seed_ids(qwen25, seed_final(said(ANALYSIS), QUESTION, expected)), qwen25.decode(final_prompt)
    assert "ZeroDivisionError: division by zero" in expected["Action Step 2"]["result"]
    assert 'File "<string>", line 3' in expected["Action Step 3"]["result"]  # sys.pass: a syntax error, as the seed's
    assert "SyntaxError" in expected["Action Step 5"]["result"] and END in expected["Action Step 5"]["result"]


def test_seed_python_coder_timeout_and_silence(servers: dict[str, Any], tiny_model_dir: Path, qwen25: Any) -> None:
    """A wall-clock kill is the seed's timeout text with the limit the code ran under (its prompt says the same);
    a program that prints nothing is "(no output)"."""
    servers["wall"]["queries"] = ["Loop forever", "Print nothing"]
    out = run(servers, tiny_model_dir, max_steps=2, sandbox_wall_s=1)
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    asked = [prompt for prompt, _ in servers["scripts"]["coder"].calls]
    assert asked == [coder_ids(qwen25, q, exec_timeout=1) for q in ("Loop forever", "Print nothing")]
    expected = memory([("Loop forever", "Execution error: code timed out after 1s"), ("Print nothing", "(no output)")])
    final_prompt = servers["scripts"]["generator"].calls[-1][0]
    assert final_prompt == seed_ids(qwen25, seed_final(said(ANALYSIS), QUESTION, expected)), qwen25.decode(final_prompt)


def test_original_variant_keeps_the_originals_python_coder(servers: dict[str, Any], tiny_model_dir: Path) -> None:
    servers["wall"]["queries"] = ["Print the product"]
    out = run(servers, tiny_model_dir, variant="original", analyzer_engine="generator", max_steps=1)
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    asked = [c.prompt_text for c in servers["scripts"]["coder"].inner.calls]
    assert len(asked) == 1 and "generate a Python code snippet" in asked[0]  # the original's PYTHON_CODER_TEMPLATE
    assert "<|im_start|>system\nYou are a Python code generator" not in asked[0]
    final_text = servers["scripts"]["generator"].inner.calls[-1].prompt_text
    # the memory's result is str() of the original's list of dicts (repr-escaped inside the memory's dict)
    assert r"'result': '[{\'printed_output\': \'The product is 42\', \'execution_code\':" in final_text, final_text


def _seed_constants(source: str) -> dict[str, Any]:
    """The seed tool's module constants and execute()'s system prompt, evaluated from its syntax tree."""
    tree = ast.parse(source)
    env: dict[str, Any] = {}

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(str(value(v)) for v in node.values)
        if isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Name) and node.format_spec is None:
            return env[node.value.id]
        raise ValueError(ast.dump(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = value(node.value)
            except (ValueError, KeyError):
                continue
    return env


def test_the_seeds_source_says_what_this_file_copies() -> None:
    """Where the seed's mirror is on this machine, its tool.py gives the same prompt, cut and time limit."""
    if not (SEED_MIRROR / "HEAD").exists():
        pytest.skip("the seed's git mirror is not on this machine; the copies above are checked against it where it is")
    source = subprocess.run(["git", "-C", str(SEED_MIRROR), "show", f"{SEED_COMMIT}:{SEED_TOOL}"], check=True,
                            capture_output=True, text=True).stdout
    seed = _seed_constants(source)
    assert seed["_EXEC_TIMEOUT"] == 30 == VARIANTS["seed"]["sandbox_wall_s"]
    assert seed["_MAX_OUTPUT_LENGTH"] == 4000 and seed["TOOL_NAME"] == TOOL_NAME
    assert seed["system_prompt"] == seed_system_prompt(30)

"""The seed's executor from the outside: what the planner's next (trained) prompt shows when the command generator
writes a malformed command or a tool refuses its arguments, under `variant: seed`.

Seed: Takenzz/AgentFlow@4b5aa84, agentic/agentflow/core/executor.py. Its command is the first ```python block
after "Generated Command:", else the longest ```python block, else the text from `execution = tool.execute(` to the
last ")", else "No command found." (:40-82); its arguments come from running the command against a recording tool,
else two regex readings of `query=` (:130-176); its error texts are "Command parse error: Cannot parse command:
<repr>" and "Tool execution error (<name as written>): <exception>" (:225-245). The expected texts below are
worked out by hand from those lines.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgraphs.testing.scripted import ScriptCall
from tests.agentflow.test_graph import helper_script, plan
from tests.agentflow.test_seed import run_flow

BASE = "Generalist_Solution_Generator_Tool"


def _command(code: str) -> str:
    return f"Generated Command:\n```python\n{code}\n```"


def _run(tiny_engine: Any, reply: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """A seed run of two steps: the command generator answers `reply` at step 0; the base generator answers
    "Forty-two." to whatever it is asked. Returns the memory's first step, the second planner prompt (trained
    turn) and the base generator's user messages."""
    roles = helper_script(verdicts=["CONTINUE", "STOP"])
    asked: list[str] = []
    commands = iter([reply, _command('execution = tool.execute(query="Compute 6 * 7")')])

    def helper(call: ScriptCall) -> str:
        if "Generate a precise command" in call.prompt_text:
            return next(commands)
        if "Task:" not in call.prompt_text and "Python code generator" not in call.prompt_text:  # base generator
            asked.append(call.prompt_text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0])
            return "Forty-two."
        return roles(call)

    plans = [plan("Multiply six by seven.", BASE), plan("Multiply again.", BASE)]
    rollout, policy, _ = run_flow(tiny_engine, plans, helper, max_steps=2)
    assert rollout.status == "completed", rollout.reason
    prompts = [c.prompt_text for c in policy.calls if "optimal next step" in c.prompt_text]
    return rollout.final_state["memory"][0], prompts, asked


@pytest.mark.parametrize(("reply", "command", "result", "asked"), [
    # no command at all: the seed's placeholder command and its parse error
    ("I cannot write that command.", "No command found.",
     "Command parse error: Cannot parse command: 'No command found.'", None),
    # quotes inside a double-quoted query: not Python; the seed's regex reading takes the query
    (_command('execution = tool.execute(query="He said "hi" twice")'),
     'execution = tool.execute(query="He said "hi" twice")', "Forty-two.<|im_end|>", 'He said "hi" twice'),
    # a bare call in prose: the seed takes it from `execution =` to the last ")"
    ('Here it is: execution = tool.execute(query="Compute 6 * 7") as asked.',
     'execution = tool.execute(query="Compute 6 * 7")', "Forty-two.<|im_end|>", "Compute 6 * 7"),
    # an argument the seed's tool does not take: Python's TypeError, naming the seed's class
    (_command('execution = tool.execute(context="6 and 7")'), 'execution = tool.execute(context="6 and 7")',
     f"Tool execution error ({BASE}): Base_Generator_Tool.execute() got an unexpected keyword argument 'context'",
     None),
    # an empty query is asked as it is (tools/base_generator/tool.py:27-30)
    (_command('execution = tool.execute(query="")'), 'execution = tool.execute(query="")', "Forty-two.<|im_end|>",
     ""),
], ids=["none", "quotes", "prose", "kwarg", "empty"])
def test_the_planner_sees_the_seeds_command_and_result(tiny_engine: Any, reply: str, command: str, result: str,
                                                       asked: str | None) -> None:
    """Each fails on the code before this test's commit: the command was "" / the whole prose, the result
    ours ("Command parse error: No command was generated.", "...not valid Python...", "Error in
    execute_tool_command: TypeError: _base_generator() ...", "Error: query must be a non-empty string")."""
    step, prompts, base_asked = _run(tiny_engine, reply)
    assert (step["command"], step["result"]) == (command, result)
    assert base_asked == ([] if asked is None else [asked]) + ["Compute 6 * 7"]  # step 0's ask, then step 1's
    # the trained turn's prompt shows them as the seed's memory prints them
    assert repr(command) in prompts[1] or repr(command).replace("\\'", "'") in prompts[1]
    assert f"'result': {result!r}" in prompts[1]


@pytest.mark.parametrize(("reply", "command"), [
    # the first block after the first "Generated Command:", not a later one
    ("Generated Command:\n```python\nexecution = tool.execute(query=\"a\")\n```\nGenerated Command:\n```python\n"
     "execution = tool.execute(query=\"second\")\n```", 'execution = tool.execute(query="a")'),
    # without the marker, the longest block (the first of equal ones)
    ("```python\nprint(1)\n```\nthen\n```python\nexecution = tool.execute(query=\"longer\")\n```",
     'execution = tool.execute(query="longer")'),
    # a ```python tag without a newline after it is no block; a trailing end token is cut
    ("```python print(1)``` so execution = tool.execute(query=\"x\")<|im_end|>", 'execution = tool.execute(query="x")'),
    # a leading "(... pid=N ...)" (a worker's log prefix) is dropped
    ("Generated Command:\n```python\n(worker pid=12) execution = tool.execute(query=\"x\")\n```",
     'execution = tool.execute(query="x")'),
])
def test_seed_command_extraction(reply: str, command: str) -> None:
    from agentgraphs.agentflow.seed_command import seed_command

    assert seed_command(reply) == command


@pytest.mark.parametrize(("command", "kwargs"), [
    ('execution = tool.execute(query="a")\nexecution = tool.execute(query="b")', {"query": "b"}),
    ("execution = tool.execute(query='''it's \"x\"''')", {"query": 'it\'s "x"'}),
    ('execution = tool.execute(query="""it\'s """ )', {"query": "it's "}),
    # neither Python nor a closed quote: everything from query= to the last ")", stripped, one quote mark cut
    ('execution = tool.execute(query="open ended )', {"query": "open ended"}),
    ("execution = tool.execute(query=six times seven)", {"query": "six times seven"}),
    ("execution = tool.execute(query=)", "Cannot parse command: 'execution = tool.execute(query=)'"),
    ("print('no call')", "Cannot parse command: \"print('no call')\""),
])
def test_seed_command_kwargs(command: str, kwargs: Any) -> None:
    from agentgraphs.agentflow.seed_command import seed_command_kwargs

    assert seed_command_kwargs(command) == kwargs


def test_hostile_commands_read_in_linear_time() -> None:
    """A reply of many unclosed tags or quotes is read without the regexes' backtracking."""
    import time

    from agentgraphs.agentflow.seed_command import seed_command, seed_command_kwargs

    started = time.monotonic()
    seed_command("Generated Command:" + "```python\n" * 20_000)
    seed_command_kwargs("tool.execute(query=" + '"' * 50_000 + " )")
    assert time.monotonic() - started < 2.0


# -- a tool name the seed does not know ------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "written"), [
    (plan("Look up the product.", "Google_Search_Tool"), "Google_Search_Tool"),
    ("The product is forty-two, I believe.", ""),  # no Context/Sub-Goal/Tool Name block: an empty name
], ids=["unknown", "unparsed"])
def test_an_unknown_tool_runs_the_base_generator(tiny_engine: Any, reply: str, written: str) -> None:
    """core/executor.py:178-200: a name the seed does not resolve falls back to Base_Generator_Tool; the command is
    asked for the name as written (core/solver.py:115-122) and the memory keeps that name (:127-128). Fails on the
    code before this test's commit, where the step was skipped with "tool was not found" placeholders."""
    roles = helper_script(verdicts=["STOP"])
    command_prompts: list[str] = []

    def helper(call: ScriptCall) -> str:
        if "Generate a precise command" in call.prompt_text:
            command_prompts.append(call.prompt_text)
            return _command('execution = tool.execute(query="What is 6 times 7?")')
        if call.prompt_text.endswith("What is 6 times 7?<|im_end|>\n<|im_start|>assistant\n"):
            return "Forty-two."
        return roles(call)

    rollout, _, _ = run_flow(tiny_engine, [reply], helper, max_steps=1)
    assert rollout.status == "completed", rollout.reason
    assert rollout.final_state["memory"] == [{
        "tool_name": written, "sub_goal": "Look up the product." if written else "",
        "command": 'execution = tool.execute(query="What is 6 times 7?")', "result": "Forty-two.<|im_end|>"}]
    assert len(command_prompts) == 1 and f"- **Tool Name:** {written}\n" in command_prompts[0]
    assert [t["node"] for t in rollout.turns] == ["analyze_query", "plan_next_step", "generate_command",
                                                  "tool:base_generator", "verify", "final_output"]


@pytest.mark.parametrize("options", [{"unknown_tool": "placeholders"}, {"tools": ["python_coder"]}])
def test_the_placeholders_when_asked_or_without_a_base_generator(tiny_engine: Any, options: dict) -> None:
    rollout, _, _ = run_flow(tiny_engine, [plan("Look it up.", "Google_Search_Tool")],
                             helper_script(verdicts=["STOP"]), max_steps=1, **options)
    assert rollout.status == "completed", rollout.reason
    step = rollout.final_state["memory"][0]
    assert step["tool_name"] == "No matched tool given: Google_Search_Tool"
    assert step["command"] == "No command was generated because the tool was not found."

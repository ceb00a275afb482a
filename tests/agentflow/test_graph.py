"""AgentFlow's graph with scripted policies over the tiny model (real ids and log-probs).

The planner is the policy (ScriptedPolicy); every other role is a second ScriptedPolicy registered as
the context's "helper" engine, answering by which prompt it reads. python_coder's code really runs in
agentgraphs.sandbox. These tests run the original's variant (only plan_next_step trained); the seed's
(the default: the analysis trained too) is tested in test_seed.py. They say `judge: null` (math-verify
scores; the judge's path is tested in test_reward.py and test_judge_engine.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgraphs.agentflow import SPEC, Tool, build_graph
from agentgraphs.agentflow.prompts import NO_TOOL_COMMAND, NO_TOOL_RESULT
from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.errors import ConfigError
from agentgraphs.records import sample_fields
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.trace import check_trace


def plan(sub_goal: str, tool: str, context: str = "The query as given.") -> str:
    return (f"**Justification:** {tool} fits this sub-goal.\n**Context:** {context}\n"
            f"**Sub-Goal:** {sub_goal}\n**Tool Name:** {tool}")


def helper_script(*, code: str = "print('The product is', 6 * 7)", verdicts: list[str] | None = None,
                  command: str | None = None, answer: str = "42"):
    """The helper model: answers each role by the prompt it is given."""
    verdicts = list(verdicts or ["CONTINUE", "STOP"])
    seen_verifications = []

    def script(call: ScriptCall) -> str:
        text = call.prompt_text
        if "Analyze the given query" in text:
            return "Summary: a product of two numbers. Skills: arithmetic. Tools: Python_Coder_Tool."
        if "Generate a precise command" in text:
            return command or 'Generated Command:\n```python\nexecution = tool.execute(query="Compute 6 * 7")\n```'
        if "generate a Python code snippet" in text or "You are a Python code generator" in text:  # original, seed
            return f"Step by step:\n```python\n{code}\n```"
        if "Evaluate if the current memory" in text:
            verdict = verdicts[min(len(seen_verifications), len(verdicts) - 1)]
            seen_verifications.append(verdict)
            return f"The memory holds the computation.\n**Conclusion**: **{verdict}**"
        if "Generate a concise final answer" in text:
            return f"1. **Process Summary:** computed it.\n2. **Answer:** <answer>{answer}</answer>"
        if "Generate the final output" in text:  # the seed's final output asks for \boxed{} (core/planner.py:168)
            return "Computed it.\n" + (answer if "\\boxed" in answer else f"The answer is \\boxed{{{answer}}}.")
        return "A general answer."

    return script


def run(tiny_engine: Any, planner: list[str], helper: Any, *, label: Any = "42", ctx_tools: dict | None = None,
        max_new_tokens: int = 256, **options: Any):
    policy = ScriptedPolicy(tiny_engine, planner, name="planner")
    helper_engine = ScriptedPolicy(tiny_engine, helper, name="helper")
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"helper": helper_engine},
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens), tools=ctx_tools or {})
    inp = rollout_input("What is 6 times 7?", label, {}, 0)
    rollout = asyncio.run(run_rollout(SPEC, inp, ctx, options={"variant": "original", "judge": None, **options}))
    return rollout, policy, helper_engine


def assert_flow_grpo_layout(rollout: Any) -> None:
    """Only plan_next_step turns are trained; each is its own sequence, checked token by token."""
    planner_turns = [i for i, t in enumerate(rollout.turns) if t["node"] == "plan_next_step"]
    for i, turn in enumerate(rollout.turns):
        assert turn["trainable"] == (turn["node"] == "plan_next_step"), (i, turn["node"])
    seqs = check_trace(rollout.turns, SPEC.layout)
    assert [s["turn_indices"] for s in seqs] == [[i] for i in planner_turns]
    for seq, i in zip(seqs, planner_turns):
        turn = rollout.turns[i]
        assert seq["tokens"] == turn["prompt_ids"] + turn["output_ids"]
        assert seq["response_length"] == len(turn["output_ids"])
        assert seq["loss_mask"] == [1] * len(turn["output_ids"])
        assert seq["rollout_log_probs"] == turn["output_logprobs"]
    assert rollout.sequences == seqs


def test_two_step_solve_with_python_coder_ending_in_stop(tiny_engine: Any) -> None:
    planner = [plan("Compute 6 * 7 with Python.", "Python_Coder_Tool"),
               plan("Double-check 6 * 7 with Python.", "python coder tool")]  # normalised tool name
    rollout, policy, helper = run(tiny_engine, planner, helper_script())
    assert rollout.status == "completed", rollout.reason
    nodes = [t["node"] for t in rollout.turns]
    assert nodes == ["analyze_query",
                     "plan_next_step", "generate_command", "tool:python_coder", "verify",
                     "plan_next_step", "generate_command", "tool:python_coder", "verify",
                     "final_output"]
    state = rollout.final_state
    assert state["stop_reason"] == "verifier" and state["step"] == 2
    assert [m["tool_name"] for m in state["memory"]] == ["Python_Coder_Tool", "Python_Coder_Tool"]
    assert "The product is 42" in state["memory"][0]["result"]  # really executed in the sandbox
    assert state["memory"][0]["command"] == 'execution = tool.execute(query="Compute 6 * 7")'
    assert rollout.answer == "42" and rollout.reward == 1.0
    assert rollout.summary["steps"] == 2 and rollout.summary["stop_reason"] == "verifier"
    # the second plan sees the first step's result in its prompt (memory)
    assert "Action Step 1" in policy.calls[1].prompt_text and "The product is 42" in policy.calls[1].prompt_text
    assert_flow_grpo_layout(rollout)
    assert len(rollout.sequences) == 2
    fields = sample_fields(rollout, SPEC)
    assert sum(fields["loss_mask"]) == len(rollout.turns[1]["output_ids"])  # first sequence = first plan turn


def test_unknown_tool_skips_command_and_execution(tiny_engine: Any) -> None:
    planner = [plan("Search the web for 6 * 7.", "Google_Search_Tool"),
               plan("Compute 6 * 7.", "Python_Coder_Tool")]
    rollout, _, _ = run(tiny_engine, planner, helper_script())
    assert rollout.status == "completed", rollout.reason
    nodes = [t["node"] for t in rollout.turns]
    assert nodes[:3] == ["analyze_query", "plan_next_step", "verify"]  # no command, no tool
    first = rollout.final_state["memory"][0]
    assert first["tool_name"] == "No matched tool given: Google_Search_Tool"
    assert (first["command"], first["result"]) == (NO_TOOL_COMMAND, NO_TOOL_RESULT)
    assert rollout.reward == 1.0
    assert_flow_grpo_layout(rollout)


def test_a_verifier_that_never_says_stop_ends_at_max_steps(tiny_engine: Any) -> None:
    planner = [plan(f"Attempt {i}.", "Base_Generator_Tool") for i in range(4)]
    command = 'Generated Command:\n```python\nexecution = tool.execute(query="What is 6 times 7?")\n```'
    rollout, _, _ = run(tiny_engine, planner, helper_script(verdicts=["CONTINUE"], command=command), max_steps=4)
    assert rollout.status == "completed", rollout.reason
    state = rollout.final_state
    assert state["step"] == 4 and state["stop_reason"] == "max_steps"
    assert [t["node"] for t in rollout.turns].count("plan_next_step") == 4
    assert [t["node"] for t in rollout.turns].count("tool:base_generator") == 4
    assert_flow_grpo_layout(rollout)
    assert len(rollout.sequences) == 4


def test_a_tool_that_times_out_is_a_result_not_a_failure(tiny_engine: Any) -> None:
    planner = [plan("Loop forever.", "Python_Coder_Tool")]
    rollout, _, _ = run(tiny_engine, planner, helper_script(code="while True:\n    pass", verdicts=["STOP"]),
                        max_steps=1, sandbox_wall_s=1.0)
    assert rollout.status == "completed", rollout.reason
    result = rollout.final_state["memory"][0]["result"]
    assert "wall-clock limit" in result  # the sandbox's account, in the memory the planner reads next
    # and the per-call tool timeout of the graph itself
    async def slow(rt: Any, query: str) -> str:
        await asyncio.sleep(30)
        return "never"

    sleeper = Tool(name="Sleeper_Tool", description="Sleeps.", input_types={"query": "str"}, output_type="str",
                   run=slow)
    command = 'Generated Command:\n```python\nexecution = tool.execute(query="zzz")\n```'
    rollout, _, _ = run(tiny_engine, [plan("Sleep.", "Sleeper_Tool")],
                        helper_script(verdicts=["STOP"], command=command), ctx_tools={"sleeper": sleeper},
                        max_steps=1, tool_timeout_s=0.2, tools=("sleeper",))
    assert rollout.status == "completed", rollout.reason
    assert "Execution timed out after 0.2 seconds" in rollout.final_state["memory"][0]["result"]


def test_a_command_that_raises_or_is_not_a_tool_call(tiny_engine: Any) -> None:
    planner = [plan("Compute.", "Python_Coder_Tool")]
    rollout, _, _ = run(tiny_engine, planner, helper_script(code="raise ValueError('bad input')", verdicts=["STOP"]),
                        max_steps=1)
    assert rollout.status == "completed", rollout.reason
    assert "ValueError: bad input" in rollout.final_state["memory"][0]["result"]

    async def broken(rt: Any, query: str) -> str:
        raise RuntimeError("tool exploded")

    boom = Tool(name="Boom_Tool", description="Raises.", input_types={"query": "str"}, output_type="str", run=broken)
    hostile = ('Generated Command:\n```python\nimport os\nos.system("touch /tmp/pwned")\n'
               'execution = tool.execute(query="x")\nexecution = tool.execute(nope=open("/etc/passwd"))\n```')
    rollout, _, _ = run(tiny_engine, [plan("Explode.", "Boom_Tool")], helper_script(verdicts=["STOP"], command=hostile),
                        ctx_tools={"boom": boom}, max_steps=1, tools=("boom",))
    assert rollout.status == "completed", rollout.reason
    result = rollout.final_state["memory"][0]["result"]
    assert "only `execution = tool.execute(...)`" in result  # import os / os.system: refused, never run
    assert "RuntimeError: tool exploded" in result
    assert "argument 'nope' is not a literal" in result


def test_max_time_reached_goes_to_the_final_output(tiny_engine: Any) -> None:
    async def slowish(rt: Any, query: str) -> str:
        await asyncio.sleep(0.5)
        return "partial"

    tool = Tool(name="Slow_Tool", description="Takes a while.", input_types={"query": "str"}, output_type="str",
                run=slowish)
    command = 'Generated Command:\n```python\nexecution = tool.execute(query="go")\n```'
    planner = [plan(f"Step {i}.", "Slow_Tool") for i in range(5)]
    rollout, _, _ = run(tiny_engine, planner, helper_script(verdicts=["CONTINUE"], command=command),
                        ctx_tools={"slow": tool}, max_steps=5, max_time_s=0.3, tools=("slow",))
    assert rollout.status == "completed", rollout.reason
    state = rollout.final_state
    # the clock starts before the analysis (as the original's): on a slow machine the analysis alone may
    # use the budget (0 steps); otherwise one 0.5 s step does; never a second step
    assert state["step"] in (0, 1) and state["stop_reason"] == "max_time"
    assert [t["node"] for t in rollout.turns][-1] == "final_output"
    assert_flow_grpo_layout(rollout)


def test_roles_can_use_the_policy_itself_untrained(tiny_engine: Any) -> None:
    """No helper engine: every role falls back to the policy, recorded as untrained turns."""
    script = helper_script(verdicts=["STOP"])
    replies = iter([plan("Compute 6 * 7.", "Python_Coder_Tool")])

    def both(call: ScriptCall) -> str:
        if "Determine the optimal next step" in call.prompt_text:
            return next(replies)
        return script(call)

    policy = ScriptedPolicy(tiny_engine, both)
    ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer,
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
    rollout = asyncio.run(run_rollout(SPEC, rollout_input("What is 6 times 7?", "42", {}, 0), ctx,
                                      options={"max_steps": 1, "variant": "original", "judge": None}))
    assert rollout.status == "completed", rollout.reason
    assert {t["engine"] for t in rollout.turns} == {policy.name}
    assert_flow_grpo_layout(rollout)
    assert rollout.reward == 1.0


def test_unknown_role_engine_and_tool_are_config_errors(tiny_engine: Any) -> None:
    with pytest.raises(ConfigError, match="`verifier_engine` names the engine 'nope'"):  # before the graph runs
        run(tiny_engine, [plan("x", "Python_Coder_Tool")], helper_script(), verifier_engine="nope")
    rollout, _, _ = run(tiny_engine, [plan("x", "Python_Coder_Tool")], helper_script(),
                        tools=("web_search",))
    assert rollout.status == "failed" and "unknown tool 'web_search'" in rollout.reason
    with pytest.raises(Exception, match="max_steps"):
        SPEC.resolve_options({"max_steps": 0})


def test_graph_has_the_issue_nodes() -> None:
    nodes = set(build_graph().get_graph().nodes) - {"__start__", "__end__"}
    assert nodes == {"analyze_query", "plan_next_step", "generate_command", "execute", "update_memory", "verify",
                     "final_output"}


def test_helper_roles_over_an_openai_compatible_endpoint(tiny_engine: Any) -> None:
    """The helper model behind /v1/chat/completions (text in, text out): the roles still work, and only
    the planner's turns carry token ids to train."""
    from agentgraphs.engines import make_engine
    from agentgraphs.testing.server import SGLangTestServer

    helper = ScriptedPolicy(tiny_engine, helper_script(), name="helper")
    with SGLangTestServer(helper) as server:
        async def go() -> Any:
            engine = make_engine(f"openai:{server.url}/v1#helper")
            policy = ScriptedPolicy(tiny_engine, [plan("Compute 6 * 7 with Python.", "Python_Coder_Tool"),
                                                  plan("Check it.", "Python_Coder_Tool")], name="planner")
            ctx = AgentContext(policy=policy, tokenizer=tiny_engine.tokenizer, engines={"helper": engine},
                               sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
            try:
                return await run_rollout(SPEC, rollout_input("What is 6 times 7?", "42", {}, 0), ctx,
                                         options={"variant": "original", "judge": None})
            finally:
                await engine.aclose()

        rollout = asyncio.run(go())
        assert server.stats.chat_requests == 8  # analysis, 2 x (command, code, verify), final
    assert rollout.status == "completed", rollout.reason
    assert "The product is 42" in rollout.final_state["memory"][0]["result"]
    assert rollout.reward == 1.0
    helper_turns = [t for t in rollout.turns if t["node"] != "plan_next_step"]
    assert helper_turns and all(t["output_ids"] == [] and not t["trainable"] for t in helper_turns)
    assert_flow_grpo_layout(rollout)


def test_a_branch_resumed_later_keeps_the_time_budget(tiny_engine: Any, monkeypatch: Any) -> None:
    """max_time_s counts the run's own time in its nodes: resuming a checkpoint a day later (a replay, a
    fork, a paused debugger session) runs the same loop, where a clock of day in state cut it at once."""
    from langgraph.checkpoint.memory import InMemorySaver

    opts = SPEC.resolve_options({"variant": "original", "max_steps": 2, "max_time_s": 300})
    ctx = AgentContext(policy=ScriptedPolicy(tiny_engine, [plan(f"Step {i}.", "Python_Coder_Tool") for i in range(3)],
                                             name="planner"), tokenizer=tiny_engine.tokenizer,
                       engines={"helper": ScriptedPolicy(tiny_engine, helper_script(verdicts=["CONTINUE"]),
                                                         name="helper")},
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
    graph = build_graph(opts, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "later"}, "recursion_limit": 100}

    async def main() -> dict:
        inp = SPEC.make_input(rollout_input("What is 6 times 7?", "42", {}, 0), opts)
        paused = await graph.ainvoke(inp, config, context=ctx, interrupt_after=["analyze_query"])
        assert "analysis" in paused and "next_step" not in paused  # paused after the analysis, as `step` leaves it
        now = __import__("time").time()
        monkeypatch.setattr("time.time", lambda: now + 86_400.0)  # resumed a day later
        return await graph.ainvoke(None, config, context=ctx)

    state = asyncio.run(main())
    assert state["stop_reason"] == "max_steps" and state["step"] == 2
    assert 0.0 < state["elapsed_s"] < 300


def test_a_long_step_result_keeps_its_end_in_the_memory(tiny_engine: Any) -> None:
    """The seed's memory (core/memory.py) keeps a long result's first and last 2,048 characters; the original
    keeps it whole. A tool's conclusion comes last: the head-only cut dropped it, so the planner, the
    verifier and the final output never saw the answer the tool found."""
    answer = "Working: " + "6 * 7 is computed by adding 6 seven times. " * 110 + "The final answer is 42."
    assert len(answer) > 4500

    roles = helper_script(verdicts=["CONTINUE", "STOP"])

    def helper(call: ScriptCall) -> str:
        if "Generate a precise command" in call.prompt_text:
            return 'Generated Command:\n```python\nexecution = tool.execute(query="What is 6 times 7?")\n```'
        if call.prompt_text.rstrip().endswith("What is 6 times 7?<|im_end|>\n<|im_start|>assistant"):
            return answer  # the base generator's own call
        return roles(call)

    rollout, policy, _ = run(tiny_engine, [plan("Compute 6 * 7.", "Base_Generator_Tool"),
                                           plan("Check it.", "Base_Generator_Tool")], helper, max_new_tokens=2048)
    assert rollout.status == "completed", rollout.reason
    result = rollout.final_state["memory"][0]["result"]
    full = str([answer])
    assert result.startswith(full[:2048]) and result.endswith(full[-2048:])
    assert len(result) < 4096 + 100
    assert "The final answer is 42." in result
    assert "The final answer is 42." in policy.calls[1].prompt_text  # the next plan reads it


def test_a_sandbox_that_cannot_run_here_fails_the_rollout(tiny_engine: Any, monkeypatch: Any) -> None:
    """A machine without the sandbox's protections (no bubblewrap, say) refuses every execution. That is the
    machine's fault, not the planner's: the rollout fails loudly, naming the fix, instead of showing the
    planner "the sandbox could not run the code" as python_coder's result and training on a tool that never
    works."""
    from agentgraphs.sandbox import SandboxUnavailableError

    async def refuse(code: str, limits: Any) -> Any:
        raise SandboxUnavailableError("filesystem NOT HELD: bubblewrap is not installed. Fix: apt-get install "
                                      "bubblewrap", ["filesystem"])

    monkeypatch.setattr("agentgraphs.tool_code.run_python_async", refuse)  # the shared helper's sandbox call
    rollout, _, _ = run(tiny_engine, [plan("Compute 6 * 7 with Python.", "Python_Coder_Tool")],
                        helper_script(verdicts=["STOP"]), max_steps=1)
    assert rollout.status == "failed"
    assert "ConfigError" in rollout.reason and "python_coder" in rollout.reason
    assert "bubblewrap" in rollout.reason and "python -m agentgraphs.sandbox" in rollout.reason
    assert not any(sample_fields(rollout, SPEC)["loss_mask"])  # a failed trajectory trains nothing


def test_tool_metadata_is_printed_as_the_original_prints_it(tiny_engine: Any) -> None:
    """The original (and the seed) put the metadata dicts in their f-string prompts as they are, so the model
    reads Python's dict repr ({'tool_name': 'Python_Coder_Tool', ...}), not JSON ({"tool_name": ...})."""
    from agentgraphs.agentflow import BASE_GENERATOR, PYTHON_CODER

    rollout, policy, helper = run(tiny_engine, [plan("Compute 6 * 7 with Python.", "Python_Coder_Tool")],
                                  helper_script(verdicts=["STOP"]), max_steps=1)
    assert rollout.status == "completed", rollout.reason
    toolbox = {"Base_Generator_Tool": BASE_GENERATOR.metadata(), "Python_Coder_Tool": PYTHON_CODER.metadata()}
    assert f"- **Toolbox Metadata:** {toolbox}\n" in policy.calls[0].prompt_text
    command_prompt = next(c.prompt_text for c in helper.calls if "Generate a precise command" in c.prompt_text)
    assert f"- **Tool Metadata:** {PYTHON_CODER.metadata()}\n" in command_prompt

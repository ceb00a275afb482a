"""Editing an AgentFlow run in the debugger (README "Debugging a run"): the route after the verifier reads the run's
context (the step cap: `max_steps`, or `eval_max_steps` in evaluation), so an edit there must route with it. Before
the edit carried the run's context, LangGraph raised "Missing required config key" at every verifier checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentgraphs.checkpoints.debugger import DebugSession
from agentgraphs.rollout import rollout_input
from agentgraphs.testing.scripted import ScriptedPolicy
from tests.agentflow.test_graph import helper_script, plan


def _planner(call: Any) -> str:
    if "Analyze the given query" in call.prompt_text:
        return "Summary: a product. Skills: arithmetic. Tools: Python_Coder_Tool."
    return plan("Compute 6 * 7.", "Python_Coder_Tool")


def test_an_edit_of_the_verifiers_conclusion_routes_with_the_runs_context(tmp_path: Path, tiny_engine: Any) -> None:
    """The verifier said CONTINUE; the user edits its conclusion to STOP at that checkpoint: the route (which
    reads the step cap from the run's context) sends the run to final_output, which answers from the memory."""
    policy = ScriptedPolicy(tiny_engine, _planner, name="planner")
    helper = ScriptedPolicy(tiny_engine, helper_script(verdicts=["CONTINUE"]), name="helper")

    async def go() -> tuple[tuple[str, ...], Any, list[str]]:
        async with DebugSession.open("agentflow", tmp_path / "debug.sqlite", row=rollout_input("What is 6 * 7?", "42"),
                                     engine=policy, engines={"helper": helper}, options={"judge": None}) as session:
            ran: list[str] = []
            while not ran or ran[-1] != "verify":
                ran.append((await session.state()).next[0])
                await session.step()
            assert (await session.state()).values["conclusion"] == "CONTINUE"
            await session.edit({"conclusion": "STOP"})
            after = (await session.state()).next
            await session.run_to_end()
            return after, await session.rollout(), ran

    after, rollout, ran = asyncio.run(go())
    assert ran[-1] == "verify" and after == ("final_output",)
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    assert rollout.final_state.get("stop_reason") == "verifier"

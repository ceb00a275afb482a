"""Debugging a ToolOrchestra run from the outside (README "Debugging a run"): the graph's route reads the run's
context (the turn cap depends on evaluation), so an edit (the debugger's `edit`, `fork`) must route with it:
what was to run next runs, the edited conversation is the orchestrator's next prompt, and the cap is the
context's (training 12 turns, evaluation `eval_max_turns`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentgraphs.checkpoints.debugger import DebugSession
from agentgraphs.checkpoints.replay import fork, history
from agentgraphs.context import AgentContext
from agentgraphs.engines.base import SamplingParams
from agentgraphs.engines.hf import HFEngine
from agentgraphs.rollout import rollout_input
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.trace import check_trace
from tests.toolorchestra.test_experts import call
from tests.toolorchestra.test_seed_tools import EXPERTS, QUESTION, Retrieval, scorer  # noqa: F401  (a fixture)


def _ctx(scorer: HFEngine, orchestrator: list[str], evaluation: bool = False) -> AgentContext:
    replies = {"searcher": "<query>Zorblax code</query>", "reasoner": "4321 + 1", "answerer": "<answer>4322</answer>"}
    experts = {name: ScriptedPolicy(scorer, lambda _call, reply=reply: reply, name=name)
               for name, reply in replies.items()}
    return AgentContext(policy=ScriptedPolicy(scorer, orchestrator, name="orchestrator"), tokenizer=scorer.tokenizer,
                        engines=experts, tools={"retrieval": Retrieval()}, evaluation=evaluation,
                        sampling=SamplingParams(temperature=1.0, max_new_tokens=256))


def test_an_edit_of_the_seed_conversation_routes_with_the_runs_context_and_the_next_prompt_reads_it(
        scorer: HFEngine, tmp_path: Path) -> None:
    """Stopped after the search, the conversation is edited: the edit counts as `search`, whose route (the turn
    cap, from the context) says the orchestrator runs next; its prompt is the edited conversation."""
    ctx = _ctx(scorer, [call("search", "searcher"), call("answer", "answerer")])
    edited = [{"role": "assistant", "content": "edited turn<|im_end|>"}, {"role": "tool", "content": "edited result"}]

    async def go() -> Any:
        async with DebugSession.open("toolorchestra", tmp_path / "d.sqlite", row=rollout_input(QUESTION, "4322"),
                                     context=ctx, options={"experts": EXPERTS}) as session:
            await session.step()  # orchestrator
            await session.step()  # search
            await session.edit({"history": edited})
            assert (await session.state()).next == ("orchestrator",)
            await session.run_to_end()
            return await session.rollout()

    rollout = asyncio.run(go())
    assert rollout.status == "completed" and rollout.answer == "4322", rollout.reason
    second = ctx.policy.calls[1].prompt_text
    assert "edited turn<|im_end|><|im_end|>" in second and "edited result" in second and "[Doc 1]" not in second
    check_trace(rollout.final_state["turns"], "per_turn")


def test_a_fork_of_an_evaluation_thread_routes_with_its_turn_cap(scorer: HFEngine, tmp_path: Path) -> None:
    """A fork at the orchestrator's checkpoint past the training cap (max_turns 1) of an evaluation thread
    (eval_max_turns 2): the route reads the evaluation context, so the search still goes back to the
    orchestrator, which answers."""
    db = tmp_path / "f.sqlite"
    ctx = _ctx(scorer, [call("search", "searcher"), call("answer", "answerer")], evaluation=True)
    options = {"experts": EXPERTS, "max_turns": 1, "eval_max_turns": 2}

    async def first() -> str:
        async with DebugSession.open("toolorchestra", db, row=rollout_input(QUESTION, "4322"), context=ctx,
                                     options=options) as session:
            await session.step()
            await session.step()
            return session.thread_id

    thread = asyncio.run(first())
    assert history(db, thread)[-1]["next"] == ["orchestrator"]
    replay = fork(db, thread, len(history(db, thread)) - 1, {"context_parts": ["[Search by searcher] edited"]},
                  context=_ctx(scorer, [call("answer", "answerer")], evaluation=True))
    assert replay.rollout.status == "completed" and replay.rollout.answer == "4322", replay.rollout.reason

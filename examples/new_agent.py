"""A new agent in one page: "solve, then check yourself", trained as ONE concatenated sequence.

    question -> solve (assistant answers) -> check (same chat, user: "Check your answer...") -> answer

Both model turns live in one conversation ("main"), so `layout="concat"` trains them as one
sequence: the first answer, the masked template glue + follow-up question, then the checked answer.
The reward is 1.0 when the last \\boxed{} of the checked answer equals the label (MATH-normalised).

Run it on the tiny test model (no GPU, no server; the script chooses the text, the tiny model
supplies the real token ids and log-probs):

    python -m examples.new_agent

Train it with slime: put the repository root on the Ray workers' PYTHONPATH and, in the
--custom-config-path YAML, set

    agentgraph: examples.new_agent:SPEC
    agentgraph_options: {check: true}

slime's own checkout ALSO has a package called `examples`; whichever comes first on sys.path wins.
If the workers import slime's (ModuleNotFoundError: No module named 'examples.new_agent'), name the
file instead: `agentgraph: /path/to/agentgraphs/examples/new_agent.py:SPEC`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from functools import partial

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import NotRequired  # typing.NotRequired is Python 3.11+

from agentgraphs.answers import boxed_match
from agentgraphs.context import AgentContext
from agentgraphs.errors import InputError
from agentgraphs.node import TraceState, call_llm
from agentgraphs.spec import AgentSpec, MethodOptions, RewardInput, RolloutInput

# Prompts are data.
SOLVE_PROMPT = "{question}\n\nThink step by step, then put the final answer in \\boxed{{}}."
CHECK_PROMPT = (
    "Check your answer: verify each step. If you find a mistake, correct it. "
    "Finish with the final answer in \\boxed{}."
)



class SelfCheckOptions(MethodOptions):
    """Typed, documented options: `-o check=false` on the CLI, `agentgraph_options` in slime's YAML."""

    check: bool = Field(True, description="False: a single solve turn (the baseline to compare against)")
    solve_max_new_tokens: int = Field(1024, ge=1, description="cap of the first answer")
    check_max_new_tokens: int = Field(1024, ge=1, description="cap of the checked answer")


class SelfCheckState(TraceState):
    question: str
    draft: NotRequired[str]  # the first answer
    answer: NotRequired[str]  # the final (checked) answer


async def solve(state: SelfCheckState, runtime: Runtime[AgentContext], opts: SelfCheckOptions) -> dict[str, Any]:
    out = await call_llm(
        state, runtime, node="solve", conversation="main",
        messages=[{"role": "user", "content": SOLVE_PROMPT.format(question=state["question"])}],
        max_new_tokens=opts.solve_max_new_tokens,
    )
    return {"draft": out.text, "answer": out.text, **out.update}


async def check(state: SelfCheckState, runtime: Runtime[AgentContext], opts: SelfCheckOptions) -> dict[str, Any]:
    # Same conversation: the prompt is solve's prompt + solve's output ids + glue for this message.
    out = await call_llm(
        state, runtime, node="check", conversation="main",
        messages=[{"role": "user", "content": CHECK_PROMPT}],
        max_new_tokens=opts.check_max_new_tokens,
    )
    return {"answer": out.text, **out.update}


def build_graph(options: SelfCheckOptions | None = None) -> Any:
    """The compiled graph for resolved options: each node gets them bound (`partial`)."""
    opts = options or SelfCheckOptions()
    builder = StateGraph(SelfCheckState, context_schema=AgentContext)
    builder.add_node("solve", partial(solve, opts=opts))
    builder.add_node("check", partial(check, opts=opts))
    builder.add_edge(START, "solve")
    if opts.check:
        builder.add_edge("solve", "check")
    else:
        builder.add_edge("solve", END)
    builder.add_edge("check", END)
    return builder.compile(name="self_check")


# ------------------------------------------------------------------------------------------ RL binding


def make_input(row: RolloutInput, options: SelfCheckOptions) -> dict[str, Any]:
    prompt = row["prompt"]
    if isinstance(prompt, list):  # chat messages: the last user message is the question
        prompt = next((m.get("content") for m in reversed(prompt) if m.get("role") == "user"), None)
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("prompt", "the question is missing or empty", "put the question under --input-key")
    return {"question": prompt.strip(), "turns": []}


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    return boxed_match(rin["answer"], rin["label"])


SPEC = AgentSpec(
    name="self_check",
    build_graph=build_graph,
    make_input=make_input,
    reward=reward,
    layout="concat",  # one sequence per conversation: both turns, glue masked
    reward_split="broadcast",
    options=SelfCheckOptions,
    description="solve, then check the answer in the same conversation; boxed exact-match reward",
)


# ------------------------------------------------------------------------------------- try it locally


def mask_runs(tokens: list[int], loss_mask: list[int], tokenizer: Any) -> list[tuple[int, str]]:
    """The response as (mask, text) runs, for display only (training never decodes)."""
    response = tokens[len(tokens) - len(loss_mask):]
    runs: list[tuple[int, list[int]]] = []
    for tok, m in zip(response, loss_mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(tok)
        else:
            runs.append((m, [tok]))
    return [(m, tokenizer.decode(ids, skip_special_tokens=False)) for m, ids in runs]


async def demo(question: str = "What is 2 + 2?", label: str = "4") -> Any:
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.rollout import rollout_input, run_rollout
    from agentgraphs.testing.scripted import ScriptedPolicy
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    scorer = HFEngine.from_dir(ensure_tiny_model(), device="cpu", seed=0)
    policy = ScriptedPolicy(scorer, [
        "2 + 2 = 4, so the answer is \\boxed{4}.",
        "Checking: 2 + 2 is 4, the step is right. Final answer: \\boxed{4}.",
    ])
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer)
    return await run_rollout(SPEC, rollout_input(question, label), ctx), scorer.tokenizer


def main() -> None:
    rollout, tok = asyncio.run(demo())
    print(f"status: {rollout.status} ({rollout.reason})   reward: {rollout.reward}")
    for i, turn in enumerate(rollout.turns):
        print(f"turn {i} [{turn['node']}] prompt {len(turn['prompt_ids'])} ids -> "
              f"{len(turn['output_ids'])} ids, finish={turn['finish_reason']}: {turn['text']!r}")
    for k, seq in enumerate(rollout.sequences):
        print(f"sequence {k}: {len(seq['tokens'])} tokens, response {seq['response_length']}, "
              f"trained {sum(seq['loss_mask'])}, turns {seq['turn_indices']}")
        for m, text in mask_runs(seq["tokens"], seq["loss_mask"], tok):
            print(f"  {'TRAIN' if m else 'mask '} {text!r}")


if __name__ == "__main__":
    main()

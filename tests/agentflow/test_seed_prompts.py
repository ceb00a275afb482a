'''The seed variant's prompts are the seed's, token for token, from slime's side: rl_bridge.generate against two
local SGLang-contract servers (the policy, a fixed generator model), scripted over the tiny model.

The seed (Takenzz/AgentFlow@4b5aa8410c68c92fe45e2852db5a4c6cfe97d321, agentic/agentflow) renders every call as
`tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)` and
tokenizes that text (core/llm_engine.py:50-56), each prompt one user message. Its texts, copied below:
- the query analysis, core/planner.py:80-94 (`_build_prompt`), sent at :97-100;
- the next step, core/planner.py:111-138 (`_build_next_step_content`), sent at :148-150;
- the command, core/executor.py:85-124, given the whole toolbox metadata (core/solver.py:119-122);
- the verifier, core/verifier.py:19-42; the final output, core/planner.py:157-169.
The planner lists the tools' TOOL_NAME in directory order with {"description": TOOL_DESCRIPTION}
(core/planner.py:48-77; tools/base_generator/tool.py:5-9, tools/python_coder/tool.py:19, 35-38); the memory is
Memory.get_actions(): {"Action Step k": {tool_name (as the planner wrote it), sub_goal, command, str(result)}}
with k from 0 (core/memory.py:11-25, core/solver.py:91, 115, 127-128); the query is the row's prompt
(rollout.py:115). The reply is read by core/formatters.py:4-44 and the name resolved by core/executor.py:178-200.
Every reply the seed reads is SGLang's `text` (core/llm_engine.py:67) of a request with slime's sampling params
(skip_special_tokens false, no_stop_trim): a reply that stopped on the end of turn ends with "<|im_end|>" (`said`),
and so do the analysis and the results the later prompts show.
'''

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache
from tests.agentflow.test_engines import SLIME_SAMPLING
from tests.test_multiturn import RecordingEngine

QUESTION = "What is 6 times 7?"
TOOLS = "['Generalist_Solution_Generator_Tool', 'Python_Code_Generator_Tool']"
METADATA = str({
    "Generalist_Solution_Generator_Tool": {"description": (
        "\nA generalized tool that takes query from the user, and answers the question step by step to the best "
        "of its ability.\n")},
    "Python_Code_Generator_Tool": {"description": (
        "\nA tool that generates and executes Python code snippets for calculations and math-related problems.\n"
        "It returns the printed output from the executed code.\n")},
})


def seed_analysis(question: str) -> str:  # core/planner.py:80-94
    return f"""Task: Analyze the given query to determine necessary skills and tools.

Inputs:
- Query: {question}
- Available tools: {TOOLS}
- Metadata for tools: {METADATA}

Instructions:
1. Identify the main objectives in the query.
2. List the necessary skills and tools.
3. For each skill and tool, explain how it helps address the query.
4. Note any additional considerations.

"""


def seed_next_step(query: str, query_analysis: str, actions: dict) -> str:  # core/planner.py:111-138
    return f"""
Task: Determine the optimal next step to address the query using available tools and previous steps.
Context:
- **Query:** {query}
- **Query Analysis:** {query_analysis}
- **Available Tools:** {TOOLS}
- **Toolbox Metadata:** {METADATA}
- **Previous Steps:** {actions}

Instructions:
1. Analyze the query, previous steps, and available tools.
2. Select the **single best tool** for the next step.
3. Formulate a specific, achievable **sub-goal** for that tool.
4. Provide all necessary **context** (data, file names, variables) for the tool to function.

Response Format:
1.  **Justification:** Explain your choice of tool and sub-goal.
2.  **Context:** Provide all necessary information for the tool.
3.  **Sub-Goal:** State the specific objective for the tool.
4.  **Tool Name:** State the exact name of the selected tool.

Rules:
- Select only ONE tool.
- The sub-goal must be directly achievable by the selected tool.
- The Context section must contain all information the tool needs to function.
- The response must end with the Context, Sub-Goal, and Tool Name sections in that order, with no extra content.

"""


def seed_command(query: str, context: str, sub_goal: str, tool_name: str) -> str:  # core/executor.py:85-124
    return f"""
Task: Generate a precise command to execute the selected tool.

Context:
- **Query:** {query}
- **Sub-Goal:** {sub_goal}
- **Tool Name:** {tool_name}
- **Tool Metadata:** {METADATA}
- **Relevant Data:** {context}

Instructions:
1.  Analyze the tool's required parameters from its metadata.
2.  Construct valid Python code that addresses the sub-goal using the provided context and data.
3.  The command must include at least one call to `tool.execute()`.
4.  Each `tool.execute()` call must be assigned to a variable named **`execution`**.
5.  Please give the exact numbers and parameters should be used in the `tool.execute()` call.
6.  **IMPORTANT: `tool.execute()` only accepts a single keyword argument: `query`. Do NOT pass any other keyword arguments (e.g. no `context`, `data`, `input`, etc.).**
7.  **IMPORTANT: The `query` value MUST be a plain-language description of what to compute. Do NOT put Python code inside the query string.**
8.  **IMPORTANT: Always wrap the `query` value in triple double-quotes (`\"\"\"...\"\"\"`). This prevents syntax errors from special characters or apostrophes.**

Output Format:
Present your response in the following structured format. Do not include any extra text or explanations.

Generated Command:
```python
<command>
```

Example1:
Generated Command:
```python
execution = tool.execute(query=\"\"\"Calculate the factorial of 10\"\"\")
```

Example2:
Generated Command:
```python
execution = tool.execute(query=\"\"\"Find the number of intersections of y = 4*g(f(sin(2*pi*x))) and x = 4*g(f(cos(3*pi*y))), where f(x)=|x|-0.5 and g(x)=|x|-0.25\"\"\")
```
"""  # noqa: E501


def seed_verify(question: str, query_analysis: str, actions: dict) -> str:  # core/verifier.py:19-42
    return f"""
Task: Evaluate if the current memory is complete and accurate enough to answer the query, or if more tools are needed.

Context:
- **Query:** {question}
- **Available Tools:** {TOOLS}
- **Toolbox Metadata:** {METADATA}
- **Initial Analysis:** {query_analysis}
- **Memory (Tools Used & Results):** {actions}

Instructions:
1.  Review the query, initial analysis, and memory.
2.  Assess the completeness of the memory: Does it fully address all parts of the query?
3.  Check for potential issues:
    -   Are there any inconsistencies or contradictions?
    -   Is any information ambiguous or in need of verification?
4.  Determine if any unused tools could provide missing information.

Final Determination:
-   If the memory is sufficient, explain why and conclude with "STOP".
-   If more information is needed, explain what's missing, which tools could help, and conclude with "CONTINUE".

IMPORTANT: The response must end with either "Conclusion: STOP" or "Conclusion: CONTINUE".
"""


def seed_final(query_analysis: str, question: str, actions: dict) -> str:  # core/planner.py:157-169
    return f"""
Task: Generate the final output based on the query and the results from all tools used.

Context:
- **Initial Analysis:** {query_analysis}
- **Query:** {question}
- **Actions Taken:** {actions}

Instructions:
1. Review the query and the results from all tool executions.
2. Incorporate the relevant information to create a coherent, step-by-step final output.
3. You MUST end your response with the final answer enclosed in \\boxed{{}}. For example: \\boxed{{42}}.
"""


ANALYSIS = "Summary: a product of two numbers. Tools: Generalist_Solution_Generator_Tool."
# step 0 names the tool by its class name in backticks, step 1 by the seed's name: the seed resolves both
# (core/executor.py:180-189) and keeps the name as written in its memory (core/solver.py:128)
PLANS = [
    ("**Justification:** It can multiply.\n**Context:** 6 and 7\n**Sub-Goal:** Multiply 6 by 7.\n"
     "**Tool Name:** `Base_Generator_Tool`\n\nThat is all."),
    ("**Justification:** Check it.\n**Context:** The product is 42.\n**Sub-Goal:** Explain why 6 * 7 is 42.\n"
     "**Tool Name:** Generalist_Solution_Generator_Tool"),
]
STEPS = [("6 and 7", "Multiply 6 by 7.", "`Base_Generator_Tool`", "Multiply 6 by 7"),
         ("The product is 42.", "Explain why 6 * 7 is 42.", "Generalist_Solution_Generator_Tool", "Explain 6 * 7")]
TOOL_REPLY = {"Multiply 6 by 7": "6 * 7 = 42", "Explain 6 * 7": "Six sevens make 42."}
FINAL = "Step 1: 6 * 7 = 42.\nThe answer is \\boxed{42}."
END = "<|im_end|>"


def said(reply: str) -> str:
    """The seed's text of `reply` stopped on the end-of-turn token: SGLang's `text` with slime's sampling params."""
    return reply + END


def planner(call: ScriptCall) -> str:
    text = call.prompt_text
    if "Analyze the given query" in text:
        return ANALYSIS
    return PLANS[1] if "'Action Step 0'" in text else PLANS[0]


def generator(call: ScriptCall) -> str:
    text = call.prompt_text
    if "Analyze the given query" in text:  # the original's analysis is a helper's
        return ANALYSIS
    if "Generate a precise command" in text:
        query = STEPS[1][3] if "Explain why" in text else STEPS[0][3]
        return f'Generated Command:\n```python\nexecution = tool.execute(query="""{query}""")\n```'
    if "Evaluate if the current memory" in text:
        return "Enough.\nConclusion: STOP" if "'Action Step 1'" in text else "More.\nConclusion: CONTINUE"
    if "Generate the final output" in text or "Generate a concise final answer" in text:  # the seed's, the original's
        return FINAL
    for query, reply in TOOL_REPLY.items():
        if text.endswith(f"{query}<|im_end|>\n<|im_start|>assistant\n"):
            return reply
    raise AssertionError(f"unexpected generator prompt: {text[-300:]}")


@pytest.fixture()
def servers(tiny_engine: Any) -> Iterator[dict[str, SGLangTestServer]]:
    engines = {"policy": RecordingEngine(ScriptedPolicy(tiny_engine, planner, name="policy")),
               "generator": RecordingEngine(ScriptedPolicy(tiny_engine, generator, name="generator"))}
    with SGLangTestServer(engines["policy"], port=0) as p, SGLangTestServer(engines["generator"], port=0) as g:
        p.script, g.script = engines["policy"], engines["generator"]  # type: ignore[attr-defined]
        yield {"policy": p, "generator": g}
    clear_cache()


def seed_bridge_run(servers: Mapping[str, Any], model_dir: Path, helpers: tuple[str, ...], options: Mapping[str, Any],
                    *, label: str = "42", sampling: Mapping[str, Any] | None = None, reward: bool = True) -> Any:
    """slime's side of one seed-variant row: the launch's args (the policy server at the router, each of `helpers`
    served under its name, the seed's roles on "generator"), then rl_bridge.generate (and reward_func: (sample,
    reward)) with slime's sampling params (`sampling` over them)."""
    host, port = servers["policy"].url.removeprefix("http://").rsplit(":", 1)
    args = SimpleNamespace(agentgraph="agentflow", hf_checkpoint=str(model_dir), sglang_router_ip=host,
                           sglang_router_port=int(port), agentgraph_max_retries=0, reward_key=None,
                           agentgraph_options={"executor_engine": "generator", "verifier_engine": "generator",
                                               "final_engine": "generator", "tool_engine": "generator", **options},
                           agentgraph_engines={name: f"sglang:{servers[name].url}" for name in helpers})
    clear_cache()
    sample = Sample(group_index=0, index=0, prompt=QUESTION, label=label, metadata={})

    async def go() -> Any:
        try:
            out = await rl_bridge.generate(args, sample, {**SLIME_SAMPLING, **(sampling or {})})
            return (out, await rl_bridge.reward_func(args, out)) if reward else out
        finally:
            await aclose_all()

    return asyncio.run(go())


def run(servers: dict[str, SGLangTestServer], model_dir: Path, **options: Any) -> Any:
    return seed_bridge_run(servers, model_dir, ("generator",), {"judge": None, **options})


def seed_ids(tokenizer: Any, content: str) -> list[int]:
    """core/llm_engine.py:50-56: the chat template's text, then its tokens."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def seed_memory(steps: int) -> dict[str, dict[str, str]]:
    """Memory.get_actions() after `steps` steps (core/memory.py:11-22)."""
    return {f"Action Step {k}": {"tool_name": STEPS[k][2], "sub_goal": STEPS[k][1],
                                 "command": f'execution = tool.execute(query="""{STEPS[k][3]}""")',
                                 "result": said(TOOL_REPLY[STEPS[k][3]])} for k in range(steps)}


def test_seed_variant_planner_prompts_are_the_seeds_token_for_token(servers: dict[str, SGLangTestServer],
                                                                   tiny_model_dir: Path, qwen25: Any) -> None:
    out, reward = run(servers, tiny_model_dir)  # variant: seed, the default
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    received = [prompt for prompt, _ in servers["policy"].script.calls]  # type: ignore[attr-defined]
    expected = [seed_analysis(QUESTION), seed_next_step(QUESTION, said(ANALYSIS), seed_memory(0)),
                seed_next_step(QUESTION, said(ANALYSIS), seed_memory(1))]
    assert len(received) == 3
    for got, content in zip(received, expected):
        assert got == seed_ids(qwen25, content), (qwen25.decode(got), content)
    # trained: exactly the policy's three calls, token for token as the server returned them
    rows = out.train_metadata["turns"]
    returned = servers["policy"].script.calls  # type: ignore[attr-defined]
    assert len(rows) == len(returned) == 3
    for row, (prompt, completion) in zip(rows, returned):
        assert row["tokens"] == prompt + completion.token_ids
        assert row["response_length"] == len(completion.token_ids)
        assert row["loss_mask"] == [1] * len(completion.token_ids)
        assert row["rollout_log_probs"] == completion.logprobs
    # the reward reads the final output's last \boxed{} as the seed's (rollout.py:232-236)
    assert (reward["score"] if isinstance(reward, dict) else reward) == 1.0


def test_seed_variant_helper_prompts_are_the_seeds(servers: dict[str, SGLangTestServer], tiny_model_dir: Path,
                                                   qwen25: Any) -> None:
    out, _ = run(servers, tiny_model_dir)
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    received = [prompt for prompt, _ in servers["generator"].script.calls]  # type: ignore[attr-defined]
    analysis = said(ANALYSIS)
    expected = [seed_command(QUESTION, *STEPS[0][:3]), STEPS[0][3], seed_verify(QUESTION, analysis, seed_memory(1)),
                seed_command(QUESTION, *STEPS[1][:3]), STEPS[1][3], seed_verify(QUESTION, analysis, seed_memory(2)),
                seed_final(analysis, QUESTION, seed_memory(2))]
    assert len(received) == len(expected)
    for got, content in zip(received, expected):
        assert got == seed_ids(qwen25, content), (qwen25.decode(got), content)


def test_original_variant_keeps_the_original_prompts(servers: dict[str, SGLangTestServer],
                                                     tiny_model_dir: Path) -> None:
    out, _ = run(servers, tiny_model_dir, variant="original", analyzer_engine="generator")
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    policy = [c.prompt_text for c in servers["policy"].script.inner.calls]  # type: ignore[attr-defined]
    helper = [c.prompt_text for c in servers["generator"].script.inner.calls]  # type: ignore[attr-defined]
    assert len(policy) == 1 and all("Task: Determine the optimal next step" in text for text in policy)
    for text in policy + helper:  # the original's tool names and metadata, the <answer> suffix on the query
        assert "['Generalist_Solution_Generator_Tool'" not in text and "{'description':" not in text
    assert all("Base_Generator_Tool" in text and "'input_types':" in text and "<answer>" in text for text in policy)
    assert sum("Generate a concise final answer" in text for text in helper) == 1
    verify = [text for text in helper if "Evaluate if the current memory" in text]
    assert "'Action Step 1': {" in verify[0] and "'Action Step 0'" not in verify[0]  # the original counts from 1

"""An existing LangGraph agent, trained unmodified: `create_react_agent` with a calculator and a lookup tool.

The only agentgraphs piece inside the graph is the chat model, `TracedChatModel()`: it takes the engine,
tokenizer and sampling from the run's AgentContext, renders the messages incrementally (one training
sequence for the whole tool loop: the model's outputs trained, tool results and template glue masked),
parses hermes `<tool_call>` blocks into `AIMessage.tool_calls`, and records each Turn in its AIMessage.

Run it on the tiny test model (the script chooses the text; the tiny model supplies ids and log-probs):

    python -m examples.react_agent

Train it with slime (in the --custom-config-path YAML; repository root on the workers' PYTHONPATH):

    agentgraph: examples.react_agent:SPEC

Evaluate it: `agentgraphs run --agent examples.react_agent:SPEC --data rows.jsonl --engine sglang:URL`.
In `langgraph dev` it is the `react_agent` graph of langgraph.json (engine from $AGENTGRAPHS_ENGINE or the
run's context, e.g. `{"policy": "sglang:http://127.0.0.1:30000", "tokenizer": "/models/Qwen2.5-7B-Instruct"}`).
"""

from __future__ import annotations

import ast
import asyncio
import operator
import warnings
from typing import Any

from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10
from pydantic import Field

from agentgraphs.answers import boxed_match
from agentgraphs.chat_model import TracedChatModel, messages_graph_spec
from agentgraphs.context import AgentContext
from agentgraphs.spec import MethodOptions, RewardInput

SYSTEM_PROMPT = ("You answer questions about cities. Use `lookup` for facts and `calculator` for arithmetic; "
                 "finish with the final answer in \\boxed{}.")

# The lookup tool's table: city -> facts (population in millions, area in km^2).
CITIES: dict[str, dict[str, float]] = {
    "paris": {"population": 2.1, "area": 105.4},
    "tokyo": {"population": 14.0, "area": 2194.0},
    "lagos": {"population": 15.4, "area": 1171.0},
    "lima": {"population": 10.0, "area": 2672.0},
}

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.Mod: operator.mod}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        right = _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _BINARY[type(node.op)](_evaluate(node.left), right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"unsupported expression element {type(node).__name__}")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / % ** and parentheses, e.g. "2.1 * 2"."""
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"error: {exc}"
    return f"{value:g}"


@tool
def lookup(city: str, field: str) -> str:
    """Look up a city's `population` (millions) or `area` (km^2)."""
    facts = CITIES.get(city.strip().lower())
    if facts is None:
        return f"unknown city {city!r}; known: {', '.join(sorted(CITIES))}"
    if field not in facts:
        return f"unknown field {field!r}; known: {', '.join(sorted(facts))}"
    return f"{facts[field]:g}"


class ReactOptions(MethodOptions):
    """`-o max_new_tokens=512` on the CLI, `agentgraph_options` in slime's YAML."""

    max_new_tokens: int = Field(512, ge=1, description="cap of each model turn (never above the context's)")
    system_prompt: str = Field(SYSTEM_PROMPT, description="the agent's system prompt")


def build_graph(options: ReactOptions | None = None, *, checkpointer: Any = None) -> Any:
    """The unmodified prebuilt ReAct agent over our chat model."""
    opts = options or ReactOptions()
    model = TracedChatModel(sampling={"max_new_tokens": opts.max_new_tokens})
    with warnings.catch_warnings():  # "moved to langchain.agents": this example shows the prebuilt one users have
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        return create_react_agent(model, [calculator, lookup], prompt=opts.system_prompt, checkpointer=checkpointer,
                                  name="react_agent")


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    """1.0 when the final answer's last \\boxed{} equals the label (numbers compared MATH-normalised)."""
    return boxed_match(rin["answer"], rin["label"])


SPEC = messages_graph_spec(build_graph, reward=reward, name="react_agent", options=ReactOptions,
                           description="create_react_agent with a calculator and a city lookup")

# For `langgraph dev` (langgraph.json): compiled without a checkpointer; the server brings persistence.
graph = build_graph()


# ------------------------------------------------------------------------------------- try it locally

DEMO_SCRIPT = [
    '<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris", "field": "population"}}\n</tool_call>',
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2.1 * 2"}}\n</tool_call>',
    "Twice the population of Paris is \\boxed{4.2} million.",
]


async def demo() -> Any:  # -> Rollout
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.rollout import rollout_input, run_rollout
    from agentgraphs.testing.scripted import ScriptedPolicy
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    scorer = HFEngine.from_dir(ensure_tiny_model(), device="cpu", seed=0)
    ctx = AgentContext(policy=ScriptedPolicy(scorer, DEMO_SCRIPT), tokenizer=scorer.tokenizer)
    rollout = await run_rollout(SPEC, rollout_input("What is twice the population of Paris (millions)?", "4.2"),
                                ctx)
    return rollout


def main() -> None:
    rollout = asyncio.run(demo())
    print(f"status: {rollout.status} ({rollout.reason})   answer: {rollout.answer!r}   reward: {rollout.reward}")
    for i, turn in enumerate(rollout.turns):
        print(f"turn {i} [{turn['node']}/{turn['conversation']}] prompt {len(turn['prompt_ids'])} ids -> "
              f"{len(turn['output_ids'])} ids: {turn['text']!r}")
    for k, seq in enumerate(rollout.sequences):
        print(f"sequence {k}: {len(seq['tokens'])} tokens, response {seq['response_length']}, "
              f"trained {sum(seq['loss_mask'])}, turns {seq['turn_indices']}")


if __name__ == "__main__":
    main()

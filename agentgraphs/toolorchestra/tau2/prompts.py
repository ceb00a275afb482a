"""Prompts of tau^2 mode (data, not code). The agent's and the user's base prompts are tau^2's own.

The orchestrator's system prompt is tau^2's agent prompt (its instructions + the domain policy),
with one paragraph added when experts are available; the user simulator's is tau^2's (global
guidelines + the task's scenario, see bench.user_system_prompt).
"""

from __future__ import annotations

from typing import Any, Sequence

EXPERT_TOOL = "call_expert"

EXPERTS_PARAGRAPH = (
    "Besides the domain tools you may call `call_expert` to ask a stronger model for advice: it "
    "sees the policy and the conversation so far and answers your question. Experts: {experts}."
)

EXPERT_SYSTEM = (
    "You advise a customer service agent that must follow the <policy> below. Answer the agent's "
    "question concisely: say what the agent should do next (which tool to call with which arguments, "
    "or what to tell the user) and why, according to the policy.\n<policy>\n{policy}\n</policy>"
)

EXPERT_USER = "<conversation>\n{transcript}\n</conversation>\n\nThe agent asks: {question}"

FORMAT_ERROR = (
    "Error: your last message was not understood ({error}). Either write a message to the user "
    "(plain text, no tool call) or call tools, each as <tool_call>\n{{\"name\": ..., \"arguments\": "
    "{{...}}}}\n</tool_call>."
)


def agent_system_prompt(instruction: str, template: str, policy: str, experts: Sequence[str]) -> str:
    """tau^2's agent system prompt for `policy`, plus the experts paragraph when there are experts.

    >>> agent_system_prompt("Help.", "<i>{agent_instruction}</i>{domain_policy}", " P", [])
    '<i>Help.</i> P'
    """
    if experts:
        instruction = instruction + "\n\n" + EXPERTS_PARAGRAPH.format(experts=", ".join(experts))
    return template.format(agent_instruction=instruction, domain_policy=policy)


def expert_tool_schema(experts: Sequence[str]) -> dict[str, Any]:
    """The `call_expert` tool in OpenAI function format (rendered by the chat template like the others)."""
    return {
        "type": "function",
        "function": {
            "name": EXPERT_TOOL,
            "description": "Ask an expert model what to do next; it sees the policy and the conversation.",
            "parameters": {
                "type": "object",
                "properties": {
                    "expert": {"type": "string", "enum": list(experts), "description": "Which expert to ask."},
                    "question": {"type": "string", "description": "What you want the expert's advice on."},
                },
                "required": ["expert", "question"],
            },
        },
    }


def transcript(messages: Sequence[dict[str, Any]]) -> str:
    """The conversation as plain text for an expert: who said what, which tools ran and returned what."""
    lines = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            lines.append(f"tool result ({m.get('requestor', 'assistant')}): {m.get('content', '')}")
            continue
        for call in m.get("tool_calls") or []:
            lines.append(f"{role} calls {call['name']}({_args(call.get('arguments', {}))})")
        if m.get("content"):
            lines.append(f"{'agent' if role == 'assistant' else role}: {m['content']}")
    return "\n".join(lines)


def _args(arguments: dict[str, Any]) -> str:
    import json

    return json.dumps(arguments, ensure_ascii=False)

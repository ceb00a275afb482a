"""ToolOrchestra's prompts and tool schemas (data, not code).

The orchestrator sees "Problem: ...\\n\\n{context}\\n\\nChoose an appropriate tool." with the tools given to
the chat template (Qwen3 renders them in hermes format inside <tools></tools>). Experts get plain
instructions: write a search query, write Python, or answer.
"""

from __future__ import annotations

from typing import Any

ORCHESTRATOR_USER = "Problem: {problem}\n\n{context}\n\nChoose an appropriate tool."
NO_CONTEXT = "No information gathered yet."

SEARCH_EXPERT = ("Write one short web-search query that would find the information needed to solve the problem."
                 " Reply with the query only.\n\nProblem: {problem}\n\n{context}")
CODE_EXPERT = ("Write a Python program that helps solve the problem and prints its result. Reply with the code"
               " in one ```python block.\n\nProblem: {problem}\n\n{context}")
ANSWER_EXPERT = ("Answer the problem. Think briefly, then give the final answer as \\boxed{{ANSWER}}.\n\n"
                 "Problem: {problem}\n\n{context}")
JUDGE = ("Decide whether the response answers the question with the same meaning as the reference answer.\n"
         "Question: {problem}\nReference answer: {reference}\nResponse: {answer}\n"
         "Reply with exactly 'yes' or 'no'.")


def tool_schemas(experts: dict[str, list[str]]) -> list[dict[str, Any]]:
    """OpenAI-style function schemas for the QA tools; `model` is an enum of the allowed experts."""
    descriptions = {
        "search": "Search for missing knowledge: an expert model writes a query, a retriever returns passages.",
        "enhance_reasoning": "An expert model writes and runs Python code to compute or check intermediate results.",
        "answer": "An expert model gives the final answer. This ends the episode.",
    }
    return [{"type": "function",
             "function": {"name": name, "description": descriptions[name],
                          "parameters": {"type": "object",
                                         "properties": {"model": {"type": "string", "enum": list(models),
                                                                  "description": "the expert model to use"}},
                                         "required": ["model"]}}}
            for name, models in experts.items()]

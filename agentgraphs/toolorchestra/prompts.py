"""ToolOrchestra's prompts and tool schemas (data, not code).

The orchestrator sees "Problem: ...\\n\\n{context}\\n\\nChoose an appropriate tool." with the tools given to
the chat template (Qwen3 renders them in hermes format inside <tools></tools>). Experts get plain
instructions: write a search query, write Python, or answer. The SEED_ strings are the seed's own QA tools
(option tool_protocol: seed, agentgraphs.toolorchestra.seed_tools).
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
# The seed's QA tools (tool_protocol: seed), byte for byte: Takenzz/AgentFlow@4b5aa84, agentic/ToolOrchestra/.
# The orchestrator's system prompt (prompt_builder.py:20) and first user message (prompt_builder.py:106-109, whose
# context is always empty: orchestra_solver.py:116 passes no documents, snippets or attempts).
SEED_ORCHESTRATOR_SYSTEM = ("You are an orchestrator. You must ALWAYS call the appropriate tool to handle user "
                            "requests. Never answer directly without using a tool.")
SEED_ORCHESTRATOR_USER = "Problem: {problem}\n\nChoose an appropriate tool."
# search's query writer (orchestra_solver.py:577-590): the context parts, then this
SEED_SEARCH_SYSTEM = "You are a search query writer. Generate concise, targeted search queries."
SEED_SEARCH_ASK = ("Question: {problem}\nInstead of directly answering the question, please write a search query "
                   "that would help find the relevant information. Wrap the query within <query> and </query>.")
# enhance_reasoning's reasoner (orchestra_solver.py:624-636): the problem and the context parts, then this
SEED_REASONING_SYSTEM = ("You are an expert reasoning assistant. Break down complex problems step by step. Show "
                         "your thought process clearly.")
SEED_REASONING_SUFFIX = "\n\nPlease think through this step by step, showing your reasoning process in detail."
# answer's expert (orchestra_solver.py:508-520): the problem and the context parts, then this
SEED_ANSWER_SYSTEM = "You are a helpful expert. Provide a clear, accurate answer."
SEED_ANSWER_SUFFIX = ("\n\nBased on all the information above, provide your final answer. Wrap the final answer "
                      "within <answer> and </answer>.")
# what the context parts and the orchestrator's tool messages say (orchestra_solver.py:598-602, 639)
SEED_SEARCH_PART = "[Search by {expert}]\n{documents}"
SEED_SEARCH_FAILED_PART = "[Search by {expert}] No results found."
SEED_REASONING_PART = "[Reasoning by {expert}]\n{result}"
SEED_NO_DOCUMENTS = "No relevant documents found."  # tools/search_retrieval/tool.py:69, 80; orchestra_solver.py:602
SEED_DOCUMENT = "[Doc {rank}] (score={score:.4f})\n{text}"  # tools/search_retrieval/tool.py:78, joined by a blank line
# the circuit breaker's tool result (orchestra_solver.py:476-479)
SEED_UNAVAILABLE = ("[Expert unavailable] The expert service is not responding after multiple attempts. Please "
                    "answer based on available information.")

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

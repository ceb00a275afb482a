"""AgentFlow's prompts, one module constant per call, in the formats of the public AgentFlow code.

The sections, their order and every marker a parser relies on are the original's: the planner ends
with "Context: / Sub-Goal: / Tool Name:", the command generator answers "Generated Command:" and a
```python block of `execution = tool.execute(...)` calls, the verifier ends with "Conclusion: STOP" or
"Conclusion: CONTINUE", the final output has "Process Summary" and "Answer" sections, and in training the
question carries the suffix asking for <answer> tags (reference/methods.md). Fill them with `str.format`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ANALYZE_TEMPLATE", "NEXT_STEP_TEMPLATE", "COMMAND_TEMPLATE", "VERIFY_TEMPLATE", "FINAL_TEMPLATE",
    "ANSWER_SUFFIX", "JUDGE_TEMPLATE", "PYTHON_CODER_TEMPLATE", "NO_TOOL_COMMAND", "NO_TOOL_RESULT",
    "format_memory", "format_tools", "SEED_ANALYZE_TEMPLATE", "SEED_NEXT_STEP_TEMPLATE", "SEED_COMMAND_TEMPLATE",
    "SEED_FINAL_TEMPLATE", "SEED_JUDGE_TEMPLATE", "SEED_PYTHON_CODER_SYSTEM", "format_seed_metadata",
]

ANSWER_SUFFIX = ("When ready, output the final answer enclosed in <answer> and </answer> tags. "
                 "Do not generate any content after the </answer> tag.")

ANALYZE_TEMPLATE = """
Task: Analyze the given query to determine necessary skills and tools.

Inputs:
- Query: {question}
- Available tools: {tools}
- Metadata for tools: {metadata}

Instructions:
1. Identify the main objectives in the query.
2. List the necessary skills and tools.
3. For each skill and tool, explain how it helps address the query.
4. Note any additional considerations.

Format your response with a summary of the query, lists of skills and tools with explanations, and a section for additional considerations.

Be brief and precise with insight.
"""

NEXT_STEP_TEMPLATE = """
Task: Determine the optimal next step to address the query using available tools and previous steps.

Context:
- **Query:** {question}
- **Query Analysis:** {analysis}
- **Available Tools:** {tools}
- **Toolbox Metadata:** {metadata}
- **Previous Steps:** {memory}

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

COMMAND_TEMPLATE = """
Task: Generate a precise command to execute the selected tool.

Context:
- **Query:** {question}
- **Sub-Goal:** {sub_goal}
- **Tool Name:** {tool_name}
- **Tool Metadata:** {tool_metadata}
- **Relevant Data:** {context}

Instructions:
1.  Analyze the tool's required parameters from its metadata.
2.  Construct valid Python code that addresses the sub-goal using the provided context and data.
3.  The command must include at least one call to `tool.execute()`.
4.  Each `tool.execute()` call must be assigned to a variable named **`execution`**.
5.  Give the exact numbers and parameters to use in the `tool.execute()` call.

Output Format:
Present your response in the following structured format. Do not include any extra text or explanations.

Generated Command:
```python
<command>
```

Example1:
Generated Command:
```python
execution = tool.execute(query="Summarize the following problem: Isaac has 100 toys, Masa gets ..., how many do they have together?")
```

Example2:
Generated Command:
```python
execution = tool.execute(query=["Methanol", "function of hyperbola", "Fermat's Last Theorem"])
```
"""

VERIFY_TEMPLATE = """
Task: Evaluate if the current memory is complete and accurate enough to answer the query, or if more tools are needed.

Context:
- **Query:** {question}
- **Available Tools:** {tools}
- **Toolbox Metadata:** {metadata}
- **Initial Analysis:** {analysis}
- **Memory (Tools Used & Results):** {memory}

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

FINAL_TEMPLATE = """
Task: Generate a concise final answer to the query based on all provided context.

Context:
- **Query:** {question}
- **Initial Analysis:** {analysis}
- **Actions Taken:** {memory}

Instructions:
1. Review the query and the results from all actions.
2. Synthesize the key findings into a clear, step-by-step summary of the process.
3. Provide a direct, precise answer to the original query.

Output Structure:
1.  **Process Summary:** A clear, step-by-step breakdown of how the query was addressed, including the purpose and key results of each action.
2.  **Answer:** A direct and concise final answer to the query.
"""

# The original's judge (train/utils.py `compute_score`) word for word, but for its last section: the original
# gets {analysis, true_false} by structured output (response_format=AnswerVerification), so its "<analysis>: /
# <true_false>:" lines are replaced by asking for that JSON object (any chat endpoint can answer it).
JUDGE_TEMPLATE = """
You are a precise evaluator. Determine if the Model Response is equivalent to the Ground Truth.

**Instructions:**
1.  **Extract:** Isolate the final answer from the Model Response, ignoring reasoning. Look for `\\boxed{{...}}` or concluding statements.
2.  **Normalize & Compare:** The extracted answer and Ground Truth must be equivalent after normalization:
    - **Math:** Mathematically identical (e.g., `\\frac{{1}}{{2}}` == `0.5`).
    - **Numbers/Text:** Ignore formatting, case, and currency/units (e.g., `1,000` == `1000`).
    - **MCQ:** Match option content (e.g., "Paris") or number (e.g., `3rd` option) to the correct letter.
3.  **Verdict:** "True" only for semantically or mathematically equivalent answers.

**Inputs:**
Question: {question}
Model Response: {response}
Ground Truth: {ground_truth}

**Format:**
Answer with a JSON object and nothing else: {{"analysis": "<brief analysis of the comparison>", "true_false": true or false}}
"""

PYTHON_CODER_TEMPLATE = """Task:
Given a query, generate a Python code snippet that performs the specified operation on the provided data. Please think step by step. Ensure to break down the process into clear, logical steps. Make sure to print the final result in the generated code snippet with a descriptive message explaining what the output represents. The final output should be presented in the following format:

```python
<code snippet>
```

Query:
{query}"""

# -- the seed's prompts (`prompts: seed`, the seed variant) ------------------------------------------------
# The seed's f-strings (Takenzz/AgentFlow@4b5aa84, agentic/agentflow) as str.format templates, text unchanged; its
# verifier prompt (core/verifier.py:19-42) is VERIFY_TEMPLATE's text. The seed fills {tools} with its tool-name list
# and {metadata} with {name: {"description": TOOL_DESCRIPTION}} (core/planner.py:48-77; `format_seed_metadata`),
# {memory} with its Memory.get_actions() dict (core/memory.py:11-25) and {question} with the row's prompt.

# the seed's core/planner.py:80-94
SEED_ANALYZE_TEMPLATE = """Task: Analyze the given query to determine necessary skills and tools.

Inputs:
- Query: {question}
- Available tools: {tools}
- Metadata for tools: {metadata}

Instructions:
1. Identify the main objectives in the query.
2. List the necessary skills and tools.
3. For each skill and tool, explain how it helps address the query.
4. Note any additional considerations.

"""

# the seed's core/planner.py:103-138
SEED_NEXT_STEP_TEMPLATE = """
Task: Determine the optimal next step to address the query using available tools and previous steps.
Context:
- **Query:** {question}
- **Query Analysis:** {analysis}
- **Available Tools:** {tools}
- **Toolbox Metadata:** {metadata}
- **Previous Steps:** {memory}

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

# the seed's core/planner.py:154-169
SEED_FINAL_TEMPLATE = """
Task: Generate the final output based on the query and the results from all tools used.

Context:
- **Initial Analysis:** {analysis}
- **Query:** {question}
- **Actions Taken:** {memory}

Instructions:
1. Review the query and the results from all tool executions.
2. Incorporate the relevant information to create a coherent, step-by-step final output.
3. You MUST end your response with the final answer enclosed in \\boxed{{}}. For example: \\boxed{{42}}.
"""

# the seed's core/executor.py:84-124
SEED_COMMAND_TEMPLATE = """
Task: Generate a precise command to execute the selected tool.

Context:
- **Query:** {question}
- **Sub-Goal:** {sub_goal}
- **Tool Name:** {tool_name}
- **Tool Metadata:** {tool_metadata}
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
"""

NO_TOOL_COMMAND = "No command was generated because the tool was not found."
NO_TOOL_RESULT = "No result was generated because the tool was not found."


# The seed's judge (core/rewarder.py:9-30), asked as one user message: {question} is the row's prompt
# (rollout.py:226-228), {model_response} the whole final output (:232, 242), {groundtruth} str(label) (:230).
SEED_JUDGE_TEMPLATE = """You are a strict math answer evaluator.

**Task:** Read the Model Response, extract its final answer, and determine if it matches the Ground Truth.

**Steps:**
1. Read the Model Response carefully. Find the final answer — look for \\boxed{{...}}, "the answer is ...", "result: ...", or the last numerical conclusion.
2. Compare the extracted answer to the Ground Truth.
3. They are equivalent ONLY if they represent the same mathematical value (e.g., "1/2" == "0.5", "1,000" == "1000").
4. If the Model Response has no clear final answer, or the answer does not match, output False.
5. Do NOT be lenient. When in doubt, output False.

**Inputs:**
Question: {question}

Model Response:
{model_response}

Ground Truth: {groundtruth}

**You MUST end your response with exactly one of these two lines (no extra text after it):**
VERDICT: True
VERDICT: False"""  # noqa: E501


# The seed's python_coder asks its coder model with this system message and the query as the user message
# (tools/python_coder/tool.py:139-150): the f-string of :140-146 with LIMITATION (:21-26) and BEST_PRACTICE
# (:28-33) in it; {exec_timeout} is its _EXEC_TIMEOUT (:12, 30 s; here `sandbox_wall_s`, printed as the seed's int).
SEED_PYTHON_CODER_SYSTEM = """You are a Python code generator. Write a self-contained Python script that solves the problem and prints the final result.

The Python_Code_Generator_Tool has the following limitations:
1. Code execution is time-limited to {exec_timeout} seconds; avoid infinite loops or extremely slow algorithms.
2. No GUI output (matplotlib.pyplot.show() has no effect); use print() to output results.
3. File and network I/O may not work in the sandbox environment.


For optimal results with the Python_Code_Generator_Tool:
1. Describe the calculation or problem in plain language; do not include Python code in the query.
2. The tool will generate and run Python code automatically — just state what needs to be computed.
3. Always end the generated code with a print() statement so the result is captured.

Return ONLY a single Python code block wrapped in ```python ... ```."""  # noqa: E501


def format_tools(names: Sequence[str]) -> str:
    """The tool list as the original prints it (a Python list).

    >>> format_tools(["Python_Coder_Tool", "Base_Generator_Tool"])
    "['Python_Coder_Tool', 'Base_Generator_Tool']"
    """
    return str(list(names))


def format_memory(actions: Sequence[Mapping[str, Any]], start: int = 1) -> str:
    """The memory as `get_actions()` prints it: {"Action Step k": {...}}, k from `start` (the original counts
    from 1, the seed from 0: its step_count runs over range(max_steps)).

    >>> format_memory([{"tool_name": "T", "sub_goal": "g", "command": "c", "result": "r"}])
    "{'Action Step 1': {'tool_name': 'T', 'sub_goal': 'g', 'command': 'c', 'result': 'r'}}"
    >>> format_memory([{"tool_name": "T"}, {"tool_name": "U"}], start=0)
    "{'Action Step 0': {'tool_name': 'T'}, 'Action Step 1': {'tool_name': 'U'}}"
    >>> format_memory([])
    '{}'
    """
    return str({f"Action Step {i}": dict(a) for i, a in enumerate(actions, start)})


def format_metadata(metadata: Mapping[str, Any]) -> str:
    """Tool metadata as the original's f-string prompts print their dicts (Python's repr, not JSON).

    >>> format_metadata({"T": {"tool_name": "T", "input_types": {"query": "str"}}})
    "{'T': {'tool_name': 'T', 'input_types': {'query': 'str'}}}"
    """
    return str(dict(metadata))


def format_seed_metadata(descriptions: Mapping[str, str]) -> str:
    """The seed's toolbox metadata as its prompts print it: {tool name: {"description": text}}
    (core/planner.py:72-75, printed by the f-string's str()).

    >>> format_seed_metadata({"T": "Does t."})
    "{'T': {'description': 'Does t.'}}"
    """
    return str({name: {"description": text} for name, text in descriptions.items()})

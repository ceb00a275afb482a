"""AgentFlow's two presets: the seed's training (the default) and the original paper's.

`AgentFlowOptions(variant=...)` fills every option below that the input does not set; an option given
explicitly wins. SOURCES says where each seed value comes from in the seed repository (Takenzz/AgentFlow,
commit 4b5aa84, folder agentic/agentflow); README's AgentFlow section prints this table.

>>> VARIANTS["seed"]["max_steps"], VARIANTS["original"]["max_steps"]
(5, 3)
"""

from __future__ import annotations

from typing import Any

__all__ = ["VARIANTS", "SOURCES", "SEED_COMMIT", "TEMPLATE_PRESETS"]

SEED_COMMIT = "Takenzz/AgentFlow@4b5aa84 agentic/agentflow"

VARIANTS: dict[str, dict[str, Any]] = {
    "seed": {
        "max_steps": 5,
        "max_time_s": None,
        "train_analysis": True,
        "analyzer_engine": "policy",
        "reward_split": "divide",
        "answer_check": "boxed_exact",
        "planner_max_new_tokens": 4096,
        "helper_max_new_tokens": 4096,
        "helper_temperature": None,
        "planner_token_budget": 131072,
        "verifier_rule": "seed",
        "sandbox_wall_s": 30.0,
        "tool_timeout_s": None,
        "action_step_start": 0,
        "prompts": "seed",
        "unknown_tool": "base_generator",
        "answer_suffix": False,
        "judge_prompt": "seed",
        "judge_max_new_tokens": 2048,
        "judge_no_verdict": "zero",
        "judge_sampling": "sglang_defaults",
        "helper_failure": "seed",
    },
    "original": {
        "max_steps": 3,
        "max_time_s": 300.0,
        "train_analysis": False,
        "analyzer_engine": "helper",
        "reward_split": "broadcast",
        "answer_check": "math_verify",
        "planner_max_new_tokens": 2048,
        "helper_max_new_tokens": 2048,
        "helper_temperature": 0.0,
        "planner_token_budget": None,
        "verifier_rule": "original",
        "sandbox_wall_s": 10.0,
        "tool_timeout_s": 120.0,
        "action_step_start": 1,
        "prompts": "original",
        "unknown_tool": "placeholders",
        "answer_suffix": True,
        "judge_prompt": "original",
        "judge_max_new_tokens": 1024,
        "judge_no_verdict": "fail",
        "judge_sampling": "greedy",
        "helper_failure": "fail",
    },
}

# option -> (seed file:line, what is there)
SOURCES: dict[str, tuple[str, str]] = {
    "max_steps": ("core/solver.py:33, rollout.py:145", "Solver's default max_steps=5; rollout.py passes none"),
    "max_time_s": ("core/solver.py:91-164", "no clock: only STOP, max_steps and the token budget end the loop"),
    "train_analysis": ("core/solver.py:78-85", "the planner's query analysis is training sequence #0, mask all 1"),
    "analyzer_engine": ("rollout.py:137-138, core/solver.py:47", "the analysis runs on the planner engine"),
    "reward_split": ("custom_convert.py:75-77", "group-normalised advantage / number of turns"),
    "answer_check": ("rollout.py:232-244", "last \\boxed{} (else a regex), normalised, == label, else the judge"),
    "planner_max_new_tokens": ("rollout.py:113", "the planner engine's max_new_tokens=4096"),
    "helper_max_new_tokens": ("rollout.py:122-134", "helper engines' max_new_tokens=4096"),
    "helper_temperature": ("rollout.py:122-134", "helpers sample with the rollout's sampling params"),
    "planner_token_budget": ("core/solver.py:27, 161-164", "no new step once planner tokens >= 131072"),
    "verifier_rule": ("core/verifier.py:50-65",
                      "the last 'Conclusion: STOP|CONTINUE', else the word stop/continue in the last 3 lines"),
    "sandbox_wall_s": ("tools/python_coder/tool.py:12, 165", "python_coder runs the code with _EXEC_TIMEOUT = 30 s"),
    "tool_timeout_s": ("core/executor.py:225-245, tools/python_coder/tool.py:150-155",
                       "no limit on tool.execute; python_coder's own: 120 s for its code, then the 30 s run"),
    "action_step_start": ("core/solver.py:91, 128", ("memory.add_action(step_count, ...) for step_count in "
                                                     "range(max_steps): 'Action Step 0' first")),
    "prompts": ("core/planner.py:80-169, core/executor.py:84-124, core/formatters.py:4-44, "
                "tools/python_coder/tool.py:60-170, core/llm_engine.py:67",
                "the seed's planner, command and final-output prompts, tool list and reply parser; python_coder's "
                "own prompt and one result string; every reply read as SGLang's text, its end-of-turn token kept"),
    "unknown_tool": ("core/executor.py:178-200, core/solver.py:115-128",
                     "a tool name it does not know (or none) runs Base_Generator_Tool; the memory keeps the name"),
    "answer_suffix": ("rollout.py:115", "the query is the row's prompt as given"),
    "judge_prompt": ("core/rewarder.py:9-48, rollout.py:225-244",
                     "the judge gets the question, the whole final output and the label; its first 'VERDICT: X' "
                     "decides, else '<true_false>: X', else a last line that is only true/false"),
    "judge_max_new_tokens": ("rollout.py:217-222", "the judge engine's max_new_tokens=2048"),
    "judge_no_verdict": ("core/rewarder.py:36-48", "a reply with no verdict by its rule returns 0.0"),
    "judge_sampling": ("rollout.py:217-222",
                       "sampling_params={} plus max_new_tokens: SGLang's /generate defaults, temperature 1.0, top-p 1.0"),
    "helper_failure": ("core/solver.py:118-125, 137-143, 169-181",
                       "a failing command call makes the command 'Error generating command: <e>', a failing verifier "
                       "concludes STOP, a failing final output is ''; each logged, the rollout goes on"),
}

# variant -> the chat-template kwargs its prompts are rendered with (MethodOptions.template_presets). The seed's
# engines render every prompt with apply_chat_template(..., enable_thinking=False) (rollout.py:113; the helpers'
# by core/llm_engine.py:31's default, used at :54): a Qwen2.5 template never reads it; a Qwen3 one then writes an
# empty think block, which its prompts lack otherwise.
TEMPLATE_PRESETS: dict[str, dict[str, Any]] = {"seed": {"enable_thinking": False}}

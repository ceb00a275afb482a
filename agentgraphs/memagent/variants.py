"""MemAgent's two presets: what the seed's code trains (the default) and the original MemAgent's.

`MemAgentOptions(variant=...)` fills every option below that the input does not set; an option given
explicitly wins. SOURCES says where each seed value comes from in the seed repository (Takenzz/AgentFlow,
commit 4b5aa84, folder agentic/memagent, whose converter is agentic/agentflow/custom_convert.py); README's
MemAgent section prints this table. The original's values are BytedTsinghua-SIA/MemAgent's
(recurrent/impls/memory.py and its RULER-HQA script).

Both variants read 5000-token chunks, cap memory updates at 1024 tokens and train the final answer: the
seed's README says its final answer is masked (loss_mask 0), its code trains it (rollout.py:145-150).

>>> VARIANTS["seed"]["max_chunks"], VARIANTS["original"]["max_chunks"]
(512, 8)
"""

from __future__ import annotations

from typing import Any

__all__ = ["VARIANTS", "SOURCES", "SEED_COMMIT", "TEMPLATE_PRESETS"]

SEED_COMMIT = "Takenzz/AgentFlow@4b5aa84 agentic/memagent"

VARIANTS: dict[str, dict[str, Any]] = {
    "seed": {
        "reward_split": "divide",
        "max_chunks": 512,
        "eval_max_chunks": 512,
        "truncation": "tail",
        "final_max_new_tokens": 256,
        "question_max_tokens": None,
        "chunk_as": "text",
        "strip_responses": True,
        "memory_after_think": False,
    },
    "original": {
        "reward_split": "broadcast",
        "max_chunks": 8,
        "eval_max_chunks": None,
        "truncation": "middle",
        "final_max_new_tokens": 1024,
        "question_max_tokens": 1024,
        "chunk_as": "ids",
        "strip_responses": False,
        "memory_after_think": True,
    },
}

# option -> (seed file:line, what is there); paths under agentic/ at 4b5aa84
SOURCES: dict[str, tuple[str, str]] = {
    "reward_split": ("agentflow/custom_convert.py:74-77",
                     "group-normalised advantage / len(turns), every memory update and the final answer"),
    "max_chunks": ("memagent/run_memagent_7b.sh:148", "MEM_MAX_CHUNKS=512 (rollout.py:41 reads it)"),
    "eval_max_chunks": ("memagent/eval_ruler_hqa.py:55, 259-262", "evaluation keeps the first 512 chunks too"),
    "truncation": ("memagent/rollout.py:115-118", "chunks of the whole document, then [:MAX_CHUNKS]: the head"),
    "final_max_new_tokens": ("memagent/run_memagent_7b.sh:147", "MEM_MAX_FINAL=256 (rollout.py:40, 143)"),
    "question_max_tokens": ("memagent/rollout.py:106, 126-127", "the question goes into the prompt uncut"),
    "chunk_as": ("memagent/rollout.py:125-128",
                 "decode(chunk, skip_special_tokens=True) into the prompt text, re-tokenised whole"),
    "strip_responses": ("memagent/rollout.py:84-88, 130, 152",
                        "stop-token text removed, .strip(); an empty update keeps the memory"),
    "memory_after_think": ("memagent/rollout.py:130",
                           "the whole update is the next memory, a </think> and the thoughts before it included"),
}

# variant -> the chat-template kwargs its prompts are rendered with (MethodOptions.template_presets): the seed's
# rollout renders with AgentFlow's engine (rollout.py:101), whose default is enable_thinking=False
# (agentflow/core/llm_engine.py:31, 54); a Qwen3 template then writes an empty think block, Qwen2.5's never reads it.
TEMPLATE_PRESETS: dict[str, dict[str, Any]] = {"seed": {"enable_thinking": False}}

"""MemAgent's AgentSpec: slime row -> graph input, the reward (`reward.py`), Multi-Conv sequences.

Every memory update and the final answer are their own sequence (`per_turn`); the `reward_split` option
(set by `variant`) gives each the trajectory's advantage (original) or it divided by their number (seed).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError
from ..row_fields import question_input
from ..spec import AgentSpec, RolloutInput, register
from .graph import MemAgentOptions, build_graph
from .reward import metrics, reward, reward_golds


def make_input(row: RolloutInput, options: MemAgentOptions) -> dict[str, Any]:
    # as given: the seed formats sample.prompt into its prompts unstripped (rollout.py:106, 126-127)
    question = question_input(row, strip=False)
    metadata = row["metadata"] or {}
    document = metadata.get("context")
    if not isinstance(document, str) or not document.strip():
        raise InputError("metadata.context", "missing or empty document",
                         "put the long document under metadata['context'] (--metadata-key metadata)")
    if row.get("label") is not None:
        reward_golds(row["label"], metadata)  # a bad metadata.ground_truth is reported before any generation
    return {"question": question, "document": document, "turns": []}


def reply_text_keys(options: MemAgentOptions) -> dict[str, object]:
    """With `strip_responses` (the seed's) the next memory and the answer are SGLang's reply text under slime's
    default skip_special_tokens=False (rollout.py:84-88, 130): another value is refused."""
    return {"skip_special_tokens": False} if options.strip_responses else {}


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """How much of the document was read: a chunk cap drops the tail (seed) or the middle (original) of a long one."""
    doc_tokens = len(state.get("doc_ids") or [])
    chunks = state.get("chunks") or []
    return {
        "doc_tokens": doc_tokens,
        "chunks_read": int(state.get("chunk_index", 0)),
        "chunks_planned": len(chunks),
        "tokens_read": sum(end - start for chunk in chunks for start, end in chunk),
    }


SPEC = AgentSpec(
    name="memagent",
    build_graph=build_graph,
    make_input=make_input,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    layout="per_turn",
    reward_split="broadcast",
    options=MemAgentOptions,
    reply_text_keys=reply_text_keys,  # slime's --rollout-skip-special-tokens under strip_responses: refused
    description="MemAgent: chunked recurrent memory over a long document, then a boxed answer",
    headline_metric="sub_em_strict",
    metric_notes={
        "sub_em_strict": "gold in answer or answer in gold, an empty answer never counts (the headline)",
        "sub_em": "the seed's published figure: an empty answer counts as a hit, so a model that never answers "
                  "scores 1.0 (sub_em - sub_em_strict = the share of unanswered responses)",
        "answered": "share of responses with a non-empty answer",
    },
)
register(SPEC)  # `load_spec("memagent")`, langgraph.json

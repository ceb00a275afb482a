"""MemAgent's AgentSpec: slime row -> graph input, reward, Multi-Conv sequences."""

from __future__ import annotations

from typing import Any, Mapping

from ..context import AgentContext
from ..errors import InputError
from ..spec import AgentSpec, RewardInput, RolloutInput
from .graph import MemAgentOptions, build_graph
from .reward import eval_metrics, memagent_reward


def question_of(prompt: Any) -> str:
    """The question from a slime prompt: a string, or chat messages (the last user message)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for msg in reversed(prompt):
            if isinstance(msg, Mapping) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
                return msg["content"]
    raise InputError("prompt", f"expected a question string or chat messages, got {type(prompt).__name__}",
                     "put the question under --input-key (default 'input') as a string")


def answers_of(label: Any) -> list[str]:
    """Ground truths from a label: a string, a list of strings, or {"ground_truth": ...}."""
    if isinstance(label, Mapping):
        label = label.get("ground_truth", label.get("answers"))
    if isinstance(label, str):
        return [label]
    if isinstance(label, (list, tuple)) and label and all(isinstance(x, (str, int, float)) for x in label):
        return [str(x) for x in label]
    raise InputError("label", f"expected an answer string or a list of answers, got {label!r:.80}",
                     "put the ground truth(s) under --label-key (default 'label')")


def make_input(row: RolloutInput, options: MemAgentOptions) -> dict[str, Any]:
    question = question_of(row["prompt"]).strip()
    if not question:
        raise InputError("prompt", "the question is empty", "give a non-empty question under --input-key")
    document = (row["metadata"] or {}).get("context")
    if not isinstance(document, str) or not document.strip():
        raise InputError("metadata.context", "missing or empty document",
                         "put the long document under metadata['context'] (--metadata-key metadata)")
    if row["label"] is not None:
        answers_of(row["label"])  # a malformed label is a bad row, reported before any generation
    return {"question": question, "document": document, "turns": []}


def answer(state: Mapping[str, Any]) -> str:
    return str(state.get("answer", ""))


def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
    return memagent_reward(rin["answer"], answers_of(rin["label"]))


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """How much of the document was read: a training cap drops the middle of long documents."""
    doc_tokens = len(state.get("doc_ids") or [])
    chunks = state.get("chunks") or []
    return {
        "doc_tokens": doc_tokens,
        "chunks_read": int(state.get("chunk_index", 0)),
        "chunks_planned": len(chunks),
        "tokens_read": sum(end - start for chunk in chunks for start, end in chunk),
    }


def metrics(rin: RewardInput) -> dict[str, float]:
    golds = answers_of(rin["label"]) if rin["label"] is not None else []
    if not golds:
        return {}
    return dict(eval_metrics(rin["answer"], golds))  # the reward itself is Rollout.reward (computed once)


SPEC = AgentSpec(
    name="memagent",
    build_graph=build_graph,
    make_input=make_input,
    answer=answer,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    layout="per_turn",
    reward_split="broadcast",
    options=MemAgentOptions,
    description="MemAgent: chunked recurrent memory over a long document, then a boxed answer",
)

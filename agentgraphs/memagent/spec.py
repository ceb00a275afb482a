"""MemAgent's AgentSpec: slime row -> graph input, reward, Multi-Conv sequences."""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ConfigError, InputError
from ..node import AgentContext
from ..spec import AgentSpec, RewardInput, RolloutInput
from .graph import DEFAULT_OPTIONS, build_graph
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


def make_input(row: RolloutInput, options: Mapping[str, Any]) -> dict[str, Any]:
    question = question_of(row["prompt"]).strip()
    if not question:
        raise InputError("prompt", "the question is empty", "give a non-empty question under --input-key")
    document = (row["metadata"] or {}).get("context")
    if not isinstance(document, str) or not document.strip():
        raise InputError("metadata.context", "missing or empty document",
                         "put the long document under metadata['context'] (--metadata-key metadata)")
    inp: dict[str, Any] = {"question": question, "document": document, "turns": []}
    if row["label"] is not None:
        inp["answers"] = answers_of(row["label"])
    return inp


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


def validate_options(options: Mapping[str, Any]) -> None:
    """Reject bad option values up front, naming the option."""
    for key in ("chunk_tokens", "memory_max_new_tokens", "final_max_new_tokens", "question_max_tokens"):
        _positive_int(options, key, allow_none=False)
    for key in ("max_chunks", "eval_max_chunks"):
        _positive_int(options, key, allow_none=True)
    if not isinstance(options.get("train_final_answer"), bool):
        raise ConfigError(f"option train_final_answer must be true or false, got {options.get('train_final_answer')!r}")
    if options.get("reward_split") not in ("broadcast", "divide"):
        raise ConfigError(f"option reward_split must be 'broadcast' or 'divide', got {options.get('reward_split')!r}")


def _positive_int(options: Mapping[str, Any], key: str, *, allow_none: bool) -> None:
    value = options.get(key)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        allowed = "a positive integer or null" if allow_none else "a positive integer"
        raise ConfigError(f"option {key} must be {allowed}, got {value!r}")


def metrics(rin: RewardInput) -> dict[str, float]:
    golds = answers_of(rin["label"]) if rin["label"] is not None else []
    if not golds:
        return {}
    return {"reward": memagent_reward(rin["answer"], golds), **eval_metrics(rin["answer"], golds)}


SPEC = AgentSpec(
    name="memagent",
    build_graph=lambda options: build_graph(options),
    make_input=make_input,
    answer=answer,
    reward=reward,
    eval_metrics=metrics,
    summarize=summarize,
    validate_options=validate_options,
    layout="per_turn",
    reward_split="broadcast",
    options=dict(DEFAULT_OPTIONS),
    description="MemAgent: chunked recurrent memory over a long document, then a boxed answer",
)

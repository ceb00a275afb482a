"""MemAgent's AgentSpec: slime row -> graph input, reward, Multi-Conv sequences."""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError
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
    layout="per_turn",
    reward_split="broadcast",
    options=dict(DEFAULT_OPTIONS),
    description="MemAgent: chunked recurrent memory over a long document, then a boxed answer",
)

"""A finished rollout (`Rollout`) as records: slime Sample fields, list-mode siblings, trace lines, the
RewardInput.

The one home of the Rollout record and of the shaping from a Rollout to what slime (through `rl_bridge`) and
`agentgraphs run` write: both call `sample_fields`, so a sample looks the same wherever it was made. Plain Python.

>>> trace_summary([])["trained_tokens"]
0
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence, get_args

from .calls import DroppedCall
from .errors import InputError, RewardError
from .spec import AgentSpec, MethodOptions, RewardInput, RewardValue
from .trace import TrainSequence, Turn, head_index

logger = logging.getLogger(__name__)
_WARNED_TRAILING_ZERO: set[str] = set()

# The keys agentgraphs adds to a Sample's metadata; everything else in it is the input row's own.
# ("rollout_time_s" is no longer written, samples are free of wall-clock values; still stripped from old ones)
RESULT_METADATA_KEYS = frozenset({
    "agentgraph", "answer", "status_reason", "error", "llm_calls", "untrained_calls", "masked_turns", "retries",
    "num_sequences", "rollout_time_s", "metrics", "trace_summary", "options", "trajectory_id", "sequence_index",
})
SEQUENCE_KEYS = ("tokens", "response_length", "loss_mask", "rollout_log_probs")

Status = Literal["completed", "truncated", "aborted", "failed"]
STATUSES: tuple[str, ...] = get_args(Status)  # every status a sample can have (`agentgraphs check` refuses others)


@dataclass
class Rollout:
    """The result of one input: status, turns, training sequences, and the reward and metrics (once).

    FAILED rollouts train nothing: `agentgraphs.records.sample_fields` masks their sequences.
    `llm_calls` counts every engine call the rollout's graph made through `call_llm` / `TracedChatModel`
    (policy and helpers), `untrained_calls` the trainable ones whose Turn did not reach the final state
    (`agentgraphs.calls`).
    """

    status: Status
    reason: str
    answer: str = ""
    # bulky fields stay out of repr(): asyncio.run() reprs its result when it restores the SIGINT
    # handler, and a 448K-token document made that a 15 MB string
    turns: list[Turn] = field(default_factory=list, repr=False)
    sequences: list[TrainSequence] = field(default_factory=list, repr=False)
    reward: RewardValue | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    time_s: float = 0.0
    error: str | None = None
    final_state: dict[str, Any] | None = field(default=None, repr=False)
    options: MethodOptions | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    reward_input: RewardInput | None = field(default=None, repr=False)
    path: list[str] = field(default_factory=list, repr=False)  # every graph node that ran, in order
    # per step of `path`: the request ids of the Turns its update added (None: not readable from the update)
    path_rids: list[list[str] | None] = field(default_factory=list, repr=False)
    llm_calls: int | None = None  # None: not counted (a state reached elsewhere): the Turns themselves
    untrained_calls: list[DroppedCall] = field(default_factory=list)
    masked_turns: list[dict[str, Any]] = field(default_factory=list)  # {turn, node, reason}: see untrain_turns
    trajectory_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if self.llm_calls is None:
            self.llm_calls = len(self.turns)

    @property
    def retries(self) -> int:
        return sum(int(t.get("retries", 0)) for t in self.turns)


def trace_summary(turns: Sequence[Turn]) -> dict[str, Any]:
    """Counts a user reads first: calls per node, tokens generated and trained, truncations."""
    by_node: dict[str, int] = {}
    for t in turns:
        by_node[t["node"]] = by_node.get(t["node"], 0) + 1
    return {
        "turns_by_node": by_node,
        "output_tokens": sum(len(t["output_ids"]) for t in turns),
        "trained_tokens": sum(len(t["output_ids"]) for t in turns if t["trainable"]),
        "truncated_turns": sum(1 for t in turns if t["finish_reason"] == "length"),
    }


def reward_input(*, answer: str, prompt: Any, label: Any, row_metadata: Mapping[str, Any] | None, status: str,
                 summary: Mapping[str, Any], options: MethodOptions | Mapping[str, Any] | None) -> RewardInput:
    """The RewardInput, built here and nowhere else (run_rollout and rl_bridge.reward_func both call it)."""
    opts = options.model_dump() if isinstance(options, MethodOptions) else dict(options or {})
    return RewardInput(answer=answer, prompt=prompt, label=label, metadata=dict(row_metadata or {}), status=status,
                       trace_summary=dict(summary), options=opts)


def row_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Sample's metadata without the keys agentgraphs added: the input row's own metadata."""
    return {k: v for k, v in (metadata or {}).items() if k not in RESULT_METADATA_KEYS}


def sample_metadata(metadata: Any) -> dict[str, Any]:
    """A Sample's metadata as a dict the result keys can be written into: none for None, a copy of a mapping,
    and anything else (a slime row's string or list under --metadata-key) kept under "value", never dropped.

    >>> sample_metadata(None), sample_metadata({"a": 1}), sample_metadata("row text")
    ({}, {'a': 1}, {'value': 'row text'})
    """
    if metadata is None:
        return {}
    return dict(metadata) if isinstance(metadata, Mapping) else {"value": metadata}


def reward_input_of_sample(sample: Any) -> RewardInput:
    """Rebuild the RewardInput a rollout was scored with from the Sample rl_bridge.generate filled.

    A Sample without the extracted answer (metadata["answer"]) was not filled by rl_bridge.generate (slime's
    own generate with our rm): InputError, since grading its raw response text would make up a reward."""
    meta = getattr(sample, "metadata", None) or {}
    if not isinstance(meta, Mapping) or "answer" not in meta:
        raise InputError("metadata.answer", "this Sample carries no extracted answer: rl_bridge.generate did not "
                         "fill it, and grading its raw response text would make up a reward",
                         "pass --custom-generate-function-path rl_bridge.generate with --custom-rm-path "
                         "rl_bridge.reward_func (the rm re-scores only the Samples that generate filled)")
    status = getattr(getattr(sample, "status", None), "value", None) or "completed"
    return reward_input(answer=str(meta["answer"]),
                        prompt=getattr(sample, "prompt", None), label=getattr(sample, "label", None),
                        row_metadata=row_metadata(meta),
                        status=str(status), summary=meta.get("trace_summary") or {},
                        options=meta.get("options") or {})


def scalar(value: RewardValue | None, key: str) -> float:
    """The scalar of a reward: a float, or a dict reward's `key` entry; None (not scored) counts as 0.

    A dict without `key` raises RewardError: a made-up 0.0 would pass for a wrong answer. So does a NaN or
    infinite value: a mean over it (an eval accuracy, a run's mean reward) would be NaN.

    >>> scalar({"reward": 1, "acc": 0.5}, "reward"), scalar(None, "reward")
    (1.0, 0.0)
    """
    if value is None:
        return 0.0
    number = float(_entry(value, key) if isinstance(value, Mapping) else value)
    if not math.isfinite(number):
        raise RewardError(f"reward {value!r} is not finite: it cannot be averaged or trained on; the reward "
                          "function must return a finite number")
    return number


def scale_reward(value: RewardValue, factor: float, key: str) -> RewardValue:
    if isinstance(value, Mapping):
        return {**value, key: float(_entry(value, key)) * factor}
    return float(value) * factor


def _entry(value: Mapping[str, Any], key: str) -> Any:
    if key not in value:
        raise RewardError(f"dict reward {sorted(value)} has no key {key!r}: the reward function must put its scalar "
                          f"under the spec's reward_key, or name the key that holds it (AgentSpec.reward_key; "
                          f"slime: --reward-key / --eval-reward-key)")
    return value[key]


def zero_reward(spec: AgentSpec) -> RewardValue:
    return {spec.reward_key: 0.0} if spec.dict_reward else 0.0


def mask_out(seq: dict[str, Any]) -> None:
    """Train nothing from `seq` (a failed trajectory): all-zero loss mask, log-prob 0.0 (invariant 4)."""
    n = seq["response_length"]
    seq["loss_mask"] = [0] * n
    seq["rollout_log_probs"] = [0.0] * n


FAILED_FIELDS = ("status", "remove_sample", "loss_mask", "rollout_log_probs", "metadata")  # what fail_fields sets


def fail_fields(fields: dict[str, Any], reason: str) -> None:
    """Turn filled Sample fields into a FAILED trajectory that trains nothing (invariant 4): status "failed",
    removed, the top level and every training sequence masked (mask 0, log-prob 0.0), the reason in metadata.
    `fields` needs `response_length` (and may have `train_metadata` and `metadata`); it sets FAILED_FIELDS.

    >>> fields = {"response_length": 2, "train_metadata": {"turns": [{"response_length": 2}]}, "metadata": {}}
    >>> fail_fields(fields, "judge down")
    >>> fields["loss_mask"], fields["train_metadata"]["turns"][0]["loss_mask"], fields["metadata"]
    ([0, 0], [0, 0], {'status_reason': 'judge down'})
    """
    n = int(fields.get("response_length") or 0)
    fields["status"] = "failed"
    fields["remove_sample"] = True
    fields["loss_mask"] = [0] * n
    fields["rollout_log_probs"] = [0.0] * n
    for seq in (fields.get("train_metadata") or {}).get("turns", []):
        mask_out(seq)
    fields["metadata"] = {**sample_metadata(fields.get("metadata")), "status_reason": reason}


def sample_fields(rollout: Rollout, spec: AgentSpec, *, pad_id: int = 0) -> dict[str, Any]:
    """The slime Sample fields for a rollout (status as a lower-case string).

    The top-level tokens/loss_mask/rollout_log_probs hold the first training sequence that trains a token
    (else the first), so slime's default path sees a valid sample; `train_metadata["turns"]` holds every
    sequence for rl_bridge.convert, each with the `sampling` its trained tokens were generated with. A failed rollout
    trains nothing: all-zero masks and remove_sample=True, reward 0. `metadata["llm_calls"]` counts every
    engine call the rollout made and `metadata["untrained_calls"]` names the trainable ones the graph
    dropped. Nothing here depends on the wall clock (the rollout's time is in its trace record), so a
    seeded run writes the same samples twice.
    """
    sequences: list[dict[str, Any]] = [{**{k: s[k] for k in SEQUENCE_KEYS}, "sampling": s.get("sampling")}
                                       for s in rollout.sequences]
    if not sequences:
        # slime needs a non-empty prompt AND response (it reads the logits at position prompt_len-1):
        # two pad tokens, the second a masked placeholder response, never trained.
        sequences = [dict(tokens=[pad_id, pad_id], response_length=1, loss_mask=[0], rollout_log_probs=[0.0],
                          sampling=None)]
    warn_trailing_zero(sequences, spec.name)
    head = sequences[head_index(sequences)]  # the first that trains a token: all-zero top level = train nothing
    options = rollout.options.model_dump() if isinstance(rollout.options, MethodOptions) else {}
    fields: dict[str, Any] = {
        "tokens": list(head["tokens"]),
        "response_length": head["response_length"],
        "loss_mask": list(head["loss_mask"]),
        "rollout_log_probs": list(head["rollout_log_probs"]),
        "response": rollout.answer,
        "status": rollout.status,
        "reward": rollout.reward,
        "remove_sample": False,
        "weight_versions": sorted({str(t["weight_version"]) for t in rollout.turns if t.get("weight_version")}),
        "metadata": {
            "agentgraph": spec.name,
            "trajectory_id": rollout.trajectory_id,
            "answer": rollout.answer,
            "status_reason": rollout.reason,
            "error": rollout.error,
            "llm_calls": rollout.llm_calls,
            "untrained_calls": [dict(c) for c in rollout.untrained_calls],
            "masked_turns": list(rollout.masked_turns),
            "retries": rollout.retries,
            "num_sequences": len(rollout.sequences),
            "metrics": rollout.metrics,
            "trace_summary": rollout.summary or trace_summary(rollout.turns),
            "options": options,
        },
        "train_metadata": {
            "turns": sequences,
            "reward_split": spec.reward_split_for(rollout.options) if isinstance(rollout.options, MethodOptions)
            else spec.reward_split,
            "layout": spec.layout,
        },
    }
    if spec.reward_shaping is not None and isinstance(rollout.options, MethodOptions):
        shaping = spec.reward_shaping(rollout.options, fields["metadata"]["trace_summary"])
        if shaping:
            fields["train_metadata"]["reward_shaping"] = shaping
    if rollout.status == "failed":
        fail_fields(fields, rollout.reason)
        if rollout.reward is None:
            fields["reward"] = zero_reward(spec)
    return fields


def sibling_fields(fields: dict[str, Any], spec: AgentSpec) -> list[dict[str, Any]]:
    """List mode (`agentgraph_return_list`): one Sample's fields per training sequence.

    Every sibling carries the trajectory's reward, computed once (divided by the sibling count when the
    reward split is "divide"), the same trajectory_id, and its place among the siblings.
    """
    seqs = fields["train_metadata"]["turns"]
    divide = fields["train_metadata"]["reward_split"] == "divide" and len(seqs) > 1
    reward = fields["reward"]
    if divide and reward is not None:
        reward = scale_reward(reward, 1.0 / len(seqs), spec.reward_key)
    out = []
    for i, seq in enumerate(seqs):
        sib = {**fields, **{k: (list(seq[k]) if isinstance(seq[k], list) else seq[k]) for k in SEQUENCE_KEYS}}
        sib["reward"] = reward
        sib["metadata"] = {**fields["metadata"], "sequence_index": i, "num_sequences": len(seqs)}
        sib["train_metadata"] = {**fields["train_metadata"], "turns": [seq], "reward_split": "broadcast",
                                 "trajectory_sequences": len(seqs)}
        out.append(sib)
    return out


def warn_trailing_zero(sequences: Sequence[Mapping[str, Any]], agent: str) -> None:
    """slime packs rows and reads trailing token id 0 as padding: a trained sequence ending in id 0
    (`!` in Qwen's vocabulary) packed last in its row would shift that row's log-probs. Say so."""
    for k, seq in enumerate(sequences):
        tokens = seq["tokens"]
        if tokens and tokens[-1] == 0 and any(seq["loss_mask"]) and agent not in _WARNED_TRAILING_ZERO:
            _WARNED_TRAILING_ZERO.add(agent)  # once per agent and process: it is a property of the policy
            logger.warning(
                "agentgraph %s: training sequence %d ends in token id 0, which slime's packing treats as "
                "padding; if it is packed last in its row its log-probs shift (see README, 'Training with "
                "slime'). Stop generations on the end-of-turn token to avoid it.", agent, k)


def path_turns(path_rids: Sequence[Sequence[str] | None], turns: Sequence[Turn]) -> list[list[int | None] | None]:
    """Per graph step, the indices in `turns` of the engine calls it made: None for a call whose Turn is not
    in the final state (the graph dropped it), and a step None when its calls could not be read.

    >>> path_turns([[], ["b", "x"], None], [{"rid": "a"}, {"rid": "b"}])
    [[], [1, None], None]
    """
    where = {str(t.get("rid")): i for i, t in enumerate(turns) if t.get("rid")}
    return [None if rids is None else [where.get(r) if r else None for r in rids] for rids in path_rids]


def trace_record(rollout: Rollout, index: int | None) -> dict[str, Any]:
    """A JSON line for traces.jsonl: the input's index, status and every Turn as recorded."""
    return {
        "index": index,
        "status": rollout.status,
        "reason": rollout.reason,
        "answer": rollout.answer,
        "reward": rollout.reward,
        "metrics": rollout.metrics,
        "summary": rollout.summary or trace_summary(rollout.turns),
        "time_s": round(rollout.time_s, 4),
        "path": rollout.path,
        "path_turns": path_turns(rollout.path_rids, rollout.turns),
        "llm_calls": rollout.llm_calls,
        "untrained_calls": [dict(c) for c in rollout.untrained_calls],
        "turns": rollout.turns,
        "error": rollout.error,
    }


__all__ = [
    "FAILED_FIELDS",
    "RESULT_METADATA_KEYS",
    "Rollout",
    "STATUSES",
    "Status",
    "TrainSequence",
    "fail_fields",
    "mask_out",
    "path_turns",
    "reward_input",
    "reward_input_of_sample",
    "row_metadata",
    "sample_fields",
    "sample_metadata",
    "scalar",
    "sibling_fields",
    "trace_record",
    "trace_summary",
    "warn_trailing_zero",
    "zero_reward",
]

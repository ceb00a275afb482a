"""slime's hooks: generate, reward_func, eval_log. The whole rollout path, top to bottom.

    --custom-generate-function-path rl_bridge.generate
    --custom-rm-path rl_bridge.reward_func
    --custom-eval-rollout-log-function-path rl_bridge.eval_log
    --custom-convert-samples-to-train-data-path rl_bridge.convert

slime's Sample is duck-typed: fields are set on the object it hands us; siblings are copies of it;
`Status` is read from its class. Nothing here imports slime.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from typing import Any, Sequence

from agentgraphs.engine import SamplingParams
from agentgraphs.rollout import Rollout, reward_input, rollout_input, run_rollout, sample_fields, score
from agentgraphs.spec import RewardInput
from agentgraphs.trace import mask_out

from .setup import get_setup

logger = logging.getLogger(__name__)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """Run the configured agent graph for one slime Sample and fill it in place.

    Returns the Sample (status COMPLETED / TRUNCATED / ABORTED / FAILED), or a list of sibling
    Samples, one per training sequence, when `agentgraph_return_list` is set.
    Configuration errors (unknown agent, no hf_checkpoint) raise before any rollout starts.
    """
    setup = get_setup(args)
    ctx = setup.context(SamplingParams.from_slime(sampling_params), evaluation=evaluation)
    inp = rollout_input(sample.prompt, sample.label, _metadata(sample), getattr(sample, "index", None))
    rollout = await run_rollout(setup.spec, inp, ctx, options=setup.options, compute_reward=False)
    _fill(sample, rollout, setup)
    if rollout.status == "failed":
        logger.warning("agentgraph %s: sample %s failed: %s", setup.spec.name, inp["index"], rollout.reason)
    if setup.return_list and rollout.status != "aborted":
        return _siblings(sample)
    return sample


def _metadata(sample: Any) -> dict[str, Any]:
    meta = getattr(sample, "metadata", None)
    if meta is None:
        meta = {}
        sample.metadata = meta
    if not isinstance(meta, dict):
        meta = {"value": meta}
        sample.metadata = meta
    return meta


def _status(sample: Any, name: str) -> Any:
    return type(sample).Status(name)


def _fill(sample: Any, rollout: Rollout, setup: Any) -> None:
    pad = getattr(setup.tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(setup.tokenizer, "eos_token_id", 0) or 0
    fields = sample_fields(rollout, setup.spec, pad_id=int(pad))
    sample.tokens = fields["tokens"]
    sample.response_length = fields["response_length"]
    sample.loss_mask = fields["loss_mask"]
    sample.rollout_log_probs = fields["rollout_log_probs"]
    sample.response = fields["response"]
    sample.status = _status(sample, fields["status"])
    sample.remove_sample = fields["remove_sample"]
    sample.weight_versions = fields["weight_versions"]
    sample.reward = None
    _metadata(sample).update(fields["metadata"])
    sample.train_metadata = {**(getattr(sample, "train_metadata", None) or {}), **fields["train_metadata"]}


def _siblings(sample: Any) -> list[Any]:
    """One Sample per training sequence; siblings share rollout_id (slime >= 0.3)."""
    seqs = sample.train_metadata["turns"]
    out = []
    for i, seq in enumerate(seqs):
        sib = copy.copy(sample)
        sib.tokens = list(seq["tokens"])
        sib.response_length = seq["response_length"]
        sib.loss_mask = list(seq["loss_mask"])
        sib.rollout_log_probs = list(seq["rollout_log_probs"])
        sib.metadata = {**sample.metadata, "sequence_index": i, "num_sequences": len(seqs)}
        sib.train_metadata = {k: v for k, v in sample.train_metadata.items() if k != "turns"}
        sib.train_metadata["turns"] = [seq]
        sib.train_metadata["reward_split"] = "broadcast"
        sib.train_metadata["trajectory_sequences"] = len(seqs)
        if hasattr(sib, "rollout_id") and getattr(sib, "rollout_id", None) is None:
            sib.rollout_id = sample.index
        out.append(sib)
    return out


async def reward_func(args: Any, sample: Any, **kwargs: Any) -> Any:
    """slime's custom rm: a float or dict per Sample; a list of them when given a list.

    Dict rewards carry the scalar under the spec's `reward_key` ("reward" by default): pass
    `--reward-key reward`. For siblings from `agentgraph_return_list`, each gets its trajectory's
    reward (divided by the sibling count when the spec's reward_split is "divide"). Note the order:
    there the RAW reward is divided and slime then normalises the siblings, while rl_bridge.convert
    normalises per trajectory first and divides the normalised value (the seed's reward / T).
    A sample whose reward cannot be computed (no label, a judge that is down) does not stop slime:
    it becomes FAILED with zero masks, its reason in metadata, and scores 0.
    """
    if isinstance(sample, (list, tuple)):
        return [await _reward_one(args, s) for s in sample]
    return await _reward_one(args, sample)


async def _reward_one(args: Any, sample: Any) -> Any:
    setup = get_setup(args)
    meta = _metadata(sample)
    status = getattr(getattr(sample, "status", None), "value", "completed")
    rin = RewardInput(answer=str(meta.get("answer", sample.response or "")), label=sample.label,
                      metadata=meta, status=str(status))
    if status == "failed":
        # a failed rollout is fully masked and left out of the group statistics by rl_bridge.convert
        return _zero(setup)
    try:
        ctx = setup.context(SamplingParams(), evaluation=False)
        value = await score(setup.spec, rin, ctx)
    except Exception as exc:  # noqa: BLE001 - one unscorable sample must not stop slime's rollout
        _fail_unscorable(sample, f"reward failed: {type(exc).__name__}: {exc}")
        logger.warning("agentgraph %s: sample %s could not be scored: %s", setup.spec.name,
                       getattr(sample, "index", None), exc)
        return _zero(setup)
    tm = getattr(sample, "train_metadata", None) or {}
    n = int(tm.get("trajectory_sequences", 1) or 1)
    if n > 1 and setup.options.get("reward_split", setup.spec.reward_split) == "divide":
        value = _scale(value, 1.0 / n, setup.spec.reward_key)
    return value


def _zero(setup: Any) -> Any:
    return {setup.spec.reward_key: 0.0} if setup.spec.dict_reward else 0.0


def _fail_unscorable(sample: Any, reason: str) -> None:
    """A sample whose reward cannot be computed (no label, a judge that is down) trains nothing."""
    sample.status = _status(sample, "failed")
    sample.remove_sample = True
    sample.loss_mask = [0] * int(sample.response_length or 0)
    sample.rollout_log_probs = [0.0] * int(sample.response_length or 0)
    for seq in (getattr(sample, "train_metadata", None) or {}).get("turns", []):
        mask_out(seq)
    _metadata(sample)["status_reason"] = reason


def _scale(value: Any, factor: float, key: str) -> Any:
    if isinstance(value, dict):
        return {**value, key: float(value.get(key, 0.0)) * factor}
    return float(value) * factor


def eval_log(rollout_id: int, args: Any, data: dict[str, Any], extra_metrics: dict[str, Any] | None) -> bool:
    """slime's eval-log hook: per-dataset accuracy and the method's metrics.

    Writes `<dir>/eval_<rollout_id>.json` (dir = args.agentgraph_eval_dir, else args.save/eval_logs,
    else ./eval_logs) and adds `eval/<dataset>/<metric>` entries to slime's `extra_metrics` dict,
    so slime's own logger (wandb/tensorboard) records them; when slime passes no dict (v0.2.2's
    default eval), they are logged through slime.utils.logging_utils directly. Returns False:
    slime's default logging still runs.
    """
    metrics = eval_metrics(data, getattr(args, "eval_reward_key", None) or getattr(args, "reward_key", None))
    flat = {f"eval/{ds}/{k}": v for ds, m in metrics.items() for k, v in m.items()}
    if isinstance(extra_metrics, dict):
        extra_metrics.update(flat)
    else:
        # slime v0.2.2's default eval passes extra_metrics=None: log through slime's tracker ourselves
        _log_with_slime(rollout_id, args, flat)
    out_dir = getattr(args, "agentgraph_eval_dir", None) or (
        os.path.join(args.save, "eval_logs") if getattr(args, "save", None) else "eval_logs"
    )
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"eval_{rollout_id}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"rollout_id": rollout_id, "metrics": metrics}, fh, indent=2, sort_keys=True)
    logger.info("agentgraphs eval %s: %s (written to %s)", rollout_id, flat, path)
    return False


def _log_with_slime(rollout_id: int, args: Any, flat: dict[str, float]) -> None:
    try:
        from slime.utils import logging_utils  # type: ignore[import-not-found]
    except ImportError:
        return  # outside slime: the JSON file is the record
    try:
        from slime.utils.metric_utils import compute_rollout_step  # type: ignore[import-not-found]

        step = compute_rollout_step(args, rollout_id)
    except Exception:  # noqa: BLE001 - older slime: the rollout id is the step
        step = rollout_id
    logging_utils.log(args, {**flat, "eval/step": step}, step_key="eval/step")


def eval_metrics(data: dict[str, Any], reward_key: str | None = None) -> dict[str, dict[str, float]]:
    """Per dataset: count, accuracy (mean scalar reward), truncated rate, status counts and the
    means of every numeric metric the agent recorded in sample.metadata["metrics"], over ALL samples
    (a sample without the metric, e.g. a failed rollout, counts as 0, as in accuracy)."""
    out: dict[str, dict[str, float]] = {}
    for name, entry in data.items():
        rewards = [_scalar(r, reward_key) for r in entry.get("rewards", [])]
        samples: Sequence[Any] = entry.get("samples") or []
        m: dict[str, float] = {"count": float(len(rewards))}
        if rewards:
            m["accuracy"] = sum(rewards) / len(rewards)
        truncated = entry.get("truncated") or []
        if truncated:
            m["truncated_rate"] = sum(1 for t in truncated if t) / len(truncated)
        sums: dict[str, float] = {}
        for s in samples:
            meta = getattr(s, "metadata", None) or {}
            status = getattr(getattr(s, "status", None), "value", None)
            if status:
                m[f"status_{status}"] = m.get(f"status_{status}", 0.0) + 1
            for k, v in (meta.get("metrics") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    sums[k] = sums.get(k, 0.0) + float(v)
        for k in sums:
            m[k] = sums[k] / len(samples)
        out[name] = m
    return out


def _scalar(value: Any, key: str | None) -> float:
    if isinstance(value, dict):
        return float(value.get(key or "reward", 0.0))
    return float(value or 0.0)


__all__ = ["eval_log", "eval_metrics", "generate", "reward_func", "reward_input"]

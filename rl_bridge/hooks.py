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
import importlib
import importlib.util
import json
import logging
import os
from typing import Any, Sequence

from agentgraphs.engines import SamplingParams
from agentgraphs.errors import ConfigError, RewardError, SamplingMismatchError
from agentgraphs.records import (
    FAILED_FIELDS,
    Rollout,
    fail_fields,
    scalar,
    reward_input_of_sample,
    row_metadata,
    sample_fields,
    sample_metadata,
    scale_reward,
    sibling_fields,
    zero_reward,
)
from agentgraphs.rollout import reward_failure, rollout_input, run_rollout, score, untrain_turns
from agentgraphs.trace import SamplingMismatch, sampling_mismatches
from agentgraphs.train_checks import slime_v03

from .setup import get_setup

logger = logging.getLogger(__name__)
_SAMPLE_FIELDS = ("tokens", "response_length", "loss_mask", "rollout_log_probs", "response", "reward",
                  "remove_sample", "weight_versions")


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """Run the configured agent graph for one slime Sample and fill it in place.

    Returns the Sample (status COMPLETED / TRUNCATED / ABORTED / FAILED) with its reward already set
    (computed once, in `run_rollout`; slime then skips its reward model for it), or, with
    `agentgraph_return_list`, a list: one sibling Sample per training sequence (an aborted trajectory
    comes back as a one-element list). Configuration errors raise before any rollout starts.

    A trainable turn sampled with another temperature / top_p / top_k / min_p than slime's rollout settings
    (`rollout_sampling`) raises SamplingMismatchError naming the node and both values, or, with
    `agentgraph_on_sampling_mismatch: mask`, trains nothing (mask 0, log-prob 0.0; `metadata["masked_turns"]`).
    """
    setup = get_setup(args)
    if setup.return_list and not slime_v03(sample, getattr(args, "agentgraph_slime_version", None)):
        raise ConfigError(
            "agentgraph_return_list: true needs slime >= 0.3 (siblings grouped by rollout_id), but this Sample has "
            "neither rollout_id nor group_id: slime 0.2.x logs and scores a generate result as one Sample. Use "
            "the default single-Sample layout with --custom-convert-samples-to-train-data-path rl_bridge.convert")
    setup.spec.check_reply_text_keys(setup.options, sampling_params)
    ctx = setup.context(SamplingParams.from_slime(sampling_params), evaluation=evaluation)
    inp = rollout_input(sample.prompt, sample.label, _row_metadata(sample), getattr(sample, "index", None))
    rollout = await run_rollout(setup.spec, inp, ctx, options=setup.options)
    if not evaluation and rollout.status in ("completed", "truncated"):
        _check_sampling(rollout, rollout_sampling(args, sampling_params), setup.on_sampling_mismatch,
                        setup.spec.layout, setup.spec.name)
    fields = sample_fields(rollout, setup.spec, pad_id=_pad_id(setup.tokenizer))
    if rollout.status == "failed":
        logger.warning("agentgraph %s: sample %s failed: %s", setup.spec.name, inp["index"], rollout.reason)
    if not setup.return_list:
        _apply(sample, fields)
        return sample
    if rollout.status == "aborted":
        _apply(sample, fields)
        return [sample]  # slime's flattening takes lists only, once a generate function returns lists
    return [_apply(copy.copy(sample), sib) for sib in sibling_fields(fields, setup.spec)]


def rollout_sampling(args: Any, sampling_params: dict[str, Any]) -> dict[str, Any]:
    """The sampling slime's trainer assumes: --rollout-temperature / --rollout-top-p / --rollout-top-k (else the
    sampling_params slime handed `generate`), and no min_p (slime has none).

    >>> rollout_sampling(type("Args", (), {"rollout_temperature": 0.8})(), {"top_p": 1.0})
    {'temperature': 0.8, 'top_p': 1.0, 'top_k': -1, 'min_p': 0.0}
    """
    out: dict[str, Any] = {}
    for key, arg, default in (("temperature", "rollout_temperature", 1.0), ("top_p", "rollout_top_p", 1.0),
                              ("top_k", "rollout_top_k", -1)):
        value = getattr(args, arg, None)
        if value is None:
            value = sampling_params.get(key)
        out[key] = (int if key == "top_k" else float)(default if value is None else value)
    out["min_p"] = 0.0
    return out


_FLAGS = {"temperature": "--rollout-temperature", "top_p": "--rollout-top-p", "top_k": "--rollout-top-k",
          "min_p": "(slime has no min-p: off)"}


def _check_sampling(rollout: Rollout, expected: dict[str, Any], action: str, layout: Any, agent: str) -> None:
    found = sampling_mismatches(rollout.turns, expected)
    if not found:
        return
    if action == "refuse":
        raise SamplingMismatchError(
            f"agentgraph {agent}: {_describe(found[0])}: slime's trainer recomputes its log-probs with its own "
            f"setting, so the recorded ones would not be comparable ({len(found)} such trainable turn(s) in this "
            "rollout). Sample trainable calls with slime's settings (drop the override: `.bind(...)`, "
            "TracedChatModel(sampling=...), call_llm(temperature=...)), make that call trainable=False, or set "
            "`agentgraph_on_sampling_mismatch: mask` to train nothing from such turns")
    untrain_turns(rollout, layout, {m["turn"]: f"not trained: {_describe(m)}" for m in found})
    logger.warning("agentgraph %s: %d trainable turn(s) masked (agentgraph_on_sampling_mismatch: mask); first: %s",
                   agent, len(found), _describe(found[0]))


def _describe(m: SamplingMismatch) -> str:
    return (f"node {m['node']!r} (turn {m['turn']}) was sampled with {m['key']}={m['recorded']}, slime's rollout "
            f"uses {m['key']}={m['expected']} {_FLAGS[m['key']]}")


def _row_metadata(sample: Any) -> Any:
    meta = getattr(sample, "metadata", None)
    if not isinstance(meta, dict):
        return meta  # None is no metadata; anything else is refused by run_rollout, naming the field
    # a Sample generate filled before (re-queued by --partial-rollout) carries our result keys: not the row's
    return row_metadata(meta) if "agentgraph" in meta else dict(meta)


def _pad_id(tokenizer: Any) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", 0) or 0
    return int(pad)


def _apply(sample: Any, fields: dict[str, Any]) -> Any:
    """Set the fields `agentgraphs.records.sample_fields` computed on slime's (duck-typed) Sample."""
    for name in _SAMPLE_FIELDS:
        setattr(sample, name, fields[name])
    sample.status = type(sample).Status(fields["status"])
    sample.metadata = {**sample_metadata(getattr(sample, "metadata", None)), **fields["metadata"]}
    sample.train_metadata = {**(getattr(sample, "train_metadata", None) or {}), **fields["train_metadata"]}
    if "trajectory_sequences" in fields["train_metadata"]:
        # siblings share one rollout id (slime >= 0.3: rollout_id; v0.3.0 named it group_id, and its Sample
        # raises AttributeError on reading rollout_id, so hasattr is the test)
        own = next((name for name in ("rollout_id", "group_id") if hasattr(sample, name)), None)
        if own is not None and getattr(sample, own) is None:
            setattr(sample, own, getattr(sample, "index", None))
    return sample


async def reward_func(args: Any, sample: Any, **kwargs: Any) -> Any:
    """slime's custom rm: a float or dict per Sample; a list of them when given a list.

    `rl_bridge.generate` already set every Sample's reward (computed once per trajectory in
    `run_rollout`), so slime calls this only where a reward is missing: it is then recomputed from the
    same RewardInput (`agentgraphs.records.reward_input_of_sample`), once per trajectory, and shared by
    its list-mode siblings (divided among them when the reward split is "divide"). Dict rewards carry
    the scalar under the spec's `reward_key`: pass `--reward-key reward`. A sample whose reward cannot
    be computed (no label, a judge that is down) or is not a trainable value (None, NaN or infinite, a dict
    without the reward_key, no answer within agentgraph_reward_timeout_s) does not stop slime: it becomes
    FAILED with zero masks, its reason in metadata, and scores 0.
    """
    if isinstance(sample, (list, tuple)):
        done: dict[Any, tuple[Any, str | None]] = {}
        out = []
        for s in sample:
            key = sample_metadata(getattr(s, "metadata", None)).get("trajectory_id") or id(s)
            if key not in done:
                done[key] = await _trajectory_reward(args, s)
            out.append(_scored(args, s, *done[key]))
        return out
    return _scored(args, sample, *await _trajectory_reward(args, sample))


def _scored(args: Any, sample: Any, value: Any, failure: str | None) -> Any:
    """This Sample's share of its trajectory's reward; every sibling of an unscorable trajectory is FAILED
    (not only the one that was scored: the others would train on the stand-in 0)."""
    if failure is not None:
        _fail_unscorable(sample, failure)
    return _sibling_share(args, sample, value)


async def _trajectory_reward(args: Any, sample: Any) -> tuple[Any, str | None]:
    """(the trajectory's reward, None), or (a zero stand-in, why it could not be computed)."""
    setup = get_setup(args)
    status = getattr(getattr(sample, "status", None), "value", "completed")
    if status == "failed":
        # a failed rollout is fully masked and left out of the group statistics by rl_bridge.convert
        return zero_reward(setup.spec), None
    try:
        ctx = setup.context(SamplingParams(), evaluation=False)
        return await score(setup.spec, reward_input_of_sample(sample), ctx), None
    except Exception as exc:  # noqa: BLE001 - one unscorable sample must not stop slime's rollout
        logger.warning("agentgraph %s: sample %s could not be scored: %s", setup.spec.name,
                       getattr(sample, "index", None), exc)
        return zero_reward(setup.spec), reward_failure(exc)


def _sibling_share(args: Any, sample: Any, value: Any) -> Any:
    setup = get_setup(args)
    tm = getattr(sample, "train_metadata", None) or {}
    n = int(tm.get("trajectory_sequences", 1) or 1)
    if n > 1 and setup.spec.reward_split_for(setup.options) == "divide":
        return scale_reward(value, 1.0 / n, setup.spec.reward_key)
    return value


def _fail_unscorable(sample: Any, reason: str) -> None:
    """A sample whose reward cannot be computed (no label, a judge that is down) trains nothing."""
    fields = {name: getattr(sample, name, None) for name in ("response_length", "train_metadata", "metadata")}
    fail_fields(fields, reason)
    for name in FAILED_FIELDS:
        setattr(sample, name, type(sample).Status(fields[name]) if name == "status" else fields[name])


def eval_log(rollout_id: int, args: Any, data: dict[str, Any], extra_metrics: dict[str, Any] | None) -> bool:
    """slime's eval-log hook: per-dataset accuracy and the method's metrics.

    Writes `<dir>/eval_<rollout_id>.json` (dir = args.agentgraph_eval_dir, else args.save/eval_logs,
    else ./eval_logs) and adds `eval/<dataset>/<metric>` entries to slime's `extra_metrics` dict,
    so slime's own logger (wandb/tensorboard) records them; when slime passes no dict (its default
    eval does not), they are logged through slime's logging_utils directly (slime.observability after
    v0.3.1, slime.utils before). Returns False:
    slime's default logging still runs.
    """
    metrics = eval_metrics(data, getattr(args, "eval_reward_key", None) or getattr(args, "reward_key", None))
    flat = {f"eval/{ds}/{k}": v for ds, m in metrics.items() for k, v in m.items()}
    if isinstance(extra_metrics, dict):
        extra_metrics.update(flat)
    else:
        # slime's default eval passes extra_metrics=None (every version): log through slime's tracker ourselves
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
    tracker = _slime_module("logging_utils")
    if tracker is None:
        if importlib.util.find_spec("slime") is not None:
            logger.warning("slime is importable but has neither slime.observability.logging_utils nor "
                           "slime.utils.logging_utils: the eval metrics are only in eval_%s.json", rollout_id)
        return  # outside slime: the JSON file is the record
    metric_utils = _slime_module("metric_utils")
    try:
        step = metric_utils.compute_rollout_step(args, rollout_id) if metric_utils else rollout_id
    except Exception:  # noqa: BLE001 - older slime: the rollout id is the step
        step = rollout_id
    tracker.log(args, {**flat, "eval/step": step}, step_key="eval/step")


def _slime_module(name: str) -> Any:
    """slime's `name` module: slime.observability (after v0.3.1), else slime.utils (v0.2-v0.3.1); None outside."""
    for package in ("slime.observability", "slime.utils"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ImportError:
            continue
    return None


def eval_metrics(data: dict[str, Any], reward_key: str | None = None) -> dict[str, dict[str, float]]:
    """Per dataset: count, accuracy (mean scalar reward), truncated rate, status counts and the
    means of every numeric metric the agent recorded in sample.metadata["metrics"], over ALL samples
    (a sample without the metric, e.g. a failed rollout, counts as 0, as in accuracy).

    A dict reward without `reward_key` (default "reward") raises ConfigError: its accuracy would be made up; so
    does a dataset whose rewards and samples differ in number. No dataset, or one with no sample, is logged as a
    WARNING (its entry keeps count 0 and no accuracy).
    """
    out: dict[str, dict[str, float]] = {}
    if not data:
        logger.warning("agentgraphs eval: slime passed no eval dataset, so there is no metric to log (check "
                       "--eval-prompt-data)")
    for name, entry in data.items():
        try:
            rewards = [scalar(r, reward_key or "reward") for r in entry.get("rewards", [])]
        except RewardError as exc:
            raise ConfigError(f"eval dataset {name!r}: {exc}") from None
        samples: Sequence[Any] = entry.get("samples") or []
        if samples and len(samples) != len(rewards):
            raise ConfigError(f"eval dataset {name!r}: {len(rewards)} rewards for {len(samples)} samples: its "
                              "accuracy and its metrics would average over different samples; pass one reward "
                              "per sample (slime's eval data: 'rewards' and 'samples' in the same order)")
        if not rewards:
            logger.warning("agentgraphs eval: dataset %r has no evaluated sample: its entry holds only count 0 "
                           "(check that its prompts loaded and --n-samples-per-eval-prompt is at least 1)", name)
        m: dict[str, float] = {"count": float(len(rewards))}
        if rewards:
            m["accuracy"] = sum(rewards) / len(rewards)
        truncated = entry.get("truncated") or []
        if truncated:
            m["truncated_rate"] = sum(1 for t in truncated if t) / len(truncated)
        sums: dict[str, float] = {}
        for s in samples:
            meta = sample_metadata(getattr(s, "metadata", None))
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


__all__ = ["eval_log", "eval_metrics", "generate", "reward_func", "rollout_sampling"]

"""A small single-process GRPO trainer for learning checks (not for production: that is slime's job).

Each step runs `n_samples_per_prompt` rollouts per input row through the agent's graph and
`agentgraphs.rollout.run_rollout`, shapes them with `agentgraphs.records.sample_fields` into slime
Samples, converts them with `agentgraphs.train_data.to_train_data` (the code path `rl_bridge.convert`
runs inside slime: group normalisation, per_turn/concat sequences, broadcast/divide), and takes one AdamW
step on slime's policy objective, computed as slime computes it (slime/utils/ppo_utils.py and
slime/backends/megatron_utils/loss.py, v0.3.1):

- log-probs of the trained tokens from the model's logits divided by the rollout temperature;
- importance ratio exp(logp - rollout_logp) against the RECORDED rollout log-probs (slime's
  `--use-rollout-logprobs`; with one optimizer step per rollout batch it is 1 up to numerics);
- `num_steps_per_rollout` optimizer steps per rollout batch (slime's `--num-steps-per-rollout`): the
  rollouts are split in order into that many global batches of whole rollouts, each normalised on its own
  (slime splits a step's data by rollout id, never a rollout's sequences across steps);
- GRPO advantages: each sequence's normalised reward on every one of its tokens;
- PPO clipping: max(-A * r, -A * clip(r, 1 - eps, 1 + eps_high));
- reduction: the mean over each sequence's loss mask, then the mean over sequences (slime's default),
  or the mean over all trained tokens (`per_token_loss`, slime's `--calculate-per-token-loss`);
- optionally slime's KL loss (`--use-kl-loss --kl-loss-coef --kl-loss-type`): the estimator between the
  model's log-probs and a frozen reference model's at the same trained tokens (the same temperature), reduced
  as the policy loss and added times the coefficient (`compute_approx_kl`; low_var_kl clamped to +-10);
- optionally Megatron's linear warm-up (`--lr-warmup-iters`, `--lr-warmup-init` 0): optimizer step k
  (0-based, counted in AdamW's own state, so a resumed optimizer continues the schedule) runs at
  lr * min(1, k / warm-up): the first step moves nothing and only fills AdamW's moments.

The model is the HFEngine's own: generation sees the updated weights on the next step (train mode for
the update, eval mode for generation, the update under the engine's lock). Faults for negative controls
are injected through `corrupt=`, a callable on the train-data dict (see `FAULTS`).

>>> GRPOConfig(steps=2).eps_clip
0.2
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any, Callable, Literal, Mapping, Optional, Sequence, TypedDict

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..context import AgentContext
from ..engines import SamplingParams
from ..records import Rollout, sample_fields, scalar
from ..rollout import rollout_input, run_rollout
from ..spec import AgentSpec, MethodOptions
from ..train_data import TrainDataSettings, to_train_data
from .slime_sample import Sample

TrainData = dict[str, Any]
Corrupt = Callable[[TrainData, Sequence[Any]], TrainData]
# Sees every rollout of a step and its Sample before anything is trained on them; raises to stop training.
Audit = Callable[[Sequence[Rollout], Sequence[Any]], None]


class GRPOConfig(BaseModel):
    """Trainer settings (slime's flag in brackets)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(24, ge=1, description="rollout + update steps")
    n_samples_per_prompt: int = Field(8, ge=2, description="rollouts per row: one GRPO group [--n-samples-per-prompt]")
    lr: float = Field(3e-3, gt=0, description="AdamW learning rate [--lr]")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay [--weight-decay]")
    adam_betas: tuple[float, float] = Field((0.9, 0.98), description="[--adam-beta1/2]")
    clip_grad: float = Field(1.0, ge=0, description="gradient norm clip, 0 = off [--clip-grad]")
    temperature: float = Field(0.9, gt=0, description="rollout temperature [--rollout-temperature]")
    max_new_tokens: int = Field(1024, ge=1, description="per-call ceiling [--rollout-max-response-len]")
    eps_clip: float = Field(0.2, gt=0, description="[--eps-clip]")
    eps_clip_high: Optional[float] = Field(None, gt=0, description="[--eps-clip-high]; None = eps_clip")
    per_token_loss: bool = Field(False, description="[--calculate-per-token-loss]")
    use_kl_loss: bool = Field(False, description="add the KL loss to a frozen reference model [--use-kl-loss]")
    kl_loss_coef: float = Field(0.0, ge=0, description="[--kl-loss-coef]")
    kl_loss_type: Literal["k1", "k2", "k3", "low_var_kl"] = Field("k1", description="[--kl-loss-type]")
    lr_warmup_steps: int = Field(0, ge=0, description="linear warm-up from 0 over this many optimizer steps "
                                 "[--lr-warmup-iters]")
    micro_batch_size: int = Field(16, ge=1, description="sequences per forward pass (gradients accumulate)")
    tf32: bool = Field(False, description="allow TF32 matmuls in the update (CUDA only; generation stays full "
                       "fp32, so the recorded log-probs do not change; the trainer's own log-probs then differ "
                       "from them by TF32 rounding, ~1e-3)")
    num_steps_per_rollout: int = Field(1, ge=1, description="optimizer steps per rollout batch, each over an "
                                       "equal share of whole rollouts [--num-steps-per-rollout]")
    skip_flat_updates: bool = Field(False, description="no optimizer step when every trained row's advantage is 0 "
                                    "(no group has reward variance): AdamW's momentum would otherwise keep moving "
                                    "every weight by ~lr with no signal; slime steps anyway (off = slime)")
    concurrency: int = Field(1, ge=1, description="rollouts in flight at once; 1 = one after another "
                             "(deterministic under the engine's seed), more lets a batching engine batch them")
    train_data: TrainDataSettings = Field(default_factory=TrainDataSettings,
                                          description="conversion settings; n_samples_per_prompt is set from above")

    @model_validator(mode="after")
    def _kl_coef_needs_the_kl_loss(self) -> "GRPOConfig":
        # slime ignores --kl-loss-coef without --use-kl-loss; here a coefficient that would do nothing is refused
        if self.kl_loss_coef > 0 and not self.use_kl_loss:
            raise ValueError(f"kl_loss_coef={self.kl_loss_coef} has no effect without use_kl_loss=True "
                             "(slime's --use-kl-loss): set use_kl_loss=True, or kl_loss_coef=0")
        return self


class StepStats(TypedDict):
    """One step's figures. The log-prob and ratio figures are over trained tokens, before the update."""

    step: int
    reward_mean: float
    reward_std: float
    group_means: list[float]  # each prompt's mean reward over its n_samples_per_prompt rollouts, in group order
    flat_groups: int  # groups whose rollouts all got one reward: advantage 0, no policy-gradient signal
    statuses: dict[str, int]
    sequences: int
    trained_tokens: int
    loss: float
    clipfrac: float
    entropy: float
    kl: float  # mean KL estimate to the reference over trained tokens (nan without use_kl_loss)
    logp_diff_max: float
    logp_diff_mean: float
    ratio_min: float
    ratio_max: float
    ratio_std: float
    grad_norm: float  # the mean over this step's optimizer steps
    optimizer_steps: int
    skipped: float  # 1.0 when skip_flat_updates left the weights as they were
    rollout_s: float
    train_s: float


class Verdict(TypedDict):
    passed: bool
    first: float
    last: float
    gain: float
    min_gain: float
    window: int


class GRPOTrainer:
    """Train `engine.model` on `spec`'s reward over `rows` ({prompt, label, metadata} dicts).

    >>> from agentgraphs.testing.learning import build_check_engine, learning_rows, learning_spec
    >>> eng = build_check_engine(hidden_size=32, num_layers=1)
    >>> spec = learning_spec(frozenset(range(0, 151936, 2)))
    >>> t = GRPOTrainer(spec, eng, learning_rows(1), GRPOConfig(n_samples_per_prompt=2), options={"max_new_tokens": 2})
    >>> t.step()["sequences"]
    2
    """

    def __init__(self, spec: AgentSpec, engine: Any, rows: Sequence[Mapping[str, Any]], config: GRPOConfig | None = None,
                 *, options: Mapping[str, Any] | MethodOptions | None = None, corrupt: Corrupt | None = None,
                 audit: Audit | None = None, reference: Any = None) -> None:
        import copy

        import torch

        self.spec, self.engine, self.config = spec, engine, config or GRPOConfig()
        if not rows:
            raise ValueError("GRPOTrainer: rows is empty: give at least one input row")
        self.rows = [dict(r) for r in rows]
        for i, row in enumerate(self.rows):
            if "prompt" not in row:
                raise ValueError(f"rows[{i}] has no 'prompt' (keys: {sorted(row)}): rows are {{prompt, label, metadata}}")
        if not hasattr(engine, "model") or not hasattr(engine, "model_lock"):
            raise TypeError(f"GRPOTrainer trains an HFEngine's model in process; got {type(engine).__name__}")
        self.options = spec.resolve_options(options)
        self.corrupt = corrupt
        self.audit = audit
        self.last_rollouts: list[Rollout] = []
        self.settings = self.config.train_data.model_copy(
            update={"n_samples_per_prompt": self.config.n_samples_per_prompt})
        self.optimizer = torch.optim.AdamW(
            [p for p in engine.model.parameters() if p.requires_grad], lr=self.config.lr,
            betas=self.config.adam_betas, weight_decay=self.config.weight_decay)
        self.reference = None
        if self.config.use_kl_loss:  # slime's --ref-load: by default the weights training starts from
            self.reference = reference if reference is not None else copy.deepcopy(engine.model)
            self.reference.eval().requires_grad_(False)
        elif reference is not None:
            raise ValueError("GRPOTrainer: a reference model was given but config.use_kl_loss is False: "
                             "set use_kl_loss=True (and kl_loss_coef) or drop reference=")
        self.history: list[StepStats] = []
        self.context = AgentContext(
            policy=engine, tokenizer=engine.tokenizer,
            sampling=SamplingParams(temperature=self.config.temperature, max_new_tokens=self.config.max_new_tokens))

    # ------------------------------------------------------------------------------------ one step

    def step(self) -> StepStats:
        """Roll out, convert, update once; returns this step's figures (also appended to `history`)."""
        started = time.perf_counter()
        samples = asyncio.run(self.collect())
        rollout_s = time.perf_counter() - started
        if self.audit is not None:
            self.audit(self.last_rollouts, samples)
        data = to_train_data(samples, self.settings)
        if self.corrupt is not None:
            data = self.corrupt(data, samples)
        started = time.perf_counter()
        stats = self.update(data)
        rewards = [scalar(s.reward, self.spec.reward_key) for s in samples]
        mean = sum(rewards) / len(rewards)
        statuses: dict[str, int] = {}
        for s in samples:
            statuses[s.status.value] = statuses.get(s.status.value, 0) + 1
        groups: dict[int, list[float]] = {}
        for s, r in zip(samples, rewards):
            groups.setdefault(s.group_index, []).append(r)
        result = StepStats(step=len(self.history), reward_mean=mean,
                           reward_std=math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)),
                           group_means=[sum(g) / len(g) for _, g in sorted(groups.items())],
                           flat_groups=sum(1 for g in groups.values() if max(g) == min(g)), statuses=statuses,
                           sequences=len(data["tokens"]), rollout_s=rollout_s,
                           train_s=time.perf_counter() - started, **stats)  # type: ignore[typeddict-item]
        self.history.append(result)
        return result

    def train(self, steps: int | None = None, on_step: Callable[[StepStats], None] | None = None) -> list[StepStats]:
        """Run `steps` steps (default: config.steps); `on_step` sees each step's figures."""
        for _ in range(steps if steps is not None else self.config.steps):
            stats = self.step()
            if on_step is not None:
                on_step(stats)
        return self.history

    async def collect(self) -> list[Any]:
        """n rollouts per row as Samples, in (row, draw) order; `config.concurrency` of them in flight at once
        (1: one after another, deterministic under the engine's seed). The rollouts stay in `last_rollouts`."""
        jobs = [(group, row) for group, row in enumerate(self.rows) for _ in range(self.config.n_samples_per_prompt)]
        gate = asyncio.Semaphore(self.config.concurrency)

        async def one(group: int, row: Mapping[str, Any]) -> Rollout:
            async with gate:
                inp = rollout_input(row["prompt"], row.get("label"), row.get("metadata"), index=group)
                return await run_rollout(self.spec, inp, self.context, options=self.options)

        if self.config.concurrency == 1:
            rollouts = [await one(group, row) for group, row in jobs]
        else:
            rollouts = list(await asyncio.gather(*(one(group, row) for group, row in jobs)))
        samples: list[Any] = []
        for (group, row), rollout in zip(jobs, rollouts):
            if rollout.status == "aborted":
                raise RuntimeError(f"rollout aborted ({rollout.reason}): an HFEngine does not abort; check the agent")
            fields = sample_fields(rollout, self.spec)
            fields["status"] = Sample.Status(fields["status"])
            samples.append(Sample(group_index=group, index=len(samples), prompt=row["prompt"],
                                  label=row.get("label"), **fields))
        self.last_rollouts = rollouts
        return samples

    # ------------------------------------------------------------------------------------- the update

    def update(self, data: TrainData) -> dict[str, float]:
        """`num_steps_per_rollout` AdamW steps on slime's policy loss over `data`; figures before each step."""
        import torch

        model, cfg = self.engine.model, self.config
        batch = token_batch(data)
        if batch["trained_tokens"] == 0:
            return {**_empty_stats(), "trained_tokens": 0}
        if cfg.skip_flat_updates and not any(a for a, m in zip(data["rewards"], data["loss_masks"]) if any(m)):
            return {**_empty_stats(), "trained_tokens": batch["trained_tokens"], "skipped": 1.0}
        tf32 = torch.backends.cuda.matmul.allow_tf32
        parts, norms = [], []
        with self.engine.model_lock:
            model.train()
            torch.backends.cuda.matmul.allow_tf32 = cfg.tf32 or tf32
            try:
                for step_rows in optimizer_batches(data, cfg.num_steps_per_rollout):
                    share = token_batch(data, step_rows)
                    self.optimizer.zero_grad(set_to_none=True)
                    trained_rows = [r for r in step_rows if any(data["loss_masks"][r])]
                    if cfg.skip_flat_updates and not any(data["rewards"][r] for r in trained_rows):
                        continue  # this share has no signal: no step (see skip_flat_updates)
                    self._schedule_lr()
                    for rows in _chunks(trained_rows, cfg.micro_batch_size):
                        part = policy_loss(model, data, rows, share, cfg, self.reference)
                        part["loss"].backward()
                        parts.append({k: v.detach() for k, v in part.items()})
                    params = [p for p in model.parameters() if p.grad is not None]
                    if not params:
                        continue
                    clip = cfg.clip_grad if cfg.clip_grad > 0 else float("inf")
                    norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
                    self.optimizer.step()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = tf32
                model.eval()
        stats = _merge(parts, batch["trained_tokens"], sum(norms) / max(len(norms), 1))
        if not cfg.use_kl_loss:
            stats["kl"] = float("nan")
        return {**stats, "optimizer_steps": len(norms), "skipped": 0.0}

    def optimizer_steps_taken(self) -> int:
        """AdamW steps taken so far (read from its own state, so a loaded state dict carries it)."""
        for state in self.optimizer.state.values():
            if "step" in state:
                return int(state["step"])
        return 0

    def _schedule_lr(self) -> None:
        warmup = self.config.lr_warmup_steps
        k = self.optimizer_steps_taken()
        lr = self.config.lr * (min(1.0, k / warmup) if warmup > 0 else 1.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr


def optimizer_batches(data: TrainData, steps: int) -> list[list[int]]:
    """The rows of each optimizer step: rollouts (by `sample_indices`, in order of first appearance) split into
    `steps` consecutive shares as even as whole rollouts allow; a rollout's sequences never span two steps.

    >>> optimizer_batches({"sample_indices": [0, 0, 1, 2, 2, 3]}, 2)
    [[0, 1, 2], [3, 4, 5]]
    """
    order: dict[Any, list[int]] = {}
    for row, owner in enumerate(data["sample_indices"]):
        order.setdefault(owner, []).append(row)
    rollouts = list(order.values())
    if steps > len(rollouts):
        raise ValueError(f"num_steps_per_rollout ({steps}) is more than the step's {len(rollouts)} rollouts: "
                         "lower it or roll out more per step")
    bounds = [round(k * len(rollouts) / steps) for k in range(steps + 1)]
    return [[row for rollout in rollouts[a:b] for row in rollout] for a, b in zip(bounds, bounds[1:])]


class TokenBatch(TypedDict):
    denominators: list[float]  # per row of the data: what its token sum is divided by
    trained_tokens: int  # in the rows of this optimizer step
    rows: int  # rows of this optimizer step (the mean over sequences divides by it)


def token_batch(data: TrainData, rows: Sequence[int] | None = None) -> TokenBatch:
    """The loss's denominators for the optimizer step over `rows` (default: every row): per-row mask sums
    (clamped to 1) over the step's row count, or its trained-token count (per-token loss)."""
    masks = data["loss_masks"]
    picked = range(len(masks)) if rows is None else rows
    return TokenBatch(denominators=[float(max(sum(m), 1)) for m in masks],
                      trained_tokens=sum(sum(masks[r]) for r in picked), rows=len(picked))


def policy_loss(model: Any, data: TrainData, rows: Sequence[int], batch: TokenBatch, cfg: GRPOConfig,
                reference: Any = None) -> dict[str, Any]:
    """slime's PPO-clip policy loss for `rows` (+ its KL loss to `reference` when cfg.use_kl_loss), scaled so
    that the sum over micro-batches is the batch loss."""
    import torch

    logp, old, adv, owner = trained_logprobs(model, data, rows, cfg.temperature)
    log_ratio = logp["logp"] - old
    ratio = log_ratio.exp()
    eps_high = cfg.eps_clip_high if cfg.eps_clip_high is not None else cfg.eps_clip
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - cfg.eps_clip, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    n_rows = batch["rows"]
    if cfg.per_token_loss:
        weights = torch.full_like(per_token, 1.0 / max(batch["trained_tokens"], 1))
    else:
        denom = torch.tensor([batch["denominators"][r] for r in rows], dtype=per_token.dtype, device=per_token.device)
        weights = 1.0 / (denom[owner] * n_rows)
    loss = (per_token * weights).sum()
    kl_sum = torch.zeros((), device=per_token.device)
    if cfg.use_kl_loss:
        if reference is None:
            raise ValueError("policy_loss: cfg.use_kl_loss needs the reference model (reference=)")
        with torch.no_grad():
            ref, _, _, _ = trained_logprobs(reference, data, rows, cfg.temperature)
        kl = approx_kl(logp["logp"], ref["logp"], cfg.kl_loss_type)
        loss = loss + cfg.kl_loss_coef * (kl * weights).sum()
        kl_sum = kl.detach().sum()
    diff = (logp["logp"].detach() - old).abs()
    return {
        "loss": loss, "kl_sum": kl_sum,
        "clip_n": (clipped > unclipped).float().sum(),
        "entropy_sum": logp["entropy"].sum(),
        "diff_sum": diff.sum(), "diff_max": diff.max(),
        "ratio_min": ratio.detach().min(), "ratio_max": ratio.detach().max(),
        "ratio_sum": ratio.detach().sum(), "ratio_sq": (ratio.detach() ** 2).sum(),
    }


def approx_kl(logp: Any, ref_logp: Any, kind: str) -> Any:
    """slime's per-token KL estimators (Schulman's k1/k2/k3) of the model from the reference.

    >>> import torch
    >>> round(float(approx_kl(torch.tensor([0.0]), torch.tensor([-1.0]), "low_var_kl")), 4)  # e^-1 - 1 + 1
    0.3679
    """
    log_ratio = logp.float() - ref_logp.float()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return log_ratio ** 2 / 2.0
    if kind in ("k3", "low_var_kl"):
        kl = (-log_ratio).exp() - 1 + log_ratio
        return kl.clamp(-10, 10) if kind == "low_var_kl" else kl
    raise ValueError(f"kl_loss_type {kind!r} is not one of k1, k2, k3, low_var_kl")


def trained_logprobs(model: Any, data: TrainData, rows: Sequence[int], temperature: float) -> tuple[dict[str, Any], Any, Any, Any]:
    """Log-probs (and entropy) at every trained position of `rows`, from one padded forward pass.

    Only positions with loss mask 1 reach the vocabulary projection: masked positions add nothing to
    slime's loss, and a full [rows, length, vocab] logits tensor would not fit a CPU's memory.
    Returns ({logp, entropy}, rollout log-probs, advantages, row of each token (0-based in `rows`)).
    """
    import torch

    if "rollout_log_probs" not in data:
        raise ValueError("train data has no rollout_log_probs: the learning check needs the recorded log-probs")
    device = next(model.parameters()).device
    seqs = [data["tokens"][r] for r in rows]
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    row_idx, pos_idx, targets, old, adv = [], [], [], [], []
    for k, (r, seq) in enumerate(zip(rows, seqs)):
        ids[k, : len(seq)] = torch.tensor(seq)
        attention[k, : len(seq)] = 1
        start = len(seq) - data["response_lengths"][r]
        for j, m in enumerate(data["loss_masks"][r]):
            if m:
                row_idx.append(k)
                pos_idx.append(start + j - 1)  # the logits at position p predict token p + 1
                targets.append(seq[start + j])
                old.append(data["rollout_log_probs"][r][j])
                adv.append(float(data["rewards"][r]))
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    hidden = base(input_ids=ids.to(device), attention_mask=attention.to(device)).last_hidden_state
    owner = torch.tensor(row_idx, device=device)
    picked = hidden[owner, torch.tensor(pos_idx, device=device)]
    # the model's own logits dtype, then float32 with the temperature: what HFEngine does when it samples
    logits = model.get_output_embeddings()(picked).float() / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    logp = logprobs.gather(1, torch.tensor(targets, device=device).unsqueeze(1)).squeeze(1)
    entropy = -(logprobs.exp() * logprobs).sum(-1).detach()
    return ({"logp": logp, "entropy": entropy}, torch.tensor(old, dtype=torch.float32, device=device),
            torch.tensor(adv, dtype=torch.float32, device=device), owner)


def _chunks(items: Sequence[int], size: int) -> list[list[int]]:
    items = list(items)
    return [items[i:i + size] for i in range(0, len(items), size)]


def _merge(parts: list[dict[str, Any]], tokens: int, grad_norm: float) -> dict[str, float]:
    total = {k: sum(float(p[k]) for p in parts)
             for k in ("loss", "clip_n", "entropy_sum", "kl_sum", "diff_sum", "ratio_sum", "ratio_sq")}
    mean_ratio = total["ratio_sum"] / tokens
    return {
        "trained_tokens": tokens, "loss": total["loss"], "clipfrac": total["clip_n"] / tokens,
        "entropy": total["entropy_sum"] / tokens, "kl": total["kl_sum"] / tokens,
        "logp_diff_max": max(float(p["diff_max"]) for p in parts), "logp_diff_mean": total["diff_sum"] / tokens,
        "ratio_min": min(float(p["ratio_min"]) for p in parts), "ratio_max": max(float(p["ratio_max"]) for p in parts),
        "ratio_std": math.sqrt(max(total["ratio_sq"] / tokens - mean_ratio ** 2, 0.0)), "grad_norm": grad_norm,
    }


def _empty_stats() -> dict[str, float]:
    nan = float("nan")
    return {"loss": 0.0, "clipfrac": 0.0, "entropy": nan, "kl": nan, "logp_diff_max": nan, "logp_diff_mean": nan,
            "ratio_min": nan, "ratio_max": nan, "ratio_std": nan, "grad_norm": 0.0, "optimizer_steps": 0,
            "skipped": 0.0}


# ------------------------------------------------------------------------------------------ verdict

def verdict(history: Sequence[Mapping[str, Any]], *, window: int = 3, min_gain: float = 0.1) -> Verdict:
    """PASS when the mean reward over the last `window` steps beats the first `window` by `min_gain`.

    >>> verdict([{"reward_mean": r} for r in (0.4, 0.4, 0.6, 0.8)], window=2)["passed"]
    True
    """
    rewards = [float(h["reward_mean"]) for h in history]
    if len(rewards) < 2 * window:
        raise ValueError(f"verdict needs at least {2 * window} steps for window={window}, got {len(rewards)}")
    first, last = sum(rewards[:window]) / window, sum(rewards[-window:]) / window
    return Verdict(passed=last - first >= min_gain, first=first, last=last, gain=last - first,
                   min_gain=min_gain, window=window)


# ------------------------------------------------------------------------------- faults (controls)

def _rollout_rows(data: TrainData) -> list[list[int]]:
    """Rows of each rollout, in rollout order (rows of one rollout share its sample index)."""
    order: dict[Any, list[int]] = {}
    for row, index in enumerate(data["sample_indices"]):
        order.setdefault(index, []).append(row)
    return list(order.values())


def negate_advantages(data: TrainData, samples: Sequence[Any]) -> TrainData:
    """Fault: every advantage has the wrong sign."""
    return {**data, "rewards": [-a for a in data["rewards"]]}


def _reassign(data: TrainData, source_of: list[int]) -> TrainData:
    """Rows of rollout i take the advantage and raw reward of rollout source_of[i]."""
    groups = _rollout_rows(data)
    rewards, raw = list(data["rewards"]), list(data["raw_reward"])
    for i, rows in enumerate(groups):
        src = groups[source_of[i]][0]
        for row in rows:
            rewards[row], raw[row] = data["rewards"][src], data["raw_reward"][src]
    return {**data, "rewards": rewards, "raw_reward": raw}


def permute_within_groups(data: TrainData, samples: Sequence[Any]) -> TrainData:
    """Fault: rewards shuffled among the rollouts of each prompt group (no signal left).

    The shuffle is seeded by the batch's token count: deterministic for a given batch.
    """
    rng = random.Random(sum(len(t) for t in data["tokens"]))
    by_group: dict[Any, list[int]] = {}
    for i, sample in enumerate(samples):
        by_group.setdefault(sample.group_index, []).append(i)
    source = list(range(len(samples)))
    for members in by_group.values():
        shuffled = members[:]
        rng.shuffle(shuffled)
        for dst, src in zip(members, shuffled):
            source[dst] = src
    return _reassign(data, source)


def wrong_rollout(data: TrainData, samples: Sequence[Any]) -> TrainData:
    """Fault: each rollout's reward is broadcast to the NEXT rollout's sequences (an off-by-one owner)."""
    n = len(_rollout_rows(data))
    return _reassign(data, [(i + 1) % n for i in range(n)])


def shift_mask(data: TrainData, samples: Sequence[Any]) -> TrainData:
    """Fault: loss mask and rollout log-probs lag the tokens by one position (the token after each
    trained one is trained, with the recorded log-prob of the one before)."""
    masks = [[0] + list(m[:-1]) for m in data["loss_masks"]]
    lps = [[0.0] + list(lp[:-1]) for lp in data["rollout_log_probs"]]
    return {**data, "loss_masks": masks, "rollout_log_probs": lps}


FAULTS: dict[str, Corrupt] = {
    "negate_advantages": negate_advantages,
    "permute_within_groups": permute_within_groups,
    "wrong_rollout": wrong_rollout,
    "shift_mask": shift_mask,
}

__all__ = [
    "FAULTS", "Audit", "GRPOConfig", "GRPOTrainer", "StepStats", "Verdict", "negate_advantages", "permute_within_groups",
    "policy_loss", "shift_mask", "token_batch", "trained_logprobs", "verdict", "wrong_rollout",
]

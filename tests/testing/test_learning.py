"""Our samples train: a GRPO trainer fed by run_rollout -> sample_fields -> to_train_data learns the reward,
and each classic wiring fault (advantage sign, reward permuted within its group, reward on the wrong
rollout, loss mask shifted by one) stops it from learning.

The runs are small (a random Qwen2 of hidden 64 and 2 layers, 4 prompts x 4 samples, 8 steps) with fixed
seeds; the learning runs are deterministic on one machine. Thresholds: a run learns when the mean reward
over its last 3 steps beats the first 3 by at least LEARN_GAIN; a control must stay below FLAT_GAIN, the
noise level (one 3-step mean of 48 rollouts has a standard deviation of ~0.03). Measured here: positive
runs gain 0.2-0.3, controls -0.3 (negated) to +0.02.

MemAgent (several training sequences per trajectory): its own graph with the share reward over all of a
trajectory's turns, broadcast to each memory update's sequence; learns, and a permuted control does not.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agentgraphs.testing.grpo import (  # noqa: E402
    FAULTS, GRPOConfig, GRPOTrainer, approx_kl, negate_advantages, optimizer_batches, permute_within_groups, policy_loss,
    shift_mask, token_batch, verdict, wrong_rollout,
)
from agentgraphs.testing.learning import (  # noqa: E402
    build_check_engine, learning_rows, learning_spec, memagent_learning_spec, memagent_rows, target_ids,
    target_shares,
)
from agentgraphs.testing.slime_sample import Sample  # noqa: E402
from agentgraphs.train_data import TrainDataSettings, to_train_data  # noqa: E402

STEPS = 8
WINDOW = 3
LEARN_GAIN = 0.15
FLAT_GAIN = 0.1
TOKENS = {"share": 4, "first_token": 2}  # tokens per turn; the first-token reward needs only the first


def train(task: str, fault: str | None = None, steps: int = STEPS) -> list[Any]:
    engine = build_check_engine(hidden_size=64, num_layers=2, init_scale=0.2, seed=0, device="cpu")
    spec = learning_spec(target_ids(engine.model, seed=0), task)  # type: ignore[arg-type]
    config = GRPOConfig(n_samples_per_prompt=4, lr=2e-2, temperature=0.9)
    trainer = GRPOTrainer(spec, engine, learning_rows(4), config, options={"max_new_tokens": TOKENS[task]},
                          corrupt=FAULTS[fault] if fault else None)
    return trainer.train(steps)


@pytest.fixture(scope="module")
def share_run() -> list[Any]:
    return train("share")


def test_learns_the_share_reward(share_run: list[Any]) -> None:
    v = verdict(share_run, window=WINDOW, min_gain=LEARN_GAIN)
    assert v["passed"], v
    assert all(h["statuses"].get("failed", 0) == 0 for h in share_run)


def test_step0_importance_ratio_is_one_at_every_trained_token(share_run: list[Any]) -> None:
    # fp32 on CPU: the recorded rollout log-probs ARE the trainer's log-probs (same temperature, same context)
    step0 = share_run[0]
    assert step0["trained_tokens"] == 4 * 4 * 2 * TOKENS["share"]
    assert step0["logp_diff_max"] < 1e-4
    assert abs(step0["ratio_min"] - 1) < 1e-4 and abs(step0["ratio_max"] - 1) < 1e-4


@pytest.mark.parametrize("fault", ["negate_advantages", "permute_within_groups", "wrong_rollout"])
def test_faults_do_not_learn_the_share_reward(fault: str) -> None:
    v = verdict(train("share", fault), window=WINDOW)
    assert v["gain"] < FLAT_GAIN, v


def test_learns_the_first_token_reward() -> None:
    v = verdict(train("first_token"), window=WINDOW, min_gain=LEARN_GAIN)
    assert v["passed"], v


def test_shifted_mask_does_not_learn_the_first_token_reward() -> None:
    v = verdict(train("first_token", "shift_mask"), window=WINDOW)
    assert v["gain"] < FLAT_GAIN, v


# -------------------------------------------- MemAgent: several training sequences per trajectory (per_turn)

# 2 chunks of 64 tokens: each rollout is 2 memory updates (4 tokens each) + the final answer (2 tokens), three
# training sequences that all carry the trajectory's reward. 3 prompts x 4 samples, 6 steps, lr 6e-2 (lr 2e-2
# needs more steps than a test can afford), verdict over windows of 2 steps (24 rollouts each). Measured
# here: learns 0.42 -> 0.69 (+0.27); permuted rewards 0.46 -> 0.38 (-0.08). With 8 steps (windows of 3):
# +0.30 and +0.02; with 4 prompts x 4 and 8 steps: +0.43 and -0.15, but twice the time. ~13 s CPU per run.
MEMAGENT_STEPS = 6
MEMAGENT_WINDOW = 2
# the original's variant: the reward broadcast to every sequence (the seed's, the default, divides it)
MEMAGENT_OPTIONS = {"variant": "original", "chunk_tokens": 64, "memory_max_new_tokens": 4, "final_max_new_tokens": 2}


@pytest.fixture(scope="module")
def memagent_model() -> Any:
    return build_check_engine(hidden_size=64, num_layers=2, init_scale=0.2, seed=0, device="cpu")


def memagent_trainer(base: Any, fault: str | None = None, prompts: int = 3, samples: int = 4) -> GRPOTrainer:
    """A trainer on a fresh copy of the module's model (same weights, engine seed 0 each time)."""
    import copy

    from agentgraphs.engines.hf import HFEngine

    engine = HFEngine(copy.deepcopy(base.model), base.tokenizer, device="cpu", seed=0)
    spec = memagent_learning_spec(target_ids(engine.model, seed=0))
    rows = memagent_rows(prompts, engine.tokenizer, chunks=2, chunk_tokens=64)
    return GRPOTrainer(spec, engine, rows, GRPOConfig(n_samples_per_prompt=samples, lr=6e-2, temperature=0.9),
                       options=MEMAGENT_OPTIONS, corrupt=FAULTS[fault] if fault else None)


def test_memagent_shaped_reward_is_broadcast_over_every_memory_update(memagent_model: Any) -> None:
    import asyncio

    trainer = memagent_trainer(memagent_model, prompts=2, samples=2)
    samples = asyncio.run(trainer.collect())
    targets = target_ids(trainer.engine.model, seed=0)
    data = to_train_data(samples, TrainDataSettings(n_samples_per_prompt=2))
    assert len(data["tokens"]) == 4 * 3  # 4 trajectories x (2 memory updates + final answer)
    assert {s.train_metadata["reward_split"] for s in samples} == {"broadcast"}
    for sample in samples:
        summary = sample.metadata["trace_summary"]
        rows = [r for r, i in enumerate(data["sample_indices"]) if i == sample.index]
        assert len(rows) == 3 and {data["raw_reward"][r] for r in rows} == {sample.reward}
        assert len({data["rewards"][r] for r in rows}) == 1  # broadcast: one advantage on every row
        assert sample.reward == summary["target_share"] and summary["chunks_read"] == 2
        # the reward counts the ids of ALL of the trajectory's trained sequences, recomputed from the rows
        ids = [t for r in rows for t, m in zip(data["tokens"][r][-data["response_lengths"][r]:], data["loss_masks"][r]) if m]
        assert len(ids) == 2 * 4 + 2
        assert math.isclose(sample.reward, sum(i in targets for i in ids) / len(ids))
    # group normalisation per prompt: each group's advantages (one per trajectory) sum to zero
    for group in (0, 1):
        firsts = [next(r for r, i in enumerate(data["sample_indices"]) if i == s.index) for s in samples
                  if s.group_index == group]
        assert abs(sum(data["rewards"][r] for r in firsts)) < 1e-6


@pytest.mark.slow  # ~13 s CPU
def test_memagent_learns_the_shaped_reward(memagent_model: Any) -> None:
    history = memagent_trainer(memagent_model).train(MEMAGENT_STEPS)
    assert all(h["sequences"] == 12 * 3 and h["trained_tokens"] == 12 * (2 * 4 + 2) for h in history)
    v = verdict(history, window=MEMAGENT_WINDOW, min_gain=LEARN_GAIN)
    assert v["passed"], v


@pytest.mark.slow  # ~13 s CPU
def test_memagent_with_rewards_permuted_within_groups_does_not_learn(memagent_model: Any) -> None:
    v = verdict(memagent_trainer(memagent_model, "permute_within_groups").train(MEMAGENT_STEPS), window=MEMAGENT_WINDOW)
    assert v["gain"] < FLAT_GAIN, v


# ------------------------------------------------------------------------ the loss against a reference

def _data(model: Any, seed: int = 0) -> dict[str, Any]:
    """Two hand-made rows with masked glue in the middle and recorded log-probs slightly off-policy."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n_prompt, n_resp in ((5, 7), (3, 9)):
        tokens = torch.randint(0, 1000, (n_prompt + n_resp,), generator=g).tolist()
        mask = [1] * n_resp
        mask[2] = mask[3] = 0
        rows.append((tokens, n_resp, mask))
    data: dict[str, Any] = {"tokens": [r[0] for r in rows], "response_lengths": [r[1] for r in rows],
                            "loss_masks": [r[2] for r in rows], "rewards": [0.7, -1.3]}
    with torch.no_grad():
        lps = []
        for tokens, n, mask in rows:
            logits = model(input_ids=torch.tensor([tokens])).logits[0].float() / 0.8
            lp = torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(tokens[1:]).unsqueeze(1)).squeeze(1)
            lp = lp[-n:] + torch.randn(n, generator=g) * 0.3  # off-policy: some ratios leave [0.8, 1.2]
            lps.append([float(x) if m else 0.0 for x, m in zip(lp, mask)])
    data["rollout_log_probs"] = lps
    return data


def _reference_loss(model: Any, data: dict[str, Any], temperature: float, per_token: bool) -> float:
    """slime's objective written out directly on plain transformers logits (full vocabulary, every position)."""
    per_row, tokens_total, weighted = [], 0, 0.0
    for tokens, n, mask, old, adv in zip(data["tokens"], data["response_lengths"], data["loss_masks"],
                                         data["rollout_log_probs"], data["rewards"]):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens])).logits[0].double() / temperature
        logp = torch.log_softmax(logits, -1)[len(tokens) - n - 1:-1]
        logp = logp.gather(1, torch.tensor(tokens[-n:]).unsqueeze(1)).squeeze(1)
        ratio = torch.exp(logp - torch.tensor(old, dtype=torch.float64))
        loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)) * torch.tensor(mask, dtype=torch.float64)
        per_row.append(float(loss.sum()) / max(sum(mask), 1))
        tokens_total += sum(mask)
        weighted += float(loss.sum())
    return weighted / tokens_total if per_token else sum(per_row) / len(per_row)


@pytest.mark.parametrize("per_token", [False, True])
def test_policy_loss_matches_slime_objective_on_plain_logits(per_token: bool) -> None:
    engine = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, device="cpu")
    model = engine.model
    data = _data(model)
    cfg = GRPOConfig(temperature=0.8, per_token_loss=per_token)
    out = policy_loss(model, data, [0, 1], token_batch(data), cfg)
    assert math.isclose(float(out["loss"].detach()), _reference_loss(model, data, 0.8, per_token), rel_tol=1e-4, abs_tol=1e-6)
    assert float(out["clip_n"]) > 0  # the off-policy log-probs exercise the clipped branch
    # micro-batches sum to the batch loss
    halves = sum(float(policy_loss(model, data, [r], token_batch(data), cfg)["loss"].detach()) for r in (0, 1))
    assert math.isclose(halves, float(out["loss"].detach()), rel_tol=1e-5)


class _GradientRecorder(torch.optim.Optimizer):
    """Changes no weight; keeps a copy of every parameter's gradient at each step."""

    def __init__(self, params: Any) -> None:
        super().__init__(params, {})
        self.seen: list[list[Any]] = []

    def step(self, closure: Any = None) -> None:  # noqa: ARG002 - the Optimizer signature
        self.seen.append([p.grad.detach().clone() if p.grad is not None else None
                          for group in self.param_groups for p in group["params"]])


def test_steps_per_rollout_split_whole_rollouts_each_normalised_on_its_own() -> None:
    engine = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, device="cpu")
    model = engine.model
    data = _data(model) | {"sample_indices": [7, 9]}  # two rollouts of one sequence each
    cfg = GRPOConfig(temperature=0.8, num_steps_per_rollout=2, clip_grad=0)
    trainer = GRPOTrainer(learning_spec(frozenset({1})), engine, learning_rows(1), cfg)
    trainer.optimizer = recorder = _GradientRecorder(model.parameters())
    stats = trainer.update(data)
    assert stats["optimizer_steps"] == 2 and len(recorder.seen) == 2
    params = list(model.parameters())
    for step, row in enumerate((0, 1)):  # step k trains rollout k alone: slime's mean over ITS sequences
        share = {k: [v[row]] for k, v in data.items()}
        model.zero_grad(set_to_none=True)
        _reference_loss_tensor(model, share, 0.8).backward()
        for got, param in zip(recorder.seen[step], params):
            if param.grad is None:
                assert got is None or float(got.abs().max()) == 0.0
            else:
                error = float((got - param.grad).norm() / param.grad.norm().clamp(min=1e-12))
                assert error < 1e-4, (step, error)


def _reference_loss_tensor(model: Any, data: dict[str, Any], temperature: float) -> Any:
    """slime's mean-over-sequences objective on plain transformers logits (full vocabulary), with gradients."""
    total = 0.0
    for tokens, n, mask, old, adv in zip(data["tokens"], data["response_lengths"], data["loss_masks"],
                                         data["rollout_log_probs"], data["rewards"]):
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float() / temperature
        logp = torch.log_softmax(logits, -1)[len(tokens) - n - 1:-1]
        logp = logp.gather(1, torch.tensor(tokens[-n:]).unsqueeze(1)).squeeze(1)
        ratio = torch.exp(logp - torch.tensor(old))
        loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)) * torch.tensor(mask, dtype=torch.float32)
        total = total + loss.sum() / max(sum(mask), 1)
    return total / len(data["tokens"])


def _plain_logp(model: Any, tokens: list[int], n: int, temperature: float) -> Any:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].double() / temperature
    logp = torch.log_softmax(logits, -1)[len(tokens) - n - 1:-1]
    return logp.gather(1, torch.tensor(tokens[-n:]).unsqueeze(1)).squeeze(1)


# Schulman's estimators written out from their definitions (r = ref / model probability ratio), not our code
_KL_BY_HAND = {
    "k1": lambda lp, ref: lp - ref,
    "k2": lambda lp, ref: (lp - ref) ** 2 / 2,
    "k3": lambda lp, ref: torch.exp(ref - lp) - 1 - (ref - lp),
    "low_var_kl": lambda lp, ref: (torch.exp(ref - lp) - 1 - (ref - lp)).clamp(-10, 10),
}


@pytest.mark.parametrize("kind", sorted(_KL_BY_HAND))
@pytest.mark.parametrize("per_token", [False, True])
def test_kl_loss_matches_slime_objective_on_plain_logits(kind: str, per_token: bool) -> None:
    """slime's `--use-kl-loss`: pg_loss + coef * the KL estimate to the reference, reduced like pg_loss."""
    model = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=0, device="cpu").model
    reference = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=1, device="cpu").model
    data = _data(model)
    cfg = GRPOConfig(temperature=0.8, per_token_loss=per_token, use_kl_loss=True, kl_loss_coef=0.3, kl_loss_type=kind)
    out = policy_loss(model, data, [0, 1], token_batch(data), cfg, reference)
    per_row, total, tokens = [], 0.0, 0
    for tokens_, n, mask in zip(data["tokens"], data["response_lengths"], data["loss_masks"]):
        kl = _KL_BY_HAND[kind](_plain_logp(model, tokens_, n, 0.8), _plain_logp(reference, tokens_, n, 0.8))
        kl = kl * torch.tensor(mask, dtype=torch.float64)
        per_row.append(float(kl.sum()) / sum(mask))
        total, tokens = total + float(kl.sum()), tokens + sum(mask)
    kl_loss = total / tokens if per_token else sum(per_row) / len(per_row)
    expected = _reference_loss(model, data, 0.8, per_token) + 0.3 * kl_loss
    assert abs(kl_loss) > 1e-3  # two different models: the KL term is not zero
    assert math.isclose(float(out["loss"].detach()), expected, rel_tol=1e-4, abs_tol=1e-6)
    assert math.isclose(float(out["kl_sum"]) / tokens, total / tokens, rel_tol=1e-4, abs_tol=1e-6)
    with pytest.raises(ValueError, match="reference"):
        policy_loss(model, data, [0, 1], token_batch(data), cfg)


def test_a_kl_coefficient_without_the_kl_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="use_kl_loss=True"):
        GRPOConfig(kl_loss_coef=0.001)
    assert GRPOConfig(kl_loss_coef=0.001, use_kl_loss=True).kl_loss_type == "k1"  # slime's default estimator


def test_approx_kl_refuses_an_unknown_estimator() -> None:
    with pytest.raises(ValueError, match="low_var_kl"):
        approx_kl(torch.zeros(1), torch.zeros(1), "k4")


def test_step_counts_each_groups_mean_reward_and_the_flat_groups() -> None:
    """Group 0 always scores 1 and group 1 always 0 (flat: GRPO's advantage is 0 there), group 2 the share."""
    import dataclasses

    engine = build_check_engine(hidden_size=32, num_layers=1, seed=0, device="cpu")
    base = learning_spec(frozenset(range(0, 151936, 2)))

    def reward(rin: Any, ctx: Any) -> float:
        return {0: 1.0, 1: 0.0}.get(rin["metadata"]["i"], rin["trace_summary"]["target_share"])

    spec = dataclasses.replace(base, reward=reward)
    trainer = GRPOTrainer(spec, engine, learning_rows(3), GRPOConfig(n_samples_per_prompt=4),
                          options={"max_new_tokens": 4})
    stats = trainer.step()
    shares = [r.summary["target_share"] for r in trainer.last_rollouts[8:]]  # group 2's four rollouts
    assert stats["group_means"][:2] == [1.0, 0.0] and math.isclose(stats["group_means"][2], sum(shares) / 4)
    assert stats["flat_groups"] == 2 + (len(set(shares)) == 1)
    assert math.isclose(stats["reward_mean"], sum(stats["group_means"]) / 3)


def test_kl_reference_defaults_to_a_frozen_copy_of_the_starting_weights() -> None:
    engine = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=0, device="cpu")
    spec = learning_spec(target_ids(engine.model), "share")
    start = [p.detach().clone() for p in engine.model.parameters()]
    cfg = GRPOConfig(n_samples_per_prompt=4, lr=1e-2, use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="low_var_kl")
    trainer = GRPOTrainer(spec, engine, learning_rows(2), cfg, options={"max_new_tokens": 4})
    first = trainer.step()
    second = trainer.step()
    assert first["kl"] == 0.0  # before any update the model is its reference
    assert second["kl"] > 0.0  # the reference stayed where training started; the model moved
    assert all(torch.equal(a, b) for a, b in zip(start, trainer.reference.parameters()))
    assert not any(p.requires_grad for p in trainer.reference.parameters())
    assert math.isnan(GRPOTrainer(spec, engine, learning_rows(2), GRPOConfig(n_samples_per_prompt=4),
                                  options={"max_new_tokens": 4}).step()["kl"])  # no KL loss: no KL figure
    with pytest.raises(ValueError, match="use_kl_loss"):
        GRPOTrainer(spec, engine, learning_rows(2), GRPOConfig(), reference=engine.model)


def _record_lrs(trainer: GRPOTrainer) -> list[float]:
    """The lr of every optimizer step `trainer` takes from now on."""
    seen: list[float] = []
    step = trainer.optimizer.step

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        seen.append(trainer.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step  # type: ignore[method-assign]
    return seen


def test_lr_warmup_is_megatrons_linear_ramp_from_zero_and_survives_a_reload() -> None:
    """--lr-warmup-iters 4: optimizer step k runs at lr * k / 4 (Megatron's scheduler starts at step 0 with
    --lr-warmup-init 0), so the first step only fills AdamW's moments; a reloaded optimizer continues."""
    engine = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=0, device="cpu")
    spec = learning_spec(target_ids(engine.model), "share")
    cfg = GRPOConfig(n_samples_per_prompt=4, lr=1e-2, lr_warmup_steps=4, num_steps_per_rollout=2)
    trainer = GRPOTrainer(spec, engine, learning_rows(2), cfg, options={"max_new_tokens": 4})
    data = to_train_data(asyncio.run(trainer.collect()), TrainDataSettings(n_samples_per_prompt=4))
    data["rewards"] = [1.0 if i % 2 else -1.0 for i in range(len(data["rewards"]))]  # signal in both shares
    start = [p.detach().clone() for p in engine.model.parameters()]
    seen = _record_lrs(trainer)
    trainer.update(data)
    assert seen == [0.0, 2.5e-3]
    again = GRPOTrainer(spec, engine, learning_rows(2), cfg, options={"max_new_tokens": 4})
    again.optimizer.load_state_dict(trainer.optimizer.state_dict())
    assert again.optimizer_steps_taken() == 2
    seen = _record_lrs(again)
    again.update(data)
    again.update(data)
    assert seen == [5e-3, 7.5e-3, 1e-2, 1e-2]
    # step 0 at lr 0 moves nothing: a fresh trainer with one optimizer step per update shows it
    fresh_engine = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=0, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(start, fresh_engine.model.parameters()))
    fresh = GRPOTrainer(spec, fresh_engine, learning_rows(2), cfg.model_copy(update={"num_steps_per_rollout": 1}),
                        options={"max_new_tokens": 4})
    fresh.update(data)
    assert all(torch.equal(a, b) for a, b in zip(start, fresh_engine.model.parameters()))
    fresh.update(data)
    assert any(not torch.equal(a, b) for a, b in zip(start, fresh_engine.model.parameters()))


def test_optimizer_batches_keep_rollouts_whole_and_refuse_more_steps_than_rollouts() -> None:
    data = {"sample_indices": [0, 0, 0, 1, 2, 2, 3, 4]}
    assert optimizer_batches(data, 1) == [list(range(8))]
    assert optimizer_batches(data, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # rollouts 0-1, then 2-4
    assert optimizer_batches(data, 5) == [[0, 1, 2], [3], [4, 5], [6], [7]]
    with pytest.raises(ValueError, match="num_steps_per_rollout"):
        optimizer_batches(data, 6)


# ------------------------------------------------------------------------------ the faults, by hand

def _samples() -> list[Sample]:
    """Two prompt groups of two rollouts, each rollout two per_turn sequences (4 rollouts, 8 rows)."""
    out = []
    for i, reward in enumerate([1.0, 0.0, 0.25, 0.75]):
        seqs = [{"tokens": [1, 2, 3, 10 + i, 20 + i], "response_length": 3, "loss_mask": [1, 0, 1],
                 "rollout_log_probs": [-0.5, 0.0, -1.5]} for _ in range(2)]
        out.append(Sample(group_index=i // 2, index=i, tokens=seqs[0]["tokens"], response_length=3,
                          loss_mask=[1, 0, 1], rollout_log_probs=[-0.5, 0.0, -1.5], reward=reward,
                          status=Sample.Status.COMPLETED, train_metadata={"turns": seqs}))
    return out


def test_faults_rewire_exactly_what_they_name() -> None:
    samples = _samples()
    data = to_train_data(samples, TrainDataSettings(n_samples_per_prompt=2))
    adv = data["rewards"]  # rows 2k, 2k+1 belong to rollout k
    assert negate_advantages(data, samples)["rewards"] == [-a for a in adv]
    rolled = wrong_rollout(data, samples)["rewards"]
    assert rolled == adv[2:] + adv[:2]
    permuted = permute_within_groups(data, samples)
    for group in ((0, 1, 2, 3), (4, 5, 6, 7)):
        assert sorted(permuted["rewards"][r] for r in group) == sorted(adv[r] for r in group)
        assert permuted["rewards"][group[0]] == permuted["rewards"][group[1]]  # a rollout's rows stay together
    shifted = shift_mask(data, samples)
    assert shifted["loss_masks"][0] == [0, 1, 0] and shifted["rollout_log_probs"][0] == [0.0, -0.5, 0.0]
    assert data["loss_masks"][0] == [1, 0, 1]  # the original is untouched


def test_target_set_is_forty_percent_along_one_direction() -> None:
    engine = build_check_engine(hidden_size=32, num_layers=1, device="cpu")
    targets = target_ids(engine.model, seed=0)
    vocab = engine.model.get_output_embeddings().weight.shape[0]
    assert abs(len(targets) / vocab - 0.4) < 1e-3
    assert target_ids(engine.model, seed=0) == targets and target_ids(engine.model, seed=1) != targets
    turns = [{"trainable": True, "output_ids": [next(iter(targets)), -1]}, {"trainable": False, "output_ids": [-1]}]
    assert target_shares(turns, targets) == {"target_share": 0.5, "first_token_share": 1.0}


def test_trainer_rejects_a_text_engine_and_empty_rows() -> None:
    spec = learning_spec(frozenset({1}))
    with pytest.raises(TypeError, match="HFEngine"):
        GRPOTrainer(spec, object(), learning_rows(1))
    engine = build_check_engine(hidden_size=32, num_layers=1, device="cpu")
    with pytest.raises(ValueError, match="rows"):
        GRPOTrainer(spec, engine, [])


def test_learn_check_cli_prints_a_verdict_line() -> None:
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    result = CliRunner().invoke(app, ["learn-check", "--steps", "2", "--hidden-size", "32", "--layers", "1",
                                      "--prompts", "1", "--n-samples-per-prompt", "2", "--max-new-tokens", "2",
                                      "--device", "cpu"])
    assert result.exit_code in (0, 1), result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(("PASS learn-check draft_revise", "FAIL learn-check draft_revise")), result.output
    assert "step   1  reward" in result.output
    bad = CliRunner().invoke(app, ["learn-check", "--steps", "2", "--fault", "nope"])
    assert bad.exit_code == 2 and "negate_advantages" in bad.output


def test_learn_check_cli_runs_memagent() -> None:
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    result = CliRunner().invoke(app, ["learn-check", "--task", "memagent", "--steps", "2", "--hidden-size", "32",
                                      "--layers", "1", "--prompts", "1", "--n-samples-per-prompt", "2",
                                      "--max-new-tokens", "2", "--device", "cpu"])
    assert result.exit_code in (0, 1), result.output
    assert result.output.strip().splitlines()[-1].startswith(("PASS learn-check memagent_share",
                                                              "FAIL learn-check memagent_share")), result.output


def test_learn_check_runs_a_users_agent(tmp_path: Any) -> None:
    import json

    from agentgraphs.testing.learning_check import LearnCheckSettings, learn_check_run

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n")
    settings = LearnCheckSettings(agent="agentgraphs.testing.agents:TWO_TURN", engine="hf:tiny", data=str(data),
                                  steps=2, prompts=1, n_samples=2, max_new_tokens=3, device="cpu")
    out = learn_check_run(settings)
    assert len(out["history"]) == 2 and out["history"][0]["sequences"] == 2  # concat: one sequence a rollout
    assert out["history"][0]["trained_tokens"] == 2 * 2 * 3
    # --seed makes it reproducible: the engine's sampling is seeded too (it was drawn from OS entropy, so a run
    # could sample a stop token another run did not)
    again = learn_check_run(settings)
    def figures(run: dict[str, Any]) -> list[str]:  # as JSON text: a NaN figure (kl without a reference) is equal
        return [json.dumps({k: v for k, v in h.items() if k not in ("rollout_s", "train_s")}, sort_keys=True)
                for h in run["history"]]

    assert figures(again) == figures(out)
    assert out["line"].startswith(("PASS learn-check two_turn", "FAIL learn-check two_turn"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_step0_mismatch_and_one_update(dtype: str) -> None:
    # HFEngine decoding on CUDA vs the trainer's padded forward: equal in fp32; bf16 within its rounding
    engine = build_check_engine(hidden_size=256, num_layers=4, init_scale=0.1, device="cuda",
                                dtype=getattr(torch, dtype))
    spec = learning_spec(target_ids(engine.model), "share")
    trainer = GRPOTrainer(spec, engine, learning_rows(2), GRPOConfig(n_samples_per_prompt=4, lr=1e-2),
                          options={"max_new_tokens": 8})
    step0 = trainer.step()
    assert step0["trained_tokens"] == 2 * 4 * 2 * 8
    bound = 1e-4 if dtype == "float32" else 0.5  # measured on an H200: 2.3e-5 and 0.11 (bench/README.md)
    assert step0["logp_diff_max"] < bound and math.isfinite(step0["loss"])



def test_concurrent_collection_audits_every_rollout_before_the_update() -> None:
    """`concurrency` runs a step's rollouts together (a batching engine batches them), samples stay in
    (row, draw) order; the audit sees every rollout and its Sample first, and raising stops the update."""
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.records import SEQUENCE_KEYS

    base = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=0, device="cpu")
    engine = HFEngine(base.model, base.tokenizer, device="cpu", batching=True, seed=0)
    seen: list[tuple[int, list[int]]] = []

    def audit(rollouts: Any, samples: Any) -> None:
        for rollout, sample in zip(rollouts, samples):  # each Sample carries its own rollout's sequences
            assert sample.train_metadata["turns"] == [{**{k: seq[k] for k in SEQUENCE_KEYS}, "sampling": seq["sampling"]}
                                                      for seq in rollout.sequences]
        seen.append((len(rollouts), [s.group_index for s in samples]))
        if len(seen) == 2:
            raise RuntimeError("audit: stop")

    spec = learning_spec(target_ids(engine.model, seed=0), "share")
    trainer = GRPOTrainer(spec, engine, learning_rows(3), GRPOConfig(n_samples_per_prompt=2, lr=2e-2, concurrency=6),
                          options={"max_new_tokens": 3}, audit=audit)
    trainer.step()
    assert seen == [(6, [0, 0, 1, 1, 2, 2])]
    assert engine.batcher.stats.max_rows >= 2  # the six rollouts ran as one batch
    before = [p.detach().clone() for p in engine.model.parameters()]
    with pytest.raises(RuntimeError, match="audit: stop"):
        trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, engine.model.parameters()))  # nothing trained


@pytest.mark.parametrize("skip", [False, True])
def test_flat_batches_move_adamw_unless_skipped(skip: bool) -> None:
    """A batch where every group has one reward gives every row advantage 0: slime still takes an AdamW step
    (momentum from an earlier step keeps moving the weights); `skip_flat_updates` leaves them untouched."""
    engine = build_check_engine(hidden_size=32, num_layers=1, init_scale=0.2, seed=0, device="cpu")
    spec = learning_spec(target_ids(engine.model), "share")
    trainer = GRPOTrainer(spec, engine, learning_rows(2), GRPOConfig(n_samples_per_prompt=4, lr=1e-2,
                                                                     skip_flat_updates=skip),
                          options={"max_new_tokens": 4})
    trainer.step()  # a real step first: AdamW now has momentum
    before = [p.detach().clone() for p in engine.model.parameters()]
    data = to_train_data(asyncio.run(trainer.collect()), TrainDataSettings(n_samples_per_prompt=4))
    data["rewards"] = [0.0] * len(data["rewards"])  # what a batch of zero-variance groups converts to
    stats = trainer.update(data)
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(engine.model.parameters(), before))
    assert stats["skipped"] == (1.0 if skip else 0.0)
    assert (moved == 0.0) == skip, moved


@pytest.mark.parametrize("flags, words", [
    # before: --data and --engine without an agent were dropped without a word: the built-in task ran, exit 0/1
    (["--data", "rows.jsonl"], "learn-check: --data is for your agent and the built-in task would ignore it"),
    (["--engine", "hf:tiny", "--data", "rows.jsonl"], "--engine and --data are for your agent"),
    # before: the built-in task's flags with an agent were dropped too
    (["agentgraphs.testing.agents:TWO_TURN", "--engine", "hf:tiny", "--data", "rows.jsonl", "--task", "first_token",
      "--hidden-size", "32"], "--task, --hidden-size shape the built-in task only"),
    # before: pydantic's five-line dump naming the field `lr`, with a URL
    (["--lr", "-1", "--min-gain", "0"], "learn-check: --lr: input should be greater than 0 (got -1.0); --min-gain:"),
    # before: torch's RuntimeError traceback (exit 1) listing two dozen device types
    (["--device", "gpu"], "--device: value error, use cpu or cuda"),
])
def test_learn_check_refuses_what_it_would_ignore_or_misread(tmp_path: Any, flags: list[str], words: str) -> None:
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    (tmp_path / "rows.jsonl").write_text('{"input": "What is 2+2?", "label": "4"}\n')
    flags = [str(tmp_path / f) if f == "rows.jsonl" else f for f in flags]
    result = CliRunner().invoke(app, ["learn-check", "--steps", "2", *flags])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    said = " ".join(result.output.split())
    assert words in said and "step 1" not in said, result.output  # refused before any step

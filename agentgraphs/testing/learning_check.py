"""`agentgraphs learn-check`: train a model with GRPO on our samples for a few steps; does the reward rise?

With no agent: the built-in check task (`agentgraphs.testing.learning`) on a freshly initialised tiny
Qwen2. With an agent (`package.module:attr`), `--engine hf:DIR` and `--data rows.jsonl`: your agent, your
reward, your model (trained in memory, never written back). A `fault` injects one of
`agentgraphs.testing.grpo.FAULTS`; such a run is a negative control and passes when it does NOT learn.

>>> LearnCheckSettings(steps=4).task
'share'
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError, validation_message
from .grpo import FAULTS, GRPOConfig, GRPOTrainer, StepStats, verdict


class LearnCheckSettings(BaseModel):
    """What `agentgraphs learn-check` runs (the CLI's flags, one field each)."""

    model_config = ConfigDict(extra="forbid")

    agent: Optional[str] = Field(None, description="package.module:attr; None = the built-in check task")
    engine: Optional[str] = Field(None, description="hf:MODEL_DIR for an agent; None = a fresh tiny Qwen2")
    data: Optional[str] = Field(None, description="JSONL rows for an agent")
    task: str = Field("share", description="built-in task: share, first_token or memagent")
    options: dict[str, Any] = Field(default_factory=dict)
    steps: int = Field(12, ge=2)
    prompts: int = Field(4, ge=1)
    n_samples: int = Field(4, ge=2)
    lr: float = Field(2e-2, gt=0)
    temperature: float = Field(0.9, gt=0)
    max_new_tokens: int = Field(4, ge=1, description="tokens per LLM call (a ceiling for an agent's own calls)")
    hidden_size: int = Field(64, ge=8)
    layers: int = Field(2, ge=1)
    init_scale: float = Field(0.2, gt=0)
    fault: Optional[str] = None
    min_gain: float = Field(0.1, gt=0)
    device: Optional[str] = None
    seed: int = 0

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: Optional[str]) -> Optional[str]:
        import torch

        try:
            torch.device(value) if value is not None else None
        except RuntimeError:  # torch's own message lists two dozen device types
            raise ValueError("use cpu or cuda (or cuda:0, cuda:1, ... for one card)") from None
        return value

    @classmethod
    def from_flags(cls, **flags: Any) -> "LearnCheckSettings":
        """The settings of `agentgraphs learn-check`'s flags: a bad value is a ConfigError naming its flag."""
        try:
            return cls(**flags)
        except ValidationError as exc:
            raise ConfigError("learn-check: " + validation_message(exc, label=_flag)) from None

    def check_mode(self) -> None:
        """ConfigError for a flag the chosen mode would ignore: --engine / --data without an agent (the built-in
        task trains a fresh tiny model on its own rows), or the built-in task's flags with one."""
        if self.agent is None:
            given = [_flag(k) for k in _AGENT_ONLY if getattr(self, k) is not None]
            if given:
                one = len(given) == 1
                raise ConfigError(f"learn-check: {' and '.join(given)} {'is' if one else 'are'} for your agent and "
                                  f"the built-in task would ignore {'it' if one else 'them'} (it trains a fresh tiny "
                                  "Qwen2 on its own rows). Fix: name the "
                                  "agent (learn-check package.module:attr --engine hf:MODEL_DIR --data rows.jsonl), "
                                  f"or drop {' and '.join(given)}")
            return
        given = [_flag(k) for k in _BUILTIN_ONLY if getattr(self, k) != type(self).model_fields[k].default]
        if given:
            one = len(given) == 1
            raise ConfigError(f"learn-check {self.agent}: {', '.join(given)} {'shapes' if one else 'shape'} the "
                              f"built-in task only and your agent's run would ignore {'it' if one else 'them'} (it "
                              "trains --engine on --data). Fix: drop "
                              f"{', '.join(given)}")


_AGENT_ONLY = ("engine", "data")  # what only a user's agent reads
_BUILTIN_ONLY = ("task", "hidden_size", "layers", "init_scale")  # what only the built-in task reads
_FLAGS = {"n_samples": "--n-samples-per-prompt"}


def _flag(field: str) -> str:
    """A settings field as the learn-check flag that sets it."""
    return _FLAGS.get(field) or "--" + field.replace("_", "-")


def learn_check_run(settings: LearnCheckSettings, on_step: Callable[[StepStats], None] | None = None) -> dict[str, Any]:
    """Run the check; returns {history, verdict, ok, line} (`line` is the verdict line the CLI prints)."""
    import torch

    if settings.fault is not None and settings.fault not in FAULTS:
        raise ConfigError(f"--fault {settings.fault!r}: use one of {sorted(FAULTS)}")
    settings.check_mode()
    torch.manual_seed(settings.seed)
    if settings.agent is None:
        spec, engine, rows, options = _builtin(settings)
    else:
        spec, engine, rows, options = _user_agent(settings)
    config = GRPOConfig(steps=settings.steps, n_samples_per_prompt=settings.n_samples, lr=settings.lr,
                        temperature=settings.temperature, max_new_tokens=settings.max_new_tokens)
    trainer = GRPOTrainer(spec, engine, rows, config, options=options,
                          corrupt=FAULTS[settings.fault] if settings.fault else None)
    history = trainer.train(on_step=on_step)
    window = max(1, min(3, len(history) // 2))
    v = verdict(history, window=window, min_gain=settings.min_gain)
    ok = v["passed"] != bool(settings.fault)
    what = f"fault {settings.fault}: must NOT learn" if settings.fault else "must learn"
    line = (f"{'PASS' if ok else 'FAIL'} learn-check {spec.name} ({what}): mean reward {v['first']:.3f} over the first "
            f"{window} steps -> {v['last']:.3f} over the last {window} (gain {v['gain']:+.3f}, threshold "
            f"{settings.min_gain}); step-0 max |rollout - trainer log-prob| {history[0]['logp_diff_max']:.1e}")
    return {"history": history, "verdict": v, "ok": ok, "line": line}


def _builtin(settings: LearnCheckSettings) -> tuple[Any, Any, list[dict[str, Any]], dict[str, Any]]:
    from .learning import (
        build_check_engine, learning_rows, learning_spec, memagent_learning_spec, memagent_rows, target_ids,
    )

    if settings.task not in ("share", "first_token", "memagent"):
        raise ConfigError(f"--task {settings.task!r}: use share, first_token or memagent")
    engine = build_check_engine(hidden_size=settings.hidden_size, num_layers=settings.layers,
                                init_scale=settings.init_scale, seed=settings.seed, device=settings.device)
    if settings.task == "memagent":
        # MemAgent's graph over 2 chunks of 64 tokens; the share reward over all its turns (memagent_learning_spec),
        # broadcast to every sequence (the original's variant; -o variant=seed divides it among them)
        options = {"variant": "original", "chunk_tokens": 64, "memory_max_new_tokens": settings.max_new_tokens,
                   "final_max_new_tokens": settings.max_new_tokens, **settings.options}
        rows = memagent_rows(settings.prompts, engine.tokenizer, chunks=2, chunk_tokens=int(options["chunk_tokens"]))
        return memagent_learning_spec(target_ids(engine.model, seed=settings.seed)), engine, rows, options
    spec = learning_spec(target_ids(engine.model, seed=settings.seed), settings.task)  # type: ignore[arg-type]
    options = {"max_new_tokens": settings.max_new_tokens, **settings.options}
    return spec, engine, learning_rows(settings.prompts), options


def _user_agent(settings: LearnCheckSettings) -> tuple[Any, Any, list[dict[str, Any]], dict[str, Any]]:
    from ..engines import make_engine
    from ..rollout_inputs import RowKeys, read_rollout_inputs
    from ..spec import load_spec

    if not settings.engine or not settings.engine.startswith("hf:"):
        raise ConfigError("learn-check with an agent needs --engine hf:MODEL_DIR (the model is trained in this "
                          "process; an sglang: server cannot be)")
    if not settings.data:
        raise ConfigError("learn-check with an agent needs --data rows.jsonl ({input, label, metadata} per line)")
    spec = load_spec(settings.agent or "")
    engine = make_engine(settings.engine, seed=settings.seed)  # its sampling reproducible under --seed too
    rows: list[dict[str, Any]] = []
    for parsed in read_rollout_inputs(settings.data, RowKeys(), limit=settings.prompts):
        if parsed.inp is None:
            raise ConfigError(f"--data {settings.data}: {parsed.error}")
        rows.append({"prompt": parsed.inp["prompt"], "label": parsed.inp["label"], "metadata": parsed.inp["metadata"]})
    if not rows:
        raise ConfigError(f"--data {settings.data}: no rows")
    return spec, engine, rows, dict(settings.options)


__all__ = ["LearnCheckSettings", "learn_check_run"]

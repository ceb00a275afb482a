"""The Engine protocol and the records every engine returns.

An engine turns prompt token ids into a Completion: the exact output token ids and the log-prob
of each, as sampled. Nothing here knows about chat templates or LangGraph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from typing import Literal, Protocol, runtime_checkable

from ..errors import ConfigError, did_you_mean

FinishReason = Literal["stop", "length", "abort"]

# The largest log-prob accepted from an engine. A log-prob is <= 0 in exact arithmetic; servers compute
# log-softmax in floating point and may return a hair above 0 for a near-certain token. Every check of
# a recorded log-prob (the engines' response parsing, the trace invariants) uses this one bound.
MAX_LOGPROB = 1e-4

# keys of slime's sampling_params that shape only the detokenised text: we train ids, so they change nothing
SLIME_TEXT_ONLY_KEYS = frozenset({"skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens"})
# SGLang keys slime may send (eval datasets, top-p replay) that our engines do not apply: fine at the value
# that changes nothing (or None), refused otherwise, since the tokens would not be sampled as configured
SLIME_NEUTRAL_ONLY_KEYS: dict[str, object] = {
    "repetition_penalty": 1.0, "min_new_tokens": 0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
    "custom_params": {},
}
_NOT_APPLIED = "agentgraphs engines do not apply it, so the tokens would not be sampled as configured"
# why each of those cannot be honoured, and the fix (other keys: _NOT_APPLIED, drop it)
_SLIME_REFUSALS = {
    "repetition_penalty": (_NOT_APPLIED, "drop repetition_penalty from the eval dataset config (or set it to 1.0)"),
    "min_new_tokens": (_NOT_APPLIED, "drop min_new_tokens from the eval dataset config and --eval-min-new-tokens"),
    "custom_params": ("it asks for per-token top-p sets (--rollout-top-p < 1), which agentgraphs engines do not return",
                      "set --rollout-top-p 1.0"),
}
# names other libraries use for our fields: suggested when one is passed
_ALIASES = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens", "seed": "sampling_seed",
            "stop_sequences": "stop", "stop_ids": "stop_token_ids"}


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings, named as SGLang names them.

    `to_sglang()` emits only keys SGLang documents, so a 0.5.x server never answers 400. Every value is
    checked here, whichever way it came (constructor, `replace`, dicts): a wrong type or range raises
    ConfigError naming the field. `stop` may be one string or several, `stop_token_ids` one id or several
    (each is kept as a tuple; a string is one stop string, never its characters).

    >>> SamplingParams(temperature=0.7, max_new_tokens=16).to_sglang()["temperature"]
    0.7
    >>> SamplingParams(stop="</answer>", stop_token_ids=151645).to_sglang()["stop"]
    ['</answer>']
    """

    max_new_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    sampling_seed: int | None = None

    def __post_init__(self) -> None:
        # frozen: normalised values are set once, here, so every route (dicts, bind, slime) gets the same
        set_ = object.__setattr__
        set_(self, "stop", _stop_strings(self.stop))
        set_(self, "stop_token_ids", _stop_ids(self.stop_token_ids))
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 0:
            raise ConfigError(f"max_new_tokens must be an int >= 0 (a token count), got {_shown(self.max_new_tokens)}")
        set_(self, "max_new_tokens", int(self.max_new_tokens))
        for name in ("temperature", "top_p", "min_p"):
            if not _is_number(getattr(self, name)):
                raise ConfigError(f"{name} must be a number, got {_shown(getattr(self, name))}: pass e.g. "
                                  f"{name}={getattr(SamplingParams, name)}")
            set_(self, name, float(getattr(self, name)))
        if not self.temperature >= 0 or math.isinf(self.temperature):  # `not >=`: nan fails it too
            raise ConfigError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if not _is_int(self.top_k) or not (self.top_k == -1 or self.top_k >= 1):
            raise ConfigError(f"top_k must be -1 (off) or an int >= 1, as SGLang accepts it, got {_shown(self.top_k)}")
        set_(self, "top_k", int(self.top_k))
        if not 0 <= self.min_p <= 1:
            raise ConfigError(f"min_p must be in [0, 1] (0 = off), got {self.min_p}")
        if not isinstance(self.ignore_eos, bool):
            raise ConfigError(f"ignore_eos must be a bool (True/False), got {_shown(self.ignore_eos)}")
        if self.sampling_seed is not None:
            if not _is_int(self.sampling_seed):
                raise ConfigError(f"sampling_seed must be an int or None, got {_shown(self.sampling_seed)}")
            set_(self, "sampling_seed", int(self.sampling_seed))

    def replace(self, **changes: object) -> SamplingParams:
        import dataclasses

        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_sglang(self) -> dict[str, object]:
        out: dict[str, object] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "ignore_eos": self.ignore_eos,
            # keep the stop token in the text as well as in the ids; detokenise specials faithfully
            "no_stop_trim": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
        }
        if self.stop:
            out["stop"] = list(self.stop)
        if self.stop_token_ids:
            out["stop_token_ids"] = list(self.stop_token_ids)
        if self.sampling_seed is not None:
            out["sampling_seed"] = self.sampling_seed
        return out

    @classmethod
    def check_keys(cls, keys: Iterable[str], where: str) -> None:
        """Refuse any key that is not a field (ConfigError naming it, the close match and the fields).

        >>> SamplingParams.check_keys(["temprature"], "AgentContext.sampling")
        Traceback (most recent call last):
        ...
        agentgraphs.errors.ConfigError: AgentContext.sampling: unknown key 'temprature' (did you mean 'temperature'?)...
        """
        known = [f.name for f in fields(cls)]
        for key in keys:
            if key not in known:
                raise ConfigError(f"{where}: unknown key {key!r}{_suggestion(str(key), known)}; accepted keys: "
                                  f"{', '.join(known)}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], *, where: str = "sampling") -> SamplingParams:
        """Build from plain data (a dict of field values), strictly: unknown keys and bad values raise
        ConfigError naming `where` and the field.

        >>> SamplingParams.from_mapping({"max_new_tokens": 8, "stop": "</answer>"}).stop
        ('</answer>',)
        """
        cls.check_keys(values.keys(), where)
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_slime(cls, params: Mapping[str, object]) -> SamplingParams:
        """Build from the `sampling_params` dict slime hands a custom generate function.

        None means "not set" (slime passes `stop=None`). The text-only keys (SLIME_TEXT_ONLY_KEYS) are
        ignored; the keys our engines do not apply (SLIME_NEUTRAL_ONLY_KEYS) are accepted only at their
        neutral value; any other key is refused, so nothing slime asked for is dropped silently.

        >>> SamplingParams.from_slime({"temperature": 0.8, "stop": None, "no_stop_trim": True}).temperature
        0.8
        >>> SamplingParams.from_slime({"repetition_penalty": 1.05})
        Traceback (most recent call last):
        ...
        agentgraphs.errors.ConfigError: slime sampling_params['repetition_penalty'] = 1.05: ...
        """
        honoured = {f.name for f in fields(cls)}
        for key, value in params.items():
            _check_slime_key(key, value, honoured)
        kw = {key: value for key, value in params.items() if key in honoured and value is not None}
        return cls.from_mapping(kw, where="slime sampling_params")


def _check_slime_key(key: str, value: object, honoured: set[str]) -> None:
    """Refuse a key of slime's sampling_params that would be dropped while it changes what is sampled."""
    if key in honoured or key in SLIME_TEXT_ONLY_KEYS:
        return
    if key in SLIME_NEUTRAL_ONLY_KEYS:
        if not _neutral(value, SLIME_NEUTRAL_ONLY_KEYS[key]):
            why, fix = _SLIME_REFUSALS.get(key, (_NOT_APPLIED, f"drop {key} from the slime config that sets it"))
            raise ConfigError(f"slime sampling_params[{key!r}] = {value!r}: {why}. Fix: {fix}")
        return
    known = sorted(honoured | SLIME_TEXT_ONLY_KEYS | SLIME_NEUTRAL_ONLY_KEYS.keys())
    raise ConfigError(
        f"slime sampling_params has the key {key!r} (= {value!r}), which agentgraphs does not know, so it cannot "
        f"honour it{_suggestion(str(key), known)}. Known keys: {', '.join(known)}. Fix: remove the setting that "
        "adds it, or run this slime version without it")


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _neutral(value: object, neutral: object) -> bool:
    if value is None:
        return True
    if isinstance(neutral, Mapping):
        return isinstance(value, Mapping) and not value
    return _is_number(value) and value == neutral


def _suggestion(key: str, known: list[str]) -> str:
    return did_you_mean(key, known, _ALIASES)


def _stop_strings(stop: object) -> tuple[str, ...]:
    """One stop string or several, as a tuple; a string is ONE stop string, never its characters."""
    if stop is None:
        return ()
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
        raise ConfigError(f"stop must be a non-empty string or a list of them, got {_shown(stop)}: pass e.g. "
                          "stop='</answer>' or stop=['</answer>', '\\n\\n']")
    return tuple(items)


def _stop_ids(ids: object) -> tuple[int, ...]:
    """One stop token id or several, as a tuple of ints >= 0."""
    if ids is None:
        return ()
    items = (ids,) if _is_int(ids) else ids
    if not isinstance(items, (list, tuple)) or not all(_is_int(i) and i >= 0 for i in items):  # type: ignore[operator]
        raise ConfigError(f"stop_token_ids must be a token id (int >= 0) or a list of them, got {_shown(ids)}: "
                          "pass e.g. stop_token_ids=151645 or stop_token_ids=[151645, 151643]")
    return tuple(int(i) for i in items)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Completion:
    """What one engine call returned. `token_ids[i]` was sampled with log-prob `logprobs[i]`."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    text: str = ""
    prompt_tokens: int = 0
    weight_version: str | None = None
    rid: str = ""
    latency_s: float = 0.0
    retries: int = 0
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            from ..errors import EngineProtocolError

            raise EngineProtocolError(
                f"completion has {len(self.token_ids)} token ids but {len(self.logprobs)} log-probs"
            )


@runtime_checkable
class Engine(Protocol):
    """Anything that generates token ids from token ids.

    `name` identifies the engine in traces (e.g. "sglang:http://host:30000" or "hf:/models/tiny").
    """

    name: str

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion: ...

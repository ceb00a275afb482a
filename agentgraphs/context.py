"""The per-run context of a graph: engines, tokenizer, sampling, limits, method options.

`AgentContext` travels as LangGraph's runtime context (`graph.ainvoke(inp, config, context=ctx)`), never in
state, so checkpoints hold only JSON. Engines and tokenizers built from strings are shared per process.

>>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object())
>>> ctx.engine("policy").name
'sglang:http://127.0.0.1:30000'
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Generic, Hashable, Mapping, Sequence, TypeVar

from .chat import ChatTemplate
from .engines import Engine, SamplingParams, make_engine
from .errors import ConfigError, did_you_mean

@dataclass
class Limits:
    """Per-rollout limits. `max_llm_calls` guards against graphs that loop forever.

    The defaults admit MemAgent evaluation on multi-million-token documents (one call per
    5000-token chunk); lower them for agents whose loops should be short.
    """

    max_llm_calls: int = 2000
    max_time_s: float | None = None
    recursion_limit: int = 5000
    # a reward (or eval_metrics) that has not answered by then fails its sample instead of hanging the
    # rollout: a judge or verifier that stops answering must not freeze slime (agentgraphs.rollout.score)
    reward_timeout_s: float = 300.0

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, where: str = "limits") -> Limits:
        """Limits from plain data (a JSON context, `langgraph dev`): a key that is not a field is a ConfigError
        naming it, not a TypeError (nor a limit left at its default).

        >>> Limits.from_mapping({"max_llm_calls": 8}).max_llm_calls
        8
        >>> Limits.from_mapping({"max_llm_call": 8}, where="AgentContext.limits")
        Traceback (most recent call last):
        ...
        agentgraphs.errors.ConfigError: AgentContext.limits: unknown key 'max_llm_call' (did you mean 'max_llm_calls...
        """
        known = [f.name for f in fields(cls)]
        for key in values:
            if key not in known:
                raise ConfigError(f"{where}: unknown key {key!r}{did_you_mean(str(key), known)}; accepted keys: "
                                  f"{', '.join(known)}")
        return cls(**dict(values))

    def __post_init__(self) -> None:
        for name in ("max_llm_calls", "recursion_limit"):  # a JSON "5" would fail every rollout mid-way instead
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"Limits.{name} must be a whole number >= 1, got {value!r}")
        cap = self.max_time_s
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0):
            raise ConfigError(f"Limits.max_time_s must be a number of seconds > 0, or None for no deadline, "
                              f"got {cap!r}")
        timeout = self.reward_timeout_s
        # `not timeout > 0` also refuses NaN; None is refused too: every reward call has a deadline
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(f"Limits.reward_timeout_s must be a number of seconds > 0, got {timeout!r}: raise it "
                              "for a slow reward rather than removing it (slime: agentgraph_reward_timeout_s)")


@dataclass
class AgentContext:
    """Per-run objects, passed as LangGraph's runtime context (never stored in state).

    `policy` is the trained model's engine; `engines` holds helper models by name (judge, executor,
    experts) that may also be addressed by `call_llm(..., engine="judge")`; `evaluation` switches a graph
    to its evaluation behaviour (nothing trainable, evaluation caps). Method options are not here: a
    graph is built from its resolved options (`AgentSpec.graph(options)`).

    Plain data works too, so a graph can be driven from `langgraph dev` or a JSON request: engines
    may be given as strings in the one engine grammar of `agentgraphs.engines.make_engine`
    (`"hf:MODEL_DIR"`, `"sglang:http://host:port"`, `"openai:URL#MODEL"`), `tokenizer` may be a path or
    omitted (the engine's own is used), and `sampling` / `limits` may be dicts. `AgentContext()` alone
    uses the engine named by $AGENTGRAPHS_ENGINE. `seed` makes the rollout's sampling reproducible: every
    engine call without its own `sampling_seed` gets one derived from it (`call_seed`); `agentgraphs run
    --seed N` gives each rollout its own (`derive_seed(N, index)`).

    `sampling.max_new_tokens` is the cap of a call that asks for none. It is also the ceiling of a call that
    asks for more (a method option such as AgentFlow's `planner_max_new_tokens`) when `max_new_tokens_cap` is
    True, which is what it is when you set it: a SamplingParams object, or a dict with `max_new_tokens` (slime's
    --rollout-max-response-len, `agentgraphs run --max-new-tokens N`). Without one (no `sampling`, a dict
    without the key, `agentgraphs run` without the flag) a call's own max_new_tokens is used as asked: a run-
    level default nobody set never lowers a method's own cap. A call lowered by the ceiling logs a warning, and
    when it is cut there its rollout's status reason names the cap.

    >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object(),
    ...                    sampling={"temperature": 0.7})
    >>> ctx.policy.name, ctx.sampling.temperature
    ('sglang:http://127.0.0.1:30000', 0.7)
    """

    policy: Engine = field(default_factory=lambda: _default_policy())  # type: ignore[assignment]
    tokenizer: Any = None
    sampling: SamplingParams = None  # type: ignore[assignment]  # None: SamplingParams(), no ceiling
    engines: dict[str, Engine] = field(default_factory=dict)
    tokenizers: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    evaluation: bool = False
    seed: int | None = None
    max_new_tokens_cap: bool | None = None  # None: True when `sampling` sets max_new_tokens (see above)
    _templates: dict[str, ChatTemplate] = field(default_factory=dict, repr=False)
    _seed_uses: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):
            self.policy = shared_engine(self.policy)
        self.engines = {k: shared_engine(v) if isinstance(v, str) else v for k, v in self.engines.items()}
        if self.max_new_tokens_cap is None:
            self.max_new_tokens_cap = isinstance(self.sampling, SamplingParams) or (
                isinstance(self.sampling, Mapping) and "max_new_tokens" in self.sampling)
        self.sampling = _sampling_of(SamplingParams() if self.sampling is None else self.sampling)
        if isinstance(self.limits, Mapping):
            self.limits = Limits.from_mapping(self.limits, where="AgentContext.limits")
        if isinstance(self.tokenizer, (str, os.PathLike)):
            self.tokenizer = shared_tokenizer(str(self.tokenizer))
        if self.tokenizer is None:
            self.tokenizer = getattr(self.policy, "tokenizer", None)
            if self.tokenizer is None:
                raise ConfigError(
                    f"no tokenizer for engine {self.policy.name!r}: pass tokenizer= (an HF tokenizer or "
                    "the model's directory)"
                )

    def engine(self, name: str | None) -> Engine:
        if name is None or name == "policy":
            return self.policy
        try:
            return self.engines[name]
        except KeyError:
            raise ConfigError(
                f"no engine named {name!r} in the context; known: {['policy', *self.engines]}. "
                "Add it to AgentContext.engines"
            ) from None

    def call_seed(self, node: str, prompt_ids: Sequence[int]) -> int | None:
        """The sampling seed of one engine call of a seeded context (None when `seed` is None).

        Derived from the seed, the node, the prompt and how many times this node sent this prompt before
        in this context, never from the order calls happen to be answered in: concurrent rollouts and
        parallel branches (Send) sample the same tokens run after run. (Two parallel branches of one node
        with the very same prompt are told apart only by the order they start in.)

        >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object(), seed=3)
        >>> a, b = ctx.call_seed("solve", [1, 2]), ctx.call_seed("solve", [1, 2])
        >>> a != b and a == AgentContext(policy=ctx.policy, tokenizer=object(), seed=3).call_seed("solve", [1, 2])
        True
        """
        if self.seed is None:
            return None
        prompt = hashlib.sha256(",".join(map(str, prompt_ids)).encode()).hexdigest()
        key = f"{node}\x00{prompt}"
        uses = self._seed_uses.get(key, 0)
        self._seed_uses[key] = uses + 1
        return derive_seed(self.seed, node, prompt, uses)

    def template(self, name: str | None = None) -> ChatTemplate:
        key = name or "policy"
        tpl = self._templates.get(key)
        if tpl is None:
            # a helper engine with its own tokenizer (hf:) renders with it, not with the policy's
            own = None if key == "policy" else getattr(self.engines.get(key), "tokenizer", None)
            tokenizer = self.tokenizers.get(key) or own or self.tokenizer
            # the kwargs are checked against the policy's template (a helper of another family may read none)
            tpl = ChatTemplate(tokenizer, template_kwargs=self.template_kwargs, check_kwargs=key == "policy")
            self._templates[key] = tpl
        return tpl



def _sampling_of(sampling: object) -> SamplingParams:
    """AgentContext.sampling as SamplingParams. A dict is plain data (a JSON context, `langgraph dev`): its keys
    must be SamplingParams fields, so a misspelt one is refused, not dropped for the defaults. (slime's
    sampling_params dict, with its text-only keys, goes through `SamplingParams.from_slime` instead.)"""
    if isinstance(sampling, SamplingParams):
        return sampling
    if isinstance(sampling, Mapping):
        return SamplingParams.from_mapping(sampling, where="AgentContext.sampling")
    raise ConfigError(f"AgentContext.sampling is a {type(sampling).__name__}: pass a SamplingParams or a dict of "
                      "its fields, e.g. sampling={'temperature': 0.7, 'max_new_tokens': 256}")


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts (stable across processes and platforms, unlike `hash`).

    >>> derive_seed(3, 0) == derive_seed(3, 0) != derive_seed(3, 1)
    True
    """
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def context_of(runtime: Any) -> AgentContext:
    """Accept a LangGraph Runtime[AgentContext] or an AgentContext.

    With no context at all (e.g. a `langgraph dev` run started from the UI), the engine named by the
    environment variable AGENTGRAPHS_ENGINE is used (the Studio entry point sets it to `hf:tiny`).
    """
    ctx = getattr(runtime, "context", runtime)
    if ctx is None:
        return AgentContext()
    if isinstance(ctx, Mapping):
        return AgentContext(**dict(ctx))
    if not isinstance(ctx, AgentContext):
        raise ConfigError(
            f"the graph was invoked with context of type {type(ctx).__name__}: pass "
            "context=AgentContext(...) (or a dict of its fields) to graph.ainvoke / graph.astream"
        )
    return ctx


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class LoopCache(Generic[K, V]):
    """Values shared per event loop and key: HTTP engines and clients belong to the loop that made them.

    Keyed by the loop itself, not its id (a new loop may reuse a dead loop's id, and a client bound to the
    dead loop must not be handed out again). An entry goes with its loop: a loop that is closed loses its
    entries at the next use of the cache, one that is garbage-collected at once (weak keys). Values made
    with no loop (`loop=None`) are kept for the process.

    >>> cache: LoopCache[str, object] = LoopCache()
    >>> async def client() -> object:
    ...     return cache.get("url", object, running_loop())
    >>> first = asyncio.run(client())
    >>> asyncio.run(client()) is first  # another loop, another value
    False
    >>> cache.loops()  # both loops are closed: their entries went
    []
    """

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[K, V]] = weakref.WeakKeyDictionary()
        self._no_loop: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V], loop: asyncio.AbstractEventLoop | None) -> V:
        """The value for `key` in `loop` (None: the process), made by `make()` on first use."""
        with self._lock:
            entries = self._entries(loop)
            value = entries.get(key)
        if value is None:
            made = make()  # outside the lock: loading a model may take a while
            with self._lock:
                value = self._entries(loop).setdefault(key, made)
        return value

    def pop_loop(self, loop: asyncio.AbstractEventLoop | None) -> dict[K, V]:
        """Forget `loop`'s entries and return them (to close what still can be closed in it)."""
        with self._lock:
            if loop is None:
                entries, self._no_loop = self._no_loop, {}
                return entries
            return self._by_loop.pop(loop, {})

    def clear(self) -> None:
        with self._lock:
            self._by_loop.clear()
            self._no_loop.clear()

    def loops(self) -> list[asyncio.AbstractEventLoop]:
        """The loops that still hold entries (closed ones are dropped first)."""
        with self._lock:
            self._drop_closed()
            return list(self._by_loop.keys())

    def _entries(self, loop: asyncio.AbstractEventLoop | None) -> dict[K, V]:
        self._drop_closed()
        if loop is None:
            return self._no_loop
        entries = self._by_loop.get(loop)
        if entries is None:
            entries = self._by_loop[loop] = {}
        return entries

    def _drop_closed(self) -> None:
        for loop in [lp for lp in self._by_loop.keys() if lp.is_closed()]:
            del self._by_loop[loop]


_SHARED_ENGINES: LoopCache[str, Engine] = LoopCache()
_SHARED_TOKENIZERS: dict[str, Any] = {}


def shared_engine(spec: str) -> Engine:
    """One engine per spec string (and event loop, for HTTP engines) in this process."""
    return _SHARED_ENGINES.get(spec, lambda: make_engine(spec), None if spec.startswith("hf:") else running_loop())


def shared_tokenizer(path: str, *, trust_remote_code: bool = False) -> Any:
    """One tokenizer per model directory in this process (the bridge, the CLI and contexts share it)."""
    tok = _SHARED_TOKENIZERS.get(path)
    if tok is None:
        from .tokenizer_loading import load_tokenizer  # checks a local path before transformers sees it

        tok = load_tokenizer(path, trust_remote_code=trust_remote_code)
        _SHARED_TOKENIZERS[path] = tok
    return tok


def _default_policy() -> str:
    spec = os.environ.get("AGENTGRAPHS_ENGINE")
    if not spec:
        raise ConfigError("no policy engine: pass AgentContext(policy=...) (an Engine or a string such as "
                          "'sglang:http://127.0.0.1:30000' or 'hf:MODEL_DIR'), or set AGENTGRAPHS_ENGINE")
    return spec

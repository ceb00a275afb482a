"""SGLangEngine: the Engine protocol over SGLang's native POST /generate, token-in/token-out.

One request per call: the prompt goes out as `input_ids`, the answer comes back as the exact
sampled ids with their log-probs (`meta_info.output_token_logprobs`). Nothing is decoded and
re-encoded. The contract is reference/sglang-langgraph.md; errors are the typed ones of errors.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import httpx
import orjson

from .base import MAX_LOGPROB, Completion, FinishReason, SamplingParams
from ..calls import note_engine_call
from ..errors import ConfigError, EngineProtocolError, EngineRequestError, EngineUnavailableError
from ..http_retry import DEFAULT_BACKOFF_CAP_S, ENGINE_TIMEOUT, backoff_delay, retryable_status
from ..http_slots import KEEPALIVE_EXPIRY_S
from ..http_slots import ConnectionSlots as _ConnectionSlots

log = logging.getLogger(__name__)

_FINISH_TYPES: frozenset[str] = frozenset({"stop", "length", "abort"})
_CONTROL_CONNECTIONS = 4
# the headers that go with `request_body`'s bytes (httpx's `json=` sets the same)
REQUEST_HEADERS = {"Content-Type": "application/json"}


def request_body(payload: dict[str, Any]) -> bytes:
    """The bytes SGLangEngine posts for `payload`: the compact JSON httpx's `json=` would send, made by orjson.

    The same JSON as `json.dumps(payload, ensure_ascii=False, separators=(",", ":"))` for what the engine
    sends (ints, strings, bools, finite floats), byte for byte except that a float may be spelled otherwise
    (`0.00001` for `1e-05`: the same double), at ~1/12 of its CPU: a 32K-token prompt's `input_ids` take
    ~0.3 ms instead of ~3.5 ms, on every call of every rollout. orjson would write a nan or an infinity as
    null (SGLang's default for a sampling field: silently another setting), so they are refused here, as
    httpx's `json=` refuses them; `input_ids` is not walked (ints: SGLang answers 400 to anything else).

    >>> import json
    >>> body = {"input_ids": [151644, 872, 198], "sampling_params": {"temperature": 0.7, "stop": ["é"]}}
    >>> request_body(body) == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    True
    >>> request_body({"sampling_params": {"sampling_seed": 2**64}})
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: the /generate body cannot be sent as JSON (Integer exceeds 64-bit range): \
token ids and the sampling_seed must be Python ints within 64 bits (a numpy array: pass ids.tolist())
    >>> request_body({"sampling_params": {"temperature": float("nan")}})
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: the /generate body holds nan at sampling_params.temperature: JSON has no nan or \
infinity (orjson would send null, the server's default); give a finite number
    """
    for key, value in payload.items():
        if key != "input_ids":
            _refuse_non_finite(value, key)
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError as err:
        raise ConfigError(f"the /generate body cannot be sent as JSON ({err}): token ids and the sampling_seed must "
                          "be Python ints within 64 bits (a numpy array: pass ids.tolist())") from err


def _refuse_non_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"the /generate body holds {value} at {where}: JSON has no nan or infinity (orjson would "
                          "send null, the server's default); give a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_non_finite(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _refuse_non_finite(item, f"{where}[{i}]")


class _Pool(NamedTuple):
    """One event loop's connections: the /generate slots (None with a passed-in client) and the control client."""

    slots: _ConnectionSlots | None
    client: httpx.AsyncClient


class _Retryable(Exception):
    """One attempt failed in a way another attempt may not. `protocol` marks a bad body."""

    def __init__(self, message: str, *, protocol: bool = False) -> None:
        super().__init__(message)
        self.protocol = protocol


class SGLangEngine:
    """An Engine that talks to one SGLang server (or router) over HTTP.

    Retries 5xx, 408/429, connection errors, timeouts and malformed bodies with capped, jittered
    exponential backoff; a 4xx is the caller's bug and is raised at once. Cancelling the awaiting
    task sends /abort_request for the request in flight, so the server stops generating.

    Connections: at most `max_connections` /generate requests are in flight (more wait for a
    slot); /abort_request, /health and /model_info go over a separate small client so that an
    abort never queues behind the generations it is meant to stop. An httpx client belongs to the
    event loop that first uses it, so the engine keeps these per event loop: one engine serves an
    async graph run and the sync `invoke()` calls of its `def` nodes (TracedChatModel runs those on
    a background loop). A passed-in `client` carries all traffic instead, is left open by aclose(),
    and belongs to its own loop.

    >>> import asyncio
    >>> from agentgraphs.testing.fake_engines import FixedLatencyEngine
    >>> from agentgraphs.testing.server import SGLangTestServer
    >>> async def demo(url: str) -> list[int]:
    ...     async with SGLangEngine(url) as engine:
    ...         out = await engine.generate([1, 2, 3], SamplingParams(max_new_tokens=3))
    ...         return out.token_ids
    >>> with SGLangTestServer(FixedLatencyEngine(latency_s=0.0)) as srv:
    ...     asyncio.run(demo(srv.url))
    [10, 11, 12]
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx.Timeout | float = ENGINE_TIMEOUT,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S,
        abort_timeout_s: float = 1.0,
        client: httpx.AsyncClient | None = None,
        max_connections: int = 256,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff_s < 0 or backoff_cap_s < 0:
            raise ValueError("backoff_s and backoff_cap_s must be >= 0")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"SGLangEngine base_url {base_url!r} has no scheme: use 'http://host:port' "
                              "(the server root, without /v1 or /generate)")
        self.base_url = base_url.rstrip("/")
        self.name = f"sglang:{self.base_url}"
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_cap_s = backoff_cap_s
        self.abort_timeout_s = abort_timeout_s
        # A float means "this many seconds for every phase", as httpx reads it.
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self._owns_client = client is None
        self._max_connections = max_connections
        self._given = client
        # per event loop: (the /generate slots, the control client); a closed loop's go with it
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()
        self._pools_lock = threading.Lock()  # loops in other threads (sync calls) make their pools too
        self._rng = random.Random()  # per engine: jitter decorrelates workers, no global state
        self._abort_tasks: set[asyncio.Task[None]] = set()

    # -- the Engine protocol ---------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """POST /generate (retrying as the class says); return the exact sampled ids and log-probs.

        `Completion.rid` is the rid of the attempt that succeeded, `retries` the attempts before
        it, `latency_s` the wall time of the whole call, backoff included. A reply whose
        `meta_info.prompt_tokens` is not len(prompt_ids) (a server that cut the prompt) raises
        EngineProtocolError at once, without retrying.
        """
        started = time.perf_counter()
        last: _Retryable | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, self.backoff_s, self.backoff_cap_s, self._rng))
            # A fresh rid per attempt: a timed-out attempt may still be alive on the server, and
            # SGLang refuses a duplicate rid.
            rid = uuid.uuid4().hex
            try:
                payload = await self._post_generate(rid, prompt_ids, params)
                completion = _parse_completion(
                    payload, rid=rid, prompt_len=len(prompt_ids),
                    latency_s=time.perf_counter() - started, retries=attempt,
                )
                note_engine_call(self.name, len(completion.token_ids))  # a node's own call is named untrained
                return completion
            except _Retryable as err:
                last = err
                log.debug("generate attempt %d/%d failed: %s", attempt + 1, self.max_retries + 1, err)
        assert last is not None
        attempts = self.max_retries + 1
        if last.protocol:
            raise EngineProtocolError(
                f"{self.base_url}/generate broke the response contract on all {attempts} "
                f"attempt(s); last: {last}. Is this an SGLang /generate endpoint (0.5.x)?"
            )
        raise EngineUnavailableError(f"{self.base_url}/generate", attempts, str(last))

    # -- other endpoints -----------------------------------------------------------------------

    async def health(self, timeout_s: float = 5.0) -> bool:
        """True when GET /health answers 200 within `timeout_s`; never raises for a down server."""
        try:
            resp = await self._pool().client.get(f"{self.base_url}/health", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def model_info(self) -> dict[str, Any]:
        """GET /model_info; servers older than its introduction only have /get_model_info."""
        resp = await self._get("/model_info")
        if resp.status_code == 404:
            resp = await self._get("/get_model_info")
        _raise_for_status(resp)
        try:
            info = resp.json()
        except ValueError as err:
            raise EngineProtocolError(f"model_info body is not JSON: {err}") from err
        if not isinstance(info, dict):
            raise EngineProtocolError(f"model_info body is not an object: {info!r:.200}")
        return info

    async def abort_all(self) -> None:
        """Abort every request on the server (slime does this between rollouts)."""
        try:
            resp = await self._pool().client.post(
                f"{self.base_url}/abort_request", json={"abort_all": True},
                timeout=max(self.abort_timeout_s, 5.0),  # never the 600 s generation timeout
            )
        except httpx.HTTPError as err:
            raise EngineUnavailableError(f"{self.base_url}/abort_request", 1, repr(err)) from err
        _raise_for_status(resp)

    async def aclose(self) -> None:
        """Finish this loop's pending best-effort aborts, then close the clients the engine made: this loop's
        here, another running loop's on that loop (bounded by abort_timeout_s)."""
        loop = asyncio.get_running_loop()
        mine = {t for t in self._abort_tasks.copy() if t.get_loop() is loop}
        if mine:
            await asyncio.wait(mine, timeout=self.abort_timeout_s)
            leftover = [t for t in mine if not t.done()]
            for task in leftover:
                task.cancel()
            await asyncio.gather(*leftover, return_exceptions=True)
        if not self._owns_client:
            return
        with self._pools_lock:
            pools, self._pools = dict(self._pools), weakref.WeakKeyDictionary()
        for owner, pool in pools.items():
            if owner is loop:
                await _close_pool(pool)
            elif owner.is_running():
                done = asyncio.run_coroutine_threadsafe(_close_pool(pool), owner)
                try:
                    await asyncio.wait_for(asyncio.wrap_future(done), max(self.abort_timeout_s, 1.0))
                except (asyncio.TimeoutError, RuntimeError, httpx.HTTPError) as err:  # best effort: it may be stuck
                    log.debug("closing connections on another loop failed: %r", err)

    async def __aenter__(self) -> SGLangEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"SGLangEngine({self.base_url!r}, max_retries={self.max_retries})"

    # -- internals -----------------------------------------------------------------------------

    async def _post_generate(
        self, rid: str, prompt_ids: list[int], params: SamplingParams
    ) -> dict[str, Any]:
        body = {
            "input_ids": prompt_ids if isinstance(prompt_ids, list) else list(prompt_ids),
            "sampling_params": params.to_sglang(),
            "return_logprob": True,
            "logprob_start_len": -1,  # log-probs of the output only, not the prompt
            "rid": rid,
        }
        data = request_body(body)
        sent = False
        try:
            async with self._lend() as client:
                sent = True
                resp = await client.post(f"{self.base_url}/generate", content=data, headers=REQUEST_HEADERS,
                                         timeout=self._timeout)
        except asyncio.CancelledError:
            if sent:  # a request still waiting for a slot never reached the server
                await self._abort_in_flight(rid)
            raise
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as err:
            # our URL or request is malformed: no retry can fix that
            raise EngineUnavailableError(f"{self.base_url}/generate", 1, repr(err)) from err
        except httpx.TimeoutException as err:
            # the attempt may still be generating on the server: stop it before a retry adds load
            self._abort_in_background(rid)
            raise _Retryable(f"{type(err).__name__}: {err}") from err
        except httpx.TransportError as err:
            raise _Retryable(f"{type(err).__name__}: {err}") from err
        if retryable_status(resp.status_code):
            raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:300]}")
        _raise_for_status(resp)
        try:
            payload = resp.json()
        except ValueError as err:  # truncated or otherwise invalid JSON
            raise _Retryable(f"body is not valid JSON ({err})", protocol=True) from err
        if not isinstance(payload, dict):
            raise _Retryable(f"body is not a JSON object: {payload!r:.200}", protocol=True)
        return payload

    async def _abort_in_flight(self, rid: str) -> None:
        """Tell the server to stop `rid`; bounded by abort_timeout_s so cancellation stays prompt.

        The abort runs as a tracked task under shield: a second cancel of the caller cannot
        interrupt it half-sent, and aclose() reaps it if it outlives the wait.
        """
        task = asyncio.ensure_future(self._send_abort(rid))
        self._abort_tasks.add(task)
        task.add_done_callback(self._abort_tasks.discard)
        try:
            await asyncio.wait_for(asyncio.shield(task), self.abort_timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass  # the caller is already being cancelled; its CancelledError is re-raised above

    def _abort_in_background(self, rid: str) -> None:
        task = asyncio.ensure_future(self._send_abort(rid))
        self._abort_tasks.add(task)
        task.add_done_callback(self._abort_tasks.discard)

    async def _send_abort(self, rid: str) -> None:
        try:
            await self._pool().client.post(
                f"{self.base_url}/abort_request",
                json={"rid": rid, "abort_all": False},
                timeout=self.abort_timeout_s,
            )
        except httpx.HTTPError as err:  # best effort: the server may be the thing that failed
            log.debug("abort of %s failed: %r", rid, err)

    @asynccontextmanager
    async def _lend(self) -> AsyncIterator[httpx.AsyncClient]:
        pool = self._pool()
        if pool.slots is None:
            yield pool.client
        else:
            async with pool.slots.lend() as client:
                yield client

    def _pool(self) -> _Pool:
        """The running loop's connections, made on its first request (a passed-in client serves every call)."""
        if self._given is not None:
            return _Pool(None, self._given)
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            pool = self._pools.get(loop)
            if pool is None:
                for closed in [lp for lp in list(self._pools) if lp.is_closed()]:
                    del self._pools[closed]  # its sockets went with it
                control = httpx.AsyncClient(
                    timeout=self._timeout,
                    limits=httpx.Limits(max_connections=_CONTROL_CONNECTIONS,
                                        max_keepalive_connections=_CONTROL_CONNECTIONS,
                                        keepalive_expiry=KEEPALIVE_EXPIRY_S),  # below uvicorn's 5 s keep-alive
                )
                pool = self._pools[loop] = _Pool(_ConnectionSlots(self._max_connections, self._timeout), control)
            return pool

    async def _get(self, path: str) -> httpx.Response:
        try:
            return await self._pool().client.get(f"{self.base_url}{path}", timeout=self._timeout)
        except httpx.HTTPError as err:
            raise EngineUnavailableError(f"{self.base_url}{path}", 1, repr(err)) from err


async def _close_pool(pool: _Pool) -> None:
    if pool.slots is not None:
        await pool.slots.aclose()
    await pool.client.aclose()


def _raise_for_status(resp: httpx.Response) -> None:
    if resp.status_code >= 500:
        raise EngineUnavailableError(str(resp.request.url), 1, f"HTTP {resp.status_code}: {resp.text[:300]}")
    if resp.status_code >= 400:
        raise EngineRequestError(resp.status_code, resp.text[:500], url=str(resp.request.url))


def _parse_completion(
    payload: dict[str, Any], *, rid: str, prompt_len: int, latency_s: float, retries: int
) -> Completion:
    """Turn a /generate body into a Completion, refusing any body that breaks the contract."""
    meta = payload.get("meta_info")
    if not isinstance(meta, dict):
        raise _Retryable("response has no meta_info object", protocol=True)
    finish, raw_finish = _parse_finish(meta.get("finish_reason"))
    raw_logprobs = meta.get("output_token_logprobs")
    if finish == "abort" and raw_logprobs is None:
        # SGLang answers a request aborted while still queued ("Abort before prefill") with no
        # output fields at all: an abort with nothing generated, not a broken body
        raw_logprobs = []
    token_ids, logprobs = _parse_logprobs(raw_logprobs)
    output_ids = payload.get("output_ids")
    if output_ids is not None and not isinstance(output_ids, list):
        raise _Retryable(f"output_ids is not a list: {output_ids!r:.100}", protocol=True)
    if output_ids is not None and output_ids != token_ids:
        raise _Retryable(
            f"output_ids ({len(output_ids)} ids) disagree with output_token_logprobs "
            f"({len(token_ids)} entries)",
            protocol=True,
        )
    prompt_tokens = meta.get("prompt_tokens")
    if not (finish == "abort" and not token_ids):  # "Abort before prefill" reports 0 prompt tokens: nothing ran
        _refuse_shortened_prompt(prompt_tokens, prompt_len)
    weight_version = meta.get("weight_version")
    text = payload.get("text")
    return Completion(
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=finish,
        text=text if isinstance(text, str) else "",
        prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else prompt_len,
        weight_version=None if weight_version is None else str(weight_version),
        rid=rid,
        latency_s=latency_s,
        retries=retries,
        meta={
            "finish_reason": raw_finish,
            "server_rid": meta.get("id"),
            "cached_tokens": meta.get("cached_tokens"),
            "e2e_latency": meta.get("e2e_latency"),
        },
    )


def _refuse_shortened_prompt(prompt_tokens: object, prompt_len: int) -> None:
    """Refuse a reply whose server read another prompt than the ids sent (invariant 3).

    SGLang started with --allow-auto-truncate cuts a prompt longer than its context length and answers
    normally, with `prompt_tokens` counting what it kept: the output was generated after a prefix that no
    Turn records. No retry helps (the cut is deterministic), so this is raised at once, not retried.
    A proxy that sends no integer count is trusted, as before.
    """
    if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens == prompt_len:
        return
    raise EngineProtocolError(
        f"/generate answered for a {prompt_tokens}-token prompt (meta_info.prompt_tokens) but {prompt_len} ids "
        "were sent: the server cut or changed the prompt, so its output was not generated in the recorded "
        "context. Do not run SGLang with --allow-auto-truncate; cap the prompt below the server's "
        "--context-length (shorter inputs or fewer turns in the method's options) or raise --context-length"
    )


def _parse_finish(raw: object) -> tuple[FinishReason, dict[str, Any]]:
    # SGLang sends {"type": ..., ...}; a bare string is accepted for lenient proxies
    finish = raw.get("type") if isinstance(raw, dict) else raw
    if not isinstance(finish, str) or finish not in _FINISH_TYPES:
        raise _Retryable(f"finish_reason {raw!r:.200} is not stop/length/abort", protocol=True)
    return finish, dict(raw) if isinstance(raw, dict) else {"type": finish}  # type: ignore[return-value]


def _parse_logprobs(raw: object) -> tuple[list[int], list[float]]:
    if not isinstance(raw, list):
        raise _Retryable(
            "meta_info.output_token_logprobs is missing: the request asked for return_logprob",
            protocol=True,
        )
    token_ids: list[int] = []
    logprobs: list[float] = []
    for i, entry in enumerate(raw):
        if not (isinstance(entry, (list, tuple)) and len(entry) >= 2):
            raise _Retryable(
                f"output_token_logprobs[{i}] = {entry!r:.100} is not [lp, id, text]", protocol=True
            )
        lp, tok = entry[0], entry[1]
        # null is how SGLang's JSON encodes a non-finite log-prob: unusable for training
        if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > MAX_LOGPROB:
            # NaN/inf (a proxy's json) or a positive value cannot be a sampled token's log-prob
            raise _Retryable(f"output_token_logprobs[{i}] has log-prob {lp!r}", protocol=True)
        if isinstance(tok, bool) or not isinstance(tok, int):
            raise _Retryable(f"output_token_logprobs[{i}] has token id {tok!r}", protocol=True)
        token_ids.append(tok)
        logprobs.append(float(lp))
    return token_ids, logprobs

"""A real HTTP server on 127.0.0.1 that keeps SGLang's native /generate contract, backed by any Engine.

SGLang cannot run on CPU-only machines, so SGLangEngine is tested against this stand-in. It speaks
HTTP/1.1 itself (plain asyncio, in a background thread) rather than through an ASGI framework:
fault injection must be able to drop a connection or cut a body mid-way, which ASGI cannot express,
and a bare protocol keeps the server far from being the bottleneck of a benchmark (256 concurrent
requests on a 20 ms engine take ~60 ms with a raw socket client).

What a body must hold and how the answer is shaped lives in sglang_contract.py. Endpoints:
/generate (POST, PUT), /abort_request, /health, /health_generate, /model_info, /get_model_info, and
OpenAI's /v1/chat/completions (text in, text out: for helper models, never trained).
Aborting an in-flight rid cancels its engine call; the request then answers finish_reason abort
with the tokens it has (none: the Engine protocol has no partial results). A client that hangs up
has its generation cancelled, as SGLang does.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from ..engines import Completion, Engine, SamplingParams
from .sglang_contract import (
    BadRequest,
    GenerateRequest,
    chat_response,
    loads_json,
    parse_chat,
    parse_generate,
    response_body,
)

FAULT_KINDS: tuple[str, ...] = (
    "http500", "http503", "drop", "slow", "abort", "truncated_json", "cut_body", "short_logprobs",
)
_MAX_HEAD, _MAX_BODY = 64 * 1024, 64 * 1024 * 1024


class Faults:
    """What goes wrong with the next /generate requests; thread-safe (tests schedule, server draws).

    >>> faults = Faults(seed=0).schedule("http503", 2).set_rate("drop", 0.1)
    >>> faults.draw(), faults.draw(), faults.pending
    ('http503', 'http503', 0)
    """

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._queue: deque[str] = deque()
        self._rates: dict[str, float] = {}
        self._rng = random.Random(seed)
        self.latency_s = 0.0  # added to every /generate call (benchmarks use e.g. 0.02)
        self.slow_s = 30.0  # how long a "slow" request stalls: longer than the client timeout

    def schedule(self, kind: str, n: int = 1) -> Faults:
        """Inject `kind` into the next `n` /generate requests (after those already queued)."""
        _check_kind(kind)
        with self._lock:
            self._queue.extend([kind] * n)
        return self

    def set_rate(self, kind: str, p: float, *, seed: int | None = None) -> Faults:
        """Inject `kind` with probability `p` into requests the queue does not cover."""
        _check_kind(kind)
        with self._lock:
            rates = {**self._rates, kind: p}
            if not 0 <= p <= 1 or sum(rates.values()) > 1:
                raise ValueError(f"fault rates must lie in [0, 1] and sum to <= 1, got {rates}")
            self._rates = rates
            if seed is not None:
                self._rng.seed(seed)
        return self

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._rates = {}

    @property
    def pending(self) -> int:
        return len(self._queue)

    def draw(self) -> str | None:
        """The fault for the request now arriving, or None."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            if not self._rates:
                return None
            r, acc = self._rng.random(), 0.0
            for kind in FAULT_KINDS:  # fixed order: a seed gives the same sequence every run
                acc += self._rates.get(kind, 0.0)
                if r < acc:
                    return kind
            return None


def _check_kind(kind: str) -> None:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault {kind!r}; choose from {FAULT_KINDS}")


@dataclass
class ServerStats:
    """Counters, written by the server thread only (reads from tests are safe under the GIL)."""

    requests: int = 0  # every HTTP request
    generate_requests: int = 0
    chat_requests: int = 0  # /v1/chat/completions
    faults: Counter[str] = field(default_factory=Counter)
    aborts: Counter[str] = field(default_factory=Counter)  # /abort_request by rid
    abort_all: int = 0
    aborted_in_flight: int = 0  # generations an abort actually stopped
    disconnects: int = 0  # connections lost while a request was being served
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=256))  # /generate's
    chat_bodies: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=256))  # /v1/chat/completions'


@dataclass
class _Response:
    status: int
    body: bytes = b""
    mode: str = "normal"  # normal | drop | cut_body

    @classmethod
    def of(cls, status: int, obj: object, mode: str = "normal") -> _Response:
        return cls(status, json.dumps(obj, separators=(",", ":")).encode(), mode)

    @classmethod
    def error(cls, status: int, message: str) -> _Response:
        # FastAPI/SGLang's ErrorResponse shape
        return cls.of(status, {"object": "error", "message": message,
                                 "type": HTTPStatus(status).phrase, "param": None, "code": status})


@dataclass
class _Request:
    method: str
    path: str
    body: bytes
    keep_alive: bool


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection: parse requests, serve them in order, write answers."""

    def __init__(self, server: SGLangTestServer) -> None:
        self._server = server
        self._buf = bytearray()
        self._pending: deque[_Request] = deque()
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while not self._closed and (req := self._parse_one()) is not None:
            self._pending.append(req)
        if self._pending and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server._connections.discard(self)
        if self._task is not None:  # the client went away mid-request: stop its generation
            self._server.stats.disconnects += 1
            self._task.cancel()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._task is not None:
            self._task.cancel()

    def _parse_one(self) -> _Request | None:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HEAD:
                self._fail(431)
            return None
        lines = self._buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        length = headers.get("content-length", "0")
        if len(parts) != 3 or not length.isdigit():
            return self._fail(400)
        if "chunked" in headers.get("transfer-encoding", ""):
            return self._fail(411)  # every JSON client sends Content-Length
        if int(length) > _MAX_BODY:
            return self._fail(413)
        total = end + 4 + int(length)
        if len(self._buf) < total:
            return None
        body = bytes(self._buf[end + 4:total])
        del self._buf[:total]
        conn = headers.get("connection", "")
        keep = conn != "close" if parts[2] == "HTTP/1.1" else conn == "keep-alive"
        return _Request(parts[0], parts[1].split("?", 1)[0], body, keep)

    def _fail(self, status: int) -> None:
        self._write(_Response.error(status, HTTPStatus(status).phrase), keep_alive=False)
        self._closed = True

    async def _serve(self) -> None:
        try:
            while self._pending and not self._closed:
                req = self._pending.popleft()
                resp = await self._server._dispatch(req)
                self._write(resp, req.keep_alive)
                if resp.mode != "normal" or not req.keep_alive:
                    self._closed = True
        finally:
            self._task = None

    def _write(self, resp: _Response, keep_alive: bool) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # the client is gone: nobody to answer
        if resp.mode == "drop":  # close without a response
            self._transport.close()
            return
        n = len(resp.body)
        head = (f"HTTP/1.1 {resp.status} {HTTPStatus(resp.status).phrase}\r\n"
                + ("content-type: application/json\r\n" if n else "")
                + f"content-length: {n}\r\n"
                + ("" if keep_alive and resp.mode == "normal" else "connection: close\r\n")
                + "\r\n").encode()
        if resp.mode == "cut_body":  # promise n bytes, send half, hang up
            self._transport.write(head + resp.body[: n // 2])
            self._transport.close()
            return
        self._transport.write(head + resp.body)
        if not keep_alive:
            self._transport.close()


class SGLangTestServer:
    """SGLang's /generate contract on 127.0.0.1, served from a background thread.

    >>> import httpx
    >>> from agentgraphs.testing.fake_engines import FixedLatencyEngine
    >>> with SGLangTestServer(FixedLatencyEngine(latency_s=0.0), port=0) as srv:
    ...     body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}, "return_logprob": True}
    ...     out = httpx.post(srv.url + "/generate", json=body).json()
    >>> out["output_ids"], out["meta_info"]["finish_reason"]
    ([10, 11], {'type': 'length', 'length': 2})
    """

    def __init__(self, engine: Engine, *, host: str = "127.0.0.1", port: int = 0,
                 tokenizer: Any = None, model_path: str | None = None,
                 weight_version: str | None = None, serve_model_info: bool = True,
                 seed: int = 0) -> None:
        self.engine = engine
        # an engine that owns a tokenizer (HFEngine, FixedLatencyEngine) lends it for text
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        self.host, self.port = host, port
        self.model_path = model_path or getattr(engine, "name", "agentgraphs-test-engine")
        self.weight_version = weight_version  # None: report the engine's own version
        self.serve_model_info = serve_model_info  # False acts like SGLang before /model_info
        self.faults = Faults(seed)
        self.stats = ServerStats()
        self._in_flight: dict[str, asyncio.Task[Completion]] = {}
        self._connections: set[_Connection] = set()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._routes = {
            "/generate": (("POST", "PUT"), self._generate),
            "/abort_request": (("POST",), self._abort),
            "/health": (("GET",), self._health),
            "/health_generate": (("GET",), self._health_generate),
            "/model_info": (("GET",), self._model_info),
            "/get_model_info": (("GET",), self._model_info),  # deprecated alias, still served
            "/v1/chat/completions": (("POST",), self._chat_completions),  # OpenAI-compatible, for helpers
        }

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def in_flight_rids(self) -> list[str]:
        return list(self._in_flight)  # one C-level copy: safe against the server thread

    def start(self, timeout_s: float = 10.0) -> SGLangTestServer:
        self._thread = threading.Thread(target=self._run, name="sglang-test-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise RuntimeError(f"SGLangTestServer did not start: {self._error!r}")
        self._wait_healthy(timeout_s)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout_s)
        self._thread = self._loop = self._stop = None

    def __enter__(self) -> SGLangTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.02)
        raise RuntimeError(f"{self.url}/health did not answer 200 within {timeout_s} s")

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # thread-local: this thread's loop only
        try:
            loop.run_until_complete(self._main())
        except BaseException as err:  # reported by start(); a thread has no one else to tell
            self._error = err
            self._ready.set()
        finally:
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), self.host, self.port, backlog=4096)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for conn in list(self._connections):
                conn.close()
            await server.wait_closed()

    async def _dispatch(self, req: _Request) -> _Response:
        self.stats.requests += 1
        route = self._routes.get(req.path)
        if route is None or (req.path == "/model_info" and not self.serve_model_info):
            return _Response.of(404, {"detail": "Not Found"})
        methods, handler = route
        if req.method not in methods:
            return _Response.of(405, {"detail": "Method Not Allowed"})
        try:
            return await handler(req.body)
        except BadRequest as err:
            return _Response.error(400, str(err))
        except ValueError as err:  # as SGLang: a ValueError from the engine is the request's fault
            return _Response.error(400, f"{type(err).__name__}: {err}")
        except Exception as err:
            return _Response.error(500, f"{type(err).__name__}: {err}")

    async def _health(self, body: bytes) -> _Response:
        return _Response(200)

    async def _health_generate(self, body: bytes) -> _Response:
        params = SamplingParams(max_new_tokens=1, temperature=0.0)
        try:  # as SGLang: one real token from a one-token prompt
            await asyncio.wait_for(self.engine.generate([0], params), 20.0)
        except Exception:
            return _Response(503)
        return _Response(200)

    async def _model_info(self, body: bytes) -> _Response:
        return _Response.of(200, {
            "model_path": self.model_path,
            "tokenizer_path": getattr(self.tokenizer, "name_or_path", self.model_path),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self._weight_version(None),
        })

    def _weight_version(self, completion: Completion | None) -> str:
        if self.weight_version is not None:
            return self.weight_version
        own = completion.weight_version if completion else getattr(self.engine, "weight_version", None)
        return own or "default"

    async def _abort(self, body: bytes) -> _Response:
        obj = loads_json(body)
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        if obj.get("abort_all"):
            self.stats.abort_all += 1
            targets = list(self._in_flight.values())
        else:
            rid = str(obj.get("rid") or "")
            self.stats.aborts[rid] += 1
            targets = [self._in_flight[rid]] if rid in self._in_flight else []
        for task in targets:
            self.stats.aborted_in_flight += task.cancel()
        return _Response(200)

    async def _generate(self, body: bytes) -> _Response:
        started = time.perf_counter()
        self.stats.generate_requests += 1
        obj = loads_json(body)
        req = parse_generate(obj, self.tokenizer)
        self.stats.bodies.append(obj)
        if req.rid in self._in_flight:
            raise BadRequest(f"Duplicate request ID: {req.rid}")
        fault, early = self._draw_fault()
        if early is not None:
            return early
        delay = self.faults.latency_s + (self.faults.slow_s if fault == "slow" else 0.0)
        completion = await self._run_abortable(req, delay)
        if completion is None:
            # aborted through /abort_request before any token (the latency stands for the queue):
            # SGLang answers "Abort before prefill" with no output fields at all
            return _Response.of(200, {"text": "", "meta_info": {
                "id": req.rid, "prompt_tokens": 0, "completion_tokens": 0,
                "finish_reason": {"type": "abort", "message": "Abort before prefill", "status_code": None},
            }})
        if fault == "abort":
            half = len(completion.token_ids) // 2
            completion = Completion(completion.token_ids[:half], completion.logprobs[:half], "abort",
                                    weight_version=completion.weight_version,
                                    meta={"abort_message": "injected fault: abort"})
        out = response_body(req, completion, started=started, tokenizer=self.tokenizer,
                            weight_version=self._weight_version(completion))
        if fault == "short_logprobs" and out["meta_info"].get("output_token_logprobs"):
            out["meta_info"]["output_token_logprobs"].pop()
        resp = _Response.of(200, out)
        if fault == "truncated_json":  # a complete HTTP message whose JSON stops mid-way
            resp.body = resp.body[: len(resp.body) // 2]
        elif fault == "cut_body":
            resp.mode = "cut_body"
        return resp

    def _draw_fault(self) -> tuple[str | None, _Response | None]:
        """The next injected fault, and the response that replaces the request's (HTTP 5xx, a dropped
        connection), if any."""
        fault = self.faults.draw()
        if fault is not None:
            self.stats.faults[fault] += 1
        if fault in ("http500", "http503"):
            return fault, _Response.error(int(fault[4:]), f"injected fault: {fault}")
        if fault == "drop":
            return fault, _Response(0, mode="drop")
        return fault, None

    async def _chat_completions(self, body: bytes) -> _Response:
        """OpenAI's chat completions (non-streaming), as SGLang serves them: the tokenizer's chat template
        renders the messages, the engine generates, the text comes back without the end-of-turn token."""
        self.stats.chat_requests += 1
        obj = loads_json(body)
        if isinstance(obj, dict):
            self.stats.chat_bodies.append(obj)
        _, early = self._draw_fault()  # the faults a response body can carry apply to /generate only
        if early is not None:
            return early
        req = parse_chat(obj, self.tokenizer)
        if self.faults.latency_s:
            await asyncio.sleep(self.faults.latency_s)
        completion = await self.engine.generate(req.prompt_ids, req.params)
        return _Response.of(200, chat_response(req, completion, self.tokenizer, self.model_path))

    async def _run_abortable(self, req: GenerateRequest, delay: float) -> Completion | None:
        """Run the engine as its own task so /abort_request can cancel it; None if it did."""
        async def work() -> Completion:
            if delay > 0:
                await asyncio.sleep(delay)
            return await self.engine.generate(req.prompt_ids, req.params)

        task = asyncio.ensure_future(work())
        self._in_flight[req.rid] = task
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            await asyncio.wait({task})  # returns (never raises) when an abort cancels `task`
        finally:
            task.cancel()  # no-op when done; stops the engine if our client hung up
            del self._in_flight[req.rid]
            self.stats.in_flight -= 1
        return None if task.cancelled() else task.result()




"""SGLangEngine against a real HTTP server on 127.0.0.1 that keeps SGLang's /generate contract.

Retry policy under test (documented in sglang_engine.py): 5xx, 408/429, dropped connections,
timeouts, truncated bodies and contract-breaking bodies (invalid JSON, log-probs that disagree
with output_ids) are all retried; when every attempt failed, the last failure decides the error:
transport/5xx -> EngineUnavailableError, bad body -> EngineProtocolError. A 4xx is never retried.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agentgraphs.engines import Engine, SamplingParams
from agentgraphs.errors import ConfigError, EngineProtocolError, EngineRequestError, EngineUnavailableError
from agentgraphs.engines.sglang import SGLangEngine, _parse_completion
from agentgraphs.http_retry import backoff_delay
from agentgraphs.testing.fake_engines import TOY_EOS_ID, TOY_SCRIPT, FixedLatencyEngine
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.sglang_contract import SAMPLING_PARAM_TYPES

PROMPT = [1, 5, 7, 9]
STEP = 0.01  # per-position log-prob step: a misaligned id/log-prob pair cannot pass unnoticed


@pytest.fixture
def srv() -> Iterator[SGLangTestServer]:
    with SGLangTestServer(FixedLatencyEngine(latency_s=0.0, logprob_step=STEP)) as server:
        yield server


def client(srv: SGLangTestServer, **kw: object) -> SGLangEngine:
    opts: dict[str, object] = {
        "timeout": httpx.Timeout(2.0, connect=1.0), "max_retries": 2, "backoff_s": 0.01,
    }
    return SGLangEngine(srv.url, **{**opts, **kw})  # type: ignore[arg-type]


async def wait_until(cond, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll `cond`; the bound only limits how long a failure takes to show (it passes at once when met)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def expected_logprobs(n: int) -> list[float]:
    return [-0.5 - i * STEP for i in range(n)]


# -- the request and its parse ---------------------------------------------------------------


class _Recording(httpx.AsyncBaseTransport):
    """A real transport to the server that keeps every request it carried, bytes and headers."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_request_bytes_are_the_standard_librarys_json(srv: SGLangTestServer) -> None:
    """The body goes out as the bytes httpx's `json=` would send (compact, UTF-8 as is), with its JSON header."""

    transport = _Recording()
    prompt = [(i * 7919) % 151_000 for i in range(5000)]
    params = SamplingParams(max_new_tokens=4, temperature=0.7, top_p=0.95, min_p=0.05,
                            stop=("é", "</answer>", 'say "hi"\n'), stop_token_ids=(151645,), sampling_seed=11)
    async with httpx.AsyncClient(transport=transport) as http:
        await SGLangEngine(srv.url, client=http).generate(prompt, params)
    sent = [r for r in transport.requests if r.url.path == "/generate"][-1]
    assert sent.headers["content-type"] == "application/json"
    received = srv.stats.bodies[-1]
    assert received["input_ids"] == prompt and received["sampling_params"]["temperature"] == 0.7
    assert sent.content == json.dumps(received, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def test_request_body_floats_parse_to_the_same_doubles() -> None:
    """Some floats are spelled otherwise than json.dumps spells them (0.00001 for 1e-05): the same double."""
    import random

    from agentgraphs.engines.sglang import request_body

    rng = random.Random(5)
    floats = [1e-05, 2.5e-08, 0.1, 0.7, 1e-300, 5e-324, 1.7976931348623157e308, -0.0] + [
        rng.uniform(0, 1) * 10 ** rng.randint(-12, 12) for _ in range(2000)]
    parsed = json.loads(request_body({"sampling_params": {"xs": floats}}))["sampling_params"]["xs"]
    assert len(parsed) == len(floats)
    assert all(a == b and str(a) == str(b) for a, b in zip(parsed, floats))


def test_request_body_refuses_what_json_cannot_carry_naming_the_fix() -> None:
    import numpy as np

    from agentgraphs.engines.sglang import request_body

    with pytest.raises(ConfigError, match="Integer exceeds 64-bit range.*Python ints within 64 bits"):
        request_body({"input_ids": [1, 2], "sampling_params": {"sampling_seed": 2**70}})
    with pytest.raises(ConfigError, match=r"numpy.int64.*pass ids.tolist\(\)"):
        request_body({"input_ids": list(np.array([1, 2]))})
    # orjson alone would write null for these (the server's default: another setting, silently)
    with pytest.raises(ConfigError, match=r"holds nan at sampling_params.temperature: .*give a finite number"):
        request_body({"input_ids": [1, 2], "sampling_params": {"temperature": float("nan")}})
    with pytest.raises(ConfigError, match=r"holds -inf at sampling_params.custom\.xs\[1\]"):
        request_body({"sampling_params": {"custom.xs": [0.5, float("-inf")]}})


async def test_request_body_holds_only_documented_keys(srv: SGLangTestServer) -> None:
    async with client(srv) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=4, stop=["?"], sampling_seed=3))
    body = srv.stats.bodies[-1]
    assert set(body) == {"input_ids", "sampling_params", "return_logprob", "logprob_start_len", "rid"}
    assert set(body["sampling_params"]) <= set(SAMPLING_PARAM_TYPES)
    assert body["input_ids"] == PROMPT and body["return_logprob"] is True
    assert body["logprob_start_len"] == -1 and body["rid"] == out.rid


async def test_unknown_sampling_key_is_a_request_error_and_not_retried(srv: SGLangTestServer) -> None:
    class WithMaxTokens(SamplingParams):
        def to_sglang(self) -> dict[str, object]:
            return {**super().to_sglang(), "max_tokens": 8}  # the classic OpenAI-ism

    async with client(srv) as engine:
        with pytest.raises(EngineRequestError) as info:
            await engine.generate(PROMPT, WithMaxTokens(max_new_tokens=4))
    assert info.value.status_code == 400 and "max_tokens" in info.value.detail
    assert srv.stats.generate_requests == 1


async def test_parse_keeps_stop_token_with_its_logprob(srv: SGLangTestServer) -> None:
    async with client(srv) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=32))
        assert isinstance(engine, Engine) and engine.name == f"sglang:{srv.url}"
    assert out.token_ids == list(TOY_SCRIPT) and out.token_ids[-1] == TOY_EOS_ID
    assert out.logprobs == pytest.approx(expected_logprobs(len(TOY_SCRIPT)))
    assert out.finish_reason == "stop"
    assert out.meta["finish_reason"] == {"type": "stop", "matched": TOY_EOS_ID}
    assert out.text == "Hello, world! How are you?</s>"  # to_sglang asks for no_stop_trim, specials kept
    assert (out.prompt_tokens, out.weight_version, out.retries) == (len(PROMPT), "fixed-v0", 0)
    assert out.latency_s > 0 and out.meta["server_rid"] == out.rid


async def test_length_finish(srv: SGLangTestServer) -> None:
    async with client(srv) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=3))
    assert out.finish_reason == "length" and out.token_ids == list(TOY_SCRIPT[:3])
    assert out.meta["finish_reason"] == {"type": "length", "length": 3}


def test_parse_without_output_ids_uses_logprob_ids() -> None:
    payload = {"text": "", "meta_info": {"finish_reason": {"type": "length", "length": 2},
                                         "output_token_logprobs": [[-0.1, 7, None], [-0.2, 8, None]]}}
    out = _parse_completion(payload, rid="r", prompt_len=3, latency_s=0.0, retries=0)
    assert out.token_ids == [7, 8] and out.logprobs == [-0.1, -0.2] and out.prompt_tokens == 3


# -- the server's side of the contract ---------------------------------------------------------


async def test_server_trims_text_but_keeps_stop_ids(srv: SGLangTestServer) -> None:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        body = {"input_ids": PROMPT, "return_logprob": True,
                "sampling_params": {"max_new_tokens": 32, "skip_special_tokens": True}}
        by_token = (await http.post("/generate", json=body)).json()
        body["sampling_params"]["stop"] = [" are"]
        by_string = (await http.post("/generate", json=body)).json()
        both = {"input_ids": [1], "text": "Hi", "sampling_params": {}}
        rejected = await http.post("/generate", json=both)
        text_in = await http.post("/generate", json={"text": "Hello!", "whatever": 1})
    assert by_token["text"] == "Hello, world! How are you?" and by_token["output_ids"][-1] == TOY_EOS_ID
    assert by_string["meta_info"]["finish_reason"] == {"type": "stop", "matched": " are"}
    assert by_string["text"] == "Hello, world! How" and by_string["output_ids"][-1] == 15
    assert len(by_string["meta_info"]["output_token_logprobs"]) == len(by_string["output_ids"])
    assert rejected.status_code == 400 and "exactly one" in rejected.json()["message"].lower()
    assert text_in.status_code == 200 and text_in.json()["meta_info"]["prompt_tokens"] == 2
    assert "output_token_logprobs" not in text_in.json()["meta_info"]  # return_logprob not asked


# -- aborts and cancellation -------------------------------------------------------------------


# The aborted generations below would take GENERATION_S, far past the client's read timeout. That
# they were cut short shows in counts, not on a clock: the server reports the generation it stopped
# (aborted_in_flight) and the call's finish reason is "abort"; a client that waited would instead time
# out, retry and raise.
GENERATION_S = 60.0


async def test_abort_request_while_in_flight_returns_abort(srv: SGLangTestServer) -> None:
    srv.faults.latency_s = GENERATION_S
    async with client(srv) as engine, httpx.AsyncClient(base_url=srv.url) as http:
        task = asyncio.create_task(engine.generate(PROMPT, SamplingParams(max_new_tokens=8)))
        await wait_until(lambda: srv.in_flight_rids())
        rid = srv.in_flight_rids()[0]
        assert (await http.post("/abort_request", json={"rid": rid, "abort_all": False})).status_code == 200
        out = await task
    # the generation was stopped, not waited for: one request, stopped in flight, answered "abort"
    assert out.finish_reason == "abort" and out.rid == rid and out.token_ids == [] and out.retries == 0
    assert srv.stats.aborts[rid] == 1 and srv.stats.aborted_in_flight == 1 and srv.stats.generate_requests == 1


async def test_abort_all_and_partial_abort(srv: SGLangTestServer) -> None:
    async with client(srv) as engine:
        srv.faults.schedule("abort")  # the server answers abort with the tokens generated so far
        partial = await engine.generate(PROMPT, SamplingParams(max_new_tokens=32))
        srv.faults.latency_s = GENERATION_S
        tasks = [asyncio.create_task(engine.generate(PROMPT, SamplingParams())) for _ in range(3)]
        await wait_until(lambda: len(srv.in_flight_rids()) == 3)
        await engine.abort_all()
        outs = await asyncio.gather(*tasks)
    half = len(TOY_SCRIPT) // 2
    assert partial.finish_reason == "abort" and partial.token_ids == list(TOY_SCRIPT[:half])
    assert partial.logprobs == pytest.approx(expected_logprobs(half))
    assert [o.finish_reason for o in outs] == ["abort"] * 3 and srv.stats.abort_all == 1


async def test_cancel_sends_abort_for_its_rid_promptly_without_leaking_tasks(srv: SGLangTestServer) -> None:
    srv.faults.latency_s = GENERATION_S
    # the abort is awaited up to abort_timeout_s: wide enough that a loaded machine still sees it through
    async with client(srv, abort_timeout_s=5.0) as engine:
        before = asyncio.all_tasks()
        task = asyncio.create_task(engine.generate(PROMPT, SamplingParams()))
        await wait_until(lambda: srv.in_flight_rids())
        rid = srv.in_flight_rids()[0]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() <= before  # the abort was awaited, nothing left behind
        # cut short, not waited for: the abort for its rid reached the server, and the generation was
        # stopped in flight (by that abort, or by the closed connection if that came first)
        assert srv.stats.aborts[rid] == 1 and srv.stats.aborted_in_flight + srv.stats.disconnects == 1
    assert srv.stats.generate_requests == 1
    await wait_until(lambda: srv.stats.in_flight == 0)  # the server stopped generating


# -- retries -----------------------------------------------------------------------------------

# A fault-free answer must never run into the read timeout (even on a loaded machine), and a "slow"
# fault must always run into it; wait_until's bound (10 s) stays below SLOW_S, so a timed-out request
# that the client failed to abort is still caught in flight.
READ_TIMEOUT_S = 2.0
SLOW_S = 30.0


@pytest.mark.parametrize("faults", [["http500", "http503"], ["drop"], ["cut_body"], ["slow"],
                                    ["truncated_json"], ["short_logprobs"]])
async def test_transient_fault_is_retried(srv: SGLangTestServer, faults: list[str]) -> None:
    srv.faults.slow_s = SLOW_S
    for kind in faults:
        srv.faults.schedule(kind)
    async with client(srv, timeout=httpx.Timeout(READ_TIMEOUT_S, connect=READ_TIMEOUT_S)) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=32))
    assert out.token_ids == list(TOY_SCRIPT) and out.retries == len(faults)
    assert srv.stats.generate_requests == len(faults) + 1 and sum(srv.stats.faults.values()) == len(faults)


@pytest.mark.parametrize(("kind", "error"), [
    ("http503", EngineUnavailableError), ("drop", EngineUnavailableError),
    ("slow", EngineUnavailableError), ("truncated_json", EngineProtocolError),
    ("short_logprobs", EngineProtocolError),
])
async def test_persistent_fault_raises_after_all_attempts(
    srv: SGLangTestServer, kind: str, error: type[Exception]
) -> None:
    srv.faults.slow_s = SLOW_S
    srv.faults.set_rate(kind, 1.0)
    async with client(srv, max_retries=2, timeout=httpx.Timeout(READ_TIMEOUT_S, connect=READ_TIMEOUT_S)) as engine:
        with pytest.raises(error) as info:
            await engine.generate(PROMPT, SamplingParams(max_new_tokens=32))
    assert srv.stats.generate_requests == 3
    if isinstance(info.value, EngineUnavailableError):
        assert info.value.attempts == 3
    await wait_until(lambda: srv.stats.in_flight == 0)  # timed-out requests were cancelled server-side


def test_backoff_is_exponential_capped_and_jittered() -> None:
    rng = random.Random(0)
    for attempt, full in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 2.0)]:
        delays = [backoff_delay(attempt, 0.5, 2.0, rng) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays) and len(set(delays)) > 1


# -- the other endpoints, throughput, client ownership ----------------------------------------


async def test_health_and_model_info(srv: SGLangTestServer) -> None:
    async with client(srv) as engine:
        assert await engine.health()
        info = await engine.model_info()
    assert info["is_generation"] is True and info["weight_version"] == "fixed-v0"
    assert {"model_path", "tokenizer_path"} <= set(info)
    with SGLangTestServer(FixedLatencyEngine(latency_s=0.0), serve_model_info=False) as old:
        async with client(old) as engine:
            assert (await engine.model_info())["model_path"] == "fixed-latency"  # /get_model_info
        dead_url = old.url
    async with SGLangEngine(dead_url, timeout=1.0) as engine:
        assert not await engine.health()
    async with httpx.AsyncClient() as http:
        assert (await http.get(srv.url + "/health_generate")).status_code == 200


class HeldUntilOverlap:
    """Wraps an engine and holds every call until `n` calls have arrived (or `limit_s` after the first).

    Overlap then shows structurally, whatever the machine's load: with a client that overlaps its
    requests, `n` of them are in flight at once; with one that does not, the hold ends at the limit
    and the in-flight count stays low.
    """

    def __init__(self, inner: Engine, n: int, limit_s: float = 30.0) -> None:
        self.inner, self.n, self.limit_s = inner, n, limit_s
        self.arrived = 0
        self.deadline: float | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def generate(self, prompt_ids: list[int], params: SamplingParams):  # type: ignore[no-untyped-def]
        self.arrived += 1
        if self.deadline is None:
            self.deadline = time.monotonic() + self.limit_s
        while self.arrived < self.n and time.monotonic() < self.deadline:
            await asyncio.sleep(0.005)
        return await self.inner.generate(prompt_ids, params)


async def test_256_concurrent_requests_overlap(srv: SGLangTestServer) -> None:
    srv.engine = HeldUntilOverlap(srv.engine, 128)  # type: ignore[assignment]
    async with client(srv) as engine:
        started = time.monotonic()
        outs = await asyncio.gather(
            *(engine.generate(PROMPT, SamplingParams(max_new_tokens=4)) for _ in range(256))
        )
        elapsed = time.monotonic() - started
    assert all(o.token_ids == list(TOY_SCRIPT[:4]) for o in outs)
    # overlap is shown structurally (wall-time targets live in bench/overhead.py, not in tests)
    assert srv.stats.max_in_flight >= 128, f"only {srv.stats.max_in_flight} in flight ({elapsed:.2f} s)"


async def test_passed_in_client_is_not_closed(srv: SGLangTestServer) -> None:
    async with httpx.AsyncClient() as http:
        async with SGLangEngine(srv.url, client=http) as engine:
            await engine.generate(PROMPT, SamplingParams(max_new_tokens=2))
        assert not http.is_closed


# -- a real model behind the server (HFEngine on the tiny Qwen2) ------------------------------


async def test_hf_engine_over_http_is_token_exact(tiny_engine) -> None:  # type: ignore[no-untyped-def]
    """Ids and log-probs that cross HTTP are bit-identical to the in-process engine's."""
    prompt = [151644, 77091, 198]
    params = SamplingParams(max_new_tokens=6, temperature=0.8, sampling_seed=7)
    direct = await tiny_engine.generate(prompt, params)
    stop_id = direct.token_ids[2]  # make the model stop on a token it really samples
    with SGLangTestServer(tiny_engine) as server:
        async with client(server) as engine:
            remote = await engine.generate(prompt, params)
            stopped = await engine.generate(prompt, params.replace(stop_token_ids=(stop_id,)))
    assert remote.token_ids == direct.token_ids and remote.logprobs == direct.logprobs
    assert remote.finish_reason == "length" and remote.text == tiny_engine.decode(direct.token_ids)
    first = direct.token_ids.index(stop_id) + 1
    assert stopped.token_ids == direct.token_ids[:first] and stopped.logprobs == direct.logprobs[:first]
    assert stopped.meta["finish_reason"] == {"type": "stop", "matched": stop_id}


# -- odd bodies, checked without a server (httpx.MockTransport) -------------------------------------


def _mock_engine(body: object, status: int = 200) -> SGLangEngine:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, content=body.encode())
        return httpx.Response(status, json=body)

    return SGLangEngine("http://127.0.0.1:9", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
                        max_retries=1, backoff_s=0.0)


async def test_abort_before_prefill_body_is_an_abort_not_an_error() -> None:
    body = {"text": "", "meta_info": {"id": "x", "prompt_tokens": 0, "completion_tokens": 0,
                                      "finish_reason": {"type": "abort", "message": "Abort before prefill"}}}
    out = await _mock_engine(body).generate([1, 2], SamplingParams(max_new_tokens=4))
    assert out.finish_reason == "abort" and out.token_ids == [] and out.retries == 0


@pytest.mark.parametrize("raw, why", [
    ('{"output_ids": [5], "meta_info": {"finish_reason": {"type": "stop"}, '
     '"output_token_logprobs": [[NaN, 5, null]]}}', "NaN"),
    ('{"output_ids": [5], "meta_info": {"finish_reason": {"type": "stop"}, '
     '"output_token_logprobs": [[3.5, 5, null]]}}', "positive"),
    ('{"output_ids": 5, "meta_info": {"finish_reason": {"type": "stop"}, '
     '"output_token_logprobs": [[-1.0, 5, null]]}}', "ids not a list"),
    ('{"output_ids": [5], "meta_info": {"finish_reason": {"type": ["stop"]}, '
     '"output_token_logprobs": [[-1.0, 5, null]]}}', "finish type not a string"),
])
async def test_malformed_bodies_raise_typed_protocol_errors(raw: str, why: str) -> None:
    with pytest.raises(EngineProtocolError):
        await _mock_engine(raw).generate([1, 2], SamplingParams(max_new_tokens=4))


async def test_request_errors_say_what_to_fix() -> None:
    with pytest.raises(EngineRequestError, match="server root"):
        await _mock_engine({"detail": "Not Found"}, status=404).generate([1], SamplingParams())
    with pytest.raises(ConfigError, match="no scheme"):
        SGLangEngine("127.0.0.1:30000")


# -- a server that read a shorter prompt than it was sent (SGLang's --allow-auto-truncate) ----------


class _TruncatingHandler(BaseHTTPRequestHandler):
    """Answers /generate as SGLang with --allow-auto-truncate does: normally, counting only the kept prompt."""

    kept = 8
    requests = 0

    def do_POST(self) -> None:
        type(self).requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = json.dumps({"text": "ab", "output_ids": [5, 6], "meta_info": {
            "id": body["rid"], "prompt_tokens": self.kept, "completion_tokens": 2, "cached_tokens": 0,
            "finish_reason": {"type": "stop", "matched": 6},
            "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None]]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def truncating_url() -> Iterator[str]:
    _TruncatingHandler.requests = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TruncatingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_shortened_prompt_is_refused_at_once_naming_both_counts_and_the_fix(truncating_url: str) -> None:
    """8 prompt tokens read for 39 sent: the output was made in another context than recorded (invariant 3)."""
    engine = SGLangEngine(truncating_url, max_retries=2, backoff_s=0.0)
    async with engine:
        with pytest.raises(EngineProtocolError) as err:
            await engine.generate(list(range(100, 139)), SamplingParams(max_new_tokens=4))
    message = str(err.value)
    assert "8-token prompt" in message and "39 ids" in message and "--allow-auto-truncate" in message
    assert _TruncatingHandler.requests == 1  # deterministic: a retry would be cut the same way


async def test_matching_prompt_tokens_pass(truncating_url: str) -> None:
    async with SGLangEngine(truncating_url, max_retries=0) as engine:
        out = await engine.generate(list(range(100, 108)), SamplingParams(max_new_tokens=4))
    assert out.token_ids == [5, 6] and out.prompt_tokens == 8


async def test_contract_server_reports_the_full_prompt(srv: SGLangTestServer) -> None:
    """The testing server counts every id it was sent, so the check above never fires on it."""
    prompt = list(range(1, 40))
    async with client(srv) as engine:
        out = await engine.generate(prompt, SamplingParams(max_new_tokens=2))
    assert out.prompt_tokens == 39

"""Scale: 1,024 concurrent 30-turn rollouts from one process, against the SGLang stand-in in its own process.

    python bench/scale.py [--quick] [--works react,toolorchestra] [--rollouts 1024] [--turns 30]
                          [--latencies-ms 200,20] [--hand-rollouts 1024,256] [--no-profile] [--no-probe]
                          [--probe-repeats 11] [--modes ours,ours-ckpt,strict,hand] [--to-rollouts 256]

Two workloads (`bench/_scale_work.py`), each run through agentgraphs and by a hand loop in slime's style
(one shared httpx client, as `slime.utils.http_utils.post` keeps) making the identical calls:
- react: `create_react_agent` over `TracedChatModel` with a local async tool; one conversation growing by
  ~500 tokens a turn (~100 generated + ~400 tool result + glue), turn 30 answers;
- toolorchestra: ToolOrchestra's QA graph (30 orchestrator turns, each choosing search; the search expert's
  query; 3 passages from the retrieval service in its own process, ~500 tokens a turn).
The SGLang stand-in (`bench/_server.py`: SGLangTestServer + FixedLatencyEngine with reply rules) answers every
/generate after a fixed latency (200 ms, and 20 ms) with valid vocabulary ids and log-probs; it never runs a
model. Every configuration runs in a FRESH child process (clean memory peak, clean event loop); the server
and the retrieval service live across the children.

Figures per configuration (child): wall time vs the latency floor (turns x calls per turn x latency);
process CPU per LLM call; peak RSS growth per rollout (VmHWM, reset after a warm-up) vs the rollout's trace
ids as Python lists (every Turn's prompt_ids and output_ids: getsizeof of each list + each distinct int
object, as long_document.py counts a document's ids); with checkpoints (the compact saver, one SQLite file
for all rollouts), the database's bytes vs trace token bytes (4 B x the ids every Turn holds); the p99
delay of a 10 ms timer on the event loop. Our CPU per call = (CPU of ours - CPU of the hand loop) / calls
in the same configuration. A probe child runs single rollouts one after another and takes thread CPU
between consecutive engine calls, ours and hand alternately: our CPU per call at each context length (the
react probe's tool results are ~1,000 tokens, so its last turn reaches ~32K tokens). The react probe also clocks
each call's own work, split three ways per context length: (a) ours - hand all-in; (b) our library's own, thread
CPU inside `TracedChatModel._agenerate` (a bench-only subclass; it holds SGLangEngine's request and parse and the
Turn) - the hand loop's same work (the prompt ids, the same /generate body and its parse, the training lists, the
reply's tool call); (c) a - b, LangGraph + LangChain around our model; and beside them (d) the framework floor, the
thread CPU between the calls of the same graph over a chat model that does no work (no engine, no HTTP), so c - d is
what running around our calls adds (the same code run slower after their own work and the HTTP wait). A cProfile'd child splits our CPU by
package.
Targets: CPU per call <= 1 ms at every context length; peak memory per rollout <= 2x its token ids;
checkpoint DB <= 4x trace token bytes; event-loop p99 lag <= 50 ms; wall <= 1.10x the floor at 200 ms.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import hashlib
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import _scale_work as work  # noqa: E402

NAME = "scale"
CPU_TARGET_MS = 1.0
RSS_TARGET = 2.0
DB_TARGET = 4.0
LAG_TARGET_MS = 50.0
WALL_TARGET = 1.10
GEN_TOKENS = 100
TOOL_TOKENS = 400
PROBE_TOOL_TOKENS = 1000
MAX_NEW_TOKENS = 256


# -- the child: one configuration ------------------------------------------------------------------------

class _LagMonitor:
    """Delays of a 10 ms timer on the running loop (how long a ready callback waits)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.010)
            self.delays.append(time.perf_counter() - started - 0.010)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def p99_ms(self) -> float:
        if not self.delays:
            return 0.0
        ordered = sorted(self.delays)
        return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _digest(sequences: list[dict[str, Any]]) -> str:
    keys = ("tokens", "response_length", "loss_mask", "rollout_log_probs")
    blob = json.dumps([[s[k] for k in keys] for s in sequences])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _db_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return os.path.getsize(path)


class _Ours:
    """agentgraphs: run_rollout over the workload's spec, SGLangEngine with one connection slot per rollout."""

    def __init__(self, cfg: dict[str, Any], tok: Any) -> None:
        from agentgraphs.engines import SamplingParams
        from agentgraphs.context import Limits

        self.cfg, self.tok = cfg, tok
        self.sampling = SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
        self.limits = Limits(recursion_limit=10 * cfg["turns"] + 20, max_llm_calls=4 * cfg["turns"] + 8)
        if cfg["work"] == "react":
            model = self._marked_model() if cfg.get("probe") else None
            self.spec = work.react_spec(work.tool_results(tok, cfg["tool_tokens"]), model)
            self.options: dict[str, Any] | None = None
        else:
            from agentgraphs.toolorchestra.spec import SPEC

            self.spec = SPEC
            self.options = work.to_options(cfg["retrieval_url"], cfg["turns"])
        # the probe's clock: thread CPU where each policy call starts (react: LangChain's entry into the model's
        # `_agenerate`; toolorchestra: the engine's generate) and, react only, where `_agenerate` returns
        self.marks: list[float] | None = None
        self.ends: list[float] | None = None

    def _marked_model(self) -> Any:
        """TracedChatModel with the probe's clock around `_agenerate`, LangChain's call into our model: all our
        per-call work (messages to template dicts, digests, the prompt ids, SGLangEngine's request and its
        parse, the Turn, the AIMessage), and nothing of LangChain's or LangGraph's around it."""
        from agentgraphs.chat_model import TracedChatModel

        outer = self

        class MarkedChatModel(TracedChatModel):
            async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                                 **kwargs: Any) -> Any:
                if outer.marks is not None:
                    outer.marks.append(time.thread_time())
                result = await super()._agenerate(messages, stop, run_manager, **kwargs)
                if outer.ends is not None:
                    outer.ends.append(time.thread_time())
                return result

        return MarkedChatModel()

    def _engine(self, n: int, policy: bool) -> Any:
        from agentgraphs.engines.sglang import SGLangEngine

        outer = self
        marked = policy and self.cfg["work"] != "react"

        class Marked(SGLangEngine):
            async def generate(self, prompt_ids: list[int], params: Any) -> Any:
                if outer.marks is not None and marked:  # the toolorchestra probe: thread CPU at each policy call
                    outer.marks.append(time.thread_time())
                return await super().generate(prompt_ids, params)

        return Marked(self.cfg["url"], max_connections=n)

    @asynccontextmanager
    async def open(self, n: int) -> AsyncIterator[Any]:
        """A runner `run(first, count, saver)` over engines with `n` connection slots."""
        from agentgraphs.context import AgentContext
        from agentgraphs.rollout import rollout_input, run_rollout

        async with self._engine(n, True) as engine, self._engine(n, False) as expert:
            ctx = AgentContext(policy=engine, engines={m[0]: expert for m in work.TO_EXPERTS.values()},
                               tokenizer=self.tok, sampling=self.sampling, limits=self.limits)
            question = work.QUESTION if self.cfg["work"] == "react" else work.TO_PROBLEM

            async def one(i: int, saver: Any) -> dict[str, Any]:
                config = {"configurable": {"thread_id": f"rollout-{i}"}} if saver is not None else None
                rollout = await run_rollout(self.spec, rollout_input(question.format(i=i)), ctx, options=self.options,
                                            compute_reward=False, checkpointer=saver, config=config)
                if rollout.status != "completed":
                    raise RuntimeError(f"rollout {i}: {rollout.status}: {rollout.reason}\n{rollout.error}")
                return {"sequences": rollout.sequences, "calls": rollout.llm_calls, "turns": rollout.turns}

            async def run(first: int, count: int, saver: Any = None) -> list[dict[str, Any]]:
                return await asyncio.gather(*(one(first + i, saver) for i in range(count)))

            yield run

    async def run(self, n: int, first: int, saver: Any = None) -> list[dict[str, Any]]:
        async with self.open(n) as run:
            return await run(first, n, saver)


class _Hand:
    """The same calls by hand, slime's style: one httpx client with a pool of one connection per rollout."""

    def __init__(self, cfg: dict[str, Any], tok: Any) -> None:
        self.cfg, self.tok = cfg, tok
        self.results = work.tool_results(tok, cfg["tool_tokens"])
        from langchain_core.utils.function_calling import convert_to_openai_tool

        self.schema = convert_to_openai_tool(work.make_lookup(self.results))
        self.marks: list[float] | None = None
        self.ends: list[float] | None = None

    @asynccontextmanager
    async def open(self, n: int) -> AsyncIterator[Any]:
        """A runner `run(first, count)` over one httpx client as slime's `init_http_client` makes it: at most
        `n` connections (its concurrency), httpx's default 20 kept alive, no timeout; mode "strict": over
        SGLangEngine's connection slots instead (identical HTTP work to ours)."""
        import httpx

        client = (_SlotsClient(n) if self.cfg["mode"] == "strict"
                  else httpx.AsyncClient(limits=httpx.Limits(max_connections=n), timeout=httpx.Timeout(None)))
        async with client as http:
            async def run(first: int, count: int, saver: Any = None) -> list[dict[str, Any]]:
                if self.cfg["work"] == "react":
                    runs = [work.hand_react(http, self.cfg["url"], self.tok, first + i, self.results, self.schema,
                                            MAX_NEW_TOKENS, self.marks, self.ends) for i in range(count)]
                else:
                    runs = [work.hand_toolorchestra(http, self.cfg["url"], self.cfg["retrieval_url"], self.tok,
                                                    first + i, self.cfg["turns"], self.marks) for i in range(count)]
                return await asyncio.gather(*runs)

            yield run

    async def run(self, n: int, first: int, saver: Any = None) -> list[dict[str, Any]]:
        async with self.open(n) as run:
            return await run(first, n, saver)


class _Floor:
    """The react probe's framework floor: the same `create_react_agent` graph with the same tool, run by `run_rollout`,
    over a chat model that does no work (no engine, no tokenizer, no HTTP): it answers each call with a `lookup`
    call (the last, `turns`-th, with the answer), bound to the tools as `TracedChatModel.bind_tools` binds them.
    The thread CPU between its calls is what LangGraph + LangChain cost around a model by themselves."""

    def __init__(self, cfg: dict[str, Any], tok: Any) -> None:
        from agentgraphs.context import AgentContext, Limits
        from agentgraphs.testing.fake_engines import FixedLatencyEngine

        self.cfg = cfg
        self.marks: list[float] | None = None
        self.ends: list[float] | None = None
        self.spec = work.react_spec(work.tool_results(tok, cfg["tool_tokens"]), self._model(cfg["turns"]))
        # the model never calls the engine: the context is there because run_rollout takes one
        self.ctx = AgentContext(policy=FixedLatencyEngine(latency_s=0.0), tokenizer=tok,
                                limits=Limits(recursion_limit=10 * cfg["turns"] + 20))

    def _model(self, turns: int) -> Any:
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.utils.function_calling import convert_to_openai_tool

        outer = self

        class ReplayChatModel(BaseChatModel):
            @property
            def _llm_type(self) -> str:
                return "bench-replay"

            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

            def _generate(self, *args: Any, **kwargs: Any) -> Any:
                raise NotImplementedError("async only")

            async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                                 **kwargs: Any) -> Any:
                if outer.marks is not None:
                    outer.marks.append(time.thread_time())
                k = sum(1 for m in messages if isinstance(m, AIMessage))
                if k + 1 >= turns:
                    message = AIMessage(content=work.ANSWER)
                else:
                    message = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"query": f"topic-{k % work.QUERIES}"},
                                                                "id": f"call_{k}", "type": "tool_call"}])
                result = ChatResult(generations=[ChatGeneration(message=message)])
                if outer.ends is not None:
                    outer.ends.append(time.thread_time())
                return result

        return ReplayChatModel()

    @asynccontextmanager
    async def open(self, n: int) -> AsyncIterator[Any]:
        from agentgraphs.rollout import rollout_input, run_rollout

        async def run(first: int, count: int, saver: Any = None) -> list[dict[str, Any]]:
            out = []
            for i in range(count):
                rollout = await run_rollout(self.spec, rollout_input(work.QUESTION.format(i=first + i)), self.ctx,
                                            compute_reward=False)
                if rollout.status != "completed":
                    raise RuntimeError(f"floor rollout: {rollout.status}: {rollout.reason}\n{rollout.error}")
                out.append({"turns": []})
            return out

        yield run


class _SlotsClient:
    """`post(url, json=...)` as SGLangEngine sends: through `agentgraphs.http_slots.ConnectionSlots`, the body
    made by its `request_body` (the slime-style loop's httpx client encodes with the standard library)."""

    def __init__(self, n: int) -> None:
        import httpx

        from agentgraphs.engines.sglang import REQUEST_HEADERS, request_body
        from agentgraphs.http_retry import ENGINE_TIMEOUT
        from agentgraphs.http_slots import ConnectionSlots

        self._encode, self._headers = request_body, REQUEST_HEADERS  # imported once, not on every post

        # SGLangEngine retries a connection the server was too busy to accept within 5 s; this loop does not
        # retry, so it waits longer instead (256 connects at once to a CPU-starved stand-in took longer)
        self._slots = ConnectionSlots(n, httpx.Timeout(connect=60.0, read=ENGINE_TIMEOUT.read,
                                                       write=ENGINE_TIMEOUT.write, pool=ENGINE_TIMEOUT.pool))

    async def post(self, url: str, json: Any) -> Any:
        async with self._slots.lend() as client:
            return await client.post(url, content=self._encode(json), headers=self._headers)

    async def __aenter__(self) -> "_SlotsClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._slots.aclose()


_GC = _common.CollectorClock()


async def _timed(side: Any, n: int, saver: Any) -> tuple[list[dict[str, Any]], float, float, float]:
    lag = _LagMonitor()
    lag.start()
    wall, cpu = time.perf_counter(), _common.cpu_s()
    try:
        out = await side.run(n, 0, saver)
    finally:
        lag.stop()
    return out, time.perf_counter() - wall, _common.cpu_s() - cpu, lag.p99_ms()


async def _run_with_saver(side: Any, n: int, db: str | None) -> tuple[list[dict[str, Any]], float, float, float]:
    if db is None:
        return await _timed(side, n, None)
    from agentgraphs.checkpoints.savers import compact_async_sqlite_saver

    async with compact_async_sqlite_saver(db) as saver:
        return await _timed(side, n, saver)


_TOKENIZER: list[Any] = []


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    if not _TOKENIZER:
        _TOKENIZER.append(_common.tiny_tokenizer())
    tok = _TOKENIZER[0]
    side = _Ours(cfg, tok) if cfg["mode"] == "ours" else _Hand(cfg, tok)
    n = cfg["n"]
    if cfg.get("probe"):
        return _probe(cfg, tok)
    asyncio.run(side.run(min(4, n), 10**6))  # warm-up: imports, caches, connections (rollouts not kept)
    gc.collect()
    reset = _common.reset_peak()
    rss_before = _common.status_kib("VmRSS") * 1024
    server_cpu = _common.proc_cpu_s(cfg["server_pid"])
    if cfg.get("profile"):
        prof = cProfile.Profile()
        prof.enable()
    _GC.start()
    results, wall, cpu, lag_ms = asyncio.run(_run_with_saver(side, n, cfg.get("db")))
    collector_s = _GC.stop()
    if cfg.get("profile"):
        prof.disable()
    peak = _common.status_kib("VmHWM") * 1024 if reset else _common.peak_rss_bytes()
    server_cpu = _common.proc_cpu_s(cfg["server_pid"]) - server_cpu
    calls = sum(r["calls"] for r in results)
    out: dict[str, Any] = {
        "wall_s": wall, "cpu_s": cpu, "calls": calls, "lag_p99_ms": lag_ms, "server_cpu_s": server_cpu,
        "collector_s": collector_s, "collector_longest_s": _GC.longest,
        "rss_growth_per_rollout": (peak - rss_before) / n, "peak_reset": reset,
        "digests": [_digest(r["sequences"]) for r in results],
        "context_tokens": max(len(s["tokens"]) for r in results for s in r["sequences"]),
    }
    if cfg["mode"] == "ours":
        sample = results[:: max(1, n // 8)]
        out["ids_list_bytes_per_rollout"] = statistics.mean(
            _common.list_bytes(*[x for t in r["turns"] for x in (t["prompt_ids"], t["output_ids"])]) for r in sample)
        out["trace_ids"] = sum(len(t["prompt_ids"]) + len(t["output_ids"]) for r in results for t in r["turns"])
        out["turn_lists_per_rollout"] = statistics.mean(len(r["turns"]) for r in results)
    if cfg.get("db"):
        out["db_bytes"] = _db_bytes(Path(cfg["db"]))
    if cfg.get("profile"):
        by_group, ours, idle = _common.package_split(pstats.Stats(prof))
        out["profile_ms_per_call"] = {g: 1000 * t / calls for g, t in by_group.items()}
        out["profile_hottest"] = [(1000 * t / calls, name) for t, name in ours[:10]]
    return out


def _probe(cfg: dict[str, Any], tok: Any) -> dict[str, Any]:
    """Single rollouts one at a time, ours and hand alternately, each side's engines / client kept open
    across them (one event loop): thread CPU from each policy call's start to the next one's (the last: to the
    rollout's end). react also clocks each call's own work, ours and the hand loop's (see `_Ours._marked_model`
    and `_scale_work.hand_react`), which splits ours - hand per call into our library's own CPU (ours inside
    `_agenerate` - the hand loop's same work) and the rest (LangGraph + LangChain around the model, the tool
    node; less the hand loop's bookkeeping outside its calls). react runs a third side beside them, the framework
    floor (`_Floor`): the same graph over a chat model that does no work, whose CPU between its calls is LangGraph +
    LangChain's own. Medians over the repeats; the first round warms up."""
    ours, hand = _Ours(cfg, tok), _Hand(cfg, tok)
    split = cfg["work"] == "react"
    floor = _Floor(cfg, tok) if split else None
    per: dict[str, list[list[float]]] = {"ours": [], "hand": [], "floor": []}
    own: dict[str, list[list[float]]] = {"ours": [], "hand": [], "floor": []}
    contexts: list[int] = []

    async def main() -> None:
        nonlocal contexts
        async with AsyncExitStack() as stack:
            sides = [("hand", hand, await stack.enter_async_context(hand.open(1))),
                     ("ours", ours, await stack.enter_async_context(ours.open(1)))]
            if floor is not None:
                sides.append(("floor", floor, await stack.enter_async_context(floor.open(1))))
            for rep in range(cfg["repeats"] + 1):
                for label, side, run in sides:
                    side.marks = []
                    side.ends = [] if split else None
                    result = (await run(rep, 1))[0]
                    side.marks.append(time.thread_time())
                    if rep:
                        per[label].append([b - a for a, b in zip(side.marks, side.marks[1:])])
                        if split:
                            assert side.ends is not None and len(side.ends) == len(side.marks) - 1, label
                            own[label].append([e - a for a, e in zip(side.marks, side.ends)])
                    if label == "ours":
                        contexts = [len(t["prompt_ids"]) for t in result["turns"] if t["trainable"]]

    asyncio.run(main())
    calls_per_turn = 1 if cfg["work"] == "react" else 2
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in per.items() if v}
    diff_ms = [1000 * (o - h) / calls_per_turn for o, h in zip(med["ours"], med["hand"])]
    out: dict[str, Any] = {"repeats": cfg["repeats"], "contexts": contexts, "ours_ms": [1000 * x / calls_per_turn for x in med["ours"]],
                           "hand_ms": [1000 * x / calls_per_turn for x in med["hand"]], "diff_ms": diff_ms}
    if split:
        own_med = {k: [statistics.median(col) for col in zip(*v)] for k, v in own.items() if v}
        library_ms = [1000 * (o - h) for o, h in zip(own_med["ours"], own_med["hand"])]
        out.update(ours_call_ms=[1000 * x for x in own_med["ours"]], hand_call_ms=[1000 * x for x in own_med["hand"]],
                   library_ms=library_ms, framework_ms=[d - lib for d, lib in zip(diff_ms, library_ms)])
        # (d): the floor's interval less its model's (empty) call, per interval as the others are split
        out["floor_ms"] = [1000 * (t - c) for t, c in zip(med["floor"], own_med["floor"])]
    return out


# -- the parent --------------------------------------------------------------------------------------------

def _run_child(cfg: dict[str, Any], timeout: float, in_process: bool = False) -> dict[str, Any]:
    if in_process:  # --quick: the smoke test checks that it runs; figures from a shared process mean little
        return json.loads(json.dumps(child(cfg)))
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-6000:])
        raise SystemExit(f"the child {cfg['mode']} {cfg['work']} n={cfg['n']} failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _start_retrieval(tmp: Path, tok: Any, passages: int) -> tuple[subprocess.Popen[bytes], str, list[str]]:
    from retrieval import start_service  # bench/retrieval.py

    from agentgraphs.retrieval.corpus import write_passages
    from agentgraphs.retrieval.index import build_index
    from agentgraphs.retrieval.synthetic import synthetic_corpus, synthetic_queries

    corpus = synthetic_corpus(passages, words_per_passage=work.WORDS_PER_PASSAGE)
    write_passages(corpus, tmp / "corpus.jsonl")
    build_index(tmp / "corpus.jsonl", tmp / "index")
    proc, url = start_service(tmp / "index")
    return proc, url, synthetic_queries(corpus, work.QUERIES, seed=3)


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    else:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))), flush=True)
        return
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--small", dest="quick", action="store_true", help="the same as --quick")
    p.add_argument("--works", default="react,toolorchestra")
    p.add_argument("--rollouts", type=int, default=None, help="concurrent rollouts (default 1024; quick 8)")
    p.add_argument("--turns", type=int, default=None, help="policy turns per rollout (default 30; quick 3)")
    p.add_argument("--latencies-ms", default=None, help="per generation (default 200,20; quick 20)")
    p.add_argument("--hand-rollouts", default=None, help="extra sizes run ours + hand at the first latency; \"\" for none "
                   "(default 256; quick none)")
    p.add_argument("--no-checkpoints", action="store_true")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--no-probe", action="store_true")
    p.add_argument("--probe-repeats", type=int, default=None, help="single rollouts per side in the probe, after "
                   "a warm-up pair; per-call figures are their medians (default 11: medians of 3 moved single lengths "
                   "by ~0.5 ms on a shared 2-core machine; quick 1)")
    p.add_argument("--passages", type=int, default=20_000, help="retrieval corpus size")
    p.add_argument("--modes", default="ours,ours-ckpt,strict,hand",
                   help="which runs at the main size: ours, ours-ckpt (checkpoints on, first latency only), "
                        "strict (hand loop with SGLangEngine's slots), hand (slime-style hand loop)")
    p.add_argument("--to-rollouts", type=int, default=None,
                   help="concurrent ToolOrchestra rollouts (default 256, see the module doc; quick: --rollouts)")
    args = p.parse_args()
    n = args.rollouts or (8 if args.quick else 1024)
    turns = args.turns or (3 if args.quick else 30)
    latencies = [float(x) / 1000 for x in (args.latencies_ms or ("20" if args.quick else "200,20")).split(",")]
    sizes = args.hand_rollouts if args.hand_rollouts is not None else ("" if args.quick else "256")
    extra = [int(x) for x in sizes.split(",") if x]  # --hand-rollouts "": none
    works = args.works.split(",")
    modes = set(args.modes.split(","))
    if not modes or modes - {"ours", "ours-ckpt", "strict", "hand"}:
        p.error(f"--modes {args.modes!r}: give a comma-separated subset of ours, ours-ckpt, strict, hand")
    if args.to_rollouts is None and not args.quick:
        args.to_rollouts = 256
    work.check_sampling()
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    tok_dir = ensure_tiny_model()
    tok = _common.tiny_tokenizer()
    timeout = 600 if args.quick else 3600
    print(f"{NAME}: {n} concurrent rollouts x {turns} policy turns, works {works}, latencies "
          f"{[int(x * 1000) for x in latencies]} ms; machine: {_common.machine()['cores']} cores, load "
          f"{os.getloadavg()[0]:.1f}")
    runs: list[dict[str, Any]] = []
    probes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentgraphs-scale-") as d:
        tmp = Path(d)
        for name in works:
            retrieval = None
            queries: list[str] = []
            if name == "toolorchestra":
                retrieval, retrieval_url, queries = _start_retrieval(tmp, tok, 2000 if args.quick else args.passages)
            try:
                for li, latency in enumerate(latencies):
                    replies = (work.react_replies(tok, turns, GEN_TOKENS) if name == "react"
                               else work.to_replies(tok, queries, GEN_TOKENS))
                    server, url = _common.start_server(tok_dir, latency, "--replies", json.dumps(replies))
                    base = {"work": name, "turns": turns, "latency_s": latency, "url": url, "server_pid": server.pid,
                            "tool_tokens": TOOL_TOKENS, "retrieval_url": retrieval_url if retrieval else None}
                    k_main = n if name == "react" else min(n, args.to_rollouts or n)
                    plan = [(m, k_main, False) for m in ("ours", "strict", "hand") if m in modes]
                    if li == 0 and not args.no_checkpoints and "ours-ckpt" in modes:
                        plan.insert(1 if "ours" in modes else 0, ("ours", k_main, True))
                    if li == 0:
                        plan += [(m, k, False) for k in extra if 0 < k < k_main for m in ("ours", "strict", "hand")]
                    try:
                        for mode, k, ckpt in plan:
                            cfg = {**base, "mode": mode, "n": k,
                                   "db": str(tmp / f"{name}-{k}-{li}.sqlite") if ckpt else None}
                            print(f"  running {name} {mode} n={k} latency {latency * 1000:.0f} ms"
                                  f"{' checkpoints on' if ckpt else ''} (load {os.getloadavg()[0]:.1f}) ...", flush=True)
                            row = _run_child(cfg, timeout, args.quick)
                            row.update(work=name, mode=mode, n=k, latency_s=latency, checkpoints=ckpt, turns=turns)
                            runs.append(row)
                            _print_run(row)
                        if li == 0 and not args.no_profile and not args.quick:
                            k = min(n, 256)
                            cfg = {**base, "mode": "ours", "n": k, "profile": True, "db": None}
                            print(f"  profiling {name} ours n={k} ...", flush=True)
                            row = _run_child(cfg, timeout)
                            row.update(work=name, mode="profile", n=k, latency_s=latency, checkpoints=False, turns=turns)
                            runs.append(row)
                        if li == len(latencies) - 1 and not args.no_probe:
                            cfg = {**base, "mode": "ours", "n": 1, "probe": True,
                                   "repeats": args.probe_repeats or (1 if args.quick else 11),
                                   "tool_tokens": PROBE_TOOL_TOKENS if name == "react" and not args.quick else TOOL_TOKENS}
                            print(f"  probing {name} (single rollouts, per-call CPU by context length) ...", flush=True)
                            probes[name] = _run_child(cfg, timeout, args.quick)
                    finally:
                        _stop(server)
            finally:
                if retrieval is not None:
                    retrieval.terminate()
                    retrieval.wait()
    _report(args, runs, probes, n, turns, latencies)


def _print_run(r: dict[str, Any]) -> None:
    floor = r["turns"] * (1 if r["work"] == "react" else 2) * r["latency_s"]
    print(f"    wall {r['wall_s']:.1f} s = {r['wall_s'] / floor:.2f}x floor {floor:.1f} s; CPU {r['cpu_s']:.1f} s "
          f"= {1000 * r['cpu_s'] / r['calls']:.2f} ms/call ({r['calls']} calls); server CPU "
          f"{1000 * r['server_cpu_s'] / r['calls']:.2f} ms/call; collector {r['collector_s']:.1f} s (longest pause "
          f"{1000 * r['collector_longest_s']:.0f} ms); lag p99 {r['lag_p99_ms']:.1f} ms; RSS "
          f"+{r['rss_growth_per_rollout'] / 2**20:.2f} MB/rollout"
          + (f" vs ids {r['ids_list_bytes_per_rollout'] / 2**20:.2f} MB" if "ids_list_bytes_per_rollout" in r else "")
          + (f"; DB {r['db_bytes'] / 2**20:.1f} MB = {r['db_bytes'] / (4 * r['trace_ids']):.2f}x trace bytes"
             if "db_bytes" in r else ""), flush=True)


def _report(args: Any, runs: list[dict[str, Any]], probes: dict[str, Any], n: int, turns: int,
            latencies: list[float]) -> None:
    def find(work_: str, mode: str, k: int, latency: float, ckpt: bool = False) -> dict[str, Any] | None:
        return next((r for r in runs if (r["work"], r["mode"], r["n"], r["latency_s"], r["checkpoints"])
                     == (work_, mode, k, latency, ckpt)), None)

    verdicts: dict[str, bool] = {}
    summary: dict[str, Any] = {}
    print(f"\n{NAME} results ({n} rollouts x {turns} turns unless stated):")
    for r in runs:
        if r["mode"] != "ours":
            continue
        for mode in ("hand", "strict"):
            other = find(r["work"], mode, r["n"], r["latency_s"])
            if other is not None and other["digests"] != r["digests"]:
                raise SystemExit(f"{r['work']} n={r['n']}: ours and the {mode} hand loop built different training "
                                 "data: the comparison is void")
    for name in {r["work"] for r in runs}:
        s: dict[str, Any] = {}
        summary[name] = s
        for latency in latencies:
            for k in sorted({r["n"] for r in runs if r["work"] == name}, reverse=True):
                ours, hand = find(name, "ours", k, latency), find(name, "hand", k, latency)
                strict = find(name, "strict", k, latency)
                if ours is None:
                    continue
                floor = turns * (1 if name == "react" else 2) * latency
                key = f"{k}x{turns}@{int(latency * 1000)}ms"
                row = s[key] = {"wall_s": ours["wall_s"], "floor_s": floor, "wall_vs_floor": ours["wall_s"] / floor,
                                "cpu_ms_per_call": 1000 * ours["cpu_s"] / ours["calls"],
                                "lag_p99_ms": ours["lag_p99_ms"],
                                "rss_vs_ids": ours["rss_growth_per_rollout"] / ours["ids_list_bytes_per_rollout"],
                                "context_tokens": ours["context_tokens"]}
                row["collector_s"] = ours["collector_s"]
                if hand is not None:
                    row.update(hand_wall_s=hand["wall_s"], hand_wall_vs_floor=hand["wall_s"] / floor,
                               hand_cpu_ms_per_call=1000 * hand["cpu_s"] / hand["calls"],
                               hand_lag_p99_ms=hand["lag_p99_ms"],
                               hand_rss_per_rollout=hand["rss_growth_per_rollout"])
                if strict is not None:
                    row.update(strict_wall_s=strict["wall_s"], strict_wall_vs_floor=strict["wall_s"] / floor,
                               our_cpu_ms_per_call=1000 * (ours["cpu_s"] - strict["cpu_s"]) / ours["calls"],
                               strict_lag_p99_ms=strict["lag_p99_ms"])
                print(f"  {name} {key}: wall {row['wall_s']:.1f} s = {row['wall_vs_floor']:.2f}x floor"
                      + (f" (slime-style hand {row['hand_wall_vs_floor']:.2f}x" if hand else " (")
                      + (f", strict hand {row['strict_wall_vs_floor']:.2f}x)" if strict else ")")
                      + f"; CPU {row['cpu_ms_per_call']:.2f} ms/call"
                      + (f" (slime-style hand {row['hand_cpu_ms_per_call']:.2f})" if hand else "")
                      + (f", ours - strict hand {row['our_cpu_ms_per_call']:.2f} ms/call" if strict else "")
                      + f"; lag p99 {row['lag_p99_ms']:.1f} ms"
                      + (f" (strict hand {row['strict_lag_p99_ms']:.1f})" if strict else "")
                      + f"; peak RSS {row['rss_vs_ids']:.2f}x ids; collector {row['collector_s']:.1f} s")
                if k == max(r["n"] for r in runs if r["work"] == name and r["mode"] == "ours"):
                    verdicts[f"{name} lag {key}"] = row["lag_p99_ms"] <= LAG_TARGET_MS
                    verdicts[f"{name} memory {key}"] = row["rss_vs_ids"] <= RSS_TARGET
                    if latency == 0.2:
                        verdicts[f"{name} wall {key}"] = row["wall_vs_floor"] <= WALL_TARGET
            ck = next((r for r in runs if r["work"] == name and r["latency_s"] == latency and r["checkpoints"]), None)
            if ck is not None:
                ratio = ck["db_bytes"] / (4 * ck["trace_ids"])
                s[f"checkpoints@{int(latency * 1000)}ms"] = {
                    "db_bytes": ck["db_bytes"], "trace_token_bytes": 4 * ck["trace_ids"], "db_vs_trace": ratio,
                    "wall_s": ck["wall_s"], "cpu_ms_per_call": 1000 * ck["cpu_s"] / ck["calls"],
                    "lag_p99_ms": ck["lag_p99_ms"], "rss_vs_ids": ck["rss_growth_per_rollout"] / ck["ids_list_bytes_per_rollout"]}
                print(f"  {name} checkpoints on ({int(latency * 1000)} ms): DB {ck['db_bytes'] / 2**20:.1f} MB = "
                      f"{ratio:.2f}x trace token bytes; wall {ck['wall_s']:.1f} s; CPU "
                      f"{1000 * ck['cpu_s'] / ck['calls']:.2f} ms/call; lag p99 {ck['lag_p99_ms']:.1f} ms")
                verdicts[f"{name} checkpoint DB"] = ratio <= DB_TARGET
                verdicts[f"{name} lag with checkpoints"] = ck["lag_p99_ms"] <= LAG_TARGET_MS
        prof = next((r for r in runs if r["work"] == name and r["mode"] == "profile"), None)
        if prof is not None:
            s["profile_ms_per_call"] = prof["profile_ms_per_call"]
            split = ", ".join(f"{g} {t:.3f}" for g, t in sorted(prof["profile_ms_per_call"].items(), key=lambda kv: -kv[1]))
            print(f"  {name} profile (n={prof['n']}, cProfile self time, ms per call; the profiler inflates Python "
                  f"code): {split}")
            for t, fn in prof["profile_hottest"][:6]:
                print(f"      {t:.3f} ms/call  {fn}")
        probe = probes.get(name)
        if probe is not None:
            s["probe"] = probe
            worst = max(probe["diff_ms"])
            picks = sorted({0, len(probe["contexts"]) // 2, len(probe["contexts"]) - 1})
            print(f"  {name} probe: our CPU per call by context length: "
                  + ", ".join(f"{probe['contexts'][i]} tokens {probe['diff_ms'][i]:.2f} ms "
                              f"(ours {probe['ours_ms'][i]:.2f}, hand {probe['hand_ms'][i]:.2f})" for i in picks)
                  + f"; worst {worst:.2f} ms")
            verdicts[f"{name} CPU per call, every context"] = worst <= CPU_TARGET_MS
            if "library_ms" in probe:
                print(f"  {name} probe, per call (ms of thread CPU, medians of {probe.get('repeats', '?')}): (a) ours - "
                      "hand all-in | (b) our library's own (inside TracedChatModel._agenerate) - the hand loop's same "
                      "work | (c) the rest, a - b (LangGraph + LangChain around the model, the tool node) | (d) of "
                      "which the framework floor: the same graph over a chat model doing no work, between its calls "
                      "(no engine, no HTTP); c - d: the rest of (c), the same code run slower around our calls (after "
                      "their own work and the HTTP wait: bench/README.md, 'Per-call framework cost')")
                print("      tokens      (a)     (b)     (c)     (d)   (c-d)  | ours all-in  hand all-in  ours inside  "
                      "hand's call")
                last = len(probe["contexts"]) - 1
                floor_ms = probe.get("floor_ms") or [float("nan")] * len(probe["contexts"])
                for i, ctx_len in enumerate(probe["contexts"]):
                    print(f"      {ctx_len:6d}  {probe['diff_ms'][i]:7.2f} {probe['library_ms'][i]:7.2f} "
                          f"{probe['framework_ms'][i]:7.2f} {floor_ms[i]:7.2f} {probe['framework_ms'][i] - floor_ms[i]:7.2f}"
                          f"  | {probe['ours_ms'][i]:11.2f}  {probe['hand_ms'][i]:11.2f}"
                          f"  {probe['ours_call_ms'][i]:11.2f}  {probe['hand_call_ms'][i]:11.2f}"
                          + ("   (a), (c), (d) and all-in: the last call + the rollout's end" if i == last else ""))
                calls_only = slice(0, max(1, last))
                print(f"    worst: (a) {worst:.2f} ms, (b) {max(probe['library_ms']):.2f} ms, "
                      f"(c) {max(probe['framework_ms']):.2f} ms; without the last interval (the rollout's end): "
                      f"(a) {max(probe['diff_ms'][calls_only]):.2f} ms, (c) {max(probe['framework_ms'][calls_only]):.2f} ms")
                if "floor_ms" in probe:
                    calls = probe["floor_ms"][:max(1, last)]
                    rest = [c - d for c, d in zip(probe["framework_ms"][:max(1, last)], calls)]
                    print(f"    (d) the framework floor between calls: median {statistics.median(calls):.2f} ms "
                          f"(range {min(calls):.2f}-{max(calls):.2f}); c - d median {statistics.median(rest):.2f} ms")
                verdicts[f"{name} our library's own CPU per call, every context"] = max(probe["library_ms"]) <= CPU_TARGET_MS
    print("  targets:")
    for k, ok in verdicts.items():
        print(f"    {k}: {_common.verdict(ok)}")
    passed = all(verdicts.values()) if verdicts else False
    result = {"quick": args.quick, "rollouts": n, "turns": turns, "latencies_s": latencies, "summary": summary,
              "verdicts": verdicts, "runs": [{k: v for k, v in r.items() if k != "digests"} for r in runs],
              "passed": passed}
    misses = [k for k, ok in verdicts.items() if not ok]
    _common.finish(args.results_dir, NAME, result, passed,
                   f"{sum(verdicts.values())}/{len(verdicts)} targets" + (f"; MISS: {', '.join(misses)}" if misses else ""))


if __name__ == "__main__":
    main()

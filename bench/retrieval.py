"""Retrieval service throughput: queries/s over HTTP at concurrency 64 vs the same queries in-process.

    python bench/retrieval.py [--quick]

A synthetic 100K-passage corpus (Zipf pseudo-words, 60 words a passage: `agentgraphs.retrieval.synthetic`)
is indexed with BM25 (bm25s) once. The same index directory is then
  1. searched in-process one query at a time: `index.search([q], k=3)` for each query (one thread, no HTTP);
  2. searched in-process in batches of 64: `index.search(queries[i:i + 64], k=3)` (the strict baseline: what
     the service's batching can at best reach without HTTP);
  3. served by `agentgraphs retrieval serve` in a child process (which coalesces concurrent requests into
     batched searches) and queried with `RetrievalClient`, 64 requests in flight over 64 connections (one
     query per request, as the `search` tool sends them).
Target: service throughput >= 0.8x in-process one at a time (the issue's figure); the ratio against the
batched baseline is printed beside it. All three answer the same queries and their top-k ids are compared.
The service's process and the client share the machine's cores, so on 2 cores the client's HTTP work
competes with the searches; the CPU each process spent per request is printed too.

Then a stall check (reported, no target): one slow request (512 queries of 8192 characters, the largest
valid request) is sent, and while it is being searched, one-query requests are sent one after another; the
wait of the first one is printed for a service with one search worker (`--workers 1`, as before issue 17)
and with the default 4, and their ratio.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from typing_extensions import TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from agentgraphs.retrieval import RetrievalClient, load_index  # noqa: E402
from agentgraphs.retrieval.corpus import write_passages  # noqa: E402
from agentgraphs.retrieval.index import build_index  # noqa: E402
from agentgraphs.retrieval.synthetic import synthetic_corpus, synthetic_queries  # noqa: E402

NAME = "retrieval"
TARGET_RATIO = 0.8
CONCURRENCY = 64
TOPK = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(index_dir: Path, workers: int = 4) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = _free_port()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "agentgraphs.cli", "retrieval", "serve", str(index_dir),
                             "--port", str(port), "--workers", str(workers)], env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit("the retrieval service exited")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the retrieval service did not come up")


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class HttpRun(TypedDict):
    wall_s: float
    ids: list[list[str]]
    client_cpu_s: float
    service_cpu_s: float
    stats: dict[str, int]


async def over_http(url: str, pid: int, queries: list[str]) -> HttpRun:
    import httpx

    async with RetrievalClient(url, timeout_s=120, max_connections=CONCURRENCY) as client:
        async def one(q: str) -> list[str]:
            return [h["document"]["id"] for h in await client.search(q, topk=TOPK)]

        await asyncio.gather(*(one(q) for q in queries[:CONCURRENCY]))  # warm the connections
        async with httpx.AsyncClient() as plain:
            before = (await plain.get(f"{url}/stats")).json()
            cpu0, service0, t0 = time.process_time(), _proc_cpu_s(pid), time.perf_counter()
            ids = await asyncio.gather(*(one(q) for q in queries))
            wall = time.perf_counter() - t0
            cpu, service = time.process_time() - cpu0, _proc_cpu_s(pid) - service0
            after = (await plain.get(f"{url}/stats")).json()
    return HttpRun(wall_s=wall, ids=list(ids), client_cpu_s=cpu, service_cpu_s=service,
                   stats={k: after[k] - before[k] for k in after})


class Stall(TypedDict):
    slow_s: float  # the slow request, sent first
    first_probe_s: float  # the first one-query request sent while it is searched
    probes: int  # one-query requests answered while the slow one ran


async def stall(url: str, slow_queries: list[str], probe_queries: list[str]) -> Stall:
    import httpx

    async with httpx.AsyncClient(timeout=600) as http:
        await http.post(f"{url}/retrieve", json={"queries": probe_queries[:1]})  # warm the connection
        t0 = time.perf_counter()
        slow = asyncio.create_task(http.post(f"{url}/retrieve", json={"queries": slow_queries, "topk": TOPK}))
        await asyncio.sleep(0.5)  # it is sent and parsed, and its search has started
        waits = []
        for q in probe_queries:
            t1 = time.perf_counter()
            (await http.post(f"{url}/retrieve", json={"queries": [q], "topk": TOPK})).raise_for_status()
            waits.append(time.perf_counter() - t1)
            if slow.done():
                break
        (await slow).raise_for_status()
        slow_s = time.perf_counter() - t0
    return Stall(slow_s=slow_s, first_probe_s=waits[0], probes=len(waits))


def main() -> None:
    cli = _common.parser(__doc__.splitlines()[0])
    cli.add_argument("--workers", type=int, default=4, help="search workers of the service in the throughput run")
    args = cli.parse_args()
    n_passages, n_queries = (5_000, 256) if args.quick else (100_000, 2_000)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        passages = synthetic_corpus(n_passages)
        write_passages(passages, corpus)
        queries = synthetic_queries(passages, n_queries)
        t0 = time.perf_counter()
        index_dir = build_index(corpus, Path(tmp) / "idx")
        build_s = time.perf_counter() - t0
        index = load_index(index_dir)

        t0 = time.perf_counter()
        local = [[h["document"]["id"] for h in index.search([q], TOPK)[0]] for q in queries]
        local_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        batched = [[h["document"]["id"] for h in hits]
                   for i in range(0, n_queries, CONCURRENCY) for hits in index.search(queries[i:i + CONCURRENCY], TOPK)]
        batched_s = time.perf_counter() - t0

        proc, url = start_service(index_dir, args.workers)
        try:
            http = asyncio.run(over_http(url, proc.pid, queries))
        finally:
            proc.terminate()
            proc.wait()

        words = " ".join(queries).split()
        long_query = " ".join(words[i % len(words)] for i in range(2000))[:8192]
        stalls: dict[int, Stall] = {}
        for workers in (1, 4):
            proc, url = start_service(index_dir, workers)
            try:
                stalls[workers] = asyncio.run(stall(url, [long_query] * 512, queries[:200]))
            finally:
                proc.terminate()
                proc.wait()
    same = sum(a == b == c for a, b, c in zip(local, batched, http["ids"]))
    local_qps, batched_qps, http_qps = n_queries / local_s, n_queries / batched_s, n_queries / http["wall_s"]
    ratio, ratio_batched = http_qps / local_qps, http_qps / batched_qps
    per_batch = http["stats"]["queries"] / max(1, http["stats"]["batches"])
    print(f"corpus {n_passages} passages, {n_queries} queries, top-{TOPK}; BM25 index built in {build_s:.1f} s")
    print(f"  in-process, one at a time : {local_qps:8.1f} queries/s ({1000 * local_s / n_queries:.2f} ms/query)")
    print(f"  in-process, {CONCURRENCY} a batch    : {batched_qps:8.1f} queries/s ({1000 * batched_s / n_queries:.2f} ms/query)")
    print(f"  HTTP @ {CONCURRENCY}, {args.workers} worker(s)   : {http_qps:8.1f} queries/s"
          f" ({per_batch:.1f} queries per batched search;"
          f" CPU per request: client {1000 * http['client_cpu_s'] / n_queries:.2f} ms,"
          f" service {1000 * http['service_cpu_s'] / n_queries:.2f} ms)")
    print(f"  ratio vs one at a time    : {ratio:.2f}x (target >= {TARGET_RATIO})")
    print(f"  ratio vs batched          : {ratio_batched:.2f}x (reported)   identical top-{TOPK}: {same}/{n_queries}")
    stall_ratio = stalls[1]["first_probe_s"] / stalls[4]["first_probe_s"]
    for workers, st in stalls.items():
        print(f"  stall, {workers} worker(s)       : slow request {st['slow_s']:.2f} s; first one-query request during"
              f" it waited {1000 * st['first_probe_s']:.1f} ms; {st['probes']} answered before it finished")
    print(f"  stall ratio 1 vs 4 workers: {stall_ratio:.1f}x (reported)")
    passed = ratio >= TARGET_RATIO and same == n_queries
    result = {"passages": n_passages, "queries": n_queries, "concurrency": CONCURRENCY, "build_s": build_s,
              "workers": args.workers,
              "in_process_qps": local_qps, "in_process_batched_qps": batched_qps, "http_qps": http_qps,
              "ratio": ratio, "ratio_vs_batched": ratio_batched, "identical": same,
              "queries_per_batch": per_batch, "client_cpu_ms_per_request": 1000 * http["client_cpu_s"] / n_queries,
              "service_cpu_ms_per_request": 1000 * http["service_cpu_s"] / n_queries,
              "target_ratio": TARGET_RATIO, "quick": args.quick, "load_average": os.getloadavg()[0],
              "stall": {str(k): dict(v) for k, v in stalls.items()}, "stall_ratio": stall_ratio}
    _common.finish(args.results_dir, NAME, result, passed,
                   f"{http_qps:.0f} q/s over HTTP vs {local_qps:.0f} in-process = {ratio:.2f}x;"
                   f" vs {batched_qps:.0f} batched = {ratio_batched:.2f}x")


if __name__ == "__main__":
    main()

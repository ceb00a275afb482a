"""Retrieval service throughput: queries/s over HTTP at concurrency 64 vs the same queries in-process.

    python bench/retrieval.py [--quick]

A synthetic 100K-passage corpus (Zipf pseudo-words, 60 words a passage: `agentgraphs.retrieval.synthetic`)
is indexed with BM25 (bm25s) once. The same index directory is then
  1. searched in-process: `index.search([q], k=3)` for each query in turn (one thread, no HTTP);
  2. served by `agentgraphs retrieval serve` in a child process and queried with `RetrievalClient`, 64
     requests in flight (one query per request, as the `search` tool sends them).
Target: service throughput >= 0.8x in-process (the HTTP layer costs at most 20%). Both runs answer the
same queries and their top-k ids are compared. The service's process and the client share the machine's
cores, so on 2 cores the client's HTTP work competes with the searches.
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


def start_service(index_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = _free_port()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "agentgraphs.cli", "retrieval", "serve", str(index_dir),
                             "--port", str(port)], env=env)
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


async def over_http(url: str, queries: list[str]) -> tuple[float, list[list[str]]]:
    gate = asyncio.Semaphore(CONCURRENCY)
    async with RetrievalClient(url, timeout_s=120) as client:  # 8 connections: see bench/README.md
        async def one(q: str) -> list[str]:
            async with gate:
                return [h["document"]["id"] for h in await client.search(q, topk=TOPK)]

        await asyncio.gather(*(one(q) for q in queries[:CONCURRENCY]))  # warm the connections
        t0 = time.perf_counter()
        ids = await asyncio.gather(*(one(q) for q in queries))
        return time.perf_counter() - t0, list(ids)


def main() -> None:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
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

        proc, url = start_service(index_dir)
        try:
            http_s, remote = asyncio.run(over_http(url, queries))
        finally:
            proc.terminate()
            proc.wait()
    same = sum(a == b for a, b in zip(local, remote))
    local_qps, http_qps = n_queries / local_s, n_queries / http_s
    ratio = http_qps / local_qps
    print(f"corpus {n_passages} passages, {n_queries} queries, top-{TOPK}; BM25 index built in {build_s:.1f} s")
    print(f"  in-process : {local_qps:8.1f} queries/s ({1000 * local_s / n_queries:.2f} ms/query)")
    print(f"  HTTP @ {CONCURRENCY}  : {http_qps:8.1f} queries/s")
    print(f"  ratio      : {ratio:.2f}x (target >= {TARGET_RATIO})   identical top-{TOPK}: {same}/{n_queries}")
    passed = ratio >= TARGET_RATIO and same == n_queries
    result = {"passages": n_passages, "queries": n_queries, "concurrency": CONCURRENCY, "build_s": build_s,
              "in_process_qps": local_qps, "http_qps": http_qps, "ratio": ratio, "identical": same,
              "target_ratio": TARGET_RATIO, "quick": args.quick}
    _common.finish(args.results_dir, NAME, result, passed,
                   f"{http_qps:.0f} q/s over HTTP vs {local_qps:.0f} in-process = {ratio:.2f}x")


if __name__ == "__main__":
    main()

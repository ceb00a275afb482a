"""`agentgraphs retrieval index|serve`: build an index from a JSONL corpus, serve it over HTTP."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import AgentGraphsError
from .service import DEFAULT_KEEP_ALIVE_S, MAX_QUERY_CHARS

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="The retrieval service: BM25 (default) or dense indexes over a JSONL corpus.")
console = Console(stderr=True)


@app.command("index")
def index_command(
    corpus: Path = typer.Argument(..., help='JSONL corpus: {"id", "contents" (or "text"), "title"?} per line'),
    out: Path = typer.Option(..., "--out", help="index directory to write"),
    dense: bool = typer.Option(False, "--dense", help="dense index (faiss + all-MiniLM-L6-v2) instead of BM25"),
) -> None:
    """Index a corpus (BM25 with bm25s, or dense with --dense)."""
    from .index import build_index, load_index

    try:
        path = build_index(corpus, out, dense=dense)
        index = load_index(path)
    except (AgentGraphsError, OSError) as exc:
        console.print("[red]error:[/red]", escape(str(exc)))
        raise typer.Exit(2) from None
    console.print(f"{index.kind} index of {len(index.passages)} passages written to {path}")


@app.command("serve")
def serve_command(
    index_dir: Path = typer.Argument(..., help="directory written by `agentgraphs retrieval index`"),
    host: str = typer.Option("127.0.0.1", help="interface to bind"),
    port: int = typer.Option(8000, help="port (the seed's retrieval service uses 8000)"),
    max_topk: int = typer.Option(100, min=1, help="largest topk a request may ask for"),
    batch_window_ms: float = typer.Option(0.0, min=0.0, help="wait this long for concurrent requests to "
                                          "join a batch (0: batch only what queued during the last search)"),
    max_batch_queries: int = typer.Option(128, min=1, help="most queries one batched search takes"),
    max_query_chars: int = typer.Option(MAX_QUERY_CHARS, min=1,
                                        help="longest query in characters; a longer one is a 400"),
    workers: int = typer.Option(4, min=1, help="searches that run at once (a slow one holds only its own)"),
    keep_alive_s: int = typer.Option(DEFAULT_KEEP_ALIVE_S, min=1, help="seconds an idle connection stays open; "
                                     "keep it above the clients' keep-alive expiry (httpx: 5 s)"),
    bare_list: bool = typer.Option(False, "--bare-list", help="answer [[hits...], ...] without the {\"result\": ...} "
                                   "wrapper, as ToolOrchestra's own servers do (their clients read results[0])"),
    example_ids: Path = typer.Option(None, "--example-ids", help="the seed's example_id_file, {eid: [document "
                                     "ids]}: a request's eid keeps only its documents among the 1000 best hits "
                                     "(an eid the file lacks keeps all); without it a non-empty eid is refused"),
) -> None:
    """Serve an index: POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}, GET /health."""
    from .service import serve

    try:
        serve(index_dir, host=host, port=port, max_topk=max_topk, batch_window_s=batch_window_ms / 1000,
              max_batch_queries=max_batch_queries, max_query_chars=max_query_chars, workers=workers,
              keep_alive_s=keep_alive_s, bare_list=bare_list, example_ids=example_ids)
    except AgentGraphsError as exc:
        console.print("[red]error:[/red]", escape(str(exc)))
        raise typer.Exit(2) from None

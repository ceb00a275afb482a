"""The retrieval service ToolOrchestra's `search` tool queries: a BM25 (bm25s) or dense (faiss + MiniLM)
index over a JSONL corpus, served over HTTP on 127.0.0.1:8000 in the seed's /retrieve shape, and an async
client with timeouts and retries whose failures are `RetrievalError`s.

    agentgraphs retrieval index corpus.jsonl --out idx [--dense]
    agentgraphs retrieval serve idx --port 8000

bm25s / faiss / the embedding model are imported only when an index is built or loaded.
"""

from ..errors import RetrievalError
from .client import DEFAULT_URL, RetrievalClient
from .corpus import Passage, read_corpus
from .index import BM25Index, DenseIndex, Hit, build_index, load_index
from .service import DEFAULT_PORT, make_app, serve

__all__ = ["BM25Index", "DEFAULT_PORT", "DEFAULT_URL", "DenseIndex", "Hit", "Passage", "RetrievalClient",
           "RetrievalError", "build_index", "load_index", "make_app", "read_corpus", "serve"]

"""Retrieval indexes over a passage corpus: BM25 (bm25s, the default) and dense (faiss over MiniLM).

An index directory holds `meta.json` (kind, size, source), `passages.jsonl` (the corpus as indexed) and the
kind's data (`bm25/` written by bm25s, or `dense.faiss`). `build_index` writes one, `load_index` reads it;
both kinds answer `search(queries, k) -> one ranked list of hits per query`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from typing_extensions import TypedDict

from ..errors import ConfigError
from .corpus import Passage, passage_text, read_corpus, write_passages

__all__ = ["Hit", "SearchIndex", "BM25Index", "DenseIndex", "build_index", "load_index", "INDEX_FORMAT"]

INDEX_FORMAT = 1
IndexKind = Literal["bm25", "dense"]


class Hit(TypedDict):
    """One retrieved passage and its score (BM25 score, or cosine similarity for dense)."""

    document: Passage
    score: float


class SearchIndex(Protocol):
    kind: str
    passages: list[Passage]

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError:
        raise ConfigError("BM25 retrieval needs bm25s: pip install 'agentgraphs[retrieval]'") from None
    return bm25s


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ConfigError("dense retrieval needs faiss: pip install 'agentgraphs[retrieval-dense]'") from None
    return faiss


class BM25Index:
    """Okapi BM25 (bm25s defaults: k1=1.5, b=0.75), English stop words removed, lower-cased words.

    >>> idx = BM25Index.build([{"id": "1", "contents": "The Eiffel tower is in Paris."},
    ...                        {"id": "2", "contents": "Mount Fuji is in Japan."}])
    >>> [h["document"]["id"] for h in idx.search(["where is fuji"], k=2)[0]]
    ['2']
    """

    kind = "bm25"

    def __init__(self, retriever: Any, passages: list[Passage]) -> None:
        self.retriever = retriever
        self.passages = passages
        self._vocab: dict[str, int] = retriever.vocab_dict

    @classmethod
    def build(cls, passages: list[Passage]) -> BM25Index:
        bm25s = _bm25s()
        tokens = bm25s.tokenize([passage_text(p) for p in passages], stopwords="en", show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return cls(retriever, passages)

    def save(self, directory: Path) -> None:
        self.retriever.save(str(directory / "bm25"), show_progress=False)

    @classmethod
    def load(cls, directory: Path, passages: list[Passage]) -> BM25Index:
        retriever = _bm25s().BM25.load(str(directory / "bm25"), show_progress=False, verbosity=0)
        return cls(retriever, passages)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-k per query, best first; passages sharing no word with the query are not hits."""
        bm25s = _bm25s()
        words = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        known = [[w for w in q if w in self._vocab] for q in words]
        results: list[list[Hit]] = [[] for _ in queries]
        todo = [i for i, q in enumerate(known) if q]
        k = min(k, len(self.passages))
        if not todo or k < 1:
            return results
        docs, scores = self.retriever.retrieve([known[i] for i in todo], k=k, show_progress=False)
        for row, i in enumerate(todo):
            results[i] = [Hit(document=self.passages[int(d)], score=float(s))
                          for d, s in zip(docs[row], scores[row]) if s > 0]
        return results


class DenseIndex:
    """Exact inner-product search (faiss IndexFlatIP) over unit MiniLM vectors: cosine similarity."""

    kind = "dense"

    def __init__(self, index: Any, passages: list[Passage], embedder: Any) -> None:
        self.index = index
        self.passages = passages
        self.embedder = embedder
        # a fast tokenizer is not safe to call from two threads at once ("Already borrowed"); faiss is
        self._embed_lock = threading.Lock()

    @classmethod
    def build(cls, passages: list[Passage], embedder: Any | None = None) -> DenseIndex:
        from .embed import MiniLMEmbedder

        faiss = _faiss()
        embedder = embedder or MiniLMEmbedder()
        vectors = embedder.encode([passage_text(p) for p in passages])
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        return cls(index, passages, embedder)

    def save(self, directory: Path) -> None:
        _faiss().write_index(self.index, str(directory / "dense.faiss"))

    @classmethod
    def load(cls, directory: Path, passages: list[Passage], embedder: Any | None = None) -> DenseIndex:
        from .embed import MiniLMEmbedder

        index = _faiss().read_index(str(directory / "dense.faiss"))
        if index.ntotal != len(passages):
            raise ConfigError(f"{directory}: dense.faiss has {index.ntotal} vectors for {len(passages)} passages;"
                              " rebuild the index with `agentgraphs retrieval index CORPUS --out DIR --dense`")
        return cls(index, passages, embedder or MiniLMEmbedder())

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        k = min(k, len(self.passages))
        if not queries or k < 1:
            return [[] for _ in queries]
        with self._embed_lock:
            vectors = self.embedder.encode(list(queries))
        scores, ids = self.index.search(vectors, k)
        return [[Hit(document=self.passages[int(d)], score=float(s)) for d, s in zip(ids[r], scores[r]) if d >= 0]
                for r in range(len(queries))]


def build_index(corpus: str | Path, out_dir: str | Path, *, dense: bool = False) -> Path:
    """Index a JSONL corpus into `out_dir` (BM25, or dense with `dense=True`); returns out_dir.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); c = os.path.join(d, "c.jsonl")
    >>> _ = open(c, "w").write('{"id": "a", "contents": "red apples"}\\n{"id": "b", "contents": "blue sky"}\\n')
    >>> idx = load_index(build_index(c, os.path.join(d, "idx")))
    >>> idx.kind, [h["document"]["id"] for h in idx.search(["sky"], 3)[0]]
    ('bm25', ['b'])
    """
    passages = read_corpus(corpus)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index: BM25Index | DenseIndex = DenseIndex.build(passages) if dense else BM25Index.build(passages)
    index.save(out)
    write_passages(passages, out / "passages.jsonl")
    meta = {"format": INDEX_FORMAT, "kind": index.kind, "passages": len(passages), "corpus": str(Path(corpus))}
    if dense:
        from .embed import EMBEDDER_NAME

        meta["embedder"] = EMBEDDER_NAME
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return out


def load_index(directory: str | Path) -> BM25Index | DenseIndex:
    """Open an index directory written by `build_index`."""
    d = Path(directory)
    try:
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{d}: not an index directory ({exc}); build one with "
                          "`agentgraphs retrieval index CORPUS --out DIR`") from None
    if meta.get("format") != INDEX_FORMAT or meta.get("kind") not in ("bm25", "dense"):
        raise ConfigError(f"{d}/meta.json: unknown index format {meta.get('format')!r} / kind {meta.get('kind')!r};"
                          " rebuild the index with this version")
    passages = read_corpus(d / "passages.jsonl")
    return DenseIndex.load(d, passages) if meta["kind"] == "dense" else BM25Index.load(d, passages)

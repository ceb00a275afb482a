"""Tokenization of long texts with bounded memory, exactly as `tokenizer.encode` would do it.

>>> from transformers import AutoTokenizer
>>> from agentgraphs.testing.tiny_model import ensure_tiny_model
>>> tok = AutoTokenizer.from_pretrained(ensure_tiny_model())
>>> text = "A long document. " * 2000
>>> encode_text(tok, text) == tok.encode(text, add_special_tokens=False)
True
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class Tokenizer(Protocol):
    """The slice of a Hugging Face tokenizer this module uses."""

    eos_token: str | None
    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def convert_tokens_to_ids(self, token: str) -> Any: ...



def encode_text(tokenizer: Tokenizer, text: str) -> list[int]:
    """`tokenizer.encode(text, add_special_tokens=False)`, with bounded memory on long documents.

    A Hugging Face fast tokenizer tracks character offsets for every token: one encode of a 448K-token
    document peaks at ~700 bytes per token. When the Rust backend is in the state `encode` would put it
    in (no truncation or padding, special tokens matched), its offset-free `encode_batch_fast` is used,
    and a long text is encoded in ~8K-character pieces cut where the pre-tokenizer provably cuts too
    (see `_cuts_are_exact`): same ids, a bounded peak. Anything else takes `tokenizer.encode`.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    fast = getattr(backend, "encode_batch_fast", None)
    if not (
        fast is not None
        and getattr(backend, "truncation", False) is None
        and getattr(backend, "padding", False) is None
        and getattr(backend, "encode_special_tokens", True) is False
        and not getattr(tokenizer, "split_special_tokens", False)
    ):
        return list(tokenizer.encode(text, add_special_tokens=False))
    if len(text) <= 2 * _PIECE_CHARS or not _cuts_are_exact(backend):
        return fast([text], add_special_tokens=False)[0].ids
    ids: list[int] = []
    for piece in _pieces(text, _PIECE_CHARS):
        ids.extend(fast([piece], add_special_tokens=False)[0].ids)
    return ids


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """How many tokens `text` is, counted as `encode_text` encodes it (no special tokens added)."""
    return len(encode_text(tokenizer, text)) if text else 0


_PIECE_CHARS = 1 << 13
# Byte-level BPE pre-tokenizer regexes (Qwen2/2.5/3, Llama 3) for which a cut before a space that follows
# a non-space character and precedes an ASCII letter is also a pre-token boundary of the whole text: every
# alternative that can consume the character before the space stops at the space, none looks behind, and
# " <letters>" starts a new pre-token either way. GPT-2's ByteLevel(use_regex=True) pattern has the same
# property. BPE never merges across pre-tokens, so the pieces' ids concatenate to the whole text's ids.
_EXACT_CUT_REGEXES = frozenset({
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
})
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _cuts_are_exact(backend: Any) -> bool:
    """True when cutting text before " <ASCII letter>" cannot change this backend's tokens."""
    import json

    try:
        pre = json.loads(backend.pre_tokenizer.__getstate__())
        norm = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else None
        added = backend.get_added_tokens_decoder().values()
        dropout = getattr(backend.model, "dropout", None)
    except Exception:  # an unfamiliar backend: take the whole-text path
        return False
    if type(backend.model).__name__ != "BPE" or dropout or (norm is not None and norm != {"type": "NFC"}):
        return False
    # an added token is matched before pre-tokenization: none may start with a letter, hold a space or
    # swallow neighbouring spaces
    if any(" " in t.content or t.content[:1] in _ASCII_LETTERS or t.lstrip or t.rstrip for t in added):
        return False
    if pre.get("type") == "ByteLevel":
        return pre.get("use_regex") is True and pre.get("add_prefix_space") is False
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        split.get("type") == "Split" and split.get("behavior") == "Isolated" and split.get("invert") is False
        and split.get("pattern", {}).get("Regex") in _EXACT_CUT_REGEXES
        and byte_level.get("type") == "ByteLevel" and byte_level.get("add_prefix_space") is False
        and byte_level.get("use_regex") is False
    )


def _pieces(text: str, size: int) -> list[str]:
    """`text` cut into pieces of at least `size` characters, each cut before the first " <ASCII letter>"
    after that which follows a non-space character (a stretch without one stays in one piece)."""
    out: list[str] = []
    start = 0
    while len(text) - start > 2 * size:
        at = text.find(" ", start + size)
        while at != -1 and not (text[at + 1:at + 2] in _ASCII_LETTERS and not text[at - 1].isspace()):
            at = text.find(" ", at + 1)
        if at == -1:
            break
        out.append(text[start:at])
        start = at
    out.append(text[start:])
    return out

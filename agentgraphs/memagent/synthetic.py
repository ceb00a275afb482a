"""Synthetic long-document QA (a needle in filler text) for tests and benchmarks.

A document is filler sentences made from a small word list (no digits, no capitalised names) with one needle
sentence, "The secret code of <name> is <value>.", at a chosen position. The value is a 7-digit number
(``value_digits`` to change it), so
the answer occurs in the document exactly once.

Speed: the filler is drawn from a pool of sentences whose token counts are measured ONCE per tokenizer (one
``encode`` per pooled sentence); a document's length is then a sum, never a re-tokenisation, so a
448K-token document is built in well under a second. The counts assume tokens do not merge across the
single space between sentences, which holds for byte-level BPE (GPT/Qwen) and whitespace tokenizers.

Sentence lengths vary (``"varied"``, the default: 6 to 15 tokens with Qwen2.5's vocabulary), so where a chunk
boundary falls inside a sentence does not depend on the chunk's index. With sentences of one length
(``"uniform"``: every sentence 11 tokens with Qwen2.5; what the pool held until now, and the documents of the
small-scale MemAgent runs 3-29) that place cycles with the chunk index (period 11 for 512-token chunks), so
short training documents never show a model the alignments that long evaluation documents hold: four of those
runs' models wrote a code after reading chunk 10, the first chunk that ends exactly at a sentence's end, in
nearly every document with no needle yet (bench/README, "Chunk alignment").
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from agentgraphs.memagent.data import MemAgentRow

__all__ = [
    "TextEncoder",
    "FillerPool",
    "SentenceLengths",
    "SENTENCE_LENGTHS",
    "build_filler_pool",
    "make_needle_example",
    "make_dataset",
    "DEFAULT_CHUNK_SIZE",
]

DEFAULT_CHUNK_SIZE = 5000  # MemAgent's chunk size in tokens; a chunk-index needle position counts in these

_ADJECTIVES = ("quiet", "green", "old", "bright", "narrow", "warm", "distant", "small", "heavy", "gentle",
               "empty", "silver", "busy", "calm", "wooden", "broad")
_NOUNS = ("river", "garden", "window", "mountain", "teacher", "market", "village", "bridge", "forest",
          "harbor", "lamp", "road", "letter", "field", "tower", "kitchen", "farmer", "painter", "cloud", "stone")
_VERBS = ("watched", "painted", "followed", "crossed", "carried", "visited", "passed", "reached",
          "described", "remembered", "cleaned", "found")
_PREPOSITIONS = ("near", "behind", "under", "beside", "across", "above", "beyond", "along")

_FIRST_NAMES = ("Alice", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ingrid", "Jonas",
                "Keiko", "Lorenzo", "Maya", "Nikolai", "Olga", "Pedro", "Quinn", "Rosa", "Sven", "Tamara")
_LAST_NAMES = ("Marlow", "Okafor", "Lindqvist", "Castellano", "Nakamura", "Brennan", "Petrova", "Duval",
               "Haddad", "Kowalski", "Moreau", "Szabo")

_POOL_SIZE = 256
_POOL_SEED = 20250701

SentenceLengths = Literal["varied", "uniform"]
SENTENCE_LENGTHS: tuple[SentenceLengths, ...] = get_args(SentenceLengths)


class TextEncoder(Protocol):
    """Anything with a HF-style ``encode`` (a transformers tokenizer, or a stub in tests)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...


@dataclass(frozen=True)
class FillerPool:
    """Filler sentences and their token counts (each counted with the space that precedes it)."""

    sentences: tuple[str, ...]
    token_counts: tuple[int, ...]


def _filler_sentence(rng: random.Random) -> str:
    adj1, adj2 = rng.choice(_ADJECTIVES), rng.choice(_ADJECTIVES)
    noun1, noun2, noun3 = rng.choice(_NOUNS), rng.choice(_NOUNS), rng.choice(_NOUNS)
    verb, prep = rng.choice(_VERBS), rng.choice(_PREPOSITIONS)
    return f"The {adj1} {noun1} {verb} the {noun2} {prep} the {adj2} {noun3}."


def _varied_sentence(rng: random.Random) -> str:
    """A filler sentence of 5 to 14 words and a period (6 to 15 Qwen2.5 tokens): optional adjectives, a
    prepositional phrase and a tail."""
    def adjective() -> list[str]:
        return [rng.choice(_ADJECTIVES)] if rng.random() < 0.5 else []

    words = ["The", *adjective(), rng.choice(_NOUNS)]
    words += [rng.choice(_VERBS), "the", *adjective(), rng.choice(_NOUNS)]
    if rng.random() < 0.6:
        words += [rng.choice(_PREPOSITIONS), "the", *adjective(), rng.choice(_NOUNS)]
    if rng.random() < 0.3:
        words += ["and", "the", rng.choice(_NOUNS)]
    return " ".join(words) + "."


def _count(tokenizer: TextEncoder, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def build_filler_pool(tokenizer: TextEncoder, size: int = _POOL_SIZE,
                      sentence_lengths: SentenceLengths = "varied") -> FillerPool:
    """Measure a fixed pool of filler sentences once; reuse it for many documents (``make_dataset`` does).

    ``sentence_lengths``: ``"varied"`` (the default; see the module's docstring for why) or ``"uniform"``
    (every sentence the same words' count: what documents were made of before, kept to rebuild them).

    >>> class Words:
    ...     def encode(self, text, add_special_tokens=False): return text.split()
    >>> build_filler_pool(Words(), size=4, sentence_lengths="uniform").token_counts
    (10, 10, 10, 10)
    >>> sorted(set(build_filler_pool(Words()).token_counts))
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    """
    if sentence_lengths not in SENTENCE_LENGTHS:
        raise ValueError(f"sentence_lengths must be one of {SENTENCE_LENGTHS}, got {sentence_lengths!r}")
    rng = random.Random(_POOL_SEED)
    make = _filler_sentence if sentence_lengths == "uniform" else _varied_sentence
    sentences = tuple(make(rng) for _ in range(size))
    return FillerPool(sentences, tuple(_count(tokenizer, " " + s) for s in sentences))


def _needle_offset(n_tokens: int, needle_position: float | int, chunk_size: int) -> int:
    """The token offset at which the needle should start."""
    if isinstance(needle_position, bool) or not isinstance(needle_position, (int, float)):
        raise TypeError("needle_position must be a float in [0, 1] or an int chunk index")
    if isinstance(needle_position, float):
        if not 0.0 <= needle_position <= 1.0:
            raise ValueError(f"a relative needle_position must lie in [0, 1], got {needle_position}")
        return round(needle_position * n_tokens)
    n_chunks = -(-n_tokens // chunk_size)
    if not 0 <= needle_position < n_chunks:
        raise ValueError(f"chunk index {needle_position} is outside the document's {n_chunks} chunk(s)")
    chunk_end = min((needle_position + 1) * chunk_size, n_tokens)
    return (needle_position * chunk_size + chunk_end) // 2


def _needle_from_pool(
    pool: FillerPool,
    needle_tokens: int,
    needle: str,
    n_tokens: int,
    offset: int,
    rng: random.Random,
) -> str:
    filler_target = n_tokens - needle_tokens
    picks: list[int] = []
    total = 0
    while total < filler_target:
        i = rng.randrange(len(pool.sentences))
        picks.append(i)
        total += pool.token_counts[i]
    if picks and total - filler_target > filler_target - (total - pool.token_counts[picks[-1]]):
        picks.pop()  # stop at whichever boundary is nearer the target
    # put the needle at the sentence boundary whose token offset is nearest the wanted one
    boundaries = [0]
    for i in picks:
        boundaries.append(boundaries[-1] + pool.token_counts[i])
    at = bisect.bisect_left(boundaries, offset)
    if at == len(boundaries) or (at > 0 and boundaries[at] - offset > offset - boundaries[at - 1]):
        at -= 1
    sentences = [pool.sentences[i] for i in picks]
    sentences.insert(at, needle)
    return " ".join(sentences)


def _example_from_pool(
    pool: FillerPool,
    tokenizer: TextEncoder,
    n_tokens: int,
    seed: int | str,
    needle_position: float | int,
    chunk_size: int,
    value_digits: int = 7,
) -> MemAgentRow:
    if not 1 <= value_digits <= 18:
        raise ValueError(f"value_digits must be in 1..18, got {value_digits}")
    rng = random.Random(f"needle:{seed}")
    name = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
    value = str(rng.randrange(10 ** (value_digits - 1), 10 ** value_digits))
    needle = f"The secret code of {name} is {value}."
    needle_tokens = _count(tokenizer, " " + needle)
    if n_tokens <= needle_tokens:
        raise ValueError(f"n_tokens={n_tokens} leaves no room for filler beside a {needle_tokens}-token needle")
    offset = _needle_offset(n_tokens, needle_position, chunk_size)
    document = _needle_from_pool(pool, needle_tokens, needle, n_tokens, offset, rng)
    return MemAgentRow(
        question=f"What is the secret code of {name}?",
        document=document,
        answers=[value],
        length=n_tokens,
        id=f"needle-{n_tokens}-{seed}",
    )


def make_needle_example(
    tokenizer: TextEncoder,
    n_tokens: int,
    *,
    seed: int | str,
    needle_position: float | int = 0.5,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    pool: FillerPool | None = None,
    value_digits: int = 7,
) -> MemAgentRow:
    """One needle-in-filler question over a document of about ``n_tokens`` tokens.

    The secret code is a ``value_digits``-digit number (7 by default; fewer make an easier task for a model
    trained from scratch).

    ``needle_position`` is a float in [0, 1] (relative depth) or an int chunk index, in which case the
    needle lands in the middle of that ``chunk_size``-token chunk. Deterministic in ``seed``. Pass the
    ``pool`` of ``build_filler_pool(tokenizer)`` when making many examples (it is measured once).

    >>> class Words:
    ...     def encode(self, text, add_special_tokens=False): return text.split()
    >>> row = make_needle_example(Words(), 2000, seed=1, needle_position=0.25)
    >>> row["document"].count(row["answers"][0]), abs(len(row["document"].split()) - 2000) <= 40
    (1, True)
    >>> row["question"].startswith("What is the secret code of ")
    True
    """
    pool = pool if pool is not None else build_filler_pool(tokenizer)
    return _example_from_pool(pool, tokenizer, n_tokens, seed, needle_position, chunk_size, value_digits)


def make_dataset(
    tokenizer: TextEncoder,
    lengths: Iterable[int],
    per_length: int,
    seed: int,
) -> list[MemAgentRow]:
    """``per_length`` needle questions for each length, needles spread evenly over the depth.

    >>> class Words:
    ...     def encode(self, text, add_special_tokens=False): return text.split()
    >>> rows = make_dataset(Words(), [500, 1000], per_length=2, seed=0)
    >>> [r["length"] for r in rows], len({r["id"] for r in rows})
    ([500, 500, 1000, 1000], 4)
    """
    pool = build_filler_pool(tokenizer)
    rows = []
    for n_tokens in lengths:
        for i in range(per_length):
            depth = (i + 0.5) / per_length
            row_seed = f"{seed}-{n_tokens}-{i}"
            rows.append(_example_from_pool(pool, tokenizer, n_tokens, row_seed, depth, DEFAULT_CHUNK_SIZE))
    return rows

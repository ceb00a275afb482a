"""Synthetic corpora for tests and benchmarks: Zipf-distributed pseudo-words, plus planted English facts.

Real corpora have a long-tailed vocabulary (a few words everywhere, most words rare); BM25's cost depends
on it, so the filler passages draw pseudo-words from a Zipf law rather than uniformly. `planted_facts`
adds a fact and look-alike distractors (same sentence, other names and numbers), so a retriever has to
match the entity, not merely find the only English passage.
"""

from __future__ import annotations

import random

from typing_extensions import TypedDict

from .corpus import Passage

__all__ = ["synthetic_corpus", "synthetic_queries", "planted_facts", "Fact"]

_SYLLABLES = ("ka", "lo", "mi", "ra", "tu", "ve", "sho", "ne", "bri", "dal", "fen", "gor", "hal", "jin",
              "kor", "lum", "mar", "nox", "pel", "quin", "ros", "sil", "tam", "ur", "vol", "wen", "xi", "yor")
_STATIONS = ("Zorblax", "Vintara", "Quellmoor", "Ardent", "Brisco", "Calder", "Dunmore", "Evesham",
             "Farrow", "Galen", "Hollis", "Istra")


def _words(vocab_size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < vocab_size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def synthetic_corpus(n: int, *, seed: int = 0, words_per_passage: int = 60, vocab_size: int = 20_000
                     ) -> list[Passage]:
    """`n` passages of Zipf-distributed pseudo-words with ids "p0", "p1", ...

    >>> ps = synthetic_corpus(3, words_per_passage=5, vocab_size=50)
    >>> [p["id"] for p in ps], len(ps[0]["contents"].split())
    (['p0', 'p1', 'p2'], 5)
    """
    rng = random.Random(seed)
    vocab = _words(vocab_size, rng)
    weights = [1.0 / (rank + 1) for rank in range(vocab_size)]
    out: list[Passage] = []
    for i in range(n):
        words = rng.choices(vocab, weights=weights, k=words_per_passage)
        out.append(Passage(id=f"p{i}", contents=" ".join(words), title=f"Doc {i}"))
    return out


def synthetic_queries(passages: list[Passage], n: int, *, seed: int = 1, words: int = 3) -> list[str]:
    """`n` queries, each a few words picked from a random passage (so every query has matches)."""
    rng = random.Random(seed)
    queries = []
    for _ in range(n):
        text = rng.choice(passages)["contents"].split()
        queries.append(" ".join(rng.sample(text, min(words, len(text)))))
    return queries


class Fact(TypedDict):
    """A planted fact: the passage id that holds it, a question it answers, and the answer."""

    id: str
    question: str
    answer: str


def planted_facts(*, seed: int = 0) -> tuple[list[Passage], Fact]:
    """English passages: one fact and its look-alike distractors; returns (passages, the fact).

    >>> passages, fact = planted_facts()
    >>> fact["answer"] in next(p["contents"] for p in passages if p["id"] == fact["id"])
    True
    """
    rng = random.Random(seed)
    codes = rng.sample(range(1000, 9999), len(_STATIONS))
    passages = [Passage(id=f"station-{name.lower()}", title=f"{name} station",
                        contents=f"The launch code of {name} station is {code}. The station orbits the moon "
                                 f"of the planet {rng.choice(_SYLLABLES).title()}{rng.choice(_SYLLABLES)}.")
                for name, code in zip(_STATIONS, codes)]
    target = Fact(id="station-zorblax", question="What is the launch code of Zorblax station?",
                  answer=str(codes[0]))
    return passages, target

"""Engines without a model, for server tests and benchmarks (no torch).

`FixedLatencyEngine` answers every prompt with the same script of token ids after a fixed
`asyncio.sleep`, honouring max_new_tokens, stop_token_ids, stop strings and ignore_eos the way
SGLang does (the stop token is part of the output). `Reply` rules pick another script by what the
prompt holds (a marker token counted in the ids: no decoding), so a benchmark can drive a tool loop
of N turns, then an answer, without running a model. `ToyTokenizer` gives those ids text, so a
server can trim stop strings and decode exactly as it would with a real tokenizer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from ..engines import Completion, SamplingParams

#: id -> text of the toy vocabulary; 2 is the end-of-sequence token (a special token)
TOY_VOCAB: dict[int, str] = {
    2: "</s>",
    10: "Hello",
    11: ",",
    12: " world",
    13: "!",
    14: " How",
    15: " are",
    16: " you",
    17: "?",
}
TOY_EOS_ID = 2
#: the default script: a short sentence ending in the eos token
TOY_SCRIPT: tuple[int, ...] = (10, 11, 12, 13, 14, 15, 16, 17, TOY_EOS_ID)
_CHAR_BASE = 1000  # ids >= this are single characters (chr(id - base)), so any text encodes


class TextTokenizer(Protocol):
    """What FixedLatencyEngine needs of a tokenizer (ToyTokenizer, an HF tokenizer, ...)."""

    eos_token_id: int

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...


@dataclass(frozen=True)
class ToyTokenizer:
    """A tiny deterministic tokenizer with the two methods servers call.

    >>> tok = ToyTokenizer()
    >>> tok.decode([10, 12, 2]), tok.decode([10, 12, 2], skip_special_tokens=True)
    ('Hello world</s>', 'Hello world')
    >>> tok.encode("Hello!")
    [10, 13]
    """

    vocab: dict[int, str] = field(default_factory=lambda: dict(TOY_VOCAB))
    special_ids: frozenset[int] = frozenset({TOY_EOS_ID})
    eos_token_id: int = TOY_EOS_ID

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        parts = []
        for i in ids:
            if skip_special_tokens and i in self.special_ids:
                continue
            parts.append(self.vocab.get(i) or (chr(i - _CHAR_BASE) if i >= _CHAR_BASE else f"<{i}>"))
        return "".join(parts)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Greedy longest match over the vocabulary, falling back to one id per character."""
        pieces = sorted(self.vocab.items(), key=lambda kv: -len(kv[1]))
        ids: list[int] = []
        pos = 0
        while pos < len(text):
            for tok, piece in pieces:
                if piece and text.startswith(piece, pos):
                    ids.append(tok)
                    pos += len(piece)
                    break
            else:
                ids.append(_CHAR_BASE + ord(text[pos]))
                pos += 1
        return ids


@dataclass(frozen=True)
class Reply:
    """Scripts for the prompts that hold token `marker` `count` to `below` - 1 times (any prompt when
    `marker` is None). A prompt of n ids gets `scripts[n % len(scripts)]`: replies vary from turn to turn
    yet stay a function of the prompt. Counting one id is a C-level scan of the ids, cheap at any length.

    >>> rule = Reply(scripts=((10, 2), (12, 2)), marker=7, count=2)
    >>> rule.matches([7, 1, 7], {}), rule.script_for([7, 1, 7])
    (True, (12, 2))
    >>> Reply(scripts=((10, 2),), marker=7, count=1, below=2).matches([7, 1, 7], {})
    False
    """

    scripts: tuple[tuple[int, ...], ...]
    marker: int | None = None
    count: int = 1
    below: int | None = None

    def matches(self, prompt_ids: list[int], counts: dict[int, int]) -> bool:
        """Whether the rule applies; `counts` caches marker counts across the rules of one prompt."""
        if self.marker is None:
            return True
        n = counts.get(self.marker)
        if n is None:
            n = counts[self.marker] = prompt_ids.count(self.marker)
        return n >= self.count and (self.below is None or n < self.below)

    def script_for(self, prompt_ids: list[int]) -> tuple[int, ...]:
        return self.scripts[len(prompt_ids) % len(self.scripts)]


@dataclass
class FixedLatencyEngine:
    """An Engine returning `script` (cycled) after `latency_s`, with log-prob `logprob - i*step`.

    `replies`: rules tried in order; the first that matches the prompt gives the script instead.

    >>> import asyncio
    >>> engine = FixedLatencyEngine(latency_s=0.0)
    >>> out = asyncio.run(engine.generate([1, 2], SamplingParams(max_new_tokens=32)))
    >>> out.token_ids[-1] == TOY_EOS_ID, out.finish_reason, out.meta["matched"]
    (True, 'stop', 2)
    >>> asyncio.run(engine.generate([1], SamplingParams(max_new_tokens=2))).finish_reason
    'length'
    >>> ruled = FixedLatencyEngine(latency_s=0.0, replies=(Reply(scripts=((13, TOY_EOS_ID),), marker=5),))
    >>> asyncio.run(ruled.generate([1, 5], SamplingParams(max_new_tokens=32))).text
    '!</s>'
    """

    latency_s: float = 0.02
    script: tuple[int, ...] = TOY_SCRIPT
    logprob: float = -0.5
    logprob_step: float = 0.0
    weight_version: str = "fixed-v0"
    tokenizer: TextTokenizer = field(default_factory=ToyTokenizer)
    name: str = "fixed-latency"
    calls: int = 0
    replies: tuple[Reply, ...] = ()

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        self.calls += 1
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids.add(self.tokenizer.eos_token_id)
        script = self._script(prompt_ids)
        ids: list[int] = []
        matched: int | str | None = None
        for i in range(params.max_new_tokens):
            tok = script[i % len(script)]
            ids.append(tok)
            matched = self._stop_match(tok, ids, stop_ids, params.stop)
            if matched is not None:
                break
        text = self.tokenizer.decode(ids)
        return Completion(
            token_ids=ids,
            logprobs=[self.logprob - i * self.logprob_step for i in range(len(ids))],
            finish_reason="stop" if matched is not None else "length",
            text=text,
            prompt_tokens=len(prompt_ids),
            weight_version=self.weight_version,
            meta={"matched": matched},
        )

    def _script(self, prompt_ids: list[int]) -> tuple[int, ...]:
        counts: dict[int, int] = {}
        rule = next((r for r in self.replies if r.matches(prompt_ids, counts)), None)
        return self.script if rule is None else rule.script_for(prompt_ids)

    def _stop_match(
        self, tok: int, ids: list[int], stop_ids: set[int], stop: tuple[str, ...]
    ) -> int | str | None:
        if tok in stop_ids:
            return tok
        if stop:
            # a match must end in the newest token, and a stop string of B bytes spans at most
            # B tokens (+1 for a character split across tokens): decoding that tail suffices
            window = max(len(s.encode()) for s in stop) + 1
            text = self.tokenizer.decode(ids[-window:])
            return next((s for s in stop if s and s in text), None)
        return None

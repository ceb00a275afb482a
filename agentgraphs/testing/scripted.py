"""A scripted policy for readable graph tests: the script picks WHAT the model says; the token ids
and log-probs still come from a real teacher-forced pass of a model (the tiny Qwen), so every
invariant is exercised on real numbers.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, Union

from ..engines import Completion, SamplingParams
from ..engines.hf import HFEngine


@dataclass(frozen=True)
class ScriptCall:
    """What a script sees for one call."""

    index: int
    prompt_ids: list[int]
    prompt_text: str


Script = Union[Callable[[ScriptCall], str], Sequence[str]]


class ScriptedPolicy:
    """An Engine: text from `script`, ids = encode(text) + end-of-turn, log-probs from `scorer`.

    A script is a list of replies (used in order) or a function of the ScriptCall. A reply longer
    than max_new_tokens is cut and finishes with "length", exactly like a real engine.

    >>> import asyncio
    >>> from agentgraphs.engines.hf import HFEngine
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> policy = ScriptedPolicy(HFEngine.from_dir(ensure_tiny_model(), device="cpu", seed=0), ["Hello!"])
    >>> prompt = policy.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}],
    ...                                               add_generation_prompt=True, tokenize=False)
    >>> out = asyncio.run(policy.generate(policy.tokenizer.encode(prompt), SamplingParams(max_new_tokens=16)))
    >>> out.text, out.finish_reason, len(out.logprobs) == len(out.token_ids)
    ('Hello!<|im_end|>', 'stop', True)
    >>> out = asyncio.run(policy.generate(policy.tokenizer.encode(prompt), SamplingParams()))
    Traceback (most recent call last):
    ...
    RuntimeError: scripted policy ran out of replies at call 1
    """

    def __init__(self, scorer: HFEngine, script: Script, *, end_of_turn: str = "<|im_end|>",
                 name: str = "scripted") -> None:
        if scorer.tokenizer is None:
            raise ValueError("ScriptedPolicy needs an HFEngine with a tokenizer")
        self.scorer = scorer
        self.tokenizer = scorer.tokenizer
        self.name = f"{name}:{scorer.name}"
        self._script = script
        self._replies: Iterator[str] | None = None if callable(script) else iter(list(script))
        self._counter = itertools.count()
        self.calls: list[ScriptCall] = []
        eot = self.tokenizer.encode(end_of_turn, add_special_tokens=False)
        if len(eot) != 1:
            raise ValueError(f"end_of_turn {end_of_turn!r} is not a single token")
        self.end_of_turn_id = int(eot[0])

    def _reply(self, call: ScriptCall) -> str:
        if self._replies is None:
            return self._script(call)  # type: ignore[operator]
        try:
            return next(self._replies)
        except StopIteration:
            raise RuntimeError(f"scripted policy ran out of replies at call {call.index}") from None

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        call = ScriptCall(next(self._counter), list(prompt_ids),
                          self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
        self.calls.append(call)
        ids = list(self.tokenizer.encode(self._reply(call), add_special_tokens=False)) + [self.end_of_turn_id]
        finish = "stop"
        if len(ids) >= params.max_new_tokens:
            # like SGLang, the length limit wins even when the last allowed token is the stop token
            ids, finish = ids[: params.max_new_tokens], "length"
        logprobs = await self.scorer.score_async(list(prompt_ids), ids, params.temperature)
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return Completion(token_ids=ids, logprobs=logprobs, finish_reason=finish, text=text,  # type: ignore[arg-type]
                          prompt_tokens=len(prompt_ids), rid=uuid.uuid4().hex, weight_version="scripted")

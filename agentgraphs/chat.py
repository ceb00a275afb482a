"""Chat templates, append-only. The single module that knows how prompts are rendered.

The first prompt of a conversation is rendered once with the tokenizer's chat template and encoded
with add_special_tokens=False. After that a conversation only grows by APPENDING:
- the engine's output ids, exactly as returned (trained);
- template glue and new messages (tool results, user turns), encoded on their own (masked).
History is never re-rendered or re-tokenized, so the ids the model saw are the ids we train on.

Glue for new messages is found by rendering a two-message probe conversation with and without the
new messages and keeping the text after the probe assistant's end-of-turn token: this works for any
template that renders each message independently of later ones (Qwen2.5, Qwen3, Llama 3, ...).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .errors import TemplateError
from .long_text import Tokenizer, encode_text

Message = Mapping[str, Any]

_SEGMENT_CACHE_CHARS = 2048
_SEGMENT_CACHE_SIZE = 512
_PROBE_USER = "\u2063probe-user\u2063"
_PROBE_ASSISTANT = "\u2063probe-assistant\u2063"


class ChatTemplate:
    """Renders first prompts and append-only glue for one tokenizer.

    `template_kwargs` go to `apply_chat_template` (e.g. `{"enable_thinking": False}` for Qwen3).

    >>> from transformers import AutoTokenizer
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> tpl = ChatTemplate(AutoTokenizer.from_pretrained(ensure_tiny_model()))  # Qwen2.5's template
    >>> ids = tpl.render([{"role": "user", "content": "Hi"}])
    >>> tpl.tokenizer.decode(ids)
    '<|im_start|>system\\nYou are Qwen, ...<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    >>> tpl.tokenizer.decode(tpl.glue([{"role": "user", "content": "And then?"}]))
    '\\n<|im_start|>user\\nAnd then?<|im_end|>\\n<|im_start|>assistant\\n'
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        template_kwargs: Mapping[str, Any] | None = None,
        end_of_turn: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.end_of_turn = end_of_turn or _end_of_turn_token(tokenizer)
        self.end_of_turn_id = _single_id(tokenizer, self.end_of_turn)
        self._glue_cache: dict[str, list[int]] = {}
        self._segment_cache: dict[str, list[int]] = {}

    # -- rendering -------------------------------------------------------------------------
    def render_text(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        kwargs: dict[str, Any] = dict(self.template_kwargs)
        if tools:
            kwargs["tools"] = list(tools)
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
        if not isinstance(text, str):
            raise TemplateError("apply_chat_template(tokenize=False) did not return a string")
        return text

    def encode(self, text: str) -> list[int]:
        """Encode template text: special tokens in the text are matched, none are added."""
        return encode_text(self.tokenizer, text)

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        splice: Mapping[str, Sequence[int]] | None = None,
    ) -> list[int]:
        """The first prompt of a conversation, ending with the assistant generation header.

        `splice` maps placeholder strings in message contents to token ids inserted verbatim:
        a document chunk that is already tokenized stays exactly those ids (no decode/re-encode).
        Each placeholder must occur exactly once in the rendered text.
        """
        if not messages:
            raise TemplateError("cannot render an empty message list: give at least one user message")
        text = self.render_text(messages, tools=tools)
        if not splice:
            return self.encode(text)
        return self._encode_spliced(text, splice)

    def _encode_spliced(self, text: str, splice: Mapping[str, Sequence[int]]) -> list[int]:
        positions: list[tuple[int, str]] = []
        for placeholder in splice:
            count = text.count(placeholder)
            if count != 1:
                raise TemplateError(
                    f"splice placeholder {placeholder!r} occurs {count} times in the rendered prompt; "
                    "use a placeholder string that appears exactly once"
                )
            positions.append((text.index(placeholder), placeholder))
        ids: list[int] = []
        cursor = 0
        for at, placeholder in sorted(positions):
            ids.extend(self._encode_segment(text[cursor:at]))
            ids.extend(map(int, splice[placeholder]))
            cursor = at + len(placeholder)
        ids.extend(self._encode_segment(text[cursor:]))
        return ids

    def _encode_segment(self, text: str) -> list[int]:
        # the text around a spliced chunk repeats call after call (e.g. MemAgent's "</section> ...
        # Updated memory:" tail): short segments are encoded once per template
        if len(text) > _SEGMENT_CACHE_CHARS:
            return self.encode(text)
        cached = self._segment_cache.get(text)
        if cached is None:
            cached = self.encode(text)
            if len(self._segment_cache) >= _SEGMENT_CACHE_SIZE:
                self._segment_cache.pop(next(iter(self._segment_cache)))
            self._segment_cache[text] = cached
        return cached

    def glue_text(self, messages: Sequence[Message]) -> str:
        """Text to append after an assistant end-of-turn token: the new messages + generation header."""
        if not messages:
            raise TemplateError("glue needs at least one new message (tool result or user turn)")
        probe: list[dict[str, Any]] = [
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": _PROBE_ASSISTANT},
        ]
        full = self.render_text(probe + [dict(m) for m in messages])
        at = full.find(_PROBE_ASSISTANT)
        if at < 0:
            raise TemplateError("the chat template dropped the assistant message content; cannot find glue")
        end = full.find(self.end_of_turn, at)
        if end < 0:
            raise TemplateError(
                f"the chat template does not close assistant turns with {self.end_of_turn!r}; "
                "pass end_of_turn= to ChatTemplate"
            )
        return full[end + len(self.end_of_turn):]

    def glue(self, messages: Sequence[Message]) -> list[int]:
        """Ids to append after the model's end-of-turn token (masked in training)."""
        key = repr([sorted(dict(m).items()) for m in messages])
        cached = self._glue_cache.get(key)
        if cached is None:
            cached = self.encode(self.glue_text(messages))
            if len(self._glue_cache) < 256:
                self._glue_cache[key] = cached
        return list(cached)


def _end_of_turn_token(tokenizer: Tokenizer) -> str:
    # Qwen/ChatML close turns with <|im_end|>, which is also their eos in instruct checkpoints.
    for candidate in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        ids = tokenizer.encode(candidate, add_special_tokens=False)
        if len(ids) == 1:
            return candidate
    if tokenizer.eos_token:
        return tokenizer.eos_token
    raise TemplateError("tokenizer has no end-of-turn token; pass end_of_turn= to ChatTemplate")


def _single_id(tokenizer: Tokenizer, token: str) -> int:
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise TemplateError(f"end-of-turn token {token!r} is not a single token in this vocabulary")
    return int(ids[0])


class Conversation:
    """An append-only token sequence for one chat with the policy.

    `ids` is always the next prompt. Plain Python state: nodes rebuild it from the Turns in graph
    state (see `agentgraphs.node`), so it never needs to be checkpointed itself.

    >>> import asyncio
    >>> from agentgraphs.engines import SamplingParams
    >>> from agentgraphs.engines.hf import HFEngine
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> engine = HFEngine.from_dir(ensure_tiny_model(), device="cpu", seed=0)
    >>> tpl = ChatTemplate(engine.tokenizer)
    >>> conv = Conversation.start(tpl, [{"role": "user", "content": "2+2?"}])
    >>> completion = asyncio.run(engine.generate(conv.ids, SamplingParams(max_new_tokens=3)))
    >>> completion.finish_reason  # cut short: the output has no <|im_end|>
    'length'
    >>> conv.add_output(completion.token_ids, completion.finish_reason)
    >>> glue = conv.add_messages([{"role": "user", "content": "Why?"}])  # masked ids, <|im_end|> first
    >>> tpl.tokenizer.decode(glue)
    '<|im_end|>\\n<|im_start|>user\\nWhy?<|im_end|>\\n<|im_start|>assistant\\n'
    >>> conv.ids == tpl.render([{"role": "user", "content": "2+2?"}]) + completion.token_ids + glue
    True
    """

    def __init__(self, template: ChatTemplate, ids: Sequence[int]) -> None:
        self.template = template
        self.ids: list[int] = list(ids)

    @classmethod
    def start(
        cls, template: ChatTemplate, messages: Sequence[Message], *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> "Conversation":
        return cls(template, template.render(messages, tools=tools))

    def add_output(self, output_ids: Sequence[int], finish_reason: str) -> None:
        """Append the engine's output ids exactly as returned."""
        if finish_reason == "abort":
            raise TemplateError("an aborted generation cannot be continued; end the episode")
        self.ids.extend(output_ids)

    def add_messages(self, messages: Sequence[Message]) -> list[int]:
        """Append glue + new messages + the generation header. Returns the appended (masked) ids.

        If the previous output did not end with the end-of-turn token (finish by length, or a stop
        string), the end-of-turn token is appended first as glue so the template stays well formed.
        """
        added: list[int] = []
        if not self.ids or self.ids[-1] != self.template.end_of_turn_id:
            added.append(self.template.end_of_turn_id)
        added.extend(self.template.glue(messages))
        self.ids.extend(added)
        return added

"""Chat templates, append-only. The single module that knows how prompts are rendered.

The first prompt of a conversation is rendered once with the tokenizer's chat template and encoded
with add_special_tokens=False. After that a conversation only grows by APPENDING:
- the engine's output ids, exactly as returned (trained);
- template glue and new messages (tool results, user turns), encoded on their own (masked).
History is never re-rendered or re-tokenized, so the ids the model saw are the ids we train on.

Glue for new messages is found by rendering a two-message probe conversation with and without the
new messages and keeping the text after the probe assistant's end-of-turn token: this works for any
template that renders each message independently of later ones (Qwen2.5, Qwen3, Llama 3, ...).

A template that treats message contents as opaque text (it only writes them out and tests whether they are
empty: Qwen2.5's does; Qwen3's, which splits out <think> blocks, does not) is rendered exactly by its
*skeleton*: the same messages with each content replaced by a short placeholder, then the placeholders
replaced by the contents. `ChatTemplate.render_skeleton` gives it, so checking what a long history renders to
costs a few characters per message instead of the whole text (`agentgraphs.chat_model` uses it).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterator, Mapping, Sequence

from .errors import ConfigError, TemplateError, did_you_mean
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
        check_kwargs: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        if check_kwargs:  # off for a helper's template: a context's kwargs are the policy's, shared with helpers
            check_template_kwargs(getattr(tokenizer, "chat_template", None), self.template_kwargs)
        self.end_of_turn = end_of_turn or _end_of_turn_token(tokenizer)
        self.end_of_turn_id = _single_id(tokenizer, self.end_of_turn)
        self._glue_cache: dict[str, list[int]] = {}
        self._segment_cache: dict[str, list[int]] = {}
        self._keys_read: dict[str, frozenset[str] | None] = {}  # template source -> message_keys_read
        self._skeletons: dict[tuple[Any, ...], str] = {}  # structure of a message list -> its skeleton's text
        self._backend_decode = _backend_decode(tokenizer)

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

    def decode(self, ids: Sequence[int]) -> str:
        """The text `ids` stand for, special tokens and spaces as they are: `tokenizer.decode(ids,
        skip_special_tokens=False, clean_up_tokenization_spaces=False)`. A tokenizer whose decoding is transformers'
        own over a `tokenizers` backend is decoded by the backend directly (the same text, without transformers'
        per-id type checks)."""
        if self._backend_decode is not None:
            return self._backend_decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

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

    def render_skeleton(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> Skeleton | None:
        """`render_text` of `messages` with every non-empty string content replaced by a placeholder, when
        the template provably renders contents verbatim (`content_opaque`); None otherwise. The full text is
        `skeleton.fill(contents)`, so a caller can check a long history by its placeholders and the text of
        the messages it has not seen yet.

        >>> from transformers import AutoTokenizer
        >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
        >>> tpl = ChatTemplate(AutoTokenizer.from_pretrained(ensure_tiny_model()))
        >>> msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
        >>> sk = tpl.render_skeleton(msgs)
        >>> sk.fill(sk.text) == tpl.render_text(msgs)
        True
        """
        source, keys = self._template_keys(tools)
        if keys is None:
            return None
        shown: list[dict[str, Any]] = []
        contents: dict[str, str] = {}
        for i, m in enumerate(messages):
            entry = dict(m)
            content = entry.get("content")
            if isinstance(content, str) and content:
                entry["content"] = placeholder = f"{_HOLE_OPEN}{i}{_HOLE_CLOSE}"
                contents[placeholder] = content
            shown.append(entry)
        # the skeleton depends only on the keys the template reads (contents: whether empty), so message lists
        # of one structure (1,024 rollouts of one agent at the same turn) share one rendering; a template that
        # reads the clock (strftime_now) is rendered every time
        structure = None if "strftime_now" in source else _structure(shown, keys, tools, add_generation_prompt)
        text = self._skeletons.get(structure) if structure is not None else None
        if text is None:
            text = self.render_text(shown, tools=tools, add_generation_prompt=add_generation_prompt)
            found = _HOLE.findall(text)
            if len(found) != len(contents) or set(found) != set(contents):
                return None  # a content written twice or dropped: not the simple case, render it whole
            if structure is not None:
                if len(self._skeletons) >= _SKELETON_CACHE_SIZE:
                    self._skeletons.clear()  # shapes of a run repeat: start over rather than track use
                self._skeletons[structure] = text
        return Skeleton(text, contents)

    def content_opaque(self, tools: Sequence[Mapping[str, Any]] | None = None) -> bool:
        """Whether the chat template (the one `apply_chat_template` picks for these tools) uses message contents
        only by writing them out whole and by testing them (empty, a string, defined): then rendering with
        placeholders and filling them in gives exactly the text the contents render to. Decided once per
        template from its Jinja syntax tree; anything the check does not understand counts as not opaque."""
        return self._template_keys(tools)[1] is not None

    def _template_keys(self, tools: Sequence[Mapping[str, Any]] | None) -> tuple[str, frozenset[str] | None]:
        """(the template's source, the message keys it reads, None when not content-opaque)."""
        getter = getattr(self.tokenizer, "get_chat_template", None)
        try:
            source = getter(self.template_kwargs.get("chat_template"), tools=list(tools) if tools else None) \
                if getter is not None else None
        except Exception:  # noqa: BLE001  (no template, or an ambiguous set of named ones)
            source = None
        if not isinstance(source, str):
            return "", None
        if source not in self._keys_read:
            self._keys_read[source] = message_keys_read(source)
        return source, self._keys_read[source]

    def glue_text(self, messages: Sequence[Message]) -> str:
        """Text to append after an assistant end-of-turn token: the new messages + generation header."""
        if not messages:
            raise TemplateError("glue needs at least one new message (tool result or user turn)")
        probe: list[dict[str, Any]] = [
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": _PROBE_ASSISTANT},
        ]
        conversation = probe + [dict(m) for m in messages]
        # a content-opaque template's skeleton of this shape is rendered once and filled in (render_skeleton)
        skeleton = self.render_skeleton(conversation)
        full = skeleton.fill(skeleton.text) if skeleton is not None else self.render_text(conversation)
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


def _backend_decode(tokenizer: Any) -> Any:
    """The `tokenizers` backend's decode when `tokenizer.decode` is exactly transformers' fast decoding (no subclass
    or instance overrides it; with clean-up off it is the backend's decode), else None."""
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    except ImportError:
        return None
    cls = type(tokenizer)
    if (not isinstance(tokenizer, PreTrainedTokenizerFast) or "decode" in vars(tokenizer) or "_decode" in vars(tokenizer)
            or cls.decode is not PreTrainedTokenizerBase.decode or cls._decode is not PreTrainedTokenizerFast._decode):
        return None
    return getattr(getattr(tokenizer, "backend_tokenizer", None), "decode", None)


_HOLE_OPEN, _HOLE_CLOSE = "\u2063\u2063", "\u2064"  # invisible separator / plus: never in template text
_HOLE = re.compile(f"{_HOLE_OPEN}[0-9]+{_HOLE_CLOSE}")


_SKELETON_CACHE_SIZE = 4096
_ABSENT = object()


def _structure(messages: Sequence[Mapping[str, Any]], keys: frozenset[str], tools: Any,
               add_generation_prompt: bool) -> tuple[Any, ...]:
    """What a content-opaque template's rendering of `messages` can depend on: per message the values of the
    keys it reads (contents already replaced by their placeholders), the tools and the generation prompt."""
    import json

    def value(v: Any) -> Any:
        if v is None or type(v) in (str, int, float, bool):
            return v
        return json.dumps(v, sort_keys=True, default=str)

    order = sorted(keys)
    per_message = tuple(tuple(value(m[k]) if k in m else _ABSENT for k in order) for m in messages)
    return (value(list(tools) if tools else None), add_generation_prompt, per_message)


class Skeleton:
    """A template rendering with placeholders for message contents (`ChatTemplate.render_skeleton`)."""

    def __init__(self, text: str, contents: Mapping[str, str]) -> None:
        self.text = text
        self.contents = dict(contents)

    def fill(self, part: str) -> str:
        """`part` of the skeleton's text (a slice that cuts no placeholder) with its contents filled in."""
        return _HOLE.sub(lambda m: self.contents[m.group(0)], part)

    def placeholders(self, part: str) -> list[str]:
        return _HOLE.findall(part)


_STRING_BUILDING = ("Add", "Concat")  # a content inside these still reaches the output whole
_TESTS_OF_KIND = frozenset({"string", "none", "defined", "undefined"})
_CAPTURING = ("FilterBlock", "AssignBlock", "CallBlock", "Macro")  # output that is captured, not written


def template_is_content_opaque(source: str) -> bool:
    """Whether a chat template uses message contents only by writing them out whole (`{{ m.content }}`, maybe
    concatenated with other strings) and by testing them (`if m.content`, `is string` / `none` / `defined`),
    and uses messages only through constant keys (`m.role`, `messages[0]['content']`). Conservative: a
    filter, a method, a comparison, an assignment or a macro that touches either makes it False.

    >>> template_is_content_opaque("{% for m in messages %}{{ m.role + ': ' + m.content }}{% endfor %}")
    True
    >>> template_is_content_opaque("{% for m in messages %}{{ m.content | trim }}{% endfor %}")
    False
    >>> template_is_content_opaque("{% for m in messages %}{% if '<think>' in m.content %}x{% endif %}{% endfor %}")
    False
    """
    return message_keys_read(source) is not None


def check_template_kwargs(source: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse template kwargs the chat template `source` never reads, and booleans given as text: either
    renders exactly as if it were not given (`enable_thinkng: false` leaves Qwen3 thinking; so does
    `enable_thinking: "false"`, a non-empty string being true), so the run would differ from what was asked.

    >>> source = "{% if enable_thinking is false %}<think></think>{% endif %}"
    >>> check_template_kwargs(source, {"enable_thinkng": False})
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: template kwarg 'enable_thinkng' is not read ... 'enable_thinking'?)...
    """
    if not kwargs:
        return
    for key, value in kwargs.items():
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            raise ConfigError(f"template kwarg {key!r} is the text {value!r}: pass the boolean {value.strip().lower()} "
                              "(in a template any non-empty text is true)")
    read = template_variables(source) if isinstance(source, str) else None
    if read is None:
        return  # no template text (or several named ones, or one jinja cannot parse): nothing to check against
    names = sorted(read | {"add_generation_prompt", "messages", "tools"})
    for key in kwargs:
        if key not in read:
            raise ConfigError(f"template kwarg {key!r} is not read by this chat template, so it would change "
                              f"nothing{did_you_mean(key, names)}; the template reads: {', '.join(names)}")


@functools.lru_cache(maxsize=32)
def template_variables(source: str) -> frozenset[str] | None:
    """The variables a chat template reads from its caller (None when jinja cannot parse it); parsed once per
    template text, since a context builds its policy's ChatTemplate once per rollout.

    >>> sorted(template_variables("{% if enable_thinking %}x{% endif %}{{ messages }}"))
    ['enable_thinking', 'messages']
    """
    from jinja2 import meta
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        env = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"])
        return frozenset(meta.find_undeclared_variables(env.parse(source)))
    except TemplateSyntaxError:
        return None


def message_keys_read(source: str) -> frozenset[str] | None:
    """The keys a content-opaque chat template reads from messages (`role`, `content`, `tool_calls`, ...); None
    when it is not content-opaque (`template_is_content_opaque`). What a template writes for a list of messages
    depends only on these keys' values (for contents: whether they are empty strings), the number of messages,
    the tools and the template's own arguments.

    >>> sorted(message_keys_read("{% for m in messages %}{{ m.role + ': ' + m.content }}{% endfor %}"))
    ['content', 'role']
    """
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        tree = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                             extensions=["jinja2.ext.loopcontrols"]).parse(source)
    except TemplateSyntaxError:
        return False
    parent: dict[int, Any] = {}
    for node in tree.find_all(nodes.Node):
        for child in node.iter_child_nodes():
            parent[id(child)] = node
    message_names = _message_names(tree)

    def up(node: Any) -> Any:
        return parent.get(id(node))

    def is_messages(node: Any) -> bool:  # `messages`, or a slice / reversal of it
        if isinstance(node, nodes.Name):
            return node.name == "messages"
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            return is_messages(node.node)
        if isinstance(node, nodes.Filter) and node.name in ("reverse", "list"):
            return node.node is not None and is_messages(node.node)
        return False

    def is_message(node: Any) -> bool:  # one message: a loop name over messages, or messages[i]
        if isinstance(node, nodes.Name):
            return node.name in message_names and node.ctx == "load"
        return isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice) and is_messages(node.node)

    def keyed(node: Any) -> str | None:  # the constant key of `x.key` / `x['key']`, read (not called)
        if isinstance(node, nodes.Getattr):
            key: Any = node.attr
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            key = node.arg.value
        else:
            return None
        holder = up(node)
        if isinstance(holder, nodes.Call) and holder.node is node:
            return None  # a method (`m.get('content')`, `m.items()`)
        return key if isinstance(key, str) else None

    def written_whole(node: Any) -> bool:
        holder = up(node)
        while isinstance(holder, (nodes.Add, nodes.Concat, nodes.CondExpr)):
            if isinstance(holder, nodes.CondExpr) and holder.test is node:
                return tested(node)
            node, holder = holder, up(holder)
        if not isinstance(holder, nodes.Output):
            return False
        return not any(type(a).__name__ in _CAPTURING for a in _ancestors(holder, up))

    def tested(node: Any) -> bool:
        holder = up(node)
        while True:
            if isinstance(holder, nodes.Test) and holder.node is node and holder.name in _TESTS_OF_KIND:
                node, holder = holder, up(holder)
            elif isinstance(holder, (nodes.Not, nodes.And, nodes.Or)):
                node, holder = holder, up(holder)
            else:
                break
        return isinstance(holder, (nodes.If, nodes.CondExpr)) and holder.test is node

    keys: set[str] = set()
    for node in tree.find_all((nodes.Name, nodes.Getitem, nodes.Getattr, nodes.Filter)):
        if is_messages(node) and not is_message(node):
            holder = up(node)
            used_as = (isinstance(holder, nodes.For) and holder.iter is node
                       or isinstance(holder, nodes.Getitem) and holder.node is node
                       or isinstance(holder, nodes.Filter) and holder.node is node
                       and holder.name in ("length", "reverse", "list"))
            if not used_as and not is_messages(holder):
                return None
        elif is_message(node):
            key = keyed(up(node))
            if key is None or (isinstance(up(node), nodes.Getitem) and up(node).node is not node):
                return None
            if key == "content" and not (written_whole(up(node)) or tested(up(node))):
                return None
            keys.add(key)
    return frozenset(keys)


def _ancestors(node: Any, up: Any) -> Iterator[Any]:
    node = up(node)
    while node is not None:
        yield node
        node = up(node)


def _message_names(tree: Any) -> set[str]:
    """Names a `for` binds to the items of `messages` (or a slice / reversal of it)."""
    from jinja2 import nodes

    def over_messages(node: Any) -> bool:
        if isinstance(node, nodes.Name):
            return node.name == "messages"
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            return over_messages(node.node)
        return isinstance(node, nodes.Filter) and node.name in ("reverse", "list") and node.node is not None \
            and over_messages(node.node)

    names: set[str] = set()
    for loop in tree.find_all(nodes.For):
        if over_messages(loop.iter) and isinstance(loop.target, nodes.Name):
            names.add(loop.target.name)
    return names


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

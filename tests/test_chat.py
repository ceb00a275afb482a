"""Append-only chat templating and the round-trip traps it exists to avoid."""

from __future__ import annotations


import pytest

from agentgraphs.chat import ChatTemplate, Conversation
from agentgraphs.context import AgentContext
from agentgraphs.errors import ConfigError, TemplateError
from agentgraphs.testing.fake_engines import FixedLatencyEngine


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def test_first_prompt_is_the_template_rendered_once(qwen25) -> None:
    tpl = ChatTemplate(qwen25)
    ids = tpl.render([{"role": "user", "content": "Hi"}])
    assert ids[-3:] == [151644, 77091, 198]  # <|im_start|>assistant\n
    assert "You are Qwen, created by Alibaba Cloud." in qwen25.decode(ids)  # Qwen2.5's default system prompt
    assert tpl.end_of_turn == "<|im_end|>" and tpl.end_of_turn_id == 151645


def test_append_only_equals_full_render_for_clean_text(qwen25) -> None:
    """For text that tokenizes canonically, appending equals re-rendering the whole history."""
    tpl = ChatTemplate(qwen25)
    u1 = {"role": "user", "content": "What is 2+2?"}
    a1 = "It is 4."
    u2 = {"role": "user", "content": "Are you sure?"}
    conv = Conversation.start(tpl, [u1])
    conv.add_output(_ids(qwen25, a1) + [tpl.end_of_turn_id], "stop")
    glue = conv.add_messages([u2])
    full = _ids(qwen25, tpl.render_text([u1, {"role": "assistant", "content": a1}, u2]))
    assert conv.ids == full
    assert qwen25.decode(glue) == "\n<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    "name, generated, text",
    [
        ("space-merge", [220, 9707], " Hello"),  # " " + "Hello" re-encodes to [21927]
        ("double-newline", [198, 198], "\n\n"),  # re-encodes to [271]
    ],
)
def test_generated_ids_are_never_re_encoded(qwen25, name: str, generated: list[int], text: str) -> None:
    tpl = ChatTemplate(qwen25)
    assert qwen25.decode(generated) == text
    assert _ids(qwen25, text) != generated, "the trap must be real: re-encoding changes the ids"
    conv = Conversation.start(tpl, [{"role": "user", "content": "Say it"}])
    start = len(conv.ids)
    out = generated + [tpl.end_of_turn_id]
    conv.add_output(out, "stop")
    conv.add_messages([{"role": "user", "content": "again"}])
    assert conv.ids[start:start + len(out)] == out


def test_multibyte_character_split_across_tokens(qwen25) -> None:
    # a CJK character that the vocabulary spells with more than one byte-level token
    char = next(c for c in "龘鱻麤𠀀𪚥" if len(_ids(qwen25, c)) > 1)
    pieces = _ids(qwen25, char)
    partial = pieces[:1]  # the model stopped in the middle of the character
    assert "\ufffd" in qwen25.decode(partial)
    assert _ids(qwen25, qwen25.decode(partial)) != partial  # decode/encode is lossy here
    tpl = ChatTemplate(qwen25)
    conv = Conversation.start(tpl, [{"role": "user", "content": "Write a rare character"}])
    start = len(conv.ids)
    conv.add_output(partial, "length")
    appended = conv.add_messages([{"role": "user", "content": "Continue"}])
    assert conv.ids[start:start + 1] == partial
    assert appended[0] == tpl.end_of_turn_id  # no <|im_end|> was generated: it is added as glue


def test_length_truncated_turn_gets_masked_end_token(qwen25) -> None:
    tpl = ChatTemplate(qwen25)
    conv = Conversation.start(tpl, [{"role": "user", "content": "Count"}])
    out = _ids(qwen25, "1 2 3")
    conv.add_output(out, "length")
    glue = conv.add_messages([{"role": "user", "content": "Go on"}])
    assert glue[0] == 151645
    assert qwen25.decode(glue[1:]).startswith("\n<|im_start|>user\nGo on")


def test_aborted_output_cannot_be_continued(qwen25) -> None:
    conv = Conversation.start(ChatTemplate(qwen25), [{"role": "user", "content": "x"}])
    with pytest.raises(TemplateError):
        conv.add_output([9707], "abort")


def test_tool_observations_grouped_like_the_template(qwen25) -> None:
    tpl = ChatTemplate(qwen25)
    text = tpl.glue_text([{"role": "tool", "content": "R1"}, {"role": "tool", "content": "R2"}])
    assert text == ("\n<|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n"
                    "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_splice_inserts_ids_verbatim(qwen25) -> None:
    tpl = ChatTemplate(qwen25)
    chunk = [220, 9707, 198, 198]  # non-canonical ids survive splicing
    ids = tpl.render([{"role": "user", "content": "Read: <<C>> done"}], splice={"<<C>>": chunk})
    at = next(i for i in range(len(ids)) if ids[i:i + 4] == chunk)
    assert qwen25.decode(ids[:at]).endswith("Read: ")
    with pytest.raises(TemplateError, match="exactly once"):
        tpl.render([{"role": "user", "content": "no placeholder"}], splice={"<<C>>": chunk})


@pytest.mark.parametrize("thinking", [False, True])
def test_qwen3_thinking_blocks_kept_where_the_template_would_strip_them(qwen3, thinking: bool) -> None:
    tpl = ChatTemplate(qwen3, template_kwargs={"enable_thinking": thinking})
    u1 = {"role": "user", "content": "2+2?"}
    conv = Conversation.start(tpl, [u1])
    header = qwen3.decode(conv.ids[-6:])
    assert header.endswith("<think>\n\n</think>\n\n") != thinking
    reply = "<think>\nadd them\n</think>\n\n4" if thinking else "4"
    out = _ids(qwen3, reply) + [tpl.end_of_turn_id]
    prompt_len = len(conv.ids)
    conv.add_output(out, "stop")
    conv.add_messages([{"role": "user", "content": "and 3+3?"}])
    # append-only: the next prompt starts with exactly what the model saw and generated
    assert conv.ids[:prompt_len + len(out)] == tpl.render([u1]) + out
    if thinking:
        # re-rendering the history would drop the earlier <think> block: a different prefix
        rerendered = _ids(qwen3, tpl.render_text([u1, {"role": "assistant", "content": reply},
                                                  {"role": "user", "content": "and 3+3?"}]))
        assert rerendered[:prompt_len + len(out)] != conv.ids[:prompt_len + len(out)]
        assert "add them" not in qwen3.decode(rerendered)


def _random_text(seed: int, n_chars: int) -> str:
    import random

    rng = random.Random(seed)
    pieces = ["the", "The", " ", "  ", "\n", "\n\n", "\t", "42", "3.14", "don't", "I'm", "naïve", "日本語",
              "🙂", "<|im_end|>", "<tool_call>", "’s", "--", "...", "é", "\u0301", "Zürich", "x" * 30, " 7",
              "A", "b", "\r\n", "ſ", "İ", "\u00a0", "  \n  ", "'S", "word", "Word", "WORD"]
    out: list[str] = []
    size = 0
    while size < n_chars:
        piece = rng.choice(pieces)
        out.append(piece)
        size += len(piece)
    return "".join(out)


@pytest.mark.parametrize("seed", range(6))
def test_encode_text_equals_tokenizer_encode_on_long_hostile_text(qwen25, seed: int) -> None:
    """encode_text cuts long texts into pieces for bounded memory: the ids must not change."""
    from agentgraphs.long_text import encode_text

    text = _random_text(seed, 70_000)
    assert encode_text(qwen25, text) == qwen25.encode(text, add_special_tokens=False)


def test_encode_text_equals_tokenizer_encode_on_qwen3(qwen3) -> None:
    from agentgraphs.long_text import encode_text

    text = _random_text(99, 50_000) + "<think>\nx\n</think>"
    assert encode_text(qwen3, text) == qwen3.encode(text, add_special_tokens=False)


def test_decode_is_the_tokenizers_decode(qwen25: object, qwen3: object) -> None:
    """ChatTemplate.decode (the backend's decode when transformers' is the plain fast one) gives exactly what
    `tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)` gives: special tokens,
    spaces before punctuation, characters cut between tokens, ids beyond the text vocabulary."""
    import random

    rng = random.Random(0)
    for tok in (qwen25, qwen3):
        tpl = ChatTemplate(tok)  # type: ignore[arg-type]
        assert tpl._backend_decode is not None  # the fast path is the one under test
        text = tok.apply_chat_template(  # type: ignore[attr-defined]
            [{"role": "user", "content": "Der Zug fährt , um 7 Uhr — 列车七点出发 🙂🚆 ?"}], tokenize=False)
        ids = tok.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
        cases = [ids, ids[:-3], ids[5:-7], [], *([rng.randrange(len(tok)) for _ in range(40)] for _ in range(20))]  # type: ignore[arg-type]
        for case in cases:
            assert tpl.decode(case) == tok.decode(case, skip_special_tokens=False,  # type: ignore[attr-defined]
                                                  clean_up_tokenization_spaces=False)


def test_template_kwargs_the_template_never_reads_are_refused(qwen25, qwen3) -> None:
    with pytest.raises(ConfigError, match="'enable_thinkng' is not read .*did you mean 'enable_thinking'"):
        ChatTemplate(qwen3, template_kwargs={"enable_thinkng": False})
    with pytest.raises(ConfigError, match="the text 'false': pass the boolean false"):
        ChatTemplate(qwen3, template_kwargs={"enable_thinking": "false"})
    with pytest.raises(ConfigError, match="'enable_thinking' is not read by this chat template"):
        ChatTemplate(qwen25, template_kwargs={"enable_thinking": False})  # Qwen2.5's template has no such switch
    ChatTemplate(qwen25, template_kwargs={"enable_thinking": False}, check_kwargs=False)  # a helper's template
    # a context's kwargs are checked against its policy's template only: a helper of another family reads none
    ctx = AgentContext(policy=FixedLatencyEngine(latency_s=0.0), tokenizer=qwen3, tokenizers={"judge": qwen25},
                       template_kwargs={"enable_thinking": False})
    assert ctx.template("judge").template_kwargs == {"enable_thinking": False}
    with pytest.raises(ConfigError, match="enable_thinkng"):
        AgentContext(policy=FixedLatencyEngine(latency_s=0.0), tokenizer=qwen3,
                     template_kwargs={"enable_thinkng": False}).template()

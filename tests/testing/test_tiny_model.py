"""The tiny model kit: real Qwen tokenizer facts, real chat templates, deterministic offline builds."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from agentgraphs.testing.tiny_model import (
    DEFAULT_SYSTEM_PROMPT,
    added_tokens,
    build_tiny_model,
    ensure_tiny_model,
)


@pytest.fixture(scope="module")
def tokenizer(qwen25):
    return qwen25


@pytest.fixture(scope="module")
def qwen3_tokenizer(qwen3):
    return qwen3


def test_real_qwen_token_ids(tokenizer) -> None:
    assert tokenizer.encode(" Hello", add_special_tokens=False) == [21927]
    assert tokenizer.encode("\n\n", add_special_tokens=False) == [271]
    assert tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False) == [151644, 77091, 198]
    assert tokenizer.decode([151645]) == "<|im_end|>"
    # the pitfall the whole library guards against: decoded pieces do not re-encode to the same ids
    assert tokenizer.encode(tokenizer.decode([220, 9707]), add_special_tokens=False) == [21927]


def test_special_tokens_sit_at_qwen25_ids(tokenizer) -> None:
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 151645
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id == 151643
    for token_id, content, _ in added_tokens("qwen2.5"):
        assert tokenizer.convert_tokens_to_ids(content) == token_id
    assert tokenizer.convert_ids_to_tokens(151664) == "<|file_sep|>"
    assert len(tokenizer) == 151665
    # as in Qwen2.5: tool-call markers are added but not "special", so skipping specials keeps them
    assert tokenizer.decode([151657, 151645], skip_special_tokens=True) == "<tool_call>"


def test_qwen3_adds_think_and_tool_response(qwen3_tokenizer) -> None:
    expected = {"<tool_response>": 151665, "</tool_response>": 151666, "<think>": 151667, "</think>": 151668}
    for content, token_id in expected.items():
        assert qwen3_tokenizer.convert_tokens_to_ids(content) == token_id
    assert len(qwen3_tokenizer) == 151669


def test_model_loads_with_the_promised_config(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (64, 2, 151936)
    assert config["tie_word_embeddings"] and config["torch_dtype"] == "float32"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.get_output_embeddings().weight.shape == (151936, 64)
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_builds_are_deterministic_per_seed(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=7)
    b = build_tiny_model(tmp_path / "b", seed=7)
    c = build_tiny_model(tmp_path / "c", seed=8)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_qwen25_template_injects_default_system_prompt(tokenizer) -> None:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen25_template_hermes_tools(tokenizer) -> None:
    tool = {"type": "function", "function": {"name": "add", "description": "add", "parameters": {}}}
    messages = [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
        {"role": "tool", "content": "3"},
        {"role": "tool", "content": "ok"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[tool], tokenize=False)
    assert text.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}\n\n# Tools\n")
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>' in text
    # consecutive tool results share one user turn
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>\n"
    )


def test_qwen3_template_thinking_switch(qwen3_tokenizer) -> None:
    messages = [{"role": "user", "content": "hi"}]
    off = qwen3_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert off == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    on = qwen3_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert on.endswith("<|im_start|>assistant\n")


def test_qwen3_template_strips_earlier_think_blocks(qwen3_tokenizer) -> None:
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>\nsecret reasoning\n</think>\n\nanswer one"},
        {"role": "user", "content": "q2"},
    ]
    text = qwen3_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "secret reasoning" not in text
    assert "<|im_start|>assistant\nanswer one<|im_end|>\n" in text


def test_ensure_builds_once_and_survives_a_race(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: ensure_tiny_model(target), range(2)))
    assert paths == [target, target]
    assert (target / "model.safetensors").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temp dirs left behind
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(target) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp


def test_unknown_template_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="template"):
        build_tiny_model(tmp_path, template="llama")  # type: ignore[arg-type]


def test_size_options_shape_the_model(tmp_path: Path, agentgraphs_cache: Path) -> None:
    import torch
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    runner = CliRunner()
    args = ["tiny-model", str(tmp_path / "m"), "--hidden-size", "96", "--layers", "3", "--heads", "6",
            "--intermediate-size", "200", "--init-scale", "0.1"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["num_key_value_heads"], config["intermediate_size"]) == (96, 3, 6, 3, 200)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert len(model.model.layers) == 3 and model.model.layers[0].mlp.up_proj.weight.shape == (200, 96)
    # the init scale is the std of the normal init: 151936 x 96 embedding entries pin it to well under 1%
    assert float(model.get_input_embeddings().weight.detach().std()) == pytest.approx(0.1, rel=0.01)
    with torch.no_grad():
        assert model(torch.tensor([[151644, 872]])).logits.shape == (1, 2, 151936)

    bad = runner.invoke(app, ["tiny-model", str(tmp_path / "bad"), "--hidden-size", "64", "--heads", "3"])
    said = " ".join(bad.output.split())
    assert bad.exit_code == 2 and "must be a multiple of --heads (num_heads) 3" in said, bad.output
    assert not (tmp_path / "bad" / "config.json").exists()


@pytest.mark.parametrize(("flags", "words"), [
    (["--init-scale", "0"], "--init-scale (init_std) must be a number in (0, 10], got 0.0"),
    (["--heads", "8", "--kv-heads", "3"], "--heads (num_heads) 8 must be a multiple of --kv-heads (num_kv_heads) 3"),
    (["--layers", "0"], "--layers (num_layers) must be a positive integer, got 0"),
])
def test_size_errors_name_the_flags(flags: list[str], words: str, tmp_path: Path) -> None:
    """Before: `tiny-model --init-scale 0` said `init_std must be ...`, `--heads 8 --kv-heads 3` said `heads 8 must be
    a multiple of kv_heads 3`: Python parameter names, not the flags the user typed."""
    from typer.testing import CliRunner

    from agentgraphs.cli import app

    r = CliRunner().invoke(app, ["tiny-model", str(tmp_path / "m"), *flags])
    assert r.exit_code == 2 and words in " ".join(r.output.split()), r.output


def test_cache_key_includes_the_size(agentgraphs_cache: Path) -> None:
    small = ensure_tiny_model(hidden_size=32, num_layers=1, init_std=0.05)
    wider = ensure_tiny_model(hidden_size=48, num_layers=1, init_std=0.05)
    sharper = ensure_tiny_model(hidden_size=32, num_layers=1, init_std=0.5)
    assert len({small, wider, sharper, ensure_tiny_model()}) == 4
    assert small.parent == agentgraphs_cache and "h32-l1-a4-kv2-i128-std0.05" in small.name
    assert json.loads((wider / "config.json").read_text())["hidden_size"] == 48
    assert json.loads((sharper / "config.json").read_text())["initializer_range"] == 0.5
    assert ensure_tiny_model(hidden_size=32, num_layers=1, init_std=0.05) == small  # built once, then reused

"""MemAgent trained as the seed trains it, from the outside: slime Samples in the seed's own row format go
through `rl_bridge.generate` against the SGLang-contract HTTP server (a scripted policy over the tiny model)
and `rl_bridge.reward_func`; the prompts the server received are compared with the seed's rendering.

The seed's rows (Takenzz/AgentFlow@4b5aa84 agentic/memagent/prepare_data.py:100-109, launched with
`--input-key prompt --label-key label`): {"prompt": question, "label": first answer, "metadata": {"context":
document, "ground_truth": [every answer]}}.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rl_bridge
from agentgraphs.memagent import FINAL_TEMPLATE, MEMORY_UPDATE_TEMPLATE
from agentgraphs.memagent.synthetic import make_needle_example
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import clear_cache
from tests.test_bridge import SLIME_SAMPLING, make_args
from tests.test_multiturn import RecordingEngine

C = 40  # document tokens per memory update in these runs


def reply(call: ScriptCall) -> str:
    return "The answer is \\boxed{Alice}." if "Your answer:" in call.prompt_text else "Alice wrote it."


@pytest.fixture()
def server(tiny_engine: Any) -> Iterator[Any]:
    recorder = RecordingEngine(ScriptedPolicy(tiny_engine, reply))
    with SGLangTestServer(recorder, port=0) as srv:
        srv.recorder = recorder  # type: ignore[attr-defined]
        yield srv
    clear_cache()


def seed_row_sample(tok: Any, question: str, label: str, ground_truth: list[str] | None = None) -> tuple[Sample, str]:
    document = make_needle_example(tok, 2 * C - 10, seed=7, needle_position=0.5, chunk_size=C)["document"]
    metadata: dict[str, Any] = {"context": document}
    if ground_truth is not None:
        metadata["ground_truth"] = ground_truth
    return Sample(group_index=0, index=0, prompt=question, label=label, metadata=metadata), document


def generate(srv: Any, model_dir: Path, s: Sample) -> Sample:
    args = make_args(srv.url, model_dir, "memagent", agentgraph_options={"chunk_tokens": C})
    out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 2048}))
    assert out.status == Sample.Status.COMPLETED, out.metadata
    out.reward = asyncio.run(rl_bridge.reward_func(args, out))
    return out


def seed_prompt_ids(tok: Any, content: str) -> list[int]:
    """The seed's rendering (agentflow/core/llm_engine.py:50-56): the chat template as text, tokenized whole."""
    text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_question_enters_the_prompts_as_the_row_gives_it(server: Any, tiny_model_dir: Path,
                                                             tiny_engine: Any) -> None:
    """The seed formats `sample.prompt` into both templates unchanged (rollout.py:106, 126-127, 138-139), so a
    question with surrounding whitespace keeps it in every prompt the policy is trained on."""
    tok = tiny_engine.tokenizer
    question = "  Who wrote the letter? \n"
    s, document = seed_row_sample(tok, question, "Alice")
    generate(server, tiny_model_dir, s)
    ids = tok.encode(document, add_special_tokens=False)
    prompts = [prompt for prompt, _ in server.recorder.calls]
    assert len(prompts) == 3  # two chunks, then the answer
    memories = ["No previous memory", "Alice wrote it."]
    for k in range(2):
        chunk = tok.decode(ids[k * C:(k + 1) * C], skip_special_tokens=True)
        content = MEMORY_UPDATE_TEMPLATE.format(prompt=question, memory=memories[k], chunk=chunk)
        assert prompts[k] == seed_prompt_ids(tok, content), k
    assert prompts[2] == seed_prompt_ids(tok, FINAL_TEMPLATE.format(prompt=question, memory="Alice wrote it."))
    # the trained sequences carry those prompts
    assert [t["tokens"][:len(p)] for t, p in zip(s.train_metadata["turns"], prompts)] == prompts


def test_a_blank_question_is_still_refused(server: Any, tiny_model_dir: Path, tiny_engine: Any) -> None:
    s, _ = seed_row_sample(tiny_engine.tokenizer, " \n ", "Alice")
    args = make_args(server.url, tiny_model_dir, "memagent", agentgraph_options={"chunk_tokens": C})
    out = asyncio.run(rl_bridge.generate(args, s, dict(SLIME_SAMPLING)))
    assert out.status == Sample.Status.FAILED and "'prompt'" in out.metadata["status_reason"]
    assert not server.recorder.calls


@pytest.mark.parametrize("ground_truth, boxed, reward", [
    (["Alice Smith", "Alice"], "Alice", 1.0),  # the second of the row's answers
    (["Alice Smith"], "Alice", 0.0),  # not one of them
    ([], "Alice", 0.0),  # an empty list: the label decides (rollout.py:276-278)
    ([], "Alice Smith", 1.0),
])
def test_a_seed_row_is_scored_against_the_ground_truths_in_its_metadata(
        tiny_model_dir: Path, tiny_engine: Any, ground_truth: list[str], boxed: str, reward: float) -> None:
    """The seed's reward takes its answers from metadata["ground_truth"] (every acceptable answer), the label
    (the first answer) only when that is empty (rollout.py:275-278, prepare_data.py:94-105)."""

    def answer(call: ScriptCall) -> str:
        return f"So: \\boxed{{{boxed}}}" if "Your answer:" in call.prompt_text else "Alice Smith, also Alice."

    with SGLangTestServer(ScriptedPolicy(tiny_engine, answer), port=0) as srv:
        s, _ = seed_row_sample(tiny_engine.tokenizer, "Who wrote the letter?", "Alice Smith", ground_truth)
        assert generate(srv, tiny_model_dir, s).reward == reward
    clear_cache()


@pytest.mark.parametrize("ground_truth, problem", [
    (["Alice", " "], "answer #2 of 2 is blank"),
    ({"a": 1}, "expected an answer"),
])
def test_bad_ground_truths_in_metadata_are_named_before_any_generation(
        server: Any, tiny_model_dir: Path, tiny_engine: Any, ground_truth: Any, problem: str) -> None:
    s, _ = seed_row_sample(tiny_engine.tokenizer, "Who wrote the letter?", "Alice", ground_truth)
    args = make_args(server.url, tiny_model_dir, "memagent", agentgraph_options={"chunk_tokens": C})
    out = asyncio.run(rl_bridge.generate(args, s, dict(SLIME_SAMPLING)))
    assert out.status == Sample.Status.FAILED
    assert "input field 'metadata.ground_truth'" in out.metadata["status_reason"], out.metadata["status_reason"]
    assert problem in out.metadata["status_reason"]
    assert not server.recorder.calls


def test_a_memory_update_cut_by_its_cap_is_trained_and_becomes_the_memory(tiny_model_dir: Path,
                                                                          tiny_engine: Any) -> None:
    """The seed caps a memory update at MEM_MAX_MEMORY tokens and does nothing special when it is cut: the cut
    response, stop-token text removed and stripped, is the next memory, and the turn is trained like any other
    (rollout.py:122-136); the trajectory's advantage is divided over all its turns (custom_convert.py:74-93)."""
    long_memory = "Alice Smith wrote the letter in Paris in the spring of the year nineteen hundred and two."

    def answer(call: ScriptCall) -> str:
        return "\\boxed{Alice Smith}" if "Your answer:" in call.prompt_text else long_memory

    tok = tiny_engine.tokenizer
    recorder = RecordingEngine(ScriptedPolicy(tiny_engine, answer))
    with SGLangTestServer(recorder, port=0) as srv:
        s, _ = seed_row_sample(tok, "Who wrote the letter?", "Alice Smith")
        args = make_args(srv.url, tiny_model_dir, "memagent", advantage_estimator="grpo", n_samples_per_prompt=2,
                         rollout_batch_size=1, global_batch_size=1,
                         agentgraph_options={"chunk_tokens": C, "memory_max_new_tokens": 8})
        out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 2048}))
    clear_cache()
    assert out.status == Sample.Status.TRUNCATED  # here any cut turn says so (README: "Not reproduced")
    calls = recorder.calls
    assert [c.finish_reason for _, c in calls] == ["length", "length", "stop"]
    # the next prompt carries the cut text as the memory, as the seed keeps it
    first_memory = calls[0][1].text.replace("<|im_end|>", "").replace("<|endoftext|>", "").strip()
    assert first_memory and long_memory.startswith(first_memory) and first_memory != long_memory
    assert calls[2][0] == seed_prompt_ids(tok, FINAL_TEMPLATE.format(prompt="Who wrote the letter?",
                                                                      memory=first_memory))
    turns = out.train_metadata["turns"]
    assert [t["loss_mask"] for t in turns[:2]] == [[1] * 8, [1] * 8]  # cut updates are trained
    assert out.reward == 1.0
    # a group of two: this trajectory (1.0) and a failed-answer copy (0.0): each of 3 rows gets its advantage / 3
    other = Sample(group_index=0, index=1, prompt=s.prompt, label=s.label, metadata=dict(s.metadata), tokens=out.tokens,
                   response_length=out.response_length, loss_mask=out.loss_mask,
                   rollout_log_probs=out.rollout_log_probs, status=out.status, reward=0.0,
                   train_metadata=out.train_metadata)
    data = rl_bridge.convert(args, [out, other])
    adv = 0.5 / (2 ** -0.5 + 1e-6)  # (r - mean) / (unbiased std + 1e-6)
    assert data["rewards"] == pytest.approx([adv / 3] * 3 + [-adv / 3] * 3, abs=1e-6)
    assert all(mask == [1] * n for mask, n in zip(data["loss_masks"], data["response_lengths"]))


def test_evaluation_strips_the_question_and_the_document_as_both_references_do(server: Any, tiny_model_dir: Path,
                                                                               tiny_engine: Any) -> None:
    """Training formats the row as given (above); both references' RULER-HQA evaluation strips the question and
    the document first (the seed's eval_ruler_hqa.py:251-252, MemAgent's taskutils/memory_eval/utils/
    recurrent.py:49-50). RULER-HQA has such questions: 70 of the seed's 896 published predictions end in a space."""
    tok = tiny_engine.tokenizer
    question = "Who wrote the letter? "
    s, document = seed_row_sample(tok, question, "Alice")
    padded = "\n\n " + document + " \n"
    s.metadata["context"] = padded
    args = make_args(server.url, tiny_model_dir, "memagent", agentgraph_options={"chunk_tokens": C})
    out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 2048}, evaluation=True))
    assert out.status == Sample.Status.COMPLETED, out.metadata["status_reason"]
    ids = tok.encode(document, add_special_tokens=False)  # the stripped document's
    prompts = [prompt for prompt, _ in server.recorder.calls]
    assert len(prompts) == 3
    memories = ["No previous memory", "Alice wrote it."]
    for k in range(2):
        chunk = tok.decode(ids[k * C:(k + 1) * C], skip_special_tokens=True)
        content = MEMORY_UPDATE_TEMPLATE.format(prompt=question.strip(), memory=memories[k], chunk=chunk)
        assert prompts[k] == seed_prompt_ids(tok, content), k
    assert prompts[2] == seed_prompt_ids(tok, FINAL_TEMPLATE.format(prompt=question.strip(), memory=memories[1]))
    # training reads the same row as given: the leading newlines open its first chunk
    server.recorder.calls.clear()
    s.metadata = {"context": padded}
    generate(server, tiny_model_dir, s)
    first = tok.decode(tok.encode(padded, add_special_tokens=False)[:C], skip_special_tokens=True)
    content = MEMORY_UPDATE_TEMPLATE.format(prompt=question, memory="No previous memory", chunk=first)
    assert server.recorder.calls[0][0] == seed_prompt_ids(tok, content)


@pytest.mark.parametrize(("options", "template_kwargs", "seed_thinking"), [
    ({}, {}, False),  # the seed variant: the seed's engine renders with enable_thinking=False
    ({"variant": "original"}, {}, None),  # the original's: the template's own default
    ({}, {"enable_thinking": True}, True),  # the run's own setting wins over the variant's
])
def test_a_qwen3_policy_renders_its_prompts_as_the_seeds_engine_does(agentgraphs_cache: Path, options: dict[str, Any],
                                                                     template_kwargs: dict[str, Any],
                                                                     seed_thinking: bool | None) -> None:
    """The seed renders every MemAgent prompt with apply_chat_template(..., enable_thinking=False) (its rollout,
    rollout.py:101, uses AgentFlow's engine, agentflow/core/llm_engine.py:31, 54). Qwen2.5's template never reads
    it; a Qwen3 policy's writes an empty think block into every prompt then, and the seed variant trained on
    prompts without it."""
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    model_dir = ensure_tiny_model(template="qwen3")
    engine = HFEngine.from_dir(model_dir, device="cpu", seed=0)
    tok = engine.tokenizer
    recorder = RecordingEngine(ScriptedPolicy(engine, reply))
    with SGLangTestServer(recorder, port=0) as srv:
        args = make_args(srv.url, model_dir, "memagent", agentgraph_options={"chunk_tokens": C, **options},
                         agentgraph_template_kwargs=template_kwargs)
        s, document = seed_row_sample(tok, "Who wrote the letter?", "Alice")
        try:
            out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 2048}))
        finally:
            clear_cache()
    assert out.status == Sample.Status.COMPLETED, out.metadata
    prompts = [prompt for prompt, _ in recorder.calls]
    kwargs = {} if seed_thinking is None else {"enable_thinking": seed_thinking}
    text = tok.apply_chat_template([{"role": "user", "content": FINAL_TEMPLATE.format(
        prompt="Who wrote the letter?", memory="Alice wrote it.")}], tokenize=False, add_generation_prompt=True,
        **kwargs)
    assert prompts[-1] == tok(text, add_special_tokens=False)["input_ids"]
    assert text.endswith("<think>\n\n</think>\n\n") == (seed_thinking is False)  # the block the switch writes
    assert [t["tokens"][:len(p)] for t, p in zip(out.train_metadata["turns"], prompts)] == prompts


def test_each_methods_seed_variant_declares_the_template_kwargs_of_the_seeds_renderer(qwen3: Any) -> None:
    """Which methods' seed code passes enable_thinking=False (Takenzz/AgentFlow@4b5aa84 agentic/): AgentFlow's
    engines (agentflow/rollout.py:113, core/llm_engine.py:31) and MemAgent's (memagent/rollout.py:101, the
    engine's default); ToolOrchestra's orchestrator template gets none (ToolOrchestra/orchestra_solver.py:371-376,
    the template's default), nor does any `original` variant."""
    from agentgraphs.spec import load_spec

    seeds = {"agentflow": {"enable_thinking": False}, "memagent": {"enable_thinking": False}, "toolorchestra": {}}
    for name, expected in seeds.items():
        spec = load_spec(name)
        assert spec.resolve_options({}).template_kwargs(qwen3.chat_template, {}) == expected, name
        assert spec.resolve_options({"variant": "original"}).template_kwargs(qwen3.chat_template, {}) == {}, name
        assert spec.resolve_options({}).template_kwargs(qwen3.chat_template, {"enable_thinking": True}) == {
            "enable_thinking": True}, name


@pytest.mark.parametrize("options, memory", [
    ({}, "<think>The letter is signed.</think>\nAlice wrote it."),  # the seed: the whole response, stripped
    ({"variant": "original"}, None),  # the original: the text after the last </think>
])
def test_a_memory_update_that_thinks_keeps_its_thoughts_in_the_seeds_memory(
        tiny_model_dir: Path, tiny_engine: Any, options: dict[str, Any], memory: str | None) -> None:
    """The seed's next memory is the update's whole text, stop-token text removed and stripped (rollout.py:84-88,
    130): a `</think>` in it is kept. The original's evaluation takes the text after the last `</think>`
    (MemAgent's taskutils/memory_eval/utils/recurrent.py:80, utils/__init__.py:31-37)."""

    def answer(call: ScriptCall) -> str:
        if "Your answer:" in call.prompt_text:
            return "\\boxed{Alice}"
        return "<think>The letter is signed.</think>\nAlice wrote it. "

    tok = tiny_engine.tokenizer
    recorder = RecordingEngine(ScriptedPolicy(tiny_engine, answer))
    with SGLangTestServer(recorder, port=0) as srv:
        s, _ = seed_row_sample(tok, "Who wrote the letter?", "Alice")
        args = make_args(srv.url, tiny_model_dir, "memagent", agentgraph_options={"chunk_tokens": C, **options})
        out = asyncio.run(rl_bridge.generate(args, s, {**SLIME_SAMPLING, "max_new_tokens": 2048}))
    clear_cache()
    assert out.status == Sample.Status.COMPLETED, out.metadata
    final_ids = recorder.calls[-1][0]
    if memory is None:  # the original keeps the response as generated after the thoughts
        assert "<memory>\nAlice wrote it. " in tok.decode(final_ids) and "think>" not in tok.decode(final_ids)
    else:
        content = FINAL_TEMPLATE.format(prompt="Who wrote the letter?", memory=memory)
        assert final_ids == seed_prompt_ids(tok, content)


def test_slime_skipping_special_tokens_is_refused_where_the_seed_variant_builds_memory_from_reply_text(
        tiny_model_dir: Path, tiny_engine: Any) -> None:
    """The seed's memory is SGLang's reply text (rollout.py:130): with slime's --rollout-skip-special-tokens a
    special token written inside an update (here `<|im_start|>`) is gone from it, and from the next prompt, which
    our engines, returning ids with one text, cannot give. The seed variant (`strip_responses: true`) refuses the
    flag before any request; with `strip_responses: false` the memory is the reply as generated and it runs."""
    from agentgraphs.errors import ConfigError

    def answer(call: ScriptCall) -> str:
        return "\\boxed{Alice}" if "Your answer:" in call.prompt_text else "Alice <|im_start|> wrote it."

    recorder = RecordingEngine(ScriptedPolicy(tiny_engine, answer))
    sampling = {**SLIME_SAMPLING, "max_new_tokens": 2048, "skip_special_tokens": True}
    with SGLangTestServer(recorder, port=0) as srv:
        s, _ = seed_row_sample(tiny_engine.tokenizer, "Who wrote the letter?", "Alice")
        args = make_args(srv.url, tiny_model_dir, "memagent", agentgraph_options={"chunk_tokens": C})
        try:
            with pytest.raises(ConfigError, match=r"sampling_params\['skip_special_tokens'\] = True.*drop "
                                                  r"--rollout-skip-special-tokens"):
                asyncio.run(rl_bridge.generate(args, s, sampling))
            assert not recorder.calls
            clear_cache()
            args = make_args(srv.url, tiny_model_dir, "memagent",
                             agentgraph_options={"chunk_tokens": C, "strip_responses": False})
            out = asyncio.run(rl_bridge.generate(args, s, sampling))
        finally:
            clear_cache()
    assert out.status == Sample.Status.COMPLETED, out.metadata

"""Bad input, through the dataset reader (agentgraphs.batch) and through slime's hook (rl_bridge).

The rule (DESIGN.md invariant 5): every input comes back. A malformed row or Sample is never skipped
and never crashes the run: it returns as a FAILED result whose reason names the line and the field.
Wrong configuration is different: it raises ConfigError naming the argument before any request is
sent, because every rollout would fail the same way.

MemAgent's input rules (memagent/spec.py): the question is a non-empty string or chat messages with
a user message; the document is a non-empty string under metadata["context"]; the label is
OPTIONAL for the rollout (evaluation and debugging run without one) but REQUIRED to score it, so
a label-less Sample rolls out COMPLETED and reward_func then raises InputError naming 'label'.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.batch import run_rows
from agentgraphs.context import AgentContext
from agentgraphs.errors import ConfigError
from agentgraphs.memagent import SPEC as MEMAGENT
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.rollout_inputs import read_rollout_inputs
from agentgraphs.testing.fake_engines import FixedLatencyEngine
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache, load_tokenizer

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 16, "stop": None,
            "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
            "spaces_between_special_tokens": False}
DOC = "Alice was born in Paris. She moved to Rome in 1990. " * 4
OPTIONS = {"chunk_tokens": 64}


# -- dataset files: agentgraphs.batch ---------------------------------------------------------------

GOOD = {"input": "Where was Alice born?", "label": "Paris", "metadata": {"context": DOC}}
ROWS: list[tuple[bytes, str | None]] = [  # (line, the words its failure reason must contain)
    (json.dumps(GOOD).encode(), None),
    (b'{"input": "cut off', "invalid JSON"),
    (b"[1, 2, 3]", "expected a JSON object, got list"),
    (b'"just a string"', "expected a JSON object, got str"),
    (json.dumps({"label": "Paris", "metadata": {"context": DOC}}).encode(), "missing field 'input'"),
    (json.dumps({"input": "Q?", "metadata": ["context"]}).encode(), "field 'metadata' must be an object"),
    ('{"input": "caf\u00e9?", "metadata": {"context": "x"}}'.encode("latin-1"), "not valid UTF-8 at byte"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid JSON (nested too deeply)"),
    (b'{"input": "Q?", "label": ' + b"9" * 5000 + b"}", "invalid JSON"),
    (json.dumps({"input": 42, "metadata": {"context": DOC}}).encode(), "input field 'prompt'"),
    (json.dumps({"input": "  ", "metadata": {"context": DOC}}).encode(), "input field 'prompt'"),
    (json.dumps({"input": "Q?", "metadata": {"context": ""}}).encode(), "input field 'metadata.context'"),
    (json.dumps({"input": "Q?"}).encode(), "input field 'metadata.context'"),
    (json.dumps({"input": "Q?", "label": True, "metadata": {"context": DOC}}).encode(), "input field 'label'"),
    (json.dumps({"input": "Q?", "metadata": {"context": DOC}}).encode(), None),  # unlabelled: run, not scored
    (json.dumps({**GOOD, "metadata": None}).encode(), "input field 'metadata.context'"),
]


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    # a byte-order mark before the first row and a blank line between rows are not rows
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(line for line, _ in ROWS[:3]) + b"\n\n"
                     + b"\n".join(line for line, _ in ROWS[3:]) + b"\n")
    return path


def test_read_rollout_inputs_names_line_and_field(data_file: Path) -> None:
    rows = list(read_rollout_inputs(data_file))
    assert len(rows) == len(ROWS)
    for row, (_, words) in zip(rows, ROWS):
        if row.inp is None:
            assert words is not None and (row.error or "").startswith(f"line {row.line}: ")
            assert words in (row.error or ""), (row.line, row.error)
        else:
            assert row.error is None
    assert [r.line for r in rows] == [1, 2, 3] + list(range(5, 5 + len(ROWS) - 3))  # blank line 4
    assert rows[0].inp is not None and rows[0].inp["prompt"] == GOOD["input"]  # the BOM is gone


def test_read_rollout_inputs_repeats_bad_rows_per_sample(data_file: Path) -> None:
    rows = list(read_rollout_inputs(data_file, n_samples=3))
    assert len(rows) == 3 * len(ROWS)
    assert [r.line for r in rows[3:6]] == [2, 2, 2] and all(r.inp is None for r in rows[3:6])


def test_run_rows_answers_every_row(data_file: Path, tiny_model_dir: Path) -> None:
    tok = load_tokenizer(str(tiny_model_dir))
    records: list[dict[str, Any]] = []
    summary = asyncio.run(run_rows(
        MEMAGENT, read_rollout_inputs(data_file, n_samples=2),
        lambda: AgentContext(policy=FixedLatencyEngine(latency_s=0.0), tokenizer=tok),
        options=OPTIONS, concurrency=4, on_result=lambda sample, trace: records.append(sample),
    ))
    assert summary.rows == summary.results == len(records) == 2 * len(ROWS)
    good = sum(1 for _, words in ROWS if words is None)
    assert summary.by_status == {"completed": 2 * good, "failed": 2 * (len(ROWS) - good)}
    for k, record in enumerate(records):
        _, words = ROWS[k // 2]
        if words is None:
            assert record["status"] == "completed"
            continue
        reason = record["metadata"]["status_reason"]
        assert record["status"] == "failed" and words in reason, record["metadata"]
        # unreadable rows and rows the graph's make_input refuses alike: the reason says where they are
        assert reason.startswith(f"bad input: line {record['line']}: "), reason
        assert record["remove_sample"] and not any(record["loss_mask"])  # never trained
        assert record["line"] == (k // 2 + 1 if k // 2 < 3 else k // 2 + 2)


# -- slime Samples: rl_bridge.generate ----------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[SGLangTestServer]:
    with SGLangTestServer(FixedLatencyEngine(latency_s=0.0)) as srv:
        yield srv


def make_args(server: SGLangTestServer, model_dir: Path, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(**{
        "agentgraph": "memagent", "hf_checkpoint": str(model_dir), "sglang_router_ip": "127.0.0.1",
        "sglang_router_port": server.port, "agentgraph_max_retries": 0, "reward_key": None,
        "agentgraph_options": dict(OPTIONS), **extra,
    })


def generate_all(args: Any, samples: list[Any], evaluation: bool = False, **sp: Any) -> list[Any]:
    async def main() -> list[Any]:
        try:
            return [await rl_bridge.generate(args, s, {**SAMPLING, **sp}, evaluation=evaluation)
                    for s in samples]
        finally:
            await aclose_all()

    try:
        return asyncio.run(main())
    finally:
        clear_cache()


def sample(i: int = 0, prompt: Any = "Where was Alice born?", label: Any = "Paris",
           metadata: Any = None) -> Sample:
    return Sample(index=i, prompt=prompt, label=label,
                  metadata={"context": DOC} if metadata is None else metadata)


BAD_SAMPLES: list[tuple[Sample, str]] = [
    (sample(prompt=123), "input field 'prompt'"),
    (sample(prompt=""), "input field 'prompt'"),
    (sample(prompt=[{"role": "system", "content": "no user message"}]), "input field 'prompt'"),
    (sample(metadata={"context": ""}), "input field 'metadata.context'"),
    (sample(metadata={"context": "   \n"}), "input field 'metadata.context'"),
    (sample(metadata={"document": DOC}), "input field 'metadata.context'"),
    (sample(metadata={"context": ["not", "text"]}), "input field 'metadata.context'"),
    (sample(metadata="a string, not a dict"), "input field 'metadata': must be an object, got str"),
    (sample(label={"gold": "Paris"}), "input field 'label'"),
    (sample(label=[]), "input field 'label'"),
    (sample(label={"ground_truth": {"nested": 1}}), "input field 'label'"),
    # a key the result is written under: the row's value would be overwritten, and reward_func read ours
    (sample(metadata={"context": DOC, "answer": "Paris"}), "input field 'metadata.answer'"),
]


def test_bad_samples_come_back_failed_naming_the_field(server: SGLangTestServer, tiny_model_dir: Path) -> None:
    requests_before = server.stats.generate_requests
    good = [sample(i=100), sample(i=101, prompt=[{"role": "user", "content": "Where was Alice born?"}])]
    inputs = [s for s, _ in BAD_SAMPLES] + good
    out = generate_all(make_args(server, tiny_model_dir), inputs)
    assert len(out) == len(inputs) and all(o is i for o, i in zip(out, inputs))  # one result per input
    for s, (_, words) in zip(out, BAD_SAMPLES):
        assert s.status == Sample.Status.FAILED, (words, s.metadata)
        assert s.metadata["status_reason"].startswith("bad input: ") and words in s.metadata["status_reason"]
        assert s.remove_sample and not any(s.loss_mask) and len(s.loss_mask) == s.response_length >= 1
    for s in out[len(BAD_SAMPLES):]:
        assert s.status == Sample.Status.COMPLETED, s.metadata
    # bad inputs fail before any request; each good one made its requests
    assert server.stats.generate_requests - requests_before == sum(s.metadata["llm_calls"] for s in out)


def test_missing_label_rolls_out_but_cannot_be_scored(server: SGLangTestServer, tiny_model_dir: Path) -> None:
    args = make_args(server, tiny_model_dir)
    s = generate_all(args, [sample(label=None)])[0]
    assert s.status == Sample.Status.COMPLETED and s.metadata["llm_calls"] >= 2
    assert s.metadata["metrics"] == {}  # no gold, no metrics
    # slime's rm path: an unscorable sample does not stop the run; it becomes FAILED, trains nothing,
    # and its reason names the field and the fix
    assert asyncio.run(rl_bridge.reward_func(args, s)) == 0.0
    assert s.status == Sample.Status.FAILED and s.remove_sample and not any(s.loss_mask)
    assert all(not any(seq["loss_mask"]) for seq in s.train_metadata["turns"])
    assert "input field 'label'" in s.metadata["status_reason"] and "--label-key" in s.metadata["status_reason"]
    # the batch path scores as it rolls out: an unlabelled row is run and reported as not scored
    tok = load_tokenizer(str(tiny_model_dir))
    rollout = asyncio.run(run_rollout(
        MEMAGENT, rollout_input("Where was Alice born?", None, {"context": DOC}),
        AgentContext(policy=FixedLatencyEngine(latency_s=0.0), tokenizer=tok), options=OPTIONS,
    ))
    assert rollout.status == "completed" and rollout.reward is None and rollout.turns
    assert "no label: not scored" in rollout.reason


def test_document_over_the_chunk_cap_is_cut_in_the_middle_and_recorded(
        server: SGLangTestServer, tiny_model_dir: Path) -> None:
    tok = load_tokenizer(str(tiny_model_dir))
    doc = " ".join(f"Fact {k}: item {k} is kept in box {k % 7}." for k in range(60))
    doc_ids = tok.encode(doc, add_special_tokens=False)
    chunk, cap = 32, 2
    n_chunks = -(-len(doc_ids) // chunk)
    assert n_chunks > cap + 2
    # the original's cut (the middle) and splice (the ids verbatim); the seed's head cut: tests/memagent/test_variants.py
    args = make_args(server, tiny_model_dir, agentgraph_options={"variant": "original", "chunk_tokens": chunk,
                                                                  "max_chunks": cap})
    train = generate_all(args, [sample(metadata={"context": doc})])[0]
    full = generate_all(args, [sample(metadata={"context": doc})], evaluation=True)[0]
    # training reads max_chunks chunks (+ the final answer); evaluation reads the whole document
    assert train.status == Sample.Status.COMPLETED and full.status == Sample.Status.COMPLETED
    assert train.metadata["llm_calls"] == cap + 1 == len(train.train_metadata["turns"])
    assert full.metadata["llm_calls"] == n_chunks + 1
    # the kept chunks are the document's first and last ids, verbatim; the middle is gone
    seqs = [seq["tokens"] for seq in train.train_metadata["turns"][:cap]]
    head, tail, middle = doc_ids[:chunk // 2], doc_ids[-(chunk // 2):], doc_ids[len(doc_ids) // 2:][:chunk // 2]
    assert any(_contains(t, head) for t in seqs) and any(_contains(t, tail) for t in seqs)
    assert not any(_contains(t, middle) for t in seqs)


def _contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i:i + len(part)] == part for i in range(len(seq) - len(part) + 1))


@pytest.mark.parametrize("extra, words", [
    ({"agentgraph_options": ["chunk_tokens", 64]}, "args.agentgraph_options: input should be a valid dictionary"),
    ({"agentgraph_options": {"chunk_size": 64}}, "unknown option 'chunk_size'"),
    ({"agentgraph_max_retries": "three"}, "args.agentgraph_max_retries: input should be a valid integer"),
    ({"agentgraph_max_retries": -1}, "args.agentgraph_max_retries: input should be greater than or equal to 0"),
    ({"agentgraph_max_retries": 1.5}, "args.agentgraph_max_retries: input should be a valid integer"),
    ({"agentgraph_request_timeout_s": "10s"}, "args.agentgraph_request_timeout_s: input should be a valid number"),
    ({"agentgraph_request_timeout_s": 0}, "args.agentgraph_request_timeout_s: input should be greater than 0"),
    ({"agentgraph_max_llm_calls": 0}, "args.agentgraph_max_llm_calls: input should be greater than or equal to 1"),
    ({"agentgraph_max_time_s": -5}, "args.agentgraph_max_time_s: input should be greater than 0"),
    ({"agentgraph_recursion_limit": 0}, "args.agentgraph_recursion_limit: input should be greater than or equal to 1"),
    ({"agentgraph_recursion_limit": -1}, "args.agentgraph_recursion_limit: input should be greater than or equal to 1"),
    ({"agentgraph_recursion_limit": "5"}, "args.agentgraph_recursion_limit: input should be a valid integer"),
    ({"agentgraph_eval_recursion_limit": 0},
     "args.agentgraph_eval_recursion_limit: input should be greater than or equal to 1"),
    ({"agentgraph_engines": "sglang:http://x"}, "args.agentgraph_engines: input should be a valid dictionary"),
    ({"agentgraph_template_kwargs": [1]}, "args.agentgraph_template_kwargs: input should be a valid dictionary"),
    ({"sglang_router_port": None}, "sglang_router_port"),
    ({"hf_checkpoint": None}, "hf_checkpoint"),
    ({"agentgraph": "memagent_v2"}, "unknown agent 'memagent_v2'"),
])
def test_wrong_args_raise_naming_the_field(server: SGLangTestServer, tiny_model_dir: Path,
                                           extra: dict[str, Any], words: str) -> None:
    before = server.stats.generate_requests
    with pytest.raises(ConfigError) as err:
        generate_all(make_args(server, tiny_model_dir, **extra), [sample()])
    assert words in str(err.value)
    assert server.stats.generate_requests == before  # raised before any rollout


@pytest.mark.parametrize("sp, words", [
    ({"temperature": -1.0}, "temperature"),
    # a nan would pass `< 0` and go out as JSON null (SGLang's default, 1.0): refused, as inf is
    ({"temperature": float("nan")}, "temperature must be a finite number"),
    ({"temperature": float("inf")}, "temperature must be a finite number"),
    ({"top_p": 0.0}, "top_p"),
    ({"min_p": 1.5}, "min_p"),
    ({"top_k": 0}, "top_k must be -1"),  # SGLang refuses 0; HFEngine would have taken it for "off"
    ({"min_p": float("nan")}, "min_p"),
    ({"max_new_tokens": -3}, "max_new_tokens"),
])
def test_wrong_sampling_params_raise_naming_the_field(server: SGLangTestServer, tiny_model_dir: Path,
                                                      sp: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        generate_all(make_args(server, tiny_model_dir), [sample()], **sp)


def test_bad_option_value_is_rejected_before_any_rollout(server: SGLangTestServer, tiny_model_dir: Path) -> None:
    before = server.stats.generate_requests
    for bad, words in [({"chunk_tokens": 0}, "option chunk_tokens: input should be greater than or equal to 1"),
                       ({"max_chunks": -1}, "option max_chunks: input should be greater than or equal to 1"),
                       ({"reward_split": "half"}, "option reward_split: input should be 'broadcast' or 'divide'"),
                       ({"train_final_answer": "yes"}, "option train_final_answer: input should be a valid boolean"),
                       ({"chunk_tokens": "64"}, "option chunk_tokens: input should be a valid integer")]:
        args = make_args(server, tiny_model_dir, agentgraph_options=bad)
        with pytest.raises(ConfigError, match=words):
            generate_all(args, [sample(0)])
    assert server.stats.generate_requests == before

# -- misspelt agentgraph_* keys on slime's args -------------------------------------------------------------


@pytest.mark.parametrize("typo, value, meant", [
    ("agentgraph_optoins", {"chunk_tokens": 64}, "agentgraph_options"),
    ("agentgraph_on_sampling_missmatch", "mask", "agentgraph_on_sampling_mismatch"),
    ("agentgraph_retrun_list", True, "agentgraph_return_list"),
    ("agentgraph_max_time", 900, "agentgraph_max_time_s"),
    # the package's name spelt in: ignored without a word before
    ("agentgraphs_options", {"chunk_tokens": 64}, "agentgraph_options"),
    ("agentgraphs_return_list", True, "agentgraph_return_list"),
    ("agentgraphs", "memagent", "agentgraph"),
])
def test_a_misspelt_agentgraph_key_is_refused_naming_the_closest_setting(
        server: SGLangTestServer, tiny_model_dir: Path, typo: str, value: Any, meant: str) -> None:
    before = server.stats.generate_requests
    with pytest.raises(ConfigError) as err:
        generate_all(make_args(server, tiny_model_dir, **{typo: value}), [sample()])
    assert f"args.{typo} (did you mean {meant}?)" in str(err.value), err.value
    assert server.stats.generate_requests == before  # raised before any rollout


def test_every_agentgraph_key_the_code_reads_is_accepted() -> None:
    """The keys read from args anywhere (rl_bridge hooks, agentgraphs.train_data, ...) all pass the typo check."""
    import re

    from rl_bridge.setup import BridgeSettings

    root = Path(__file__).resolve().parents[1]
    read = set()
    for path in [*(root / "agentgraphs").rglob("*.py"), *(root / "rl_bridge").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        read |= set(re.findall(r"""(?:getattr\(args, |get\()["'](agentgraph_\w+)["']""", text))
    assert {"agentgraph_group_by", "agentgraph_eval_dir", "agentgraph_slime_version"} <= read
    settings = BridgeSettings.from_args(SimpleNamespace(agentgraph="memagent", **{k: None for k in read}))
    assert settings.agentgraph == "memagent"
    with pytest.raises(ConfigError, match="the settings are: agentgraph_engines"):  # nothing close: all listed
        BridgeSettings.from_args(SimpleNamespace(agentgraph="memagent", agentgraph_zzz=1))


@pytest.mark.parametrize("key", ["agentgraph_options", "agentgraph_engines", "agentgraph_template_kwargs"])
def test_an_empty_mapping_setting_in_the_yaml_is_refused(key: str) -> None:
    """slime's --custom-config-path setattr()s every YAML key onto args: entries not indented under their key
    leave it null (and land on args as stray attributes), and the setting was its default without a word."""
    import yaml

    from rl_bridge.setup import BridgeSettings

    args = SimpleNamespace()
    for name, value in yaml.safe_load(f"agentgraph: memagent\n{key}:\nchunk_tokens: 64\n").items():
        setattr(args, name, value)  # what slime does with the file
    assert getattr(args, key) is None
    with pytest.raises(ConfigError, match=rf"args\.{key} is empty \(null\).*indent") as err:
        BridgeSettings.from_args(args)
    assert "--custom-config-path" in str(err.value)
    args = SimpleNamespace(agentgraph="memagent", **{key: {}})  # an explicit empty mapping is kept
    assert getattr(BridgeSettings.from_args(args), key) == {}


# -- gold answers: numbers as their text, blanks refused ------------------------------------------------------


def _rin(answer: str, label: Any, **options: Any) -> Any:
    from agentgraphs.records import reward_input

    return reward_input(answer=answer, prompt="What is 6*7?", label=label, row_metadata=None, status="completed",
                        summary={}, options=options)


def test_a_whole_number_float_label_matches_the_boxed_integer() -> None:
    from agentgraphs.agentflow.reward import reward as agentflow_reward
    from agentgraphs.memagent.reward import reward as memagent_reward
    from agentgraphs.row_fields import answers_of

    assert answers_of(42.0) == ["42"] and answers_of([0.5, 3.0]) == ["0.5", "3"]
    assert memagent_reward(_rin("so \\boxed{42}", 42.0), None) == 1.0
    assert asyncio.run(agentflow_reward(_rin("so \\boxed{42}", 42.0, answer_check="boxed_exact"), None)) == 1.0
    assert memagent_reward(_rin("so \\boxed{0.5}", 0.5), None) == 1.0


@pytest.mark.parametrize("label, words", [
    ("", "the answer is blank"),
    ("   ", "the answer is blank"),
    (["Paris", ""], "answer #2 of 2 is blank"),
    ({"ground_truth": ""}, "the answer is blank"),
    (float("nan"), "the answer is nan"),
    (float("inf"), "the answer is inf"),
])
def test_a_blank_or_non_finite_gold_answer_is_refused_naming_the_label(label: Any, words: str) -> None:
    from agentgraphs.errors import InputError
    from agentgraphs.memagent.reward import reward as memagent_reward

    with pytest.raises(InputError, match=f"input field 'label': {words}"):
        memagent_reward(_rin("so \\boxed{ }", label), None)  # a blank gold would have scored this 1.0


def test_a_row_with_a_blank_label_comes_back_failed_naming_it(server: SGLangTestServer, tiny_model_dir: Path) -> None:
    before = server.stats.generate_requests
    (out,) = generate_all(make_args(server, tiny_model_dir), [sample(label="")])
    assert out.status == Sample.Status.FAILED, out.metadata
    assert "input field 'label': the answer is blank" in out.metadata["status_reason"], out.metadata
    assert server.stats.generate_requests == before  # refused before any generation


def test_a_requeued_sample_is_generated_from_its_row_not_its_last_result(server: SGLangTestServer,
                                                                        tiny_model_dir: Path) -> None:
    """slime re-queues an ABORTED sample (--partial-rollout) with the metadata generate filled in: our
    result keys are not the row's, so they neither fail it as a bad row nor reach the new rollout."""
    row = sample(7, metadata={"context": DOC, "source": "r"})
    first = generate_all(make_args(server, tiny_model_dir), [row])[0]
    assert first.metadata["answer"] is not None and first.metadata["agentgraph"] == "memagent"
    again = generate_all(make_args(server, tiny_model_dir), [first])[0]
    assert again.status == Sample.Status.COMPLETED, again.metadata["status_reason"]
    assert again.metadata["source"] == "r" and again.metadata["context"] == DOC


@pytest.mark.parametrize("metadata", ["", [], 0, False])
def test_an_empty_metadata_of_the_wrong_type_is_refused_like_any_other(tmp_path: Path, metadata: Any) -> None:
    """`"metadata": ["context"]` was refused but `""`, `[]`, `0` and `false` became {} without a word."""
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"input": "Q?", "metadata": metadata}) + "\n" + json.dumps({"input": "Q2?"}) + "\n"
                    + json.dumps({"input": "Q3?", "metadata": None}) + "\n")
    bad, missing, null = read_rollout_inputs(path)
    assert bad.inp is None and "line 1: field 'metadata' must be an object" in (bad.error or ""), bad
    assert type(metadata).__name__ in (bad.error or "")
    assert missing.inp is not None and missing.inp["metadata"] == {}  # no metadata at all: none
    assert null.inp is not None and null.inp["metadata"] == {}


def _looping_spec() -> Any:
    """A graph whose exit condition never holds: `retry` routes back to itself forever, making no LLM call
    (so Limits.max_llm_calls never stops it; LangGraph's recursion limit does)."""
    from langgraph.graph import END, START, StateGraph

    from agentgraphs.node import TraceState
    from agentgraphs.spec import AgentSpec

    class LoopState(TraceState):
        tries: int

    def build(options: Any) -> Any:
        g = StateGraph(LoopState, context_schema=AgentContext)
        g.add_node("retry", lambda state: {"tries": state["tries"] + 1})
        g.add_edge(START, "retry")
        g.add_conditional_edges("retry", lambda state: END if state["tries"] < 0 else "retry")  # never < 0
        return g.compile()

    return AgentSpec(name="loops", build_graph=build, make_input=lambda row, o: {"tries": 0, "turns": []},
                     reward=lambda rin, ctx: 0.0)


async def test_a_graph_that_never_reaches_end_fails_naming_the_limit_and_the_loop(tiny_engine: Any) -> None:
    """LangGraph's own advice names its config key; the reason says which limit of ours it was and what to check."""
    ctx = AgentContext(policy=tiny_engine, limits={"recursion_limit": 12})
    rollout = await run_rollout(_looping_spec(), rollout_input("go", "x"), ctx)
    assert rollout.status == "failed"
    assert rollout.reason.startswith("graph raised GraphRecursionError: the graph ran 12 steps "
                                     "(Limits.recursion_limit) without reaching END")
    assert "conditional edge that should route to END" in rollout.reason
    assert "AgentContext(limits={'recursion_limit': N})" in rollout.reason
    assert "GraphRecursionError" in (rollout.error or "")  # the traceback is kept

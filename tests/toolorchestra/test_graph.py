"""ToolOrchestra's QA graph with a scripted orchestrator over the tiny Qwen3-template model (real ids and
log-probs), scripted experts, and a real BM25 retrieval service on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgraphs.context import AgentContext
from agentgraphs.engines.base import SamplingParams
from agentgraphs.engines.hf import HFEngine
from agentgraphs.engines.sglang import SGLangEngine
from agentgraphs.errors import ConfigError
from agentgraphs.records import sample_fields
from agentgraphs.rollout import rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptedPolicy
from agentgraphs.testing.tiny_model import ensure_tiny_model
from agentgraphs.toolorchestra import SPEC, build_graph
from agentgraphs.toolorchestra.options import max_turns
from agentgraphs.toolorchestra.prompts import SEED_UNAVAILABLE, tool_schemas
from agentgraphs.trace import check_trace
from tests.asgi_server import free_port, serving

pytest.importorskip("uvicorn")
pytest.importorskip("bm25s")

EXPERTS = {"search": ["search-expert"], "enhance_reasoning": ["code-expert"],
           "answer": ["answer-expert", "big-expert"]}


def call(name: str, model: str, think: str = "plan") -> str:
    return f'<think>{think}</think>\n<tool_call>\n{json.dumps({"name": name, "arguments": {"model": model}})}\n</tool_call>'


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Path) -> HFEngine:
    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


@pytest.fixture(scope="module")
def retrieval_url() -> Iterator[str]:
    """A real retrieval service (BM25 over planted facts + filler) in a server thread."""
    from agentgraphs.retrieval import BM25Index, make_app
    from agentgraphs.retrieval.synthetic import planted_facts, synthetic_corpus

    passages, _ = planted_facts()
    app = make_app(BM25Index.build(synthetic_corpus(200, words_per_passage=20) + passages))
    with serving(app) as url:
        yield url


def run(scorer: HFEngine, orchestrator: list[str], experts: dict[str, Any], url: str, label: Any = "4321",
        evaluation: bool = False, **options: Any):
    policy = ScriptedPolicy(scorer, orchestrator, name="orchestrator")
    engines = {name: ScriptedPolicy(scorer, replies, name=name) if isinstance(replies, list) else replies
               for name, replies in experts.items()}
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer, engines=engines, evaluation=evaluation,
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
    opts = {"experts": EXPERTS, "retrieval_url": url, "retrieval_retries": 0, "retrieval_timeout_s": 5.0,
            **options}
    inp = rollout_input("What is the launch code of Zorblax station plus one?", label, {}, 0)
    return asyncio.run(run_rollout(SPEC, inp, ctx, options=opts)), policy, engines


def _zorblax_code(text: str) -> int:
    return int(text.split("launch code of Zorblax station is ")[1][:4])


def test_search_then_code_then_answer_trains_only_orchestrator_turns(scorer: HFEngine, retrieval_url: str) -> None:
    from agentgraphs.retrieval.synthetic import planted_facts

    code = int(planted_facts()[1]["answer"])
    rollout, policy, engines = run(
        scorer,
        [call("search", "search-expert"), call("enhance_reasoning", "code-expert"), call("answer", "big-expert")],
        {"search-expert": ["launch code Zorblax station"], "code-expert": [f"```python\nprint({code} + 1)\n```"],
         "answer-expert": [], "big-expert": [f"It is \\boxed{{{code + 1}}}."]},
        retrieval_url, label=str(code + 1), tool_protocol="original")  # the seed's tools: test_seed_tools.py
    assert rollout.status == "completed", rollout.reason + str(rollout.error)
    assert rollout.answer == str(code + 1) and rollout.reward == 1.0
    nodes = [(t["node"], t["trainable"]) for t in rollout.turns]
    assert nodes == [("orchestrator", True), ("search_expert", False), ("orchestrator", True),
                     ("code_expert", False), ("orchestrator", True), ("answer_expert", False)]
    # the context is rebuilt each turn: the document reaches turn 2, the code's output turn 3
    prompts = [c.prompt_text for c in policy.calls]
    assert _zorblax_code(prompts[1]) == code and "Documents:" in prompts[1]
    assert f"output:\n{code + 1}" in prompts[2] and "Documents:" in prompts[2]
    # only the orchestrator's turns are trained, each its own sequence, token by token what the engine saw
    sequences = check_trace(rollout.turns, "per_turn")
    orch = [t for t in rollout.turns if t["node"] == "orchestrator"]
    assert len(sequences) == len(rollout.sequences) == 3
    for seq, turn, seen in zip(sequences, orch, policy.calls):
        n = seq["response_length"]
        assert seq["tokens"][:-n] == turn["prompt_ids"] == seen.prompt_ids
        assert seq["tokens"][-n:] == turn["output_ids"] and seq["loss_mask"] == [1] * n
        assert seq["rollout_log_probs"] == turn["output_logprobs"]
    # the prompt is Qwen3's template with the tools in hermes format, rendered by transformers itself
    user = policy.calls[0].prompt_text.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
    reference = scorer.tokenizer.apply_chat_template([{"role": "user", "content": user}],
                                                     tools=tool_schemas(EXPERTS), add_generation_prompt=True,
                                                     tokenize=False)
    assert scorer.tokenizer.decode(policy.calls[0].prompt_ids) == reference
    assert "<tools>" in reference and '"name": "enhance_reasoning"' in reference
    # the expert got the problem and its own instructions, never a trained turn
    assert "web-search query" in engines["search-expert"].calls[0].prompt_text
    # the cost-aware reward's features ride along to the converter
    fields = sample_fields(rollout, SPEC)
    shaping = fields["train_metadata"]["reward_shaping"]
    assert shaping["name"] == "cost_aware" and shaping["features"]["tool:search"] == 1.0
    assert shaping["features"]["cost"] > 0 and fields["metadata"]["trace_summary"]["tool_calls"] == {
        "search": 1, "enhance_reasoning": 1, "answer": 1}


def test_malformed_unknown_and_disallowed_turns_are_invalid_and_the_loop_goes_on(scorer: HFEngine,
                                                                                 retrieval_url: str) -> None:
    """The original variant (`invalid_call: continue`); the seed's ends at the first invalid turn
    (tests/toolorchestra/test_variants.py)."""
    rollout, policy, _ = run(
        scorer,
        ['<think>x</think>\n<tool_call>\n{"name": "search", "arguments": {"model": \n</tool_call>',  # bad JSON
         call("browse", "search-expert"),  # unknown tool
         call("answer", "gpt-9"),  # a model the tool does not allow
         '<tool_call>{"name": "answer", "arguments": {"model": "answer-expert"}, "extra": 1}</tool_call>',
         call("answer", "answer-expert")],
        {"search-expert": [], "code-expert": [], "answer-expert": ["\\boxed{4321}"], "big-expert": []},
        retrieval_url, variant="original")
    assert rollout.status == "completed" and rollout.reward == 1.0
    steps = rollout.final_state["steps"]  # type: ignore[index]
    assert [s["ok"] for s in steps] == [False, False, False, False, True]
    assert "bad JSON" in steps[0]["error"] and "unknown tool 'browse'" in steps[1]["error"]
    assert "model 'gpt-9' is not allowed" in steps[2]["error"] and "keys must be exactly" in steps[3]["error"]
    assert "Format-invalid tool call: tool call 1: unknown tool 'browse'" in policy.calls[2].prompt_text
    assert rollout.summary["format_invalid_turns"] == 4
    assert len(check_trace(rollout.turns)) == 5  # invalid turns are trained too (the reward judges them)


def test_max_turns_ends_the_episode_without_an_answer(scorer: HFEngine, retrieval_url: str) -> None:
    rollout, policy, _ = run(scorer, ["no tool call here"] * 3, {n: [] for n in
                             ("search-expert", "code-expert", "answer-expert", "big-expert")},
                             retrieval_url, max_turns=3, invalid_call="continue")
    assert rollout.status == "completed" and rollout.answer == "" and rollout.reward == 0.0
    assert len(policy.calls) == 3 and len(rollout.sequences) == 3
    assert rollout.summary["ended"] == "max_turns" and not rollout.summary["answered"]
    original = SPEC.resolve_options({"variant": "original"})
    assert max_turns(original, False) == 30 and max_turns(original, True) == 50
    assert max_turns(SPEC.default_options(), False) == 12 and max_turns(SPEC.default_options(), True) == 12


def test_a_failing_expert_endpoint_and_a_dead_retrieval_service_are_reported_and_the_run_goes_on(
        scorer: HFEngine) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    rollout, policy, _ = run(
        scorer,
        [call("search", "search-expert"), call("enhance_reasoning", "code-expert"), call("answer", "answer-expert")],
        {"search-expert": ["launch code"],  # the expert answers, but the retrieval service is down
         "code-expert": SGLangEngine(dead, max_retries=1, backoff_s=0.01, timeout=2.0),  # the expert is down
         "answer-expert": ["\\boxed{4321}"], "big-expert": []},
        dead, tool_protocol="original")  # the seed's search falls back to the question: test_seed_tools.py
    assert rollout.status == "completed" and rollout.reward == 1.0, rollout.reason
    steps = rollout.final_state["steps"]  # type: ignore[index]
    assert [s["ok"] for s in steps] == [False, False, True]
    assert "search for 'launch code' failed" in steps[0]["error"] and "retrieval service" in steps[0]["error"]
    assert "expert 'code-expert' failed" in steps[1]["error"]
    assert "expert 'code-expert' failed" in policy.calls[2].prompt_text  # the orchestrator sees it
    assert rollout.summary["failed_tools"] == 2


def _dead_expert() -> SGLangEngine:
    return SGLangEngine(f"http://127.0.0.1:{free_port()}", max_retries=1, backoff_s=0.01, timeout=2.0)


@pytest.mark.parametrize("variant", ["seed", "original"])
def test_a_failed_answer_expert_ends_the_episode(scorer: HFEngine, retrieval_url: str, variant: str) -> None:
    """Both sources end the episode when the answer expert fails: the seed with the error text as the answer
    (orchestra_solver.py:525, judged like any answer), the original with an empty one (generation_quick3.py:
    272, 2026-2041). `answer_failure: note` keeps it a note and goes on."""
    script = [call("answer", "answer-expert"), call("answer", "big-expert")]
    experts = {"search-expert": [], "code-expert": [], "answer-expert": _dead_expert(), "big-expert": ["\\boxed{4321}"]}
    rollout, policy, _ = run(scorer, script, experts, retrieval_url, variant=variant)
    assert rollout.status == "completed" and len(policy.calls) == 1 and rollout.reward == 0.0, rollout.reason
    assert rollout.summary["ended"] == "answered" and rollout.summary["failed_tools"] == 1
    if variant == "seed":
        assert "expert 'answer-expert' failed" in rollout.answer and rollout.summary["answered"]
        assert sample_fields(rollout, SPEC)["train_metadata"]["reward_shaping"]["train"] is True
    else:
        assert rollout.answer == "" and not rollout.summary["answered"]
    again, policy, _ = run(scorer, script, experts, retrieval_url, variant=variant, answer_failure="note")
    assert len(policy.calls) == 2 and again.reward == 1.0 and again.answer == "4321"


def test_the_seeds_circuit_breaker_stops_calling_experts_after_two_failed_code_experts(
        scorer: HFEngine, retrieval_url: str) -> None:
    """The seed (orchestra_solver.py:97-98, 468-498) counts consecutive enhance_reasoning calls whose expert
    failed; at 2, every later expert tool is skipped with an "expert unavailable" note, answer included, so
    the episode runs out of turns unanswered. The original has no breaker: the answer runs."""
    script = [call("enhance_reasoning", "code-expert")] * 2 + [call("answer", "answer-expert")]
    for variant in ("seed", "original"):
        experts = {"search-expert": [], "code-expert": _dead_expert(), "answer-expert": ["\\boxed{4321}"],
                   "big-expert": []}
        rollout, policy, engines = run(scorer, script, experts, retrieval_url, variant=variant, max_turns=3)
        assert rollout.status == "completed" and len(policy.calls) == 3, rollout.reason
        steps = rollout.final_state["steps"]  # type: ignore[index]
        if variant == "seed":
            assert rollout.answer == "" and rollout.reward == 0.0 and rollout.summary["ended"] == "max_turns"
            assert engines["answer-expert"].calls == [] and "circuit breaker" in steps[2]["error"]
            # the seed's tool result (orchestra_solver.py:476-479), in the orchestrator's conversation
            assert rollout.final_state["history"][-1] == {  # type: ignore[index]
                "role": "tool", "name": "answer", "content": SEED_UNAVAILABLE}
        else:
            assert rollout.answer == "4321" and rollout.reward == 1.0
    # a search in between resets the count (the seed's search result never carries the expert's error)
    script = [call("enhance_reasoning", "code-expert"), call("search", "search-expert"),
              call("enhance_reasoning", "code-expert"), call("answer", "answer-expert")]
    experts = {"search-expert": ["launch code"], "code-expert": _dead_expert(),
               "answer-expert": ["\\boxed{4321}"], "big-expert": []}
    rollout, _, _ = run(scorer, script, experts, retrieval_url, max_turns=4)
    assert rollout.answer == "4321" and rollout.reward == 1.0


def test_experts_without_engines_are_refused_before_the_rollout(scorer: HFEngine) -> None:
    """An expert the options name but the run lacks: a ConfigError naming the option and the fix before any
    policy call (it failed every rollout at its first node)."""
    policy = ScriptedPolicy(scorer, [call("answer", "answer-expert")])
    ctx = AgentContext(policy=policy, tokenizer=scorer.tokenizer,
                       engines={"search-expert": scorer, "code-expert": scorer})
    with pytest.raises(ConfigError, match=r"the option `experts.answer\[0\]` names the engine 'answer-expert', "
                                          r"which this run does not have .*--helper answer-expert=ENGINE"):
        asyncio.run(run_rollout(SPEC, rollout_input("q?", "a", {}, 0), ctx))
    assert policy.calls == []


def test_graph_shape() -> None:
    assert sorted(build_graph().get_graph().nodes) == ["__end__", "__start__", "answer", "enhance_reasoning",
                                                        "orchestrator", "search"]


def test_code_that_fails_in_the_sandbox_is_shown_to_the_orchestrator(scorer: HFEngine, retrieval_url: str) -> None:
    rollout, policy, _ = run(
        scorer, [call("enhance_reasoning", "code-expert"), call("answer", "answer-expert")],
        {"search-expert": [], "code-expert": ["```python\nimport socket\nsocket.create_connection(('1.1.1.1', 80), 2)"
                                              "\n```"],
         "answer-expert": ["\\boxed{4321}"], "big-expert": []}, retrieval_url, tool_protocol="original")
    assert rollout.status == "completed" and rollout.reward == 1.0
    shown = policy.calls[1].prompt_text
    assert "Python code and outputs:" in shown and "failed:" in shown and "Error" in shown  # no network inside


def test_a_sandbox_that_cannot_run_on_the_machine_fails_the_rollout(scorer: HFEngine, retrieval_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With protections switched off the sandbox refuses every execution: not the expert's doing, so not a
    note the orchestrator reads (it would learn that enhance_reasoning never works) but a failed rollout whose
    reason says how to fix the machine or drop the tool. The expert's own errors stay results (above)."""
    from agentgraphs.sandbox.detect import DISABLE_ENV

    monkeypatch.setenv(DISABLE_ENV, "bwrap,seccomp,cgroups,uid")
    rollout, policy, _ = run(
        scorer, [call("enhance_reasoning", "code-expert"), call("answer", "answer-expert")],
        {"search-expert": [], "code-expert": ["```python\nprint(4320 + 1)\n```"],
         "answer-expert": ["\\boxed{4321}"], "big-expert": []}, retrieval_url, tool_protocol="original")
    assert rollout.status == "failed" and len(policy.calls) == 1, (rollout.status, rollout.reason)
    assert "ConfigError" in rollout.reason and "enhance_reasoning" in rollout.reason
    assert "python -m agentgraphs.sandbox" in rollout.reason and "experts" in rollout.reason


def test_reward_is_exact_match_then_the_judge_when_configured(scorer: HFEngine) -> None:
    from agentgraphs.spec import RewardInput

    judge = ScriptedPolicy(scorer, ["yes", "no"], name="judge")
    ctx = AgentContext(policy=judge, tokenizer=scorer.tokenizer, engines={"judge": judge})

    def rin(answer: str, judge_name: Any) -> RewardInput:  # the original variant's rule: SQuAD exact match
        return RewardInput(answer=answer, prompt="Capital of France?", label=["Paris"], metadata={},
                           status="completed", trace_summary={}, options={"correctness": "exact", "judge": judge_name})

    assert asyncio.run(SPEC.reward(rin("the Paris!", None), ctx)) == 1.0  # exact match after normalisation
    assert asyncio.run(SPEC.reward(rin("Paris, France", None), ctx)) == 0.0 and not judge.calls
    assert asyncio.run(SPEC.reward(rin("Paris, France", "judge"), ctx)) == 1.0  # the judge says yes
    assert "Reference answer: Paris" in judge.calls[0].prompt_text and "Capital of France?" in judge.calls[0].prompt_text
    assert asyncio.run(SPEC.reward(rin("Lyon", "judge"), ctx)) == 0.0  # ... and then no
    assert asyncio.run(SPEC.reward(rin("", "judge"), ctx)) == 0.0 and len(judge.calls) == 2  # no answer: 0
    # a judge named but not in the context: refused with the fixes, never the rule's 0 in silence
    bare = AgentContext(policy=judge, tokenizer=scorer.tokenizer)
    with pytest.raises(ConfigError, match=r"engine 'judge'.*--helper judge=.*judge: null"):
        asyncio.run(SPEC.reward(rin("Lyon", "judge"), bare))


def test_bad_rows_and_options_name_the_field() -> None:
    from agentgraphs.errors import ConfigError, InputError

    opts = SPEC.default_options()
    with pytest.raises(InputError, match="'prompt'"):
        SPEC.make_input(rollout_input("   ", "x"), opts)
    with pytest.raises(InputError, match="'label'"):
        SPEC.make_input(rollout_input("q?", {"nothing": 1}), opts)
    with pytest.raises(ConfigError, match="experts"):
        SPEC.resolve_options({"experts": {"search": ["a"]}})  # no answer tool
    with pytest.raises(ConfigError, match="experts"):
        SPEC.resolve_options({"experts": {"answer": ["a"], "browse": ["b"]}})
    with pytest.raises(ConfigError, match="preference"):
        SPEC.resolve_options({"preference": {"speed": 1.0}})
    with pytest.raises(ConfigError, match="max_turns"):
        SPEC.resolve_options({"max_turns": 0})
    assert SPEC.resolve_options({"preference": {"accuracy": 1, "tool:search": -0.1}}).preference["tool:search"] == -0.1


def test_a_group_of_real_rollouts_is_shaped_by_cost_in_the_converter(scorer: HFEngine, retrieval_url: str) -> None:
    """Four rollouts of one prompt: a cheap correct one (answer at once), a costly correct one (search
    first), two wrong ones. With cost in the preference, the converter ranks cheap > costly > wrong."""
    from types import SimpleNamespace

    from agentgraphs.testing.slime_sample import Sample
    from rl_bridge.convert import convert

    scripts = [
        ([call("answer", "answer-expert")], {"answer-expert": ["\\boxed{4321}"]}),
        ([call("search", "search-expert"), call("answer", "answer-expert")],
         {"search-expert": ["launch code Zorblax station " * 8], "answer-expert": ["\\boxed{4321}"]}),
        ([call("answer", "answer-expert")], {"answer-expert": ["\\boxed{1}"]}),
        ([call("answer", "big-expert")], {"big-expert": ["\\boxed{2}"]}),
    ]
    samples = []
    for i, (orchestrator, experts) in enumerate(scripts):
        engines = {n: experts.get(n, []) for n in ("search-expert", "code-expert", "answer-expert", "big-expert")}
        rollout, _, _ = run(scorer, orchestrator, engines, retrieval_url,
                            preference={"accuracy": 1.0, "cost": 0.5, "latency": 0.0})
        fields = sample_fields(rollout, SPEC)
        samples.append(Sample(group_index=0, index=i, reward=fields["reward"], status=Sample.Status.COMPLETED,
                              train_metadata=fields["train_metadata"]))
    costs = [s.train_metadata["reward_shaping"]["features"]["cost"] for s in samples]
    assert costs[1] > costs[0] > 0
    data = convert(SimpleNamespace(advantage_estimator="grpo", n_samples_per_prompt=4), samples)
    per_rollout = {}
    for idx, reward in zip(data["sample_indices"], data["rewards"]):
        per_rollout.setdefault(idx, set()).add(round(reward, 6))
    assert all(len(v) == 1 for v in per_rollout.values())  # every turn of a rollout gets its value
    adv = [per_rollout[i].pop() for i in range(4)]
    assert adv[0] > adv[1] > adv[2] == adv[3] and data["raw_reward"].count(1.0) == 3  # rollout 1 has 2 turns


def test_context_keeps_the_newest_notes_within_the_token_budget(scorer: HFEngine) -> None:
    from agentgraphs.toolorchestra.graph import _context_text
    from agentgraphs.toolorchestra.options import ToolOrchestraOptions
    from agentgraphs.toolorchestra.notes import Note

    tok = scorer.tokenizer
    ctx = AgentContext(policy=ScriptedPolicy(scorer, []), tokenizer=tok)
    notes = [Note(kind="document", text=f"Passage {i}: " + "alpha beta gamma delta " * 5) for i in range(6)]
    notes.append(Note(kind="code", text="```python\nprint(2)\n```\noutput:\n2"))
    text = _context_text(ctx, ToolOrchestraOptions(context_max_tokens=60), notes)
    body = [line for line in text.splitlines() if line and not line.endswith(":")]
    assert sum(len(tok.encode(line, add_special_tokens=False)) for line in body) <= 60 + len(body)
    assert "Passage 5" in text and "Passage 0" not in text and "print(2)" in text  # newest first
    assert text.index("Documents:") < text.index("Python code and outputs:")
    assert _context_text(ctx, ToolOrchestraOptions(), []) == "No information gathered yet."

"""AgentFlow's `helper_failure` option from the outside: rl_bridge.generate against local SGLang-contract servers,
one of whose helper engines fails every request (HTTP 503, no retries).

The seed's solver (Takenzz/AgentFlow@4b5aa84, agentic/agentflow/core/solver.py:118-125, 137-143, 169-181) goes on
past a helper that raises: a failed command call makes the command `Error generating command: <error>` (the tool
then runs that text), a failed verifier concludes STOP, a failed final output is "" (and the reward scores it).
`variant: seed` does the same, loudly (a WARNING naming the node, the step and the error; the sample's
trace_summary lists the failures); `variant: original` fails the rollout, as before. An aborted generation is
never gone past: slime re-queues the sample.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rl_bridge
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache
from tests.agentflow.test_graph import helper_script, plan
from tests.test_multiturn import RecordingEngine

SLIME_SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": -1, "max_new_tokens": 4096, "stop": None,
                  "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
                  "spaces_between_special_tokens": False}
ROLE = {"generate_command": "executor_engine", "verify": "verifier_engine", "final_output": "final_engine"}


def planner(call: ScriptCall) -> str:
    if "Analyze the given query" in call.prompt_text:
        return "Summary: a product. Tools: Base_Generator_Tool."
    return plan("Compute 6 * 7.", "Base_Generator_Tool")


@pytest.fixture()
def servers(tiny_engine: Any) -> Iterator[dict[str, SGLangTestServer]]:
    engines = {"policy": RecordingEngine(ScriptedPolicy(tiny_engine, planner, name="policy")),
               "generator": RecordingEngine(ScriptedPolicy(tiny_engine, helper_script(), name="generator")),
               "broken": RecordingEngine(ScriptedPolicy(tiny_engine, helper_script(), name="broken"))}
    with SGLangTestServer(engines["policy"], port=0) as p, SGLangTestServer(engines["generator"], port=0) as g, \
            SGLangTestServer(engines["broken"], port=0) as b:
        for srv, name in ((p, "policy"), (g, "generator"), (b, "broken")):
            srv.script = engines[name]  # type: ignore[attr-defined]
        yield {"policy": p, "generator": g, "broken": b}
    clear_cache()


def generate(servers: dict[str, SGLangTestServer], model_dir: Path, variant: str, failing: str | None,
             **options: Any) -> Any:
    """One slime sample through rl_bridge.generate: every helper role on `generator`, the role of node `failing`
    on `broken`."""
    roles = {option: "generator" for option in ("executor_engine", "verifier_engine", "final_engine",
                                                  "tool_engine")}
    if failing is not None:
        roles[ROLE[failing]] = "broken"
    host, port = servers["policy"].url.removeprefix("http://").rsplit(":", 1)
    args = SimpleNamespace(
        agentgraph="agentflow", hf_checkpoint=str(model_dir), sglang_router_ip=host, sglang_router_port=int(port),
        agentgraph_max_retries=0, reward_key=None,
        agentgraph_options={"variant": variant, "judge": None, "tools": ["base_generator"], **roles, **options},
        agentgraph_engines={name: f"sglang:{servers[name].url}" for name in ("generator", "broken")})
    clear_cache()
    sample = Sample(group_index=0, index=0, prompt="What is 6 times 7?", label="42", metadata={})

    async def go() -> Any:
        try:
            return await rl_bridge.generate(args, sample, dict(SLIME_SAMPLING))
        finally:
            await aclose_all()

    return asyncio.run(go())


def broken(servers: dict[str, SGLangTestServer], kind: str = "http503") -> None:
    servers["broken"].faults.set_rate(kind, 1.0)


def summary(out: Any) -> dict[str, Any]:
    return out.metadata["trace_summary"]


def warnings(caplog: pytest.LogCaptureFixture, node: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and f"helper call {node} failed" in r.getMessage()]


def assert_planner_trained(out: Any, servers: dict[str, SGLangTestServer], n: int) -> None:
    """The planner's `n` calls (analysis and steps) are the sample's training rows, token for token."""
    rows = out.train_metadata["turns"]
    returned = servers["policy"].script.calls  # type: ignore[attr-defined]
    assert len(rows) == len(returned) == n
    for row, (prompt, completion) in zip(rows, returned):
        assert row["tokens"] == prompt + completion.token_ids
        assert row["loss_mask"] == [1] * len(completion.token_ids)
        assert row["rollout_log_probs"] == completion.logprobs


def test_a_failing_command_call_becomes_the_seeds_command_and_the_rollout_goes_on(
        servers: dict[str, SGLangTestServer], tiny_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken(servers)
    with caplog.at_level(logging.WARNING, logger="agentgraphs.agentflow.graph"):
        out = generate(servers, tiny_model_dir, "seed", "generate_command")
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    assert servers["broken"].stats.generate_requests == 2  # both steps' commands were asked, and failed
    # the memory the planner reads next holds the seed's text as the step's command (and the tool's answer to it)
    step_two = servers["policy"].script.inner.calls[2].prompt_text  # type: ignore[attr-defined]
    assert "Error generating command: engine at " + servers["broken"].url in step_two
    assert "HTTP 503" in step_two
    assert_planner_trained(out, servers, 3)  # analysis + 2 steps (the verifier said CONTINUE, then STOP)
    assert out.reward == 1.0  # the final output still answers 42
    failures = summary(out)["helper_failures"]
    assert [(f["node"], f["step"]) for f in failures] == [("generate_command", 1), ("generate_command", 2)]
    assert all("EngineUnavailableError" in f["error"] and "HTTP 503" in f["error"] for f in failures)
    assert summary(out)["helper_failure_count"] == 2
    logged = warnings(caplog, "generate_command")
    assert len(logged) == 2 and "step 1" in logged[0] and "EngineUnavailableError" in logged[0]


def test_a_failing_verifier_stops_the_loop_there(servers: dict[str, SGLangTestServer], tiny_model_dir: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    broken(servers)
    with caplog.at_level(logging.WARNING, logger="agentgraphs.agentflow.graph"):
        out = generate(servers, tiny_model_dir, "seed", "verify")
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    assert servers["broken"].stats.generate_requests == 1  # one verification, failed: STOP after step 1
    assert_planner_trained(out, servers, 2)  # analysis + step 1 (the helper's script would have said CONTINUE)
    assert summary(out)["steps"] == 1 and summary(out)["stop_reason"] == "verifier"
    assert [(f["node"], f["step"]) for f in summary(out)["helper_failures"]] == [("verify", 1)]
    assert out.reward == 1.0
    assert len(warnings(caplog, "verify")) == 1


def test_a_failing_final_output_is_empty_and_scored(servers: dict[str, SGLangTestServer], tiny_model_dir: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    broken(servers)
    with caplog.at_level(logging.WARNING, logger="agentgraphs.agentflow.graph"):
        out = generate(servers, tiny_model_dir, "seed", "final_output")
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    assert servers["broken"].stats.generate_requests == 1
    assert out.metadata["answer"] == ""
    assert out.reward == 0.0  # the seed's reward scores the empty final output: wrong
    assert_planner_trained(out, servers, 3)  # the planner's turns train with that reward, as the seed's
    assert [(f["node"], f["step"]) for f in summary(out)["helper_failures"]] == [("final_output", 2)]
    assert len(warnings(caplog, "final_output")) == 1


def test_no_failure_records_none(servers: dict[str, SGLangTestServer], tiny_model_dir: Path) -> None:
    out = generate(servers, tiny_model_dir, "seed", None)
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    assert summary(out)["helper_failures"] == [] and summary(out)["helper_failure_count"] == 0


@pytest.mark.parametrize("node", ["generate_command", "verify", "final_output"])
@pytest.mark.parametrize(("variant", "options"), [("original", {}), ("seed", {"helper_failure": "fail"})])
def test_under_the_original_a_failing_helper_fails_the_rollout(
        servers: dict[str, SGLangTestServer], tiny_model_dir: Path, node: str, variant: str,
        options: dict[str, Any]) -> None:
    broken(servers)
    out = generate(servers, tiny_model_dir, variant, node, **options)
    assert out.status == Sample.Status.FAILED
    reason = out.metadata.get("status_reason", "")
    assert "EngineUnavailableError" in reason or "HTTP 503" in reason, reason
    assert servers["broken"].stats.generate_requests == 1
    assert all(m == 0 for row in out.train_metadata["turns"] for m in row["loss_mask"])  # trains nothing


@pytest.mark.parametrize("node", ["generate_command", "verify", "final_output"])
def test_an_aborted_helper_generation_still_aborts_under_seed(
        servers: dict[str, SGLangTestServer], tiny_model_dir: Path, node: str) -> None:
    broken(servers, "abort")
    out = generate(servers, tiny_model_dir, "seed", node)
    assert out.status == Sample.Status.ABORTED, out.metadata.get("status_reason")
    assert "helper_failures" not in out.metadata.get("trace_summary", {}) or \
        not out.metadata["trace_summary"]["helper_failures"]

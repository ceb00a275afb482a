"""AgentFlow as a LangGraph graph: analyze_query -> (plan_next_step -> [generate_command -> execute] ->
update_memory -> verify)* -> final_output.

plan_next_step is trained (the policy engine), and so is analyze_query with `train_analysis` (the
seed's planner makes it: turn 0); every other call goes to the engine of its role (options `*_engine`: a
name in `AgentContext.engines`, "policy", or "helper", which means `engines["helper"]` when the context
has one and the policy otherwise) and is recorded untrained. Edges: an unmatched tool name runs the base
generator (`unknown_tool: base_generator`, the seed's) or skips command and execution (the memory gets the
original's placeholders); after verify, STOP, max_steps, max_time or the planner token budget lead to
final_output, else the next plan. `variant` picks the seed's or the
original's settings (agentflow/variants.py). Under `helper_failure: seed` a failing command, verifier or final-output
helper call is gone past as the seed's solver goes past it (`_helper_failed`), recorded in `helper_failures`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from ..context import AgentContext, context_of
from ..errors import AgentGraphsError, EngineError
from ..node import LLMCallLimitExceeded, LLMResult, RolloutAborted, call_llm
from ..sandbox import SandboxLimits
from ..trace import Turn
from .parsing import NO_MATCHED_TOOL, extract_command, parse_answer_tags, parse_command, parse_next_step
from .parsing import parse_next_step_seed
from .seed_command import seed_command, seed_command_kwargs
from .parsing import parse_verifier_conclusion
from .prompts import (
    ANALYZE_TEMPLATE, ANSWER_SUFFIX, COMMAND_TEMPLATE, FINAL_TEMPLATE, NEXT_STEP_TEMPLATE, NO_TOOL_COMMAND,
    NO_TOOL_RESULT, SEED_ANALYZE_TEMPLATE, SEED_COMMAND_TEMPLATE, SEED_FINAL_TEMPLATE, SEED_NEXT_STEP_TEMPLATE,
    VERIFY_TEMPLATE, format_memory, format_metadata, format_seed_metadata, format_tools,
)
from .tools import Tool, resolve_tools, seed_signature, seed_view
from .options import AgentFlowOptions, AgentFlowState, role_engine

logger = logging.getLogger(__name__)

NODES = ("analyze_query", "plan_next_step", "generate_command", "execute", "update_memory", "verify",
         "final_output")


def _reply(out: LLMResult, opts: AgentFlowOptions) -> str:
    """The reply text the graph reads. Under `prompts: seed` the engine's whole text: the seed reads SGLang's
    `text` (core/llm_engine.py:67) of requests with slime's sampling params (skip_special_tokens false,
    no_stop_trim, no spaces between special tokens), so a reply that stopped on the end-of-turn token ends with
    "<|im_end|>", and that text goes on into memory, later prompts and the judge (the seed strips it only in
    core/executor.py:43 and core/formatters.py:40-43); a reply cut at max_new_tokens has none. Our token engines
    return that text (SGLangEngine asks SGLang for it; HFEngine decodes the output ids keeping special tokens).
    Otherwise the text without a trailing end-of-turn token (`call_llm`'s `text`). Only the text: the trained
    ids are the engine's, whatever is read."""
    return out.completion.text if opts.prompts == "seed" else out.text


async def _helper(state: AgentFlowState, runtime: Any, opts: AgentFlowOptions, role: str, node: str,
                  prompt: str, system: str | None = None) -> tuple[str, Turn]:
    ctx = context_of(runtime)
    sampling: dict[str, Any] = {"max_new_tokens": opts.helper_max_new_tokens}
    if opts.helper_temperature is not None:
        sampling["temperature"] = opts.helper_temperature
    messages = [{"role": "system", "content": system}] if system is not None else []
    out = await call_llm(state, runtime, node=node, messages=[*messages, {"role": "user", "content": prompt}],
                         engine=role_engine(ctx, role), trainable=False, **sampling)
    return _reply(out, opts), out.turn


def _helper_failed(exc: Exception, opts: AgentFlowOptions) -> bool:
    """Does `helper_failure: seed` go on past `exc`, raised by a helper call? The seed catches every Exception
    there (core/solver.py:118-125, 137-143, 169-181); ours, an engine's failure only (EngineError: unavailable,
    rejected, a broken reply; our engines wrap their client library's errors so), so that a bug in our own code is
    never gone past. Never the run's own signals: an aborted generation (slime re-queues the sample), the call
    budget, the configuration, a blocked loop or a cancelled call; the rollout's deadline cancels (not an
    Exception).

    >>> from agentgraphs.errors import ConfigError, EngineUnavailableError
    >>> seed = AgentFlowOptions()
    >>> _helper_failed(EngineUnavailableError("http://h", 1, "refused"), seed), _helper_failed(ConfigError("x"), seed)
    (True, False)
    >>> _helper_failed(KeyError("a bug of ours"), seed)
    False
    >>> _helper_failed(EngineUnavailableError("http://h", 1, "refused"), AgentFlowOptions(variant="original"))
    False
    """
    if opts.helper_failure != "seed" or isinstance(exc, (RolloutAborted, LLMCallLimitExceeded)):
        return False
    return isinstance(exc, EngineError)


def _record_failure(state: Mapping[str, Any], node: str, exc: Exception, then: str) -> dict[str, Any]:
    """The state update that records a helper failure gone past (`helper_failures`: node, step, error), logged
    as a WARNING naming the node, the step and what the run does instead (`then`)."""
    step = int(state.get("step") or 0)
    error = f"{type(exc).__name__}: {exc}"
    logger.warning("agentflow: helper call %s failed at step %d (helper_failure: seed, as the seed's solver): %s; "
                   "%s", node, step, error, then)
    return {"helper_failures": [*(state.get("helper_failures") or []), {"node": node, "step": step, "error": error}]}


def _tools(runtime: Any, opts: AgentFlowOptions) -> dict[str, Tool]:
    """{planner-facing name: Tool}: the seed's names for its two tools under `prompts: seed`."""
    tools = resolve_tools(opts.tools, context_of(runtime).tools)
    if opts.prompts == "seed":
        return {seed_view(tool)[0]: tool for tool in tools.values()}
    return tools


def _metadata(tools: Mapping[str, Tool], opts: AgentFlowOptions) -> str:
    """The toolbox metadata the prompts print: the seed's {name: {"description": ...}} or the original's."""
    if opts.prompts == "seed":
        return format_seed_metadata({name: seed_view(tool)[1] for name, tool in tools.items()})
    return format_metadata({name: tool.metadata() for name, tool in tools.items()})


def _seed_names(runtime: Any, opts: AgentFlowOptions) -> dict[str, str]:
    """Every name the seed's executor resolves exactly (core/executor.py:178-195): the planner-facing names, then
    the tools' class names (ours: Tool.name), then their directories (ours: the registry keys) -> planner name."""
    context_tools = context_of(runtime).tools
    keyed = [(key, next(iter(resolve_tools((key,), context_tools).values()))) for key in opts.tools]
    names: dict[str, str] = {}
    for alias_of in (lambda key, tool: seed_view(tool)[0], lambda key, tool: tool.name, lambda key, tool: key):
        for key, tool in keyed:
            names.setdefault(alias_of(key, tool), seed_view(tool)[0])
    return names


def _tool_engine(runtime: Any, opts: AgentFlowOptions, tool: Tool) -> str:
    """The engine option of `tool`'s own LLM calls: its `tool_engines` entry, else tool_engine."""
    context_tools = context_of(runtime).tools
    for key, name in opts.tool_engines.items():
        if tool in resolve_tools((key,), context_tools).values():
            return name
    return opts.tool_engine


def _max_steps(runtime: Any, opts: AgentFlowOptions) -> int | None:
    """The step cap of this run (None: no cap)."""
    if context_of(runtime).evaluation and opts.eval_max_steps != "max_steps":
        return opts.eval_max_steps
    return opts.max_steps


def _at_max_steps(state: Mapping[str, Any], runtime: Any, opts: AgentFlowOptions) -> bool:
    cap = _max_steps(runtime, opts)
    return cap is not None and state.get("step", 0) >= cap


async def analyze_query(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                        ) -> dict[str, Any]:
    """The query analysis (summary, skills, relevant tools, considerations); starts the clock."""
    tools = _tools(runtime, opts)
    query = state["question"] + (" " + ANSWER_SUFFIX if opts.answer_suffix else "")
    template = SEED_ANALYZE_TEMPLATE if opts.prompts == "seed" else ANALYZE_TEMPLATE
    prompt = template.format(question=query, tools=format_tools(list(tools)), metadata=_metadata(tools, opts))
    if opts.train_analysis:  # the seed's planner analyses the query itself: a trained policy call
        out = await call_llm(state, runtime, node="analyze_query", messages=[{"role": "user", "content": prompt}],
                             max_new_tokens=opts.planner_max_new_tokens)
        text, turn = _reply(out, opts), out.turn
    else:
        text, turn = await _helper(state, runtime, opts, opts.analyzer_engine, "analyze_query", prompt)
    analysis = text if opts.prompts == "seed" else text.strip()  # the seed's prompts show its reply as it is
    return {"query": query, "analysis": analysis, "step": 0, "memory": [],
            "turns": [turn]}


async def plan_next_step(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                         ) -> dict[str, Any]:
    """The planner's next step (context, sub-goal, tool): trained (with the analysis under train_analysis)."""
    tools = _tools(runtime, opts)
    template = SEED_NEXT_STEP_TEMPLATE if opts.prompts == "seed" else NEXT_STEP_TEMPLATE
    prompt = template.format(question=state["query"], analysis=state["analysis"], tools=format_tools(list(tools)),
                             metadata=_metadata(tools, opts),
                             memory=format_memory(state["memory"], opts.action_step_start))
    out = await call_llm(state, runtime, node="plan_next_step", messages=[{"role": "user", "content": prompt}],
                         max_new_tokens=opts.planner_max_new_tokens)
    if opts.prompts == "seed":
        step = parse_next_step_seed(_reply(out, opts), _seed_names(runtime, opts))
    else:
        step = parse_next_step(out.text, list(tools))
    fallback = _fallback_tool(runtime, opts)
    if not step["matched"] and fallback is not None:  # the seed's executor runs its base generator instead
        written = step.get("written", step["tool_name"][len(NO_MATCHED_TOOL):])
        step = {**step, "tool_name": fallback, "matched": True, "written": written, "fallback": True}
    return {"step": state["step"] + 1, "next_step": step, "command": "", "result": "", **out.update}


def _fallback_tool(runtime: Any, opts: AgentFlowOptions) -> str | None:
    """The planner-facing name of the tool an unknown tool name runs (`unknown_tool: base_generator`): the
    selected tool keyed base_generator; None when that option is off or no such tool is selected."""
    if opts.unknown_tool != "base_generator" or "base_generator" not in opts.tools:
        return None
    tool = next(iter(resolve_tools(("base_generator",), context_of(runtime).tools).values()))
    return seed_view(tool)[0] if opts.prompts == "seed" else tool.name


async def generate_command(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                           ) -> dict[str, Any]:
    """The executor's `execution = tool.execute(...)` command for the chosen tool."""
    step = state["next_step"]
    tools = _tools(runtime, opts)
    tool = tools[step["tool_name"]]
    if opts.prompts == "seed":  # the name as written and the whole toolbox's metadata (core/solver.py:119-122)
        prompt = SEED_COMMAND_TEMPLATE.format(question=state["query"], sub_goal=step["sub_goal"],
                                              tool_name=step.get("written", step["tool_name"]),
                                              tool_metadata=_metadata(tools, opts), context=step["context"])
    else:
        prompt = COMMAND_TEMPLATE.format(question=state["query"], sub_goal=step["sub_goal"], tool_name=tool.name,
                                         tool_metadata=format_metadata(tool.metadata()), context=step["context"])
    try:
        text, turn = await _helper(state, runtime, opts, opts.executor_engine, "generate_command", prompt)
    except Exception as exc:
        if not _helper_failed(exc, opts):
            raise
        command = f"Error generating command: {exc}"  # the seed's (core/solver.py:123-125): the tool runs it
        return {"command": command, **_record_failure(state, "generate_command", exc, "the command is its error")}
    command = seed_command(text) if opts.prompts == "seed" else extract_command(text)
    return {"command": command, "turns": [turn]}


class _ToolRuntime:
    """A tool's view of the run: its LLM (its engine: `tool_engines`, else tool_engine) and the sandbox limits."""

    def __init__(self, state: AgentFlowState, runtime: Any, opts: AgentFlowOptions, engine: str) -> None:
        self._state, self._runtime, self._opts, self._engine = state, runtime, opts, engine
        self.turns: list[Turn] = []
        self.sandbox_limits = SandboxLimits(wall_s=opts.sandbox_wall_s, cpu_s=opts.sandbox_wall_s,
                                            memory_bytes=opts.sandbox_memory_mb * 1024 * 1024)

    async def llm(self, prompt: str, *, node: str, system: str | None = None) -> str:
        state = {**self._state, "turns": list(self._state.get("turns") or []) + self.turns}
        text, turn = await _helper(state, self._runtime, self._opts, self._engine,  # type: ignore[arg-type]
                                   node, prompt, system)
        self.turns.append(turn)
        return text


async def execute(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions) -> dict[str, Any]:
    """Run each `tool.execute(...)` of the command (parsed, never exec'd); errors and timeouts become results."""
    tool = _tools(runtime, opts)[state["next_step"]["tool_name"]]
    rt = _ToolRuntime(state, runtime, opts, _tool_engine(runtime, opts, tool))
    if opts.prompts == "seed":
        run = tool.seed_run or tool.run  # the seed's own behaviour of a built-in tool (python_coder's string)
        # the seed calls tool.execute once, with the keyword arguments it reads from the command, and keeps str()
        # of that one result, or its error texts with the tool's name as the planner wrote it (core/executor.py:
        # 130-176, 225-245)
        kwargs = seed_command_kwargs(state["command"])
        written = state["next_step"].get("written", state["next_step"]["tool_name"])
        error = partial(_seed_tool_error, written)
        if isinstance(kwargs, str):
            result = f"Command parse error: {kwargs}"
        else:
            try:
                seed_signature(tool)(**kwargs)  # the seed's TypeError for arguments its tool does not take
            except TypeError as exc:
                result = error(exc)
            else:
                result = str(await _run_tool(run, rt, kwargs, opts, error=error))
        return {"result": _cut(result, opts.result_max_chars), "turns": rt.turns}
    results: list[Any] = []
    for call in parse_command(state["command"]):
        if call["error"]:
            results.append(f"Error in the command: {call['error']}")
            continue
        results.append(await _run_tool(tool.run, rt, call["kwargs"], opts))
    return {"result": _cut(str(results), opts.result_max_chars), "turns": rt.turns}


async def _run_tool(run: Callable[..., Awaitable[Any]], rt: _ToolRuntime, kwargs: dict[str, Any],
                    opts: AgentFlowOptions, error: Callable[[Exception], str] | None = None) -> Any:
    """One tool.execute (`run`): its result, or the error (worded by `error`) or timeout as the result the
    planner sees."""
    try:
        return await asyncio.wait_for(run(rt, **kwargs), opts.tool_timeout_s)  # None: no limit
    except asyncio.TimeoutError:
        return f"Execution timed out after {opts.tool_timeout_s:g} seconds"
    except (AgentGraphsError, RolloutAborted):
        raise  # the engine or the configuration failed, not the tool: the rollout reports it
    except Exception as exc:  # a tool's own failure is a result the planner sees
        return error(exc) if error is not None else f"Error in execute_tool_command: {type(exc).__name__}: {exc}"


def _seed_tool_error(written: str, exc: Exception) -> str:
    """The seed's text for a tool that raised (core/executor.py:241-245), with the name the planner wrote."""
    return f"Tool execution error ({written}): {exc}"


def _cut(text: str, limit: int) -> str:
    """`text`'s first and last `limit // 2` characters around the seed's marker when it is longer than `limit`,
    as the seed's memory cuts it (core/memory.py:13-15): a tool's conclusion (a base generator's answer, the
    last line a program printed) comes last, so the end is kept too.

    >>> _cut("abcdefghij", 4)
    'ab\\n... [truncated 6 chars] ...\\nij'
    """
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + f"\n... [truncated {len(text) - limit} chars] ...\n" + text[-half:]


async def update_memory(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                        ) -> dict[str, Any]:
    """Append "Action Step k" (tool, sub-goal, command, result); the original's placeholders for an unknown tool."""
    step = state["next_step"]
    if step["matched"]:
        command, result = state["command"], state["result"]
    else:
        command, result = NO_TOOL_COMMAND, NO_TOOL_RESULT
    name = step.get("written", step["tool_name"]) if step["matched"] else step["tool_name"]  # the seed's: as written
    action = {"tool_name": name, "sub_goal": step["sub_goal"], "command": command, "result": result}
    return {"memory": [*state["memory"], action]}


async def verify(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions) -> dict[str, Any]:
    """Is the memory enough to answer? "Conclusion: STOP" or "Conclusion: CONTINUE"."""
    tools = _tools(runtime, opts)
    prompt = VERIFY_TEMPLATE.format(question=state["query"], tools=format_tools(list(tools)),
                                    metadata=_metadata(tools, opts), analysis=state["analysis"],
                                    memory=format_memory(state["memory"], opts.action_step_start))
    try:
        text, turn = await _helper(state, runtime, opts, opts.verifier_engine, "verify", prompt)
    except Exception as exc:
        if not _helper_failed(exc, opts):
            raise
        return {"conclusion": "STOP",  # the seed's (core/solver.py:141-143)
                **_record_failure(state, "verify", exc, "the conclusion is STOP")}
    return {"conclusion": parse_verifier_conclusion(text, opts.verifier_rule), "turns": [turn]}


async def final_output(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                       ) -> dict[str, Any]:
    """The direct output (Process Summary, Answer); the answer is its last <answer>...</answer>."""
    template = SEED_FINAL_TEMPLATE if opts.prompts == "seed" else FINAL_TEMPLATE
    prompt = template.format(question=state["query"], analysis=state["analysis"],
                             memory=format_memory(state["memory"], opts.action_step_start))
    try:
        text, turn = await _helper(state, runtime, opts, opts.final_engine, "final_output", prompt)
    except Exception as exc:
        if not _helper_failed(exc, opts):
            raise
        return {"final_output": "", "answer": "",  # the seed's (core/solver.py:179-181): its reward scores ""
                **_record_failure(state, "final_output", exc, "the final output is empty")}
    # the seed's reward reads the whole final output (its last \boxed{}, rollout.py:232-236); the original's tags
    answer = text if opts.prompts == "seed" else parse_answer_tags(text)
    return {"final_output": text, "answer": answer, "turns": [turn]}


def _out_of_time(state: AgentFlowState, opts: AgentFlowOptions) -> bool:
    return opts.max_time_s is not None and float(state.get("elapsed_s") or 0.0) >= opts.max_time_s


def _clocked(node: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
    """`node`, adding the time it ran to state["elapsed_s"]. max_time_s counts the run's own work, as the
    original's clock from the query's start does while the loop runs, but not the wall clock between
    supersteps: a replay or fork hours later, or a paused debugger session, continues the same budget
    (a clock of day in state would cut such a branch at once)."""
    async def run(state: AgentFlowState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        started = time.monotonic()
        update = await node(state, runtime)
        return {**update, "elapsed_s": float(state.get("elapsed_s") or 0.0) + time.monotonic() - started}

    return run


_PLANNER_NODES = ("analyze_query", "plan_next_step")


def _over_token_budget(state: AgentFlowState, opts: AgentFlowOptions) -> bool:
    """The seed's budget: prompt + output tokens of the planner's calls (the analysis when it is one)."""
    if opts.planner_token_budget is None:
        return False
    nodes = _PLANNER_NODES if opts.train_analysis else _PLANNER_NODES[1:]
    used = sum(len(t["prompt_ids"]) + len(t["output_ids"]) for t in state.get("turns") or [] if t["node"] in nodes)
    return used >= opts.planner_token_budget


async def route_after_analyze(state: AgentFlowState, opts: AgentFlowOptions) -> str:
    return "final_output" if _out_of_time(state, opts) else "plan_next_step"


async def route_after_plan(state: AgentFlowState) -> str:
    return "generate_command" if state["next_step"]["matched"] else "update_memory"


async def route_after_verify(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions) -> str:
    if (state["conclusion"] == "STOP" or _at_max_steps(state, runtime, opts) or _out_of_time(state, opts)
            or _over_token_budget(state, opts)):
        return "final_output"
    return "plan_next_step"


async def stop_reason(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                      ) -> dict[str, Any]:
    """Why the loop ended (kept in state for the trace summary)."""
    if state.get("conclusion") == "STOP":
        reason = "verifier"
    elif _at_max_steps(state, runtime, opts):
        reason = "max_steps"
    elif _over_token_budget(state, opts):
        reason = "token_budget"
    else:
        reason = "max_time"
    return {"stop_reason": reason}


def build_graph(options: AgentFlowOptions | None = None, *, checkpointer: Any = None) -> Any:
    """The compiled AgentFlow graph for resolved options (defaults when None).

    >>> g = build_graph()
    >>> sorted(n for n in g.get_graph().nodes if not n.startswith("__"))
    ['analyze_query', 'execute', 'final_output', 'generate_command', 'plan_next_step', 'update_memory', 'verify']
    """
    opts = options or AgentFlowOptions()
    builder = StateGraph(AgentFlowState, context_schema=AgentContext)
    builder.add_node("analyze_query", _clocked(partial(analyze_query, opts=opts)))
    builder.add_node("plan_next_step", _clocked(partial(plan_next_step, opts=opts)))
    builder.add_node("generate_command", _clocked(partial(generate_command, opts=opts)))
    builder.add_node("execute", _clocked(partial(execute, opts=opts)))
    builder.add_node("update_memory", _clocked(partial(update_memory, opts=opts)))
    builder.add_node("verify", _clocked(partial(verify, opts=opts)))
    builder.add_node("final_output", partial(_final_with_reason, opts=opts))
    builder.add_edge(START, "analyze_query")
    builder.add_conditional_edges("analyze_query", partial(route_after_analyze, opts=opts),
                                  ["plan_next_step", "final_output"])
    builder.add_conditional_edges("plan_next_step", route_after_plan, ["generate_command", "update_memory"])
    builder.add_edge("generate_command", "execute")
    builder.add_edge("execute", "update_memory")
    builder.add_edge("update_memory", "verify")
    builder.add_conditional_edges("verify", partial(route_after_verify, opts=opts), ["plan_next_step", "final_output"])
    builder.add_edge("final_output", END)
    return builder.compile(checkpointer=checkpointer, name="agentflow")


async def _final_with_reason(state: AgentFlowState, runtime: Runtime[AgentContext], opts: AgentFlowOptions,
                             ) -> dict[str, Any]:
    update = await final_output(state, runtime, opts)
    return {**update, **(await stop_reason(state, runtime, opts))}

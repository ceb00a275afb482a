"""Where the CPU between two LLM calls of the react agent goes (bench/README.md, scale: "Per-call framework cost").

    python bench/_scale_profile.py [--model floor|traced] [--rollouts 300] [--turns 30] [--tool-tokens 1000]

One process, single rollouts one after another (as scale.py's probe runs them), the react workload of
`_scale_work.py` (`create_react_agent` + the `lookup` tool) run by `run_rollout`, no HTTP: `--model traced` is
`TracedChatModel` over an in-process instant engine with the stand-in's reply rules (the same prompts and replies
as the probe), `--model floor` is the probe's do-nothing chat model (`scale._Floor`). First, unsampled rollouts
give the median thread CPU between a call's return and the next call's start; then a sampler (SIGPROF on the
process's CPU time, in practice one sample per kernel tick, ~4 ms) records the Python stack of the samples taken
between calls only (a flag is cleared while the model's `_agenerate` runs and after the rollout's last call), and
each sample goes to the first component below whose marker is in its stack. The table gives each component's
share and that share of the unsampled median in ms. A sample lands on the Python frame running when the tick
fires: C code (the collector included) counts for the Python function that called it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import _scale_work as work  # noqa: E402

# (component, markers): a sample goes to the first component with a marker in its stack (outer parts first)
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("tool call: LangChain BaseTool.ainvoke/arun (callbacks, the tool function's signature and type hints, "
     "input parsing, the ToolMessage)", ("langchain_core/tools/",)),
    ("ToolNode (langgraph.prebuilt) around the tool: tool-call dispatch, injected arguments",
     ("prebuilt/tool_node.py",)),
    ("create_react_agent's sync `should_continue`, run in the default thread pool (run_in_executor, the future, "
     "the loop's wake-up)", ("should_continue", "run_in_executor", "concurrent/futures", "_read_from_self")),
    ("LangChain BaseChatModel.ainvoke/agenerate around _agenerate (callback manager, on_chat_model_start / "
     "on_llm_end, LLMResult, message ids)", ("language_models/chat_models.py", "language_models/base.py")),
    ("LangChain RunnableSequence / RunnableBinding around the model (config merges, child callback managers)",
     ("runnables/base.py",)),
    ("create_react_agent's model node (input state, history check, response name)", ("chat_agent_executor.py",)),
    ("LangGraph add_messages reducer", ("graph/message.py",)),
    ("agentgraphs run_rollout: drive (the path, each step's request ids)", ("_step_rids", "drive@agentgraphs")),
    ("LangGraph Pregel loop (ticks, task preparation, channel writes, the checkpoint object, the branch, the "
     "stream)", ("langgraph/",)),
    ("LangChain callbacks / config elsewhere", ("langchain_core/", "langsmith/")),
    ("asyncio event loop (task steps, callbacks)", ("asyncio/",)),
]


# functions named across components (inclusive: a sample counts for each of these in its stack)
NAMED: list[tuple[str, tuple[str, ...]]] = [
    ("typing.get_type_hints: LangChain reads the tool function's type hints on every call (string annotations, "
     "`from __future__ import annotations`, are evaluated again each time)", ("get_type_hints@",)),
    ("inspect.signature of callables, per call (LangChain, LangGraph)", ("signature@",)),
    ("ensure_config / merge_configs / patch_config (config dicts copied per runnable)",
     ("ensure_config@", "merge_configs@", "patch_config@")),
    ("callback managers: configure, get_child, on_*_start / on_*_end (no handler is attached)",
     ("callbacks/manager.py",)),
    ("LangGraph's checkpoint object, built every superstep without a checkpointer (create_checkpoint)",
     ("create_checkpoint@",)),
]


def component(stack: str) -> str:
    frames = stack.split(";")
    for name, marks in COMPONENTS:
        for mark in marks:
            hits = [i for i, f in enumerate(frames) if mark in f]
            if not hits:
                continue
            if name.startswith("agentgraphs run_rollout") and any("langgraph/" in f for f in frames[hits[-1]:]):
                break  # LangGraph's own code running inside our `async for`
            return name
    return "other: " + frames[-1]


class _Window:
    """Whether the main thread is between two model calls of a rollout (samples outside are dropped)."""

    def __init__(self) -> None:
        self.open = False
        self.marks: list[float] = []
        self.ends: list[float] = []
        self.stacks: collections.Counter[str] = collections.Counter()

    def sample(self, signum: int, frame: Any) -> None:
        if not self.open:
            return
        names = []
        while frame is not None:
            code = frame.f_code
            where = code.co_filename.split("site-packages/")[-1].split("/agentgraphs/", 1)
            names.append(f"{code.co_name}@{'agentgraphs/' + where[1] if len(where) == 2 else where[0]}")
            frame = frame.f_back
        self.stacks[";".join(reversed(names))] += 1


def windowed(model: Any, window: _Window) -> Any:
    """A model of `model`'s class (default fields) whose `_agenerate` closes the window while it runs and marks its
    start and end."""

    class Windowed(type(model)):  # type: ignore[misc]
        async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            window.open = False
            window.marks.append(time.thread_time())
            result = await super()._agenerate(messages, stop, run_manager, **kwargs)
            window.ends.append(time.thread_time())
            window.open = True
            return result

    return Windowed()  # both models take their defaults


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("floor", "traced"), default="floor")
    p.add_argument("--rollouts", type=int, default=300)
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--tool-tokens", type=int, default=1000)
    args = p.parse_args()

    import scale  # bench/scale.py: the probe's floor model
    from _server import _replies, _Tokenizer

    from agentgraphs.chat_model import TracedChatModel
    from agentgraphs.context import AgentContext, Limits
    from agentgraphs.engines import SamplingParams
    from agentgraphs.rollout import rollout_input, run_rollout
    from agentgraphs.testing.fake_engines import FixedLatencyEngine
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    tok = _common.tiny_tokenizer()
    fast = _Tokenizer(ensure_tiny_model() / "tokenizer.json", "<|im_end|>")
    engine = FixedLatencyEngine(latency_s=0.0, script=(fast.eos_token_id,), tokenizer=fast,  # type: ignore[arg-type]
                                replies=_replies(json.dumps(work.react_replies(tok, args.turns, scale.GEN_TOKENS)), fast))
    ctx = AgentContext(policy=engine, tokenizer=tok, sampling=SamplingParams(max_new_tokens=scale.MAX_NEW_TOKENS),
                       limits=Limits(recursion_limit=10 * args.turns + 20, max_llm_calls=4 * args.turns + 8))
    window = _Window()
    if args.model == "traced":
        model = windowed(TracedChatModel(), window)
    else:
        floor = scale._Floor({"turns": args.turns, "tool_tokens": args.tool_tokens}, tok)
        model = windowed(floor._model(args.turns), window)
    spec = work.react_spec(work.tool_results(tok, args.tool_tokens), model)

    async def rollout(i: int) -> list[float]:
        window.marks.clear()
        window.ends.clear()
        result = await run_rollout(spec, rollout_input(work.QUESTION.format(i=i)), ctx, compute_reward=False)
        window.open = False  # the rollout's end is not between calls
        if result.status != "completed" or len(window.marks) != args.turns:
            raise SystemExit(f"rollout {i}: {result.status} ({result.reason}), {len(window.marks)} calls")
        return [window.marks[k + 1] - window.ends[k] for k in range(len(window.marks) - 1)]

    async def run() -> float:
        await rollout(0)  # warm-up
        medians = [statistics.median(await rollout(i)) for i in range(1, max(5, args.rollouts // 4))]
        signal.signal(signal.SIGPROF, window.sample)
        signal.setitimer(signal.ITIMER_PROF, 0.0002, 0.0002)
        try:
            for i in range(args.rollouts):
                await rollout(i)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
        return statistics.median(medians)

    between = asyncio.run(run())
    shares: collections.Counter[str] = collections.Counter()
    for stack, n in window.stacks.items():
        shares[component(stack)] += n
    total = sum(shares.values())
    print(f"react, {args.model} model, {args.turns} turns: thread CPU between calls, median over rollouts "
          f"{1000 * between:.3f} ms (unsampled); {total} samples between calls over {args.rollouts} rollouts")
    for name, n in shares.most_common():
        print(f"  {100 * n / total:5.1f} %  {1000 * between * n / total:6.3f} ms  {name}")
    print("named functions, inclusive (a sample counts for each one in its stack):")
    for name, marks in NAMED:
        n = sum(k for stack, k in window.stacks.items() if any(m in stack for m in marks))
        print(f"  {100 * n / total:5.1f} %  {1000 * between * n / total:6.3f} ms  {name}")


if __name__ == "__main__":
    main()

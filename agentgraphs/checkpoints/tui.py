"""The terminal face of `agentgraphs debug`: a command loop over a DebugSession, printed with rich.

Each node's state update is shown as it happens; a Turn's tokens are coloured by their role in training:
trained output (green), masked output (yellow: not trainable, e.g. a helper engine or evaluation),
glue / observation tokens the turn's prompt added to its conversation (magenta: masked in a concat
sequence), and a fresh prompt (cyan). Token boundaries alternate in brightness; the earlier part of a
conversation is collapsed. Commands (`help` lists them): step, continue, state, turn, edit, history, fork,
quit. Ctrl-C during a step interrupts it (its engine calls are cancelled, no checkpoint is written) and
returns to the prompt.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from typing import Any, Awaitable, Callable, Mapping, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..errors import AgentGraphsError
from ..trace import Turn, extended_turn
from .debugger import DebugSession
from .replay import CheckpointInfo

__all__ = ["HELP", "render_turn", "render_value", "repl"]

HELP = """\
commands:
  s, step [N]       run the next N supersteps (default 1) and stop
  c, continue       run to the end (Ctrl-C interrupts a step: no checkpoint, back to this prompt)
  state [KEY]       the current state (every key summarised), or one key in full
  turn N [lp]       turn N's tokens: prompt / glue / trained / masked (lp: every output log-prob)
  edit KEY JSON     set a state key at this checkpoint (JSON value; `turns` appends), counted as the
                    node that wrote the checkpoint; edit --as NODE KEY JSON counts it as NODE
  h, history        the thread's checkpoints (* = on the current branch)
  fork N            go back to checkpoint N: the next step starts a new branch there
  help              this list
  q, quit           leave; the thread stays in the database (resume with --thread ID)"""

STYLES = {
    "prompt": ("cyan", "bright_cyan"),
    "glue": ("magenta", "bright_magenta"),
    "trained": ("green", "bright_green"),
    "masked": ("yellow", "bright_yellow"),
}
_HEAD_TOKENS = 48  # of a long fresh prompt, this many tokens at its start ...
_TAIL_TOKENS = 160  # ... and this many at its end are shown
_STEP_OUTPUT_TOKENS = 400  # a step shows this much of each new output; `turn N` shows all of it


def _token_text(tokenizer: Any, token_id: int) -> str:
    text = tokenizer.decode([token_id], skip_special_tokens=False) if tokenizer is not None else f"<{token_id}>"
    return text.replace("\n", "\u21b5\n")  # a newline token stays visible


def _add_tokens(out: Text, tokenizer: Any, ids: Sequence[int], role: str) -> None:
    styles = STYLES[role]
    for i, token_id in enumerate(ids):
        out.append(_token_text(tokenizer, int(token_id)), style=styles[i % 2])


def _base(turns: Sequence[Turn], index: int) -> Turn | None:
    """The turn `turns[index]` extends (`agentgraphs.trace.extended_turn`), if any."""
    base = extended_turn(turns, index)
    return turns[base] if base is not None else None


def _add_span(out: Text, tokenizer: Any, ids: Sequence[int], role: str, limit: int | None) -> None:
    """Tokens of one role; with a `limit`, a longer span keeps its start and end around a dim marker."""
    if limit is None or len(ids) <= limit:
        _add_tokens(out, tokenizer, ids, role)
        return
    head = min(_HEAD_TOKENS, limit // 4)
    tail = limit - head
    _add_tokens(out, tokenizer, ids[:head], role)
    more = " (`turn N` shows all)" if role in ("trained", "masked") else ""
    out.append(f"[... {len(ids) - head - tail} {role} tokens{more} ...]", style="dim")
    _add_tokens(out, tokenizer, ids[-tail:], role)


def render_turn(turn: Turn, tokenizer: Any, base: Turn | None = None, *, index: int | None = None,
                max_output_tokens: int | None = None) -> Text:
    """A Turn's tokens coloured by role, with a header line (node, sizes, finish reason, log-probs).

    `base` is the turn this one extends (`agentgraphs.trace.extended_turn`): its prompt + output are collapsed and the rest of
    the prompt is glue; without one the whole prompt is a fresh prompt.

    A long fresh prompt is shown by its start and end; `max_output_tokens` does the same for the output.
    A helper engine's text-only turn (no ids) shows its text as masked output.

    >>> from agentgraphs.trace import make_turn
    >>> from agentgraphs.engines import Completion
    >>> t = make_turn(Completion([5, 6], [-0.5, -1.5], "stop", text="xy"), node="solve", prompt_ids=[1, 2, 3],
    ...               trainable=True, temperature=1.0, engine="e")
    >>> print(render_turn(t, None, index=0).plain)
    turn 0  solve  [trained]  3 prompt + 2 output tokens  finish=stop  mean log-prob -1.000  engine e
    <1><2><3><5><6>
    """
    known = len(base["prompt_ids"]) + len(base["output_ids"]) if base is not None else 0
    role = "glue" if base is not None else "prompt"
    out_role = "trained" if turn["trainable"] else "masked"
    lps = list(turn["output_logprobs"])
    mean = f"{sum(lps) / len(lps):.3f}" if lps else "n/a"
    head = Text()
    head.append(f"turn {index}  " if index is not None else "turn  ", style="bold")
    head.append(f"{turn['node']}  ", style="bold")
    head.append(f"[{out_role}]  ", style=STYLES[out_role][0])
    head.append(f"{len(turn['prompt_ids'])} prompt + {len(turn['output_ids'])} output tokens  "
                f"finish={turn['finish_reason']}  mean log-prob {mean}  engine {turn['engine']}")
    if turn.get("retries"):
        head.append(f"  retries {turn['retries']}", style="red")
    body = Text()
    if known:
        body.append(f"[... {known} tokens of conversation '{turn['conversation']}' so far ...]", style="dim")
    fresh = list(turn["prompt_ids"][known:])
    _add_span(body, tokenizer, fresh, role, _HEAD_TOKENS + _TAIL_TOKENS if role == "prompt" else None)
    if turn["output_ids"]:
        _add_span(body, tokenizer, list(turn["output_ids"]), out_role, max_output_tokens)
    elif turn.get("text"):
        body.append(turn["text"], style=STYLES[out_role][0])  # a text engine's turn: no ids to show
    return Text("\n").join([head, body])


def legend() -> Text:
    out = Text("tokens: ")
    for role, label in (("prompt", "prompt"), ("glue", "glue/observation (masked)"), ("trained", "trained"),
                        ("masked", "masked output")):
        out.append(label, style=STYLES[role][0])
        out.append("  ")
    return out


def render_logprobs(turn: Turn, tokenizer: Any) -> Table:
    """Every output token of a turn with its id and log-prob."""
    table = Table("#", "token", "id", "log-prob")
    for i, (tid, lp) in enumerate(zip(turn["output_ids"], turn["output_logprobs"])):
        table.add_row(str(i), repr(_token_text(tokenizer, int(tid)).replace("\u21b5\n", "\n")), str(tid), f"{lp:.4f}")
    return table


def render_value(value: Any, limit: int = 160) -> str:
    """A state value in one line: long lists and strings summarised.

    >>> render_value(list(range(1000)))
    '[1000 ints]'
    >>> render_value("x" * 500, limit=10)
    "'xxxxxxxxxx...' (500 chars)"
    """
    if isinstance(value, list) and len(value) > 8 and all(isinstance(v, int) for v in value):
        return f"[{len(value)} ints]"
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r:.{limit + 2}}...' ({len(value)} chars)"
    if isinstance(value, list) and value and all(_is_message(m) for m in value):
        return "[" + ", ".join(_message(m) for m in value) + "]"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars as JSON)"


def _is_message(value: Any) -> bool:
    return hasattr(value, "type") and hasattr(value, "content")  # a LangChain message


def _message(msg: Any) -> str:
    """A chat message in a few words: its type, the start of its text, and its tool calls."""
    text = msg.content if isinstance(msg.content, str) else json.dumps(msg.content, default=str)
    calls = [c.get("name", "?") for c in (getattr(msg, "tool_calls", None) or [])]
    return f"{msg.type}: {text[:60]!r}" + (f" calls {calls}" if calls else "")


def _print_update(console: Console, session: DebugSession, node: str, update: Mapping[str, Any],
                  turns_before: list[Turn]) -> None:
    """A node's update: each key in one line, then each new Turn's tokens (the spec finds them: `turns`, or
    the AI messages of a messages graph)."""
    console.rule(f"node {node}", style="blue")
    for key, value in update.items():
        if key != "turns":
            console.print(f"{escape(key)}: {escape(render_value(value))}")
    new = session.spec.collect_turns(update)
    if new:
        console.print(f"turns: +{len(new)}")
    for turn in new:
        turns_before.append(turn)
        i = len(turns_before) - 1
        console.print(render_turn(turn, session.context.tokenizer, _base(turns_before, i), index=i,
                                  max_output_tokens=_STEP_OUTPUT_TOKENS))


async def _print_state(console: Console, session: DebugSession, key: str | None) -> None:
    snap = await session.state()
    values = snap.values or {}
    if key is not None:
        if key not in values:
            console.print(f"[red]no state key {escape(key)!r}[/red]; keys: {escape(str(sorted(values)))}")
            return
        value = values[key]
        console.print(escape(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                             default=str, indent=1)))
        return
    for k, v in values.items():
        shown = f"{len(v)} turns" if k == "turns" and isinstance(v, list) else render_value(v)
        console.print(f"{escape(k)}: {escape(shown)}")
    _print_position(console, snap)


def _print_position(console: Console, snap: Any) -> None:
    cid = snap.config.get("configurable", {}).get("checkpoint_id")
    nxt = ", ".join(snap.next) if snap.next else "(end of run)"
    console.print(f"next: {nxt}   checkpoint {cid}")


def history_table(items: Sequence[CheckpointInfo]) -> Table:
    """A thread's checkpoints as a table (`*`: on the branch of the thread's latest checkpoint)."""
    table = Table("#", "step", "wrote", "next", "turns", "branch", "checkpoint")
    for column in table.columns:
        column.overflow = "fold"  # a node name or id is never cut with "…": it wraps
    for c in items:
        table.add_row(str(c["index"]), str(c["step"]), ",".join(c["wrote"]), ",".join(c["next"]) or "(end)",
                      str(c["turns"]), "*" if c["head"] else "", c["checkpoint_id"])
    return table


async def _print_history(console: Console, session: DebugSession) -> None:
    console.print(history_table(await session.history()))


async def _run(console: Console, session: DebugSession, *, one_step: bool) -> bool:
    """One step (or the rest of the run), its updates printed as they come; False when Ctrl-C interrupted it."""
    turns = await session.turns()
    ran = False

    def show(node: str, update: dict[str, Any]) -> None:
        nonlocal ran
        ran = True
        _print_update(console, session, node, update, turns)

    if not await _interruptible(session.step(show) if one_step else session.run_to_end(show)):
        console.print("[yellow]step interrupted[/yellow]: its engine calls were cancelled and no checkpoint was "
                      "written; `step` runs it again")
        _print_position(console, await session.state())
        return False
    snap = await session.state()
    if not ran and not snap.next:
        console.print("the run has ended here: `fork N` goes back to an earlier checkpoint")
        return
    _print_position(console, snap)
    if not snap.next:
        await _print_finished(console, session)
    return True


async def _interruptible(step: Awaitable[Any]) -> bool:
    """Await a step with Ctrl-C cancelling it (and so its `def` nodes' engine calls) instead of the whole
    program (asyncio.run's own handler); False when it was interrupted. Off the main thread (no signals), plain."""
    task = asyncio.ensure_future(step)
    if threading.current_thread() is not threading.main_thread():
        await task
        return True
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        loop.call_soon_threadsafe(task.cancel)  # a signal handler runs between bytecodes: hand it to the loop

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, on_sigint)
    try:
        await task
    except asyncio.CancelledError:
        if not (interrupted and task.cancelled()):
            raise  # this command itself was cancelled, not by our Ctrl-C
        return False
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    return True


async def _print_finished(console: Console, session: DebugSession) -> None:
    rollout = await session.rollout()
    console.print(f"run finished: status {rollout.status} ({escape(rollout.reason)}), reward {rollout.reward}, "
                  f"{len(rollout.sequences)} training sequences")
    console.print(f"answer: {escape(render_value(rollout.answer, 400))}")


async def _show_turn(console: Console, session: DebugSession, args: list[str]) -> None:
    turns = await session.turns()
    if not args or not args[0].lstrip("-").isdigit():
        console.print(f"usage: turn N [lp]  (N in 0..{len(turns) - 1})")
        return
    i = int(args[0])
    if not -len(turns) <= i < len(turns):
        console.print(f"[red]no turn {i}[/red]: this state has {len(turns)} turns")
        return
    i %= len(turns)
    tok = session.context.tokenizer
    console.print(render_turn(turns[i], tok, _base(turns, i), index=i))
    if len(args) > 1 and args[1] == "lp":
        console.print(render_logprobs(turns[i], tok))


async def _edit(console: Console, session: DebugSession, rest: str) -> None:
    as_node: str | None = None
    rest = rest.strip()
    if rest.startswith("--as ") or rest == "--as":
        as_node, _, rest = rest[len("--as"):].strip().partition(" ")
        rest = rest.strip()
    key, _, raw = rest.partition(" ")
    if not key or not raw.strip() or as_node == "":
        console.print("usage: edit [--as NODE] KEY JSON_VALUE   e.g. edit question \"What is 3+3?\"")
        return
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        console.print(f"[red]not JSON[/red] ({escape(exc.msg)}): quote strings, e.g. edit {escape(key)} \"text\"")
        return
    cid = await session.edit({key: value}, as_node=as_node)
    console.print(f"edited {escape(key)}: new checkpoint {cid}")
    _print_position(console, await session.state())


async def _fork(console: Console, session: DebugSession, args: list[str]) -> None:
    if not args:
        console.print("usage: fork N   (N from `history`)")
        return
    target = int(args[0]) if args[0].lstrip("-").isdigit() else args[0]
    cid = await session.goto(target)
    console.print(f"at checkpoint {target} ({cid}): the next step starts a new branch")
    await _print_state(console, session, None)


async def repl(session: DebugSession, console: Console, read_line: Callable[[str], str] = input) -> None:
    """The command loop (see HELP). Errors of one command are printed; the loop goes on."""
    console.print(f"debugging {session.spec.name}, thread {session.thread_id}  (help: commands)")
    for note in session.notes:
        console.print(f"[yellow]{escape(note)}[/yellow]")
    console.print(legend())
    _print_position(console, await session.state())
    while True:
        try:
            line = read_line("debug> ").strip()
        except (EOFError, KeyboardInterrupt):
            line = "quit"
        cmd, _, rest = line.partition(" ")
        args = rest.split()
        try:
            if cmd in ("q", "quit", "exit"):
                console.print(f"thread {session.thread_id} kept; resume with --thread {session.thread_id}")
                return
            if cmd in ("s", "step", ""):
                for _ in range(int(args[0]) if args and args[0].isdigit() else 1):
                    if not await _run(console, session, one_step=True):
                        break
            elif cmd in ("c", "continue"):
                await _run(console, session, one_step=False)
            elif cmd == "state":
                await _print_state(console, session, args[0] if args else None)
            elif cmd == "turn":
                await _show_turn(console, session, args)
            elif cmd == "edit":
                await _edit(console, session, rest)
            elif cmd in ("h", "history"):
                await _print_history(console, session)
            elif cmd == "fork":
                await _fork(console, session, args)
            elif cmd == "help":
                console.print(HELP, markup=False)
            else:
                console.print(f"unknown command {escape(cmd)!r}; type help")
        except (AgentGraphsError, ValueError) as exc:
            console.print("[red]error:[/red]", escape(str(exc)))
        except Exception as exc:  # a node that raised: the session (and its checkpoints) stay usable
            console.print(f"[red]{type(exc).__name__}:[/red]", escape(str(exc)))
            console.print("the failing superstep left no checkpoint: edit the state, fork, or restart with "
                          "another --engine, then step again")

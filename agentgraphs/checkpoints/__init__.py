"""Checkpoints of agent runs, and the debugging tools built on them.

- `savers`: compact SQLite checkpointers (`CompactSqliteSaver`, `CompactAsyncSqliteSaver`): every Turn stored
  once, conversation prompts as deltas; `codec` is their encoding (no I/O, shared by both savers).
- `replay`: the threads of a checkpoints database: `threads`, `history`, `replay` and `fork` from any
  checkpoint (what `agentgraphs run --checkpoints` and `agentgraphs debug` write).
- `debugger`: `DebugSession`, a run stepped one superstep at a time (edit, go back, fork, resume).
- `tui`: the terminal face of `agentgraphs debug` over a DebugSession.

Import from the module that holds a name, e.g. `from agentgraphs.checkpoints.replay import replay`.
"""

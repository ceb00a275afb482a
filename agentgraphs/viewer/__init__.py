"""Look at a run: a self-contained HTML report (`write_report`) and the exactness audit (`check_run`).

Both read a run directory written by `agentgraphs run` / `agentgraphs demo` (samples.jsonl, traces.jsonl,
summary.json). `agentgraphs view` and `agentgraphs check` are thin faces over them.
"""

from __future__ import annotations

from .audit import Breach, RecordAudit, audit_record
from .check import CheckReport, NodeDrift, check_run
from .report import write_report
from .run_data import RunRecord, read_run

__all__ = ["Breach", "CheckReport", "NodeDrift", "RecordAudit", "RunRecord", "audit_record", "check_run", "read_run",
           "write_report"]

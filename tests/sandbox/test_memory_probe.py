"""The memory probe's verdict under a memory cgroup: it fails the protection only when two of its processes held
their 56 MiB at the same moment, not when one filled after the cgroup's OOM killer had ended the other (which a
loaded machine's scheduling produces, and which a hard limit over all processes allows)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from agentgraphs.sandbox import PROTECTIONS, SandboxLimits, run_python
from agentgraphs.sandbox.detect import current_plan
from agentgraphs.sandbox.execution import _wait_gone
from agentgraphs.sandbox.plan import NOT_HELD, Plan
from agentgraphs.sandbox.probes import processes_with
from agentgraphs.sandbox.resource_probes import (
    _HOLD,
    _MEMORY_TOGETHER,
    _escaped,
    _memory,
    _program,
    _token,
)


def _verdict(together_stdout: str, status: str = "memory_limit") -> str:
    """The probe's verdict under a cgroup v1 memory controller, given what its three-process program printed."""
    plan = Plan(python=sys.executable, bwrap=None, seccomp=None, drop_uid=False,
                cgroups=SimpleNamespace(controllers=("memory", "pids"), version=1))  # type: ignore[arg-type]
    calls: list[SandboxLimits] = []

    def execute(code: str, limits: SandboxLimits, _plan: Plan) -> dict[str, Any]:
        calls.append(limits)
        if len(calls) == 1:
            assert "at once" in code  # the program the verdict is read from
            return {"status": status, "stdout": together_stdout}
        return {"status": "ok", "stdout": json.dumps({"memfd": 40 << 20, "sysv_shm": "refused",
                                                      "sysv_msg": "refused"})}

    verdict = _memory(plan, execute)  # type: ignore[arg-type]
    assert [c.memory_bytes for c in calls] == [96 << 20] * 3  # together; memfd + System V; empty files
    return verdict


def test_one_after_the_other_under_a_memory_cgroup_is_held() -> None:
    # the OOM killer ended the parent, then the child filled its 56 MiB: never 112 MiB at once
    verdict = _verdict("parent holds 56 MiB\nchild holds 56 MiB\n")
    assert not verdict.startswith(NOT_HELD) and "cgroup v1 memory over all processes" in verdict


def test_two_at_once_or_no_kill_is_not_held() -> None:
    at_once = _verdict("child holds 56 MiB\nparent holds 56 MiB\nparent and child hold 56 MiB each at once\n")
    assert at_once.startswith(NOT_HELD) and "held 56 MiB each at once under memory_bytes=96 MiB" in at_once
    unkilled = _verdict("parent holds 56 MiB\n", status="ok")
    assert unkilled.startswith(NOT_HELD) and "(status ok)" in unkilled


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_the_program_says_at_once_when_nothing_limits_it() -> None:
    """Run unconfined, the probe's program sees its parent and child hold their memory together (so a cgroup that
    did not limit them would be caught), and its double-forked orphan is found and killed afterwards."""
    token = _token()
    probe = subprocess.Popen([sys.executable, "-c", _program(_MEMORY_TOGETHER, token, HOLD=_HOLD)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert probe.stdout is not None
        for line in probe.stdout:  # its processes then sleep 30 s: read up to the verdict line, then end them
            lines.append(line.strip())
            if "at once" in line:
                break
    finally:
        os.killpg(probe.pid, signal.SIGKILL)
        probe.wait(timeout=10)
        # the forked child carries the token too (in its -c source): let it finish dying before the orphan is counted
        _wait_gone({pid for pid in processes_with("orphan-" + token) if _group(pid) == probe.pid})
        orphans = _escaped(token)  # the double-forked one is in its own session: found and killed here
    assert lines[-1] == "parent and child hold 56 MiB each at once"
    assert {"parent holds 56 MiB", "child holds 56 MiB"} <= set(lines) and len(orphans) == 1


def test_inside_the_sandbox_the_program_says_at_once_only_under_a_loose_limit() -> None:
    """The same program as the probe runs it (bubblewrap, seccomp, the private uid, cgroups: what this machine has):
    under 512 MiB its two processes hold their memory together and it says so; under the probe's 96 MiB the run
    ends on the memory limit, and with a memory cgroup (a hard limit over all processes) they never held it together
    (without one, the parent's 50 ms count lets a burst pass briefly, as the memory protection's report says)."""
    token = _token()
    program = _program(_MEMORY_TOGETHER, token, HOLD=_HOLD)
    anything = frozenset(PROTECTIONS)  # this test reads the program's lines, not the protections' verdicts
    loose = run_python(program, SandboxLimits(memory_bytes=512 << 20, wall_s=3, max_processes=8,
                                              allow_missing=anything))
    tight = run_python(program, SandboxLimits(memory_bytes=96 << 20, wall_s=8, max_processes=8,
                                              allow_missing=anything))
    _escaped(token)
    assert "parent and child hold 56 MiB each at once" in loose["stdout"], loose
    assert tight["status"] == "memory_limit", tight
    if "memory" in current_plan().controllers:
        assert "at once" not in tight["stdout"], tight

"""Which isolation mechanisms exist here and which of them actually start an execution.

`find` looks for each (bwrap on PATH, pyseccomp importable, a cgroup hierarchy with usable controllers,
root to drop to a private uid); `choose` then runs the isolation probe under all of them, and while it
fails, drops one mechanism at a time (bubblewrap, then the private uid, then seccomp), keeping why.
`describe` turns the probe's observations into the mechanisms part of the report.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from .cgroups import CONTROLLERS, CgroupSetup, find_cgroups
from .plan import Plan
from .probes import FIX, Facts, closed_to_others, fix_cgroup
from .types import names_from_env

__all__ = ["DISABLE_ENV", "KNOWN", "Found", "find", "choose", "describe", "disabled_from_env"]

DISABLE_ENV = "AGENTGRAPHS_SANDBOX_DISABLE"
KNOWN = ("bwrap", "seccomp", "cgroups", "uid")


def disabled_from_env() -> frozenset[str]:
    """The mechanisms `AGENTGRAPHS_SANDBOX_DISABLE` turns off."""
    return names_from_env(DISABLE_ENV, KNOWN, "mechanism")


@dataclasses.dataclass
class Found:
    """The candidates, before any probe: what exists, and why each missing one is missing."""

    python: str
    bwrap: str | None
    seccomp: bool
    cgroups: CgroupSetup | None
    drop_uid: bool
    why: dict[str, str]


def find(disabled: frozenset[str]) -> Found:
    why: dict[str, str] = {}
    off = f"disabled by {DISABLE_ENV}"
    seccomp = False
    if "seccomp" in disabled:
        why["seccomp"] = off
    else:
        try:
            from .seccomp import filter_bpf

            filter_bpf()
            seccomp = True
        except ImportError:
            why["seccomp"] = f"pyseccomp is not installed. Fix: {FIX['seccomp']}"
        except (OSError, ValueError, RuntimeError) as e:
            why["seccomp"] = f"libseccomp failed: {e}. Fix: {FIX['seccomp']}"
    bwrap = None if "bwrap" in disabled else shutil.which("bwrap")
    if bwrap is None:
        why["bwrap"] = off if "bwrap" in disabled else f"bwrap is not on PATH. Fix: {FIX['bwrap']}"
    drop_uid = os.geteuid() == 0 and "uid" not in disabled
    if not drop_uid:
        why["uid"] = off if "uid" in disabled else "this process is not root, so it cannot switch to a private uid"
    cgroups = find_cgroups(disabled="cgroups" in disabled)
    if cgroups is None:
        why["cgroups"] = off if "cgroups" in disabled else f"no cgroup hierarchy is mounted. Fix: {fix_cgroup()}"
    return Found(sys.executable, bwrap, seccomp, cgroups, drop_uid, why)


def seccomp_program(found_seccomp: bool, cgroups: CgroupSetup | None, drop_uid: bool) -> bytes | None:
    """The filter for this combination: the memory backdoors are denied without a memory cgroup, the
    per-user counters without a private uid, a new SIGCHLD action without a cgroup CPU controller (the
    parent's CPU sum needs every exited child to be waited for)."""
    if not found_seccomp:
        return None
    from .seccomp import MEMORY_BACKDOORS, PER_USER_COUNTERS, filter_bpf

    controllers = cgroups.controllers if cgroups is not None else ()
    extra: tuple[str, ...] = ()
    if "memory" not in controllers:
        extra += MEMORY_BACKDOORS
    if not drop_uid:
        extra += PER_USER_COUNTERS
    return filter_bpf(extra, guard_sigchld="cpu" not in controllers)


def _plan(found: Found, bwrap: str | None, seccomp: bool, drop_uid: bool) -> Plan:
    return Plan(found.python, bwrap, seccomp_program(seccomp, found.cgroups, drop_uid), found.cgroups, drop_uid,
                userns=bwrap is not None and os.geteuid() != 0)


def choose(found: Found, probe: Callable[[Plan], tuple[Facts | None, str]]) -> tuple[Plan, Facts, dict[str, str]]:
    """The first combination under which the isolation probe runs: (plan, the probe's facts, why notes)."""
    why = dict(found.why)
    attempts: list[tuple[str | None, bool, bool, str]] = [(found.bwrap, found.seccomp, found.drop_uid, "")]
    if found.bwrap:
        attempts.append((None, found.seccomp, found.drop_uid, "bwrap"))
    if found.drop_uid:  # e.g. an interpreter under /root that another uid cannot traverse
        attempts.append((None, found.seccomp, False, "uid"))
    if found.seccomp:
        attempts.append((None, False, False, "seccomp"))
    failures: list[str] = []
    for k, (bwrap, seccomp, drop_uid, _) in enumerate(attempts):
        plan = _plan(found, bwrap, seccomp, drop_uid)
        facts, failure = probe(plan)
        if facts is not None:
            return plan, facts, why
        failures.append(failure)
        dropped_next = attempts[k + 1][3] if k + 1 < len(attempts) else ""
        if dropped_next == "bwrap":
            why["bwrap"] = f"the probe failed under bubblewrap: {failure}"
        elif dropped_next == "seccomp":
            why["seccomp"] = f"the probe failed with the filter loaded: {failure}"
        elif dropped_next == "uid":
            cause = closed_to_others(found.python)
            why["uid"] = f"the probe failed under a private uid: {failure}" + (
                f". Cause: {cause}. Fix: give the sandbox an interpreter every uid can read, e.g. a venv under /tmp "
                "built from /usr/bin/python3 with this package installed" if cause else "")
    why.setdefault("bwrap", "; ".join(failures))
    return _plan(found, None, False, False), {}, why


def describe(plan: Plan, found: Found, facts: Facts, why: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The mechanisms part of the report: each one available or not, with what the probe saw."""
    mech: dict[str, dict[str, Any]] = {}
    setup = plan.cgroups
    for c in CONTROLLERS:
        usable = setup is not None and setup.usable.get(c) == ""
        detail = (f"a group per execution under {setup.parents[c]} (cgroup v{setup.version})"
                  if usable and setup is not None else
                  (setup.usable.get(c, "") if setup is not None else why.get("cgroups", "")))
        mech[f"cgroup_{c}"] = {"available": usable, "detail": detail}
    if setup is not None and setup.note:
        mech["cgroup_pids"]["detail"] += f"; {setup.note}"
    bwrap = plan.bwrap
    version = ""
    if bwrap:
        try:
            version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    mech["bubblewrap"] = {"available": bwrap is not None,
                          "detail": f"{bwrap} ({version})" if bwrap else why.get("bwrap", "not used")}
    uid_map = facts.get("uid_map") or []
    userns = bwrap is not None and plan.userns and bool(uid_map)
    mech["user_namespace"] = {
        "available": userns,
        "detail": ("uid map " + " ".join(uid_map) if userns else
                   "not used: as root, bubblewrap runs privileged and the code drops to a private uid"
                   if bwrap is not None and plan.drop_uid else "not in one")}
    pidns = bwrap is not None and isinstance(facts.get("pid"), int) and facts["pid"] <= 4
    mech["pid_namespace"] = {"available": pidns, "detail": f"the code runs as pid {facts.get('pid')}"}
    netns = bwrap is not None and facts.get("interfaces") in (["lo"], [])
    mech["net_namespace"] = {"available": netns, "detail": f"interfaces seen: {facts.get('interfaces')}"}
    mountns = bwrap is not None and facts.get("host_path_visible") is False
    mech["mount_namespace"] = {"available": mountns,
                               "detail": "host paths invisible, system dirs read-only, one tmpfs writable" if mountns
                               else "the code sees the host's file system"}
    sec = plan.seccomp is not None and facts.get("seccomp") == "2"
    mech["seccomp"] = {"available": sec, "detail": "filter mode (seccomp 2)" if sec else why.get("seccomp", "not used")}
    dropped = plan.drop_uid and isinstance(facts.get("uid"), int) and facts["uid"] != 0
    mech["uid_drop"] = {"available": dropped,
                        "detail": "a private uid per execution" if dropped else why.get("uid", "runs as root")}
    return mech

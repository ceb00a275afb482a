"""Which isolation mechanisms work on this machine: detected once, by running a probe, never assumed.

Each mechanism is first looked for (bwrap on PATH, pyseccomp importable, cgroup groups creatable, root
to drop privileges from); then a probe program runs in the sandbox built from them and reports what it
actually sees (its uid, pid, network interfaces, seccomp mode, whether a host path is visible). If the
probe cannot run, mechanisms are dropped one at a time (bubblewrap, then seccomp, then the uid drop)
and the reason is kept in the report.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any, TypedDict

from .cgroups import CONTROLLERS, detect_controllers

__all__ = ["Plan", "Capabilities", "capabilities", "current_plan", "format_report", "PROTECTIONS"]

PROTECTIONS = ("wall_clock", "cpu", "memory", "processes", "network", "filesystem", "environment",
               "host_processes", "leftover_processes", "output", "syscalls")
NOT_HELD = "NOT HELD"


@dataclasses.dataclass(frozen=True)
class Plan:
    """How executions are isolated here (internal; `capabilities()` is its public face)."""

    python: str
    bwrap: str | None
    seccomp: bytes | None
    controllers: tuple[str, ...]
    drop_uid: bool
    mechanisms: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    protections: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.protections.items() if not v.startswith(NOT_HELD))


class Capabilities(TypedDict):
    """`mechanisms`: name -> {"available": bool, "detail": str}; `protections`: name -> how it is
    enforced, or a text starting with "NOT HELD" and saying why; `held`: the protections that hold."""

    mechanisms: dict[str, dict[str, Any]]
    protections: dict[str, str]
    held: list[str]


_PROBE = """
import json, os, socket
f = {"uid": os.getuid(), "pid": os.getpid(), "host_path_visible": os.path.exists(%r)}
try:
    f["seccomp"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
except (OSError, IndexError):
    f["seccomp"] = "?"
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    f["inet_socket"] = True
except OSError:
    f["inet_socket"] = False
try:
    f["interfaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
except OSError:
    f["interfaces"] = None
try:
    f["uid_map"] = open("/proc/self/uid_map").read().split()
except OSError:
    f["uid_map"] = None
print(json.dumps(f))
"""

_lock = threading.Lock()


DISABLE_ENV = "AGENTGRAPHS_SANDBOX_DISABLE"
_KNOWN = ("bwrap", "seccomp", "cgroups", "uid")


def _disabled() -> frozenset[str]:
    names = frozenset(n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip())
    unknown = sorted(names - set(_KNOWN))
    if unknown:
        from .types import SandboxError

        raise SandboxError(f"{DISABLE_ENV} names unknown mechanism(s) {unknown}. Fix: use a comma-separated "
                           f"subset of {list(_KNOWN)}")
    return names


def current_plan() -> Plan:
    """The plan in force (detected on first use, then cached; `AGENTGRAPHS_SANDBOX_DISABLE=bwrap,seccomp,
    cgroups,uid` turns mechanisms off, e.g. to see how the sandbox degrades)."""
    disabled = _disabled()
    with _lock:
        return _detect(disabled)


@functools.lru_cache(maxsize=8)
def _detect(disabled: frozenset[str] = frozenset()) -> Plan:
    from .runner import execute_with_plan  # the probe runs through the real pipeline
    from .types import SandboxLimits

    python = sys.executable
    mech: dict[str, dict[str, Any]] = {}
    cg = detect_controllers()
    if "cgroups" in disabled:
        cg = {c: f"disabled by {DISABLE_ENV}" for c in CONTROLLERS}
    controllers = tuple(c for c in CONTROLLERS if cg.get(c) == "")
    for c in CONTROLLERS:
        mech[f"cgroup_{c}"] = {"available": cg.get(c) == "", "detail": cg.get(c) or "per-execution group"}
    seccomp: bytes | None = None
    try:
        if "seccomp" in disabled:
            raise RuntimeError(f"disabled by {DISABLE_ENV}")
        from .seccomp import filter_bpf

        seccomp = filter_bpf()
        seccomp_why = ""
    except ImportError:
        seccomp_why = "pyseccomp is not installed: pip install 'agentgraphs[sandbox]'"
    except RuntimeError as e:
        seccomp_why = str(e)
    except (OSError, ValueError) as e:
        seccomp_why = f"libseccomp failed: {e}"
    bwrap = None if "bwrap" in disabled else shutil.which("bwrap")
    bwrap_why = "" if bwrap else (f"disabled by {DISABLE_ENV}" if "bwrap" in disabled
                                  else "bwrap is not on PATH: apt-get install bubblewrap")
    drop_uid = os.geteuid() == 0 and "uid" not in disabled
    uid_why = "" if drop_uid else (f"disabled by {DISABLE_ENV}" if "uid" in disabled
                                   else "this process is not root, so it cannot switch to a private uid")

    marker = tempfile.mkdtemp(prefix="agentgraphs-sandbox-probe-")
    facts: dict[str, Any] | None = None
    try:
        # each later attempt drops one more mechanism; a failure is blamed on the one dropped next
        attempts: list[tuple[str | None, bytes | None, bool, str]] = [(bwrap, seccomp, drop_uid, "")]
        if bwrap:
            attempts.append((None, seccomp, drop_uid, "bwrap"))
        if drop_uid:  # e.g. an interpreter under /root that another uid cannot traverse
            attempts.append((None, seccomp, False, "uid"))
        if seccomp is not None:
            attempts.append((None, None, False, "seccomp"))
        failures: list[str] = []
        chosen = (None, None, False)
        for k, (b, s, d, _) in enumerate(attempts):
            result = execute_with_plan(_PROBE % marker, SandboxLimits(wall_s=30, cpu_s=10),
                                       Plan(python, b, s, controllers, d))
            if result["status"] == "ok":
                try:
                    facts = json.loads(result["stdout"])
                except ValueError:
                    facts = None
            if facts is not None:
                chosen = (b, s, d)
                break
            why = (result["stderr"].strip().splitlines() or [result["status"]])[-1][:300]
            failures.append(why)
            dropped_next = attempts[k + 1][3] if k + 1 < len(attempts) else ""
            if dropped_next == "bwrap":
                bwrap_why = f"the probe failed under bubblewrap: {why}"
            elif dropped_next == "seccomp":
                seccomp_why = f"the probe failed with the filter loaded: {why}"
            elif dropped_next == "uid":
                uid_why = f"the probe failed under a private uid: {why}"
        bwrap, seccomp, drop_uid = chosen
    finally:
        shutil.rmtree(marker, ignore_errors=True)
    if facts is None:
        facts = {}
        bwrap_why = bwrap_why or "; ".join(failures)
    if bwrap is None and not bwrap_why:
        bwrap_why = "not used"
    if seccomp is None and not seccomp_why:
        seccomp_why = "not used"

    version = ""
    if bwrap:
        try:
            version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    mech["bubblewrap"] = {"available": bwrap is not None, "detail": f"{bwrap} ({version})" if bwrap else bwrap_why}
    uid_map = facts.get("uid_map") or []
    userns = bwrap is not None and uid_map[:3] != ["0", "0", "4294967295"] and bool(uid_map)
    mech["user_namespace"] = {"available": userns, "detail": "uid map " + " ".join(uid_map) if userns else
                              "not used: as root, bubblewrap runs privileged and the code drops to a private uid"
                              if bwrap is not None and drop_uid else "not in one"}
    pidns = bwrap is not None and isinstance(facts.get("pid"), int) and facts["pid"] <= 4
    mech["pid_namespace"] = {"available": pidns, "detail": f"the code runs as pid {facts.get('pid')}"}
    netns = bwrap is not None and facts.get("interfaces") in (["lo"], [])
    mech["net_namespace"] = {"available": netns, "detail": f"interfaces seen: {facts.get('interfaces')}"}
    mountns = bwrap is not None and facts.get("host_path_visible") is False
    mech["mount_namespace"] = {"available": mountns,
                               "detail": "host paths invisible, system dirs read-only, tmpfs cwd" if mountns
                               else "the code sees the host's file system"}
    sec = seccomp is not None and facts.get("seccomp") == "2"
    mech["seccomp"] = {"available": sec, "detail": "filter mode (seccomp 2)" if sec else seccomp_why}
    dropped = drop_uid and isinstance(facts.get("uid"), int) and facts["uid"] != 0
    mech["uid_drop"] = {"available": dropped,
                        "detail": "a private uid per execution" if dropped else (uid_why or "runs as root")}

    have = {k: v["available"] for k, v in mech.items()}
    prot: dict[str, str] = {}
    prot["wall_clock"] = "the parent kills the whole process tree at wall_s"
    prot["cpu"] = "RLIMIT_CPU per process" + (" + cgroup cpuacct over all processes" if have["cgroup_cpuacct"]
                                              else " only (a process tree can use more in total)")
    prot["memory"] = ("cgroup memory over all processes, tmpfs files included" if have["cgroup_memory"]
                      else "RLIMIT_AS per process (virtual memory, per process only)")
    nproc = []
    if have["cgroup_pids"]:
        nproc.append("cgroup pids")
    if dropped:
        nproc.append("RLIMIT_NPROC under a private uid")
    prot["processes"] = " + ".join(nproc) if nproc else f"{NOT_HELD}: no pids cgroup and no uid to drop to"
    net = []
    if netns:
        net.append("network namespace without interfaces")
    if sec and facts.get("inet_socket") is False:
        net.append("seccomp refuses non-UNIX sockets")
    prot["network"] = " + ".join(net) if net else f"{NOT_HELD}: no network namespace and no seccomp"
    if mountns:
        prot["filesystem"] = ("mount namespace: only system and Python dirs, read-only; cwd is a fresh tmpfs "
                              "of tmp_bytes, gone with the execution")
    elif dropped:
        prot["filesystem"] = (f"{NOT_HELD} fully: a private uid writes only world-writable host paths; cwd is a "
                              "fresh host directory (RLIMIT_FSIZE per file), removed afterwards")
    else:
        prot["filesystem"] = f"{NOT_HELD}: the code can write wherever this process can"
    prot["environment"] = "scrubbed: only PATH, HOME, TMPDIR, locale, thread counts and SandboxLimits.env"
    if not (pidns or dropped):
        prot["environment"] = (f"{NOT_HELD} fully: scrubbed, but the code runs as this uid without a pid "
                               "namespace, so /proc/<parent>/environ is readable")
    if pidns:
        prot["host_processes"] = "pid namespace: host processes are invisible"
    elif dropped:
        prot["host_processes"] = "private uid: host processes visible but not signalable or readable"
    else:
        prot["host_processes"] = f"{NOT_HELD}: same uid as this process"
    if pidns:
        prot["leftover_processes"] = "pid namespace: every process dies with the code's main process"
    elif controllers and "pids" in controllers:
        prot["leftover_processes"] = "cgroup: every member is killed when the code returns"
    else:
        prot["leftover_processes"] = f"{NOT_HELD} fully: process group only (a child calling setsid survives)"
    prot["output"] = "stdout + stderr capped at max_output_bytes by the parent"
    prot["syscalls"] = ("seccomp: namespaces, mounts, ptrace, bpf, io_uring, modules, keyrings denied" if sec
                        else f"{NOT_HELD}: {seccomp_why}")
    return Plan(python, bwrap, seccomp if sec else None, controllers, dropped, mech, prot)


def capabilities(refresh: bool = False) -> Capabilities:
    """What isolation holds on this machine (the first call runs a probe, ~0.1 s).

    >>> caps = capabilities()
    >>> sorted(caps["protections"]) == sorted(PROTECTIONS)
    True
    >>> "wall_clock" in caps["held"]
    True
    """
    if refresh:
        with _lock:
            _detect.cache_clear()  # type: ignore[attr-defined]
    plan = current_plan()
    return Capabilities(mechanisms={k: dict(v) for k, v in plan.mechanisms.items()},
                        protections=dict(plan.protections), held=list(plan.held))


def format_report(caps: Capabilities | None = None) -> str:
    """A human-readable report (`python -m agentgraphs.sandbox` prints it).

    >>> "protections" in format_report()
    True
    """
    caps = caps or capabilities()
    lines = ["agentgraphs.sandbox mechanisms:"]
    for name, m in caps["mechanisms"].items():
        lines.append(f"  [{'x' if m['available'] else ' '}] {name}: {m['detail']}")
    lines.append("protections:")
    for name, how in caps["protections"].items():
        lines.append(f"  {name}: {how}")
    return "\n".join(lines)

"""The probes that establish each protection by exercising it in a real execution on this machine.

One isolation probe (it also decides which mechanisms start at all, see `mechanisms.choose`) tries every
escape at once and reports what it saw: connecting to a port this process listens on and to its UNIX
sockets (an abstract one and a socket file), writing outside its directory and filling every writable
place past tmp_bytes, reading this process's environment and command line, signalling it, opening files
past the limit, creating a user namespace and an inotify instance, and leaving a daemon behind (looked for
on the host afterwards). The resource limits have probes of their own (`resource_probes`). A protection
holds only if its probe was contained, and only where the shape can hold it at all: code that runs as root
outside any namespace holds nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .launch import base_env
from .plan import NOT_HELD, Plan
from .types import ExecutionResult, SandboxLimits

__all__ = [
    "FIX",
    "Execute",
    "Facts",
    "MiB",
    "closed_to_others",
    "code_as_root",
    "fix_cgroup",
    "fix_uid",
    "isolation_probe",
    "isolation_protections",
    "kill_all",
    "not_held",
    "processes_with",
]

MiB = 1024 * 1024
Facts = dict[str, Any]
Execute = Callable[[str, SandboxLimits, Plan], ExecutionResult]

_ISOLATION = r'''
import ctypes, errno, hashlib, json, os, resource, socket, sys
cfg = json.loads(%r)
f = {"uid": os.getuid(), "pid": os.getpid()}
def read(p):
    try:
        with open(p, "rb") as h:
            return h.read()
    except OSError:
        return None
def err(e):
    return errno.errorcode.get(e, str(e))
um = read("/proc/self/uid_map")
f["uid_map"] = um.decode().split() if um else None
st = read("/proc/self/status") or b""
f["seccomp"] = next((l.split()[1].decode() for l in st.splitlines() if l.startswith(b"Seccomp:")), "?")
nd = read("/proc/net/dev")
f["interfaces"] = sorted(l.split(":")[0].strip() for l in nd.decode().splitlines()[2:]) if nd else None
net = []
for fam, host, port in cfg["listeners"]:
    try:
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect((host, port))
        net.append("connected to %%s:%%d" %% (host, port))
        s.close()
    except OSError as e:
        net.append(err(e.errno))
for kind, addr in (("abstract", "\0" + cfg["unix_abstract"]), ("file", cfg["unix_file"])):
    try:  # AF_UNIX passes seccomp: only a network namespace (abstract) and a mount namespace (file) stop these
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(addr)
        net.append("connected to the %%s UNIX socket %%s" %% (kind, addr.replace("\0", "@")))
        s.close()
    except OSError as e:
        net.append(err(e.errno))
f["net"] = net
f["host_path_visible"] = os.path.exists(cfg["marker"])
wrote = []
p = os.path.join(cfg["marker"], "agentgraphs-escape-" + cfg["token"])  # a real write, into a host temp dir
try:
    with open(p, "w") as h:
        h.write("x")
    wrote.append(cfg["marker"])
    os.unlink(p)
except OSError:
    pass
for d in ["/usr", "/etc", os.path.dirname(os.__file__)]:  # never written: asked whether they could be
    if os.access(d, os.W_OK):
        wrote.append(d)
f["wrote_outside"] = wrote
f["env_extra"] = sorted(set(os.environ) - set(cfg["env_allowed"]))
e = read("/proc/%%d/environ" %% cfg["host_pid"])
f["host_environ_read"] = e is not None and hashlib.sha256(e).hexdigest() == cfg["env_hash"]
c = read("/proc/%%d/cmdline" %% cfg["host_pid"])
f["host_cmdline_read"] = c is not None and hashlib.sha256(c).hexdigest() == cfg["cmdline_hash"]
try:
    os.kill(cfg["host_pid"], 0)
    hs = read("/proc/%%d/stat" %% cfg["host_pid"]) or b""
    start = hs.rpartition(b")")[2].split()[19:20]
    f["host_signal"] = "delivered" if start == [cfg["host_start"].encode()] else "reached a sandbox process"
except OSError as e:
    f["host_signal"] = err(e.errno)
fds = []
try:
    while len(fds) < 4 * cfg["nofile"]:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    f["open_files"] = "no limit reached"
except OSError as e:
    f["open_files"] = "%%s at fd %%d" %% (err(e.errno), max(fds or [0]) + 1)
    f["max_fd"] = max(fds or [0])
for fd in fds:
    os.close(fd)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
f["inotify"] = "allowed" if fd >= 0 else err(ctypes.get_errno())
if fd >= 0:
    os.close(fd)
f["rlimits"] = {n: resource.getrlimit(getattr(resource, n))[0]
                for n in ("RLIMIT_NPROC", "RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE", "RLIMIT_MEMLOCK")}
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)
f["unshare_userns"] = "allowed" if os.waitpid(pid, 0)[1] == 0 else "refused"
filled = {}
if not f["host_path_visible"]:
    places = [os.getcwd(), "/tmp", "/dev/shm", "/", "/etc", "/dev", "/var/tmp", "/run", "/var", "/home",
              os.environ.get("HOME"), os.environ.get("TMPDIR"), os.path.expanduser("~")]
    for line in (read("/proc/self/mountinfo") or b"").decode().splitlines():
        left, _, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if len(a) > 5 and b and b[0] not in ("proc", "sysfs", "devpts", "cgroup", "cgroup2", "mqueue", "devtmpfs") \
                and "rw" in a[5].split(","):
            places.append(a[4])
    chunk = b"\0" * (1 << 20)
    per_file = max(1, cfg["tmp"] // 2 // len(chunk))
    budget = 2 * cfg["tmp"] + len(chunk)
    made = []  # kept until every place is tried: two places on one tmpfs share its size
    for d in places:
        if not d or not os.path.isdir(d) or os.path.realpath(d) in filled:
            continue
        d = os.path.realpath(d)
        n = 0
        try:
            while n < budget:
                p = os.path.join(d, ".agentgraphs-fill-%%s-%%d" %% (cfg["token"], len(made)))
                h = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                made.append(p)
                try:
                    for _ in range(per_file):
                        n += os.write(h, chunk)
                finally:
                    os.close(h)
        except OSError:
            pass
        filled[d] = n
    for p in made:
        try:
            os.unlink(p)
        except OSError:
            pass
f["filled"] = filled
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(600)",
                                  "agentgraphs-leftover-" + cfg["token"]])
    os._exit(0)
os.wait()
print(json.dumps(f))
'''


class _Listeners:
    """Listening sockets the probe must not reach: TCP on 127.0.0.1 and ::1, an abstract UNIX socket (seen from
    every process of this network namespace) and a UNIX socket file in `directory` (host services such as
    dbus, docker or an X server listen so)."""

    UNIX_FILE = ".agentgraphs-probe-socket"

    def __init__(self, token: str, directory: str) -> None:
        self.sockets: list[socket.socket] = []
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            try:
                s = socket.socket(family, socket.SOCK_STREAM)
                s.bind((host, 0))
                s.listen(16)
                self.sockets.append(s)
            except OSError:
                pass
        self.tcp = [(int(s.family), s.getsockname()[0], s.getsockname()[1]) for s in self.sockets]
        self.abstract = f"agentgraphs-probe-{token}"
        self.file = os.path.join(directory, self.UNIX_FILE)
        for address in ("\0" + self.abstract, self.file):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(address)
            s.listen(16)
            self.sockets.append(s)
        os.chmod(self.file, 0o777)  # only isolation may stop the connection, not permissions

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[19].decode()
    except (OSError, IndexError):
        return ""


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def isolation_probe(plan: Plan, execute: Execute) -> tuple[Facts | None, str]:
    """Run the isolation probe under `plan`: (facts, "") or (None, why it could not run)."""
    token = f"{os.getpid()}-{time.time_ns()}"
    marker = tempfile.mkdtemp(prefix="agentgraphs-sandbox-probe-")
    os.chmod(marker, 0o777)  # only isolation may stop the write, not permissions
    listeners = _Listeners(token, marker)
    limits = SandboxLimits(wall_s=30, cpu_s=10, tmp_bytes=4 * MiB, max_open_files=64, memory_bytes=256 * MiB,
                           max_processes=16)
    cfg = {"token": token, "marker": marker, "listeners": listeners.tcp, "unix_abstract": listeners.abstract,
           "unix_file": listeners.file, "host_pid": os.getpid(), "host_start": _start_time(os.getpid()),
           "env_hash": _own_hash("environ"), "cmdline_hash": _own_hash("cmdline"),
           "nofile": limits.max_open_files, "tmp": limits.tmp_bytes,
           "env_allowed": sorted(set(base_env(limits, "/tmp")) | {"PWD", "LC_CTYPE"})}
    try:
        result = execute(_ISOLATION % json.dumps(cfg), limits, plan)
    finally:
        listeners.close()
        escaped = [name for name in os.listdir(marker) if name != _Listeners.UNIX_FILE]
        for name in os.listdir(marker):
            os.unlink(os.path.join(marker, name))
        os.rmdir(marker)
    facts: Facts | None = None
    if result["status"] == "ok":
        try:
            facts = json.loads(result["stdout"].strip().splitlines()[-1])
        except (ValueError, IndexError):
            facts = None
    left = processes_with("agentgraphs-leftover-" + token)
    kill_all(left)  # the host cleans up what the probe showed could survive
    if facts is None:
        why = (result["stderr"].strip().splitlines() or [result["status"]])[-1][:300]
        return None, why
    facts["leftovers"] = len(left)
    if escaped:
        facts["wrote_outside"] = sorted(set(facts["wrote_outside"]) | {marker})
    return facts, ""


def _own_hash(name: str) -> str:
    """sha256 of this process's /proc/self/`name` (environ, cmdline), to recognise it if the probe reads it."""
    try:
        with open(f"/proc/self/{name}", "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


def not_held(observed: str, fix: str) -> str:
    return f"{NOT_HELD}: {observed}. Fix: {fix}"


FIX = {
    "bwrap": "install bubblewrap (apt-get install bubblewrap); unprivileged users also need user namespaces "
             "(sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1 where it exists)",
    "seccomp": "pip install 'agentgraphs[sandbox]' (pyseccomp) with the system's libseccomp (apt-get install "
               "libseccomp2)",
}


def fix_uid() -> str:
    """How to get a private uid per execution, said to this process (telling root to run as root helps no one)."""
    if os.geteuid() != 0:
        return "run as root, so that each execution gets a private uid"
    return ("let each execution drop to a private uid: keep uid out of AGENTGRAPHS_SANDBOX_DISABLE, and give it an "
            "interpreter every uid can read (e.g. a venv under /tmp built from /usr/bin/python3; not one under /root, "
            "mode 0700)")


def fix_cgroup() -> str:
    """How to get writable cgroups, said to this process."""
    if os.geteuid() != 0:
        return ("run as root with writable cgroups, or under a delegated cgroup v2 subtree (systemd-run --user "
                "--scope -p Delegate=yes ..., or AGENTGRAPHS_SANDBOX_CGROUP=<an empty delegated cgroup v2 dir>)")
    return ("make a cgroup hierarchy writable for this process (in a container: /sys/fs/cgroup mounted read-write, "
            "e.g. its own cgroup namespace), keep cgroups out of AGENTGRAPHS_SANDBOX_DISABLE, or point "
            "AGENTGRAPHS_SANDBOX_CGROUP at an empty cgroup v2 directory")


def closed_to_others(python: str) -> str:
    """Why a private uid cannot start `python`, when that is why: a directory on the way to it (or to its standard
    library) that other uids cannot enter, as /root (mode 0700) is; else ""."""
    paths = [os.path.abspath(python), os.path.realpath(python)]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        paths.append(os.path.dirname(os.__file__))
    for path in paths:
        for d in reversed(Path(path).parents):
            try:
                mode = os.stat(d).st_mode
            except OSError:
                continue
            if not mode & stat.S_IXOTH:
                return (f"{d} (mode {stat.S_IMODE(mode):04o}) lets no other uid in, and the interpreter {path} lies "
                        "under it")
    return ""


def code_as_root(plan: Plan, facts: Facts, why_not: dict[str, str]) -> str | None:
    """The verdict for every protection when the isolation probe ran as root in this machine's own namespaces
    (no bubblewrap, no private uid; `why_not` says why each was not used), else None. Such code can move itself
    out of its cgroups, raise its rlimits (CAP_SYS_RESOURCE), and signal, read or write this process
    (/proc/PID/mem), so nothing given to it holds, whatever a probe run in good faith saw."""
    if plan.bwrap is not None or facts.get("uid") != 0:
        return None
    bwrap = why_not.get("bwrap", "not used").split(". Fix:")[0]
    uid = why_not.get("uid", "not used").split(". Fix:")[0]
    if uid.startswith("the probe failed"):
        uid = closed_to_others(plan.python) or uid
    return not_held(f"the code runs as root (uid 0) in this machine's own namespaces: it can leave its cgroups, raise "
                     "its rlimits and signal, read or write this process, so no limit given to it holds (bubblewrap: "
                     f"{bwrap}; private uid: {uid})", f"{FIX['bwrap']}; or {fix_uid()}")


def isolation_protections(plan: Plan, facts: Facts, limits_tmp: int = 4 * MiB) -> dict[str, str]:
    """The protections the isolation probe establishes, from what it saw."""
    p: dict[str, str] = {}
    bwrap = plan.bwrap is not None
    seccomp_on = plan.seccomp is not None and facts.get("seccomp") == "2"
    private_uid = plan.drop_uid and facts.get("uid") not in (None, 0, os.geteuid())

    reached = [n for n in facts.get("net", []) if n.startswith("connected")]
    if reached:
        unix = "UNIX socket" in reached[0]  # seccomp allows AF_UNIX: only namespaces keep host services apart
        why = " (without network and mount namespaces, host services listening on UNIX sockets are reachable)"
        p["network"] = not_held(f"the probe {reached[0]} on the host" + (why if unix else ""),
                                 FIX["bwrap"] if unix else f"{FIX['bwrap']}; or {FIX['seccomp']}")
    else:
        how = []
        if facts.get("interfaces") in (["lo"], []):
            how.append("a network namespace with only loopback")
        if seccomp_on:
            how.append("seccomp refuses non-UNIX sockets")
        p["network"] = " + ".join(how or ["no route out"]) + (" (probe: connecting to listening host TCP ports, an "
                                                              "abstract UNIX socket and a UNIX socket file failed)")

    if facts.get("host_path_visible") or facts.get("wrote_outside"):
        wrote = facts.get("wrote_outside") or []
        observed = (f"the probe wrote to {wrote}" if wrote else "host paths are visible to the code")
        p["filesystem"] = not_held(observed, FIX["bwrap"])
    else:
        p["filesystem"] = ("mount namespace: only system and Python dirs, read-only (probe: a host directory "
                           "was invisible, writes to it and to /usr, /etc and the standard library failed)")

    filled = facts.get("filled") or {}
    total = sum(filled.values())
    if facts.get("host_path_visible"):
        p["tmp_space"] = not_held("without a mount namespace the code writes into host directories", FIX["bwrap"])
    elif total > limits_tmp:
        top = ", ".join(f"{k} {v // 1024} KiB" for k, v in sorted(filled.items()) if v)
        p["tmp_space"] = not_held(f"the probe wrote {total // 1024} KiB with tmp_bytes={limits_tmp // 1024} KiB "
                                   f"({top})", FIX["bwrap"] + " (0.8 or later)")
    else:
        writable = sorted(k for k, v in filled.items() if v)
        p["tmp_space"] = (f"one tmpfs of tmp_bytes is the only writable mount (/dev/shm points into it; /, /dev "
                          f"read-only) (probe: filling every writable place stopped at {total // 1024} KiB of "
                          f"{limits_tmp // 1024} KiB, written in {writable})")

    if facts.get("env_extra") or facts.get("host_environ_read"):
        observed = ("the probe read this process's environment from /proc" if facts.get("host_environ_read")
                    else f"unexpected variables {facts.get('env_extra')}")
        p["environment"] = not_held(observed, f"{FIX['bwrap']}; or {fix_uid()}")
    else:
        p["environment"] = ("scrubbed: only PATH, HOME, TMPDIR, locale, thread counts and SandboxLimits.env "
                            "(probe: this process's /proc/PID/environ was unreadable)")

    pidns = bwrap and isinstance(facts.get("pid"), int) and facts["pid"] <= 4
    if facts.get("host_cmdline_read"):
        p["host_processes"] = not_held("the probe read this process's command line from /proc (without a pid "
                                        "namespace every host process, and its arguments, is visible)", FIX["bwrap"])
    elif facts.get("host_signal") == "delivered" or not (pidns or private_uid):
        p["host_processes"] = not_held(f"the probe's signal to this process: {facts.get('host_signal')}",
                                        f"{FIX['bwrap']}; or {fix_uid()}")
    else:
        by = "pid namespace: host processes are invisible" if pidns else "private uid: host processes cannot be " \
            "signalled or read"
        p["host_processes"] = (f"{by} (probe: signalling this process failed: {facts.get('host_signal')}; its "
                               "command line was unreadable)")

    if facts.get("leftovers"):
        p["leftover_processes"] = not_held("a double-forked daemon of the probe outlived it",
                                            f"{FIX['bwrap']}; or {fix_cgroup()}")
    else:
        by = "pid namespace: every process dies with the code's main process" if bwrap else \
            "cgroup: every member is killed when the code returns"
        p["leftover_processes"] = by + " (probe: its double-forked daemon was gone)"

    if seccomp_on and facts.get("unshare_userns") == "refused":
        p["syscalls"] = ("seccomp: namespaces, mounts, ptrace, bpf, io_uring, modules, keyrings denied (probe: "
                         "unshare(CLONE_NEWUSER) refused)")
    else:
        p["syscalls"] = not_held(f"seccomp mode {facts.get('seccomp')}, unshare(CLONE_NEWUSER) "
                                  f"{facts.get('unshare_userns')}", FIX["seccomp"])

    max_fd = facts.get("max_fd")
    if isinstance(max_fd, int) and max_fd < 64:
        p["open_files"] = f"RLIMIT_NOFILE (probe: {facts.get('open_files')} with max_open_files=64)"
    else:
        p["open_files"] = not_held(f"the probe opened files past max_open_files=64 ({facts.get('open_files')})",
                                    "report this: RLIMIT_NOFILE did not bind")

    rl = facts.get("rlimits") or {}
    bounded = all(isinstance(v, int) and 0 <= v <= 1 << 20 for v in rl.values()) and len(rl) == 4
    if private_uid:
        p["per_user_limits"] = (f"a private uid ({facts.get('uid')}) per execution: nothing is shared with this "
                                "user's per-user kernel counters")
    elif plan.userns and bwrap and bounded and facts.get("inotify") != "allowed" and seccomp_on:
        p["per_user_limits"] = ("a user namespace of its own, where the kernel counts processes, pending signals, "
                                "message-queue bytes and locked memory apart from this user and the rlimits keep "
                                "them small; inotify denied by seccomp (pipe buffers still count toward the "
                                "user's pipe-user-pages-soft, which only shrinks the user's new pipes)")
    else:
        p["per_user_limits"] = not_held(f"the code runs as this user (uid {facts.get('uid')}) with inotify "
                                         f"{facts.get('inotify')}, rlimits {rl}",
                                         fix_uid() if os.geteuid() == 0 else
                                         f"{fix_uid()}; or unprivileged: {FIX['bwrap']} and {FIX['seccomp']}")
    return p

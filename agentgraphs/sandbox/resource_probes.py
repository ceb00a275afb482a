"""The resource probes: in parallel, one per limit goes past it in a real execution on this machine.

Memory (two processes that together exceed it; memfd / System V shared memory, queues and semaphores
outside every rlimit; empty files, whose inodes are kernel memory), processes (fork, then threads, past
max_processes), CPU (four busy processes, one of them a double-forked orphan, against an aggregate limit,
each reporting its own CPU time; short-lived children the kernel reaps by itself), wall clock and output.
A limit holds only if its probe was contained, and only where the shape can hold it at all: a count every
50 ms alone does not hold processes. The isolation probe and the claims it supports are in `probes`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
from collections.abc import Callable

from .launch import TMPFS_INODE_BYTES
from .plan import Plan
from .probes import (
    FIX,
    Execute,
    MiB,
    fix_cgroup,
    fix_uid,
    kill_all,
    not_held,
    processes_with,
)
from .types import SandboxLimits

__all__ = ["resource_protections"]


_ORPHAN = r'''
import os, sys, time
def orphan(body, token):
    """A double-forked process in its own session running `body`; its command line carries `token`."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-S", "-c", body, token])
        os._exit(0)
    os.wait()
'''

_HOLD = r'''
import os, time
keep = [b"x" * (8 << 20) for _ in range(7)]
os.write(1, b"orphan holds 56 MiB\n")
time.sleep(30)
'''

# "at once": the parent holds its 56 MiB, has the child's word that it holds its own, and finds the child still
# running. Both printing "holds" is not enough: a memory cgroup's OOM killer may let one fill after the other died.
# Each line is one write(2) to the shared stdout, so the processes' lines never interleave (print may split them).
_MEMORY_TOGETHER = _ORPHAN + r'''
orphan(__HOLD__, __TOKEN__)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    keep = [b"x" * (8 << 20) for _ in range(7)]
    os.write(1, b"child holds 56 MiB\n")
    os.write(w, b"1")
    time.sleep(30)
    os._exit(0)
os.close(w)
keep = [b"x" * (8 << 20) for _ in range(7)]
os.write(1, b"parent holds 56 MiB\n")
if os.read(r, 1) == b"1" and os.waitpid(pid, os.WNOHANG) == (0, 0):
    os.write(1, b"parent and child hold 56 MiB each at once\n")
os.waitpid(pid, 0)
'''

_MEMORY_KERNEL = r'''
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
held = {"memfd": 0}
fds = []
try:
    for _ in range(4):
        fd = os.memfd_create("fill")
        fds.append(fd)
        for _ in range(40):
            held["memfd"] += os.write(fd, b"x" * (1 << 20))
except OSError:
    pass
# System V memory outlives its process when detached; only asked for here (and removed at once): a
# segment, queue or semaphore set the code may create is kernel memory no rlimit sees
sysv = (("sysv_shm", lambda: libc.shmget(0, 1 << 20, 0o1600), lambda i: libc.shmctl(i, 0, None)),
        ("sysv_msg", lambda: libc.msgget(0, 0o1600), lambda i: libc.msgctl(i, 0, None)),
        ("sysv_sem", lambda: libc.semget(0, 1, 0o1600), lambda i: libc.semctl(i, 0, 0)))  # IPC_RMID
for name, make, remove in sysv:
    ident = make()
    held[name] = "allowed" if ident >= 0 else "refused"
    if ident >= 0:
        remove(ident)
print(json.dumps(held), flush=True)
'''

# Empty files: no pages, but an inode and a dentry of kernel memory each (about 1 KiB), which tmpfs's size
# does not bound. Twice the limit's worth, one write(2) at the end only if nothing stopped it first.
_MEMORY_INODES = r'''
import os
os.mkdir("many")
n = 0
try:
    while n < __COUNT__:
        os.close(os.open("many/%d" % n, os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
except OSError as e:
    os.write(1, b"refused after %d: %s\n" % (n, e.strerror.encode()))
os.write(1, b"empty files %d\n" % n)
'''

_FORK = r'''
import os, sys, time
who = "orphan" if len(sys.argv) > 1 and sys.argv[1].startswith("orphan-") else "main"
n, kids = 0, []
try:
    while n < 40:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
        n += 1
except OSError:
    pass
print(who, "forks", n, flush=True)
if who == "orphan":
    time.sleep(30)
'''

_PROCESSES = _ORPHAN + r'''
orphan(__FORK__, __TOKEN__)
time.sleep(0.3)
''' + _FORK + r'''
for k in kids:
    os.kill(k, 9)
    os.waitpid(k, 0)
import threading
t = 0
try:
    while t < 40:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        t += 1
except RuntimeError:
    pass
print("main threads", t, flush=True)
os._exit(0)
'''

_BURN = r'''
import os, sys
tag = sys.argv[1].split("-")[0] if len(sys.argv) > 1 else "main"
last = 0.0
while True:
    for _ in range(20000):
        pass
    t = os.times()
    c = t.user + t.system
    if c - last >= 0.02:
        last = c
        os.write(1, ("%s %.3f\n" % (tag, c)).encode())
    if c > 3:
        os._exit(0)
'''

_CPU = _ORPHAN + r'''
orphan(__BURN__, __TOKEN__)
for i in range(2):
    if os.fork() == 0:
        sys.argv = ["x", "child%d-" % i]
        break
''' + _BURN


# Children the kernel reaps by itself (SIGCHLD ignored) add their CPU time to no parent: each burns 30 ms, exits,
# and reports it; a refusal to ignore SIGCHLD ends the probe at once.
_CPU_REAPED = r'''
import os, signal, time
try:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
except OSError as e:
    os.write(1, b"ignoring SIGCHLD refused: %s\n" % e.strerror.encode())
    os._exit(0)
start = time.monotonic()
while time.monotonic() - start < 3:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid == 0:
        s = time.process_time()
        while time.process_time() - s < 0.03:
            pass
        os.write(1, b"child %.3f\n" % time.process_time())
        os._exit(0)
    time.sleep(0.01)
'''


def _program(template: str, token: str, **bodies: str) -> str:
    out = template.replace("__TOKEN__", repr("orphan-" + token))
    for name, body in bodies.items():
        out = out.replace(f"__{name}__", repr(body))
    return out


def _escaped(token: str) -> list[int]:
    """Host pids of the probe's double-forked orphan (and its children) alive after the run (then killed)."""
    pids = processes_with("orphan-" + token)
    kill_all(pids)
    return pids


def _token() -> str:
    return f"{os.getpid()}-{time.time_ns()}"


def _memory(plan: Plan, execute: Execute) -> str:
    limit = 96 * MiB
    token = _token()
    r = execute(_program(_MEMORY_TOGETHER, token, HOLD=_HOLD),
                SandboxLimits(memory_bytes=limit, wall_s=8, max_processes=8), plan)
    escaped = _escaped(token)
    held_by = [w for w in ("parent", "child", "orphan") if f"{w} holds" in r["stdout"]]
    k = execute(_MEMORY_KERNEL, SandboxLimits(memory_bytes=limit, wall_s=15, max_processes=8, tmp_bytes=64 * MiB),
                plan)
    try:
        kernel = json.loads(k["stdout"].strip().splitlines()[-1]) if k["status"] == "ok" else {}
    except (ValueError, IndexError):
        kernel = {}
    kernel_bytes = kernel.get("memfd", 0) if isinstance(kernel.get("memfd"), int) else 0
    sysv = [k for k in ("sysv_shm", "sysv_msg", "sysv_sem") if kernel.get(k) == "allowed"]
    files = 2 * limit // 1024
    f = execute(_MEMORY_INODES.replace("__COUNT__", str(files)),
                SandboxLimits(memory_bytes=limit, wall_s=30, cpu_s=30, max_processes=8), plan)
    made = f"empty files {files}" in f["stdout"]
    if escaped:
        return not_held(f"a double-forked process of the probe kept its memory after the run ({held_by} held 56 "
                         "MiB each)", f"{fix_cgroup()}; or {FIX['bwrap']}")
    hard = "memory" in plan.controllers  # a cgroup refuses the pages; the parent's count is polled
    if r["status"] != "memory_limit" or (hard and "at once" in r["stdout"]):
        together = " at once" if "at once" in r["stdout"] else ""
        return not_held(f"{held_by} held 56 MiB each{together} under memory_bytes=96 MiB (status {r['status']})",
                         fix_cgroup())
    if k["status"] == "ok" and kernel_bytes > limit:
        return not_held(f"the probe held {kernel_bytes // MiB} MiB in memfd files (memory outside every rlimit) "
                         "under memory_bytes=96 MiB", f"{fix_cgroup()}; or {FIX['seccomp']}")
    if "memory" not in plan.controllers and sysv:
        return not_held(f"without a memory cgroup the probe may create {sysv} (System V memory, outside every "
                         "rlimit and, detached, outside every process)", f"{fix_cgroup()}; or {FIX['seccomp']}")
    if made and (plan.bwrap is not None or "memory" not in plan.controllers):
        # (without bubblewrap they land in a host directory, where a memory cgroup charges their inodes and, on
        # a disk, the kernel may reclaim them: then the count alone shows nothing)
        return not_held(f"the probe created {files} empty files (about {files // 1024} MiB of kernel inodes and "
                         f"dentries) under memory_bytes=96 MiB (status {f['status']})",
                         f"{fix_cgroup()}; or {FIX['bwrap']}")
    if "memory" in plan.controllers:
        how = f"cgroup v{plan.cgroups.version if plan.cgroups else '?'} memory over all processes, tmpfs included"
    else:
        how = ("RLIMIT_AS per process + the parent sums the resident memory of all processes and the tmpfs (its "
               f"pages, and {TMPFS_INODE_BYTES} bytes per inode: files, even empty ones) every 50 ms and kills the "
               "run past memory_bytes (between two checks a burst can pass it briefly); memfd / System V memory "
               "denied by seccomp; kernel buffers (pipes, sockets) bounded only by open files x processes")
    return (f"{how} (probe: three processes, one double-forked, holding 56 MiB each under 96 MiB: {r['status']}; "
            f"memfd + System V memory: {kernel or k['status']}; {files} empty files: {f['status']})")


def _processes(plan: Plan, execute: Execute) -> str:
    limit = 6
    token = _token()
    r = execute(_program(_PROCESSES, token, FORK=_FORK), SandboxLimits(max_processes=limit, wall_s=10), plan)
    escaped = _escaped(token)
    counts: dict[str, int] = {}
    for line in r["stdout"].splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            counts[f"{parts[0]} {parts[1]}"] = int(parts[2])
    forks = counts.get("main forks", 0) + counts.get("orphan forks", 0)
    threads = counts.get("main threads", 0)
    if escaped:
        return not_held(f"{len(escaped)} processes of a double-forked child outlived the run ({counts})",
                         f"{fix_cgroup()}; or {fix_uid()}; or {FIX['bwrap']}")
    if not (r["status"] == "process_limit" or (forks < limit and threads < limit)):
        return not_held(f"with max_processes={limit} the probe ran {counts} (status {r['status']})",
                         f"{fix_cgroup()}; or {fix_uid()}; or {FIX['bwrap']}")
    how = []
    if "pids" in plan.controllers:
        how.append("cgroup pids")
    if plan.drop_uid:
        how.append("RLIMIT_NPROC under a private uid")
    elif plan.bwrap is not None and plan.userns:
        how.append("RLIMIT_NPROC in the sandbox's own user namespace")
    if not how:  # between two of the parent's counts a fork burst is unbounded: a count alone holds nothing
        why = ("root ignores RLIMIT_NPROC" if os.geteuid() == 0 else
               "without a user namespace of its own RLIMIT_NPROC would count every process of this user")
        return not_held(f"only the parent's count every 50 ms bounds the processes ({why}), so a fork burst between "
                         f"two counts is unbounded (probe, max_processes={limit}: {counts}, status {r['status']})",
                         f"{fix_cgroup()}; or {fix_uid() if os.geteuid() == 0 else FIX['bwrap']}")
    if "pids" not in plan.controllers:
        how.append("the parent counts the tasks every 50 ms and kills past max_processes")
    seen = "killed" if r["status"] == "process_limit" else f"{forks} forks (one process double-forked), " \
        f"{threads} threads"
    return " + ".join(how) + f" (probe, max_processes={limit}: {seen})"


def _cpu(plan: Plan, execute: Execute) -> str:
    limit = 0.3
    token = _token()
    r = execute(_program(_CPU, token, BURN=_BURN), SandboxLimits(cpu_s=limit, wall_s=15, max_processes=8), plan)
    escaped = _escaped(token)
    final: dict[str, float] = {}
    for line in r["stdout"].splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                final[parts[0]] = max(final.get(parts[0], 0.0), float(parts[1]))
            except ValueError:
                pass
    total = sum(final.values())
    if escaped or r["status"] != "cpu_limit" or total > limit + 0.4:
        seen = "a double-forked busy process outlived the run; " if escaped else ""
        return not_held(f"{seen}four busy processes used {total:.2f} s of CPU under cpu_s={limit} (status "
                         f"{r['status']})", f"{fix_cgroup()}; or {FIX['bwrap']}")
    a = execute(_CPU_REAPED, SandboxLimits(cpu_s=limit, wall_s=15, max_processes=8), plan)
    refused = "ignoring SIGCHLD refused" in a["stdout"]
    reaped = sum(float(line.split()[1]) for line in a["stdout"].splitlines() if line.startswith("child "))
    if not refused and (a["status"] != "cpu_limit" or reaped > limit + 0.4):
        return not_held(f"children the kernel reaped by itself (SIGCHLD ignored) used {reaped:.2f} s of CPU under "
                         f"cpu_s={limit} (status {a['status']})", f"{fix_cgroup()}; or {FIX['seccomp']}")
    how = ["RLIMIT_CPU per process"]
    how.append("cgroup CPU accounting over all processes" if "cpu" in plan.controllers else
               "the parent sums the CPU time of the pid namespace's processes every 50 ms, exited children's "
               "through their parents' (seccomp refuses a new SIGCHLD action, so that every child is waited for)")
    reap = "ignoring SIGCHLD refused" if refused else f"children reaped by the kernel stopped at {reaped:.2f} s"
    return " + ".join(how) + (f" (probe: four busy processes, one double-forked, stopped at {total:.2f} s under "
                              f"cpu_s={limit}; {reap})")


def _wall(plan: Plan, execute: Execute) -> str:
    r = execute("import time\ntime.sleep(30)", SandboxLimits(wall_s=0.3), plan)
    if r["status"] != "timeout" or r["wall_s"] > 10:
        return not_held(f"a 30 s sleep under wall_s=0.3 ended {r['status']} after {r['wall_s']} s",
                         "report this: the parent's kill did not work")
    return f"the parent kills every process at wall_s (probe: a 30 s sleep stopped after {r['wall_s']:.2f} s)"


def _output(plan: Plan, execute: Execute) -> str:
    cap = 64 * 1024
    r = execute("import sys\nsys.stdout.write('x' * 3_000_000)", SandboxLimits(max_output_bytes=cap), plan)
    size = len(r["stdout"]) + len(r["stderr"])
    if r["status"] != "output_limit" or size > cap:
        return not_held(f"3 MB printed under max_output_bytes={cap} came back as {size} bytes ({r['status']})",
                         "report this: the parent's output cap did not work")
    return f"the parent caps stdout + stderr at max_output_bytes (probe: 3 MB printed, {size} bytes kept)"


_RESOURCE_PROBES: dict[str, Callable[[Plan, Execute], str]] = {
    "wall_clock": _wall, "cpu": _cpu, "memory": _memory, "processes": _processes, "output": _output,
}


def resource_protections(plan: Plan, execute: Execute) -> dict[str, str]:
    """Run the resource probes at once (each an execution past its limit) and say what held."""
    with concurrent.futures.ThreadPoolExecutor(len(_RESOURCE_PROBES)) as pool:
        futures = {name: pool.submit(probe, plan, execute) for name, probe in _RESOURCE_PROBES.items()}
        out: dict[str, str] = {}
        for name, future in futures.items():
            try:
                out[name] = future.result()
            except Exception as e:  # a probe that cannot run proves nothing
                out[name] = not_held(f"its probe failed: {type(e).__name__}: {e}", "report this")
    return out

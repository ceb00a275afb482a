"""One execution under a plan: an isolated process tree with every limit of the plan enforced, supervised until
it ends, then cleaned up whatever happened (`agentgraphs.sandbox.runner` is the public face).
"""

from __future__ import annotations

import json
import os
import select
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any

from .cgroups import ExecutionCgroup
from .launch import (
    TMPFS_INODE_BYTES,
    base_env,
    bwrap_argv,
    prologue_config,
    python_argv,
    readonly_paths,
    site_dirs,
    tmpfs_bytes,
)
from .plan import Plan
from .seccomp import program_fd
from .supervisor import descendants, tree_usage
from .types import ExecutionResult, LimitHit, SandboxError, SandboxLimits, Status
from .uids import UidLease, lease_uid

__all__ = ["check_arguments", "execute_with_plan"]

_POLL_S = 0.05  # how often a running execution's CPU, wall clock and cancellation are checked
_DRAIN_S = 0.5  # after the main process exits: how long leftover output may still arrive
_HANDSHAKE_S = 30.0  # bubblewrap must report its child within this long


# -- one execution --------------------------------------------------------------------------------


class _Run:
    """Everything one execution holds, so that `close()` can release it whatever happened."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.reaper: int | None = None  # bubblewrap's pid 1 (host pid)
        self.reaper_fd: int | None = None  # a pidfd for it: signalled without any risk of a reused pid
        self.cgroup: ExecutionCgroup | None = None
        self.lease: UidLease | None = None
        self.workdir: str | None = None
        self.fds: list[int] = []
        self.notes: list[str] = []
        self.seen: set[int] = set()  # host pids of the execution's processes seen when killing
        self.tree_cpu_s: float | None = None  # CPU of the whole waited-for tree, from wait4's rusage

    def poll(self, timeout_s: float = 0.0) -> int | None:
        """Reap the main process (bubblewrap, or the interpreter) within `timeout_s`: its exit status, or
        None. Reaped with wait4, whose rusage holds the CPU time of every process below it that was waited
        for (bubblewrap's pid 1 waits for everything in its pid namespace)."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return None if proc is None else proc.returncode
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:
                return proc.poll()
            if pid == proc.pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                self.tree_cpu_s = usage.ru_utime + usage.ru_stime
                return proc.returncode
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.002)

    def close_fds(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []

    def kill(self) -> None:
        """Kill the execution's processes: the cgroup's members first, so that bubblewrap (outside the
        group) reaps its sandbox and exits by itself; then whatever is left of the process tree."""
        proc = self.proc
        if self.cgroup is None and self.reaper is not None:
            # no cgroup: killing bubblewrap's pid 1 makes the kernel kill its whole pid namespace; the
            # processes seen now are waited for in close(), so that none is still dying when the run returns
            self.seen |= set(descendants(self.reaper)) | {self.reaper}
            if self.reaper_fd is not None:
                try:
                    signal.pidfd_send_signal(self.reaper_fd, signal.SIGKILL)
                except OSError:
                    pass  # already gone
        if self.cgroup is not None:  # the code, its descendants and bubblewrap's pid 1 (the outer
            self.seen |= self.cgroup.members()  # bwrap process is outside: it reaps them and exits)
            self.cgroup.kill_all()
            if proc is not None and self.poll() is None:
                self.poll(0.5)
        if proc is not None and self.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the tree unless a child left it
            except OSError:
                pass
            try:
                proc.kill()
            except OSError:
                pass

    def close(self) -> None:
        self.kill()
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            while self.poll(1.0) is None:
                pass
        _wait_gone(self.seen)
        self.close_fds()
        if self.cgroup is not None and not self.cgroup.close():
            self.notes.append("a cgroup could not be removed")
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.lease is not None:
            self.lease.release()


def _wait_gone(pids: set[int], timeout_s: float = 2.0) -> None:
    """Wait until killed processes have exited (not merely left their cgroup): a zombie counts as gone."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    state = f.read().rpartition(b")")[2][1:2]
            except OSError:
                break
            if state in (b"Z", b"X"):
                break
            time.sleep(0.002)


def check_arguments(code: Any, limits: Any) -> None:
    """SandboxError unless `code` is a str and `limits` a SandboxLimits."""
    if not isinstance(code, str):
        raise SandboxError(f"code must be a str (got {type(code).__name__}). Fix: pass the program's text")
    if not isinstance(limits, SandboxLimits):
        raise SandboxError(f"limits must be a SandboxLimits (got {type(limits).__name__}). Fix: "
                           "SandboxLimits(wall_s=..., memory_bytes=...)")


def execute_with_plan(code: str, limits: SandboxLimits, plan: Plan,
                      cancel: threading.Event | None = None) -> ExecutionResult:
    """One execution under `plan`, whatever holds there: the caller decides whether it may run
    (`agentgraphs.sandbox.runner` refuses while a protection does not hold; detection's probes run under a
    plan whose protections are still being established)."""
    check_arguments(code, limits)
    run = _Run()
    start = time.monotonic()
    try:
        try:
            _start(run, plan, limits)
        except (OSError, SandboxError) as e:
            return _result("sandbox_error", None, None, b"", f"sandbox: could not start: {e}".encode(), False,
                           [], time.monotonic() - start, None, None, plan)
        return _supervise(run, plan, limits, code.encode("utf-8", "surrogatepass"), start, cancel)
    finally:
        run.close()


_SIGCHLD_IGNORED = ("SIGCHLD is ignored in the process that calls run_python: its children (bubblewrap, the code, "
                    "which inherits it) would be reaped unseen, and the CPU time of the code's exited children "
                    "would not be counted. Fix: restore it there: signal.signal(signal.SIGCHLD, signal.SIG_DFL)")


def _start(run: _Run, plan: Plan, limits: SandboxLimits) -> None:
    """Spawn the process (it waits before any user code), move it into its cgroups, let it go."""
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        raise SandboxError(_SIGCHLD_IGNORED)
    python = limits.python or plan.python
    if plan.drop_uid:
        run.lease = lease_uid()
    uid = run.lease.uid if run.lease is not None else None
    if plan.cgroups is not None and plan.controllers:
        extra = 1 if plan.bwrap is not None else 0  # bubblewrap's pid 1 is in the group too
        try:
            run.cgroup = ExecutionCgroup(plan.cgroups, max_processes=limits.max_processes + extra,
                                         memory_bytes=limits.memory_bytes)
        except OSError as e:
            raise SandboxError(_cgroup_failure("create this execution's cgroup", plan, e)) from e
    nproc = _nproc(plan, limits, uid)
    seccomp_fd = program_fd(plan.seccomp) if plan.seccomp is not None else -1
    if seccomp_fd >= 0:
        run.fds.append(seccomp_fd)
    kwargs: dict[str, Any] = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True, close_fds=True)
    go_r, go_w = os.pipe()  # the prologue waits on it (after interpreter start-up) for the cgroups
    run.fds += [go_r, go_w]
    if plan.bwrap is not None:
        info_r, info_w = os.pipe()
        run.fds += [info_r, info_w]
        mounts = readonly_paths(python, limits.extra_ro_paths)
        config = prologue_config(limits, go_fd=go_r, bpf_fd=-1, uid=uid, nproc=nproc,
                                 address_space="memory" not in plan.controllers, site_dirs=site_dirs(python),
                                 sigchld_default="cpu" not in plan.controllers)
        argv = bwrap_argv(plan.bwrap, mounts, limits, privileged=os.geteuid() == 0, info_fd=info_w,
                                 tmpfs_size=tmpfs_bytes(limits, memory_cgroup="memory" in plan.controllers),
                                 seccomp_fd=seccomp_fd, command=python_argv(python, config))
        passed = (go_r, info_w) + ((seccomp_fd,) if seccomp_fd >= 0 else ())
        run.proc = subprocess.Popen(argv, env=base_env(limits, "/tmp"), cwd="/", pass_fds=passed,
                                    **kwargs)
        _close_passed(run, passed)  # the parent's copies would hide bubblewrap's EOFs
        reaper = _read_child_pid(info_r)
        if reaper is None:
            raise SandboxError("bubblewrap did not start its sandbox: " + _stderr_now(run.proc))
        run.reaper = reaper
        try:
            run.reaper_fd = os.pidfd_open(reaper)
            run.fds.append(run.reaper_fd)
        except (OSError, AttributeError):
            run.reaper_fd = None  # without pidfds (Linux < 5.3) the sandbox dies with bubblewrap instead
        if run.cgroup is not None:
            # the reaper (bubblewrap's pid 1) joins while it is still setting up mounts, so the code's
            # process it forks later is born inside; one forked before the move is moved as well
            # (migration and fork exclude each other, so no child falls between the two)
            _join(run.cgroup, plan, reaper)
            _join(run.cgroup, plan, *_children(reaper))  # read after the move: none falls between
    else:
        run.workdir = tempfile.mkdtemp(prefix="agentgraphs-sandbox-")
        if uid is not None:
            os.chown(run.workdir, uid, uid)
        config = prologue_config(limits, go_fd=go_r, bpf_fd=seccomp_fd, uid=uid, nproc=nproc,
                                 address_space="memory" not in plan.controllers, site_dirs=site_dirs(python),
                                 sigchld_default="cpu" not in plan.controllers)
        passed = (go_r,) + ((seccomp_fd,) if seccomp_fd >= 0 else ())
        run.proc = subprocess.Popen(python_argv(python, config), env=base_env(limits, run.workdir),
                                    cwd=run.workdir, pass_fds=passed, **kwargs)
        _close_passed(run, passed)
        if run.cgroup is not None:  # while the interpreter starts up; it runs nothing of the code before go
            _join(run.cgroup, plan, run.proc.pid)
    os.write(go_w, b"1")


def _join(cgroup: ExecutionCgroup, plan: Plan, *pids: int) -> None:
    """Move `pids` into the execution's cgroup; SandboxError saying what to do if the kernel refuses."""
    try:
        for pid in pids:
            cgroup.add(pid)
    except OSError as e:
        raise SandboxError(_cgroup_failure("move the execution into its cgroup", plan, e)) from e


def _cgroup_failure(what: str, plan: Plan, e: OSError) -> str:
    """A cgroup that worked at detection failing now: the message says where and what to do."""
    parents = sorted({str(p) for p in plan.cgroups.parents.values()}) if plan.cgroups is not None else []
    return (f"could not {what} under {', '.join(parents)}: {e.strerror or e}. Fix: check that this process may "
            "still create groups there (a group removed by a restarted container or an ended systemd scope, "
            "pids.max or memory limits of a parent group, or a cgroup v2 parent that now holds processes of its "
            "own); `python -m agentgraphs.sandbox` (or capabilities(refresh=True) here) re-detects what works; or "
            "run without cgroups: AGENTGRAPHS_SANDBOX_DISABLE=cgroups (the parent then counts memory, processes "
            "and CPU itself)")


def _nproc(plan: Plan, limits: SandboxLimits, uid: int | None) -> int | None:
    """RLIMIT_NPROC for the code, where it counts only this execution's tasks: under a private uid (only the
    code's processes have it) or in bubblewrap's fresh user namespace (the kernel counts per user namespace;
    bubblewrap's pid 1 is one of them). With a pids cgroup the cgroup binds first (it reports the refusal)."""
    cgroup_first = 1 if "pids" in plan.controllers else 0
    if uid is not None:
        return limits.max_processes + cgroup_first
    if plan.bwrap is not None and plan.userns:
        return limits.max_processes + 1 + cgroup_first
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []  # the reaper is gone: the code never ran, its exit status says why


def _close_passed(run: _Run, passed: tuple[int, ...]) -> None:
    for fd in passed:
        os.close(fd)
        run.fds.remove(fd)


def _read_child_pid(fd: int) -> int | None:
    """bubblewrap's --info-fd JSON (its sandbox's first process); None if it exits without one."""
    data = b""
    deadline = time.monotonic() + _HANDSHAKE_S
    while time.monotonic() < deadline:
        ready = selectors.DefaultSelector()
        ready.register(fd, selectors.EVENT_READ)
        events = ready.select(deadline - time.monotonic())
        ready.close()
        if not events:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        try:
            pid = json.loads(data).get("child-pid")
        except ValueError:
            continue
        return pid if isinstance(pid, int) else None
    return None


def _stderr_now(proc: subprocess.Popen[bytes]) -> str:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    err = proc.stderr.read() if proc.stderr is not None else b""
    return err.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"


def _supervise(run: _Run, plan: Plan, limits: SandboxLimits, code: bytes, start: float,
               cancel: threading.Event | None) -> ExecutionResult:
    proc = run.proc
    assert proc is not None and proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(code)  # the prologue reads all of it at once before the code runs
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # it died before reading (e.g. killed at start): reported from its exit below
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    selector = selectors.DefaultSelector()
    for fd in buffers:
        selector.register(fd, selectors.EVENT_READ)
    hits: list[LimitHit] = []
    reason: Status | None = None
    total = 0
    truncated = False
    deadline = start + limits.wall_s
    exited_at: float | None = None
    watch = _Watch(run, plan, limits)
    try:
        while selector.get_map():
            now = time.monotonic()
            if exited_at is None and run.poll() is not None:
                exited_at = now
                run.kill()  # the code returned: whatever it left running goes too
            if exited_at is not None and now - exited_at > _DRAIN_S:
                break
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            if now >= deadline:
                reason = "timeout"
                hits.append("wall")
                break
            cpu = run.cgroup.cpu_s() if run.cgroup is not None else None
            if cpu is not None and cpu > limits.cpu_s:
                reason = "cpu_limit"
                hits.append("cpu")
                break
            if run.cgroup is not None and run.cgroup.oom_killed():  # one process killed: the run ends
                reason = "memory_limit"
                hits.append("memory")
                break
            if exited_at is None:
                over = watch.check(now)
                if over is not None:
                    reason, hit = over
                    hits.append(hit)
                    break
            for key, _ in selector.select(min(_POLL_S, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                room = limits.max_output_bytes - total
                buffers[key.fd] += chunk[:max(room, 0)]
                total += len(chunk)
                if total > limits.max_output_bytes:
                    truncated = True
            if truncated:
                reason = "output_limit"
                hits.append("output")
                break
    finally:
        selector.close()
    if reason is None and run.poll() is None:  # its output ended: let it exit by itself first
        run.poll(_DRAIN_S)
    run.kill()
    while run.poll(1.0) is None:
        pass
    wall = time.monotonic() - start
    cpu_s = run.cgroup.cpu_s() if run.cgroup is not None else None
    if cpu_s is None:  # every process that was waited for (an escaped orphan is not, nor counted)
        cpu_s = max(run.tree_cpu_s or 0.0, watch.cpu_s or 0.0) if run.tree_cpu_s is not None or watch.active \
            else None
    peak = run.cgroup.peak_memory() if run.cgroup is not None else None
    code_rc, sig = _exit_status(proc.returncode, plan.bwrap is not None)
    stderr = bytes(buffers[proc.stderr.fileno()])
    if run.cgroup is not None and run.cgroup.oom_killed():
        hits.append("memory")
    elif "memory" not in plan.controllers and stderr.rstrip().endswith(b"MemoryError"):
        hits.append("memory")
    if run.cgroup is not None and run.cgroup.fork_refused():
        hits.append("processes")
    elif "pids" not in plan.controllers and watch.peak_tasks >= limits.max_processes:
        hits.append("processes")  # it reached the ceiling RLIMIT_NPROC holds it at
    if sig in ("SIGXCPU",) or (sig == "SIGKILL" and reason is None and cpu_s is not None
                               and cpu_s >= limits.cpu_s):
        hits.append("cpu")
    if reason is None:
        if "memory" in hits:
            reason = "memory_limit"
        elif "cpu" in hits:
            reason = "cpu_limit"
        elif code_rc == 0 and sig is None:
            reason = "ok"
        else:
            reason = "error"
    return _result(reason, code_rc, sig, bytes(buffers[proc.stdout.fileno()]), stderr, truncated,
                   list(dict.fromkeys(hits)), wall, cpu_s, peak, plan)


class _Watch:
    """The parent's own count of the execution's tasks, memory and CPU (`supervisor.tree_usage`), for each
    of them that no cgroup counts; checked every _POLL_S while the code runs."""

    def __init__(self, run: _Run, plan: Plan, limits: SandboxLimits) -> None:
        self.run = run
        self.limits = limits
        self.tasks = "pids" not in plan.controllers
        self.memory = "memory" not in plan.controllers
        self.cpu = "cpu" not in plan.controllers
        self.active = self.tasks or self.memory or self.cpu
        self.next_at = 0.0
        self.peak_tasks = 0
        self.cpu_s: float | None = None

    def check(self, now: float) -> tuple[Status, LimitHit] | None:
        if not self.active or now < self.next_at:
            return None
        self.next_at = now + _POLL_S
        run = self.run
        if run.reaper is not None:
            if run.reaper_fd is not None and _exited(run.reaper_fd):
                return None  # its pid may already name another process
            usage = tree_usage(run.reaper, include_root=False)
        elif run.proc is not None:
            usage = tree_usage(run.proc.pid, include_root=True)
        else:
            return None
        self.peak_tasks = max(self.peak_tasks, usage.tasks)
        self.cpu_s = max(self.cpu_s or 0.0, usage.cpu_s)
        if self.tasks and usage.tasks > self.limits.max_processes:
            return "process_limit", "processes"
        if self.memory and usage.memory_bytes + self._tmpfs_bytes() > self.limits.memory_bytes:
            return "memory_limit", "memory"
        if self.cpu and usage.cpu_s > self.limits.cpu_s:
            return "cpu_limit", "cpu"
        return None

    def _tmpfs_bytes(self) -> int:
        """What the code holds in its /tmp tmpfs (memory too), seen through bubblewrap's pid 1's root: its pages,
        and TMPFS_INODE_BYTES per used inode (the kernel memory of files, even empty ones)."""
        if self.run.reaper is None:
            return 0
        try:
            st = os.statvfs(f"/proc/{self.run.reaper}/root/tmp")
        except OSError:
            return 0
        if abs(st.f_blocks * st.f_frsize - tmpfs_bytes(self.limits, memory_cgroup=False)) >= st.f_frsize:
            return 0  # not (yet) the sandbox's own /tmp: bubblewrap is still setting up its mounts
        inodes = max(st.f_files - st.f_ffree, 0)
        return (st.f_blocks - st.f_bfree) * st.f_frsize + inodes * TMPFS_INODE_BYTES


def _exited(pidfd: int) -> bool:
    """Whether the process behind a pidfd has exited (a pidfd turns readable then)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _exit_status(returncode: int | None, via_bwrap: bool) -> tuple[int | None, str | None]:
    """(exit code, signal name): bubblewrap reports a signalled child as 128 + signal."""
    if returncode is None:
        return None, None
    if returncode < 0:
        return None, _signal_name(-returncode)
    if via_bwrap and 128 < returncode < 128 + 65:
        return None, _signal_name(returncode - 128)
    return returncode, None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _result(status: Status, exit_code: int | None, sig: str | None, stdout: bytes, stderr: bytes,
            truncated: bool, hits: list[LimitHit], wall: float, cpu: float | None, peak: int | None,
            plan: Plan) -> ExecutionResult:
    return ExecutionResult(
        status=status, exit_code=exit_code, signal=sig,
        stdout=stdout.decode("utf-8", "replace"), stderr=stderr.decode("utf-8", "replace"),
        truncated=truncated, limits_hit=hits, wall_s=round(wall, 4),
        cpu_s=None if cpu is None else round(cpu, 4), peak_memory_bytes=peak, protections=list(plan.held),
    )

"""The seccomp filter every execution runs under, built once with `pyseccomp` (the `sandbox` extra).

Default allow; denied with EPERM: sockets other than AF_UNIX (no network even where a network
namespace is unavailable), new namespaces and mounts, tracing and other processes' memory, kernel
modules, keyrings, BPF, perf, io_uring (it could open sockets behind the filter's back), clock and
reboot calls. clone3 answers ENOSYS so the C library falls back to clone, whose flags are checked: new
namespaces and CLONE_PARENT (a child of the code's parent is outside the tree the parent counts) are denied.

Three groups are denied only where another mechanism does not already bound what they use:
`MEMORY_BACKDOORS` without a memory cgroup (memory they hold is outside RLIMIT_AS and every tmpfs size:
memfd files, System V shared memory, message queues and semaphore sets), `PER_USER_COUNTERS` without a
private uid (inotify instances and watches count against the host user's per-user limits; fanotify is
always denied), and, without a cgroup CPU controller, any change to SIGCHLD's disposition
(`rt_sigaction(SIGCHLD, act)` with act set; reading it stays allowed): a child that exits while SIGCHLD is
ignored, or under SA_NOCLDWAIT, is reaped by the kernel without adding its CPU time to its parent's, so the
parent's sum over the process tree would lose it. Python's `signal.signal(signal.SIGCHLD, ...)` then
raises PermissionError there.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import socket
import tempfile

__all__ = ["filter_bpf", "DENIED_SYSCALLS", "MEMORY_BACKDOORS", "PER_USER_COUNTERS", "SIGCHLD_CALLS"]

DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "userfaultfd", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "syslog", "iopl", "ioperm", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "fanotify_init", "lookup_dcookie", "move_mount", "open_tree",
    "fsopen", "fsmount", "fspick", "mount_setattr",
)
MEMORY_BACKDOORS = ("memfd_create", "memfd_secret", "shmget", "msgget", "semget")
PER_USER_COUNTERS = ("inotify_init", "inotify_init1")
SIGCHLD_CALLS = ("rt_sigaction", "sigaction", "signal")  # (signal number, new action, ...): the last two are
# older ABIs' names (absent on x86_64 and arm64)
_CLONE_FLAGS = (0x10000000, 0x20000000, 0x40000000, 0x04000000, 0x08000000, 0x00020000, 0x02000000, 0x00008000)
# CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS | CLONE_NEWCGROUP |
# CLONE_PARENT


@functools.lru_cache(maxsize=8)
def filter_bpf(also_denied: tuple[str, ...] = (), *, guard_sigchld: bool = False) -> bytes:
    """The compiled BPF program, denying DENIED_SYSCALLS and `also_denied`, and with `guard_sigchld` any new
    action for SIGCHLD (raises ImportError without pyseccomp, OSError without libseccomp).

    >>> len(filter_bpf()) % 8  # struct sock_filter is 8 bytes  # doctest: +SKIP
    0
    """
    import pyseccomp as sc

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS + tuple(also_denied):
        try:
            f.add_rule(deny, name)
        except (OSError, ValueError, RuntimeError):
            pass  # unknown on this architecture/libseccomp: nothing to deny
    f.add_rule(deny, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    for flag in _CLONE_FLAGS:  # one rule per flag: any of them set -> EPERM
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    if guard_sigchld:
        for name in SIGCHLD_CALLS:
            try:
                f.add_rule(deny, name, sc.Arg(0, sc.EQ, int(signal.SIGCHLD)), sc.Arg(1, sc.NE, 0))
            except (OSError, ValueError, RuntimeError):
                pass  # not a system call on this architecture
    try:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    except (OSError, ValueError, RuntimeError):
        pass
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        program = out.read()
    if not program or len(program) % 8:
        raise OSError("libseccomp exported an empty or malformed BPF program")
    return program


def program_fd(program: bytes) -> int:
    """A pipe's read end holding `program` (for `bwrap --seccomp FD` or the in-process loader)."""
    r, w = os.pipe()
    try:
        os.write(w, program)  # a few KiB: well under the pipe's capacity
    finally:
        os.close(w)
    return r

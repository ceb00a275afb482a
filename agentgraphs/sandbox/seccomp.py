"""The seccomp filter every execution runs under, built once with `pyseccomp` (the `sandbox` extra).

Default allow; denied with EPERM: sockets other than AF_UNIX (no network even where a network
namespace is unavailable), new namespaces and mounts, tracing and other processes' memory, kernel
modules, keyrings, BPF, perf, io_uring (it could open sockets behind the filter's back), clock and
reboot calls. clone3 answers ENOSYS so the C library falls back to clone, whose flags are checked.

Two groups are denied only where another mechanism does not already bound what they use:
`MEMORY_BACKDOORS` without a memory cgroup (memory they hold is outside RLIMIT_AS and every tmpfs size:
memfd files, System V shared memory and message queues) and `PER_USER_COUNTERS` without a private uid
(inotify instances and watches count against the host user's per-user limits; fanotify is always denied).
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import tempfile

__all__ = ["filter_bpf", "DENIED_SYSCALLS", "MEMORY_BACKDOORS", "PER_USER_COUNTERS"]

DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "userfaultfd", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "syslog", "iopl", "ioperm", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "fanotify_init", "lookup_dcookie", "move_mount", "open_tree",
    "fsopen", "fsmount", "fspick", "mount_setattr",
)
MEMORY_BACKDOORS = ("memfd_create", "memfd_secret", "shmget", "msgget")
PER_USER_COUNTERS = ("inotify_init", "inotify_init1")
_NAMESPACE_FLAGS = (0x10000000, 0x20000000, 0x40000000, 0x04000000, 0x08000000, 0x00020000, 0x02000000)
# CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS | CLONE_NEWCGROUP


@functools.lru_cache(maxsize=8)
def filter_bpf(also_denied: tuple[str, ...] = ()) -> bytes:
    """The compiled BPF program, denying DENIED_SYSCALLS and `also_denied` (raises ImportError without
    pyseccomp, OSError without libseccomp).

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
    for flag in _NAMESPACE_FLAGS:  # one rule per flag: any of them set -> EPERM
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
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

"""How one execution is started: the in-sandbox prologue, the bubblewrap command line, the environment.

The code itself travels on stdin. Inside, a short trusted prologue (run with `python -I -S -B -c`, and
importing nothing but os, sys and resource, so that start-up stays as cheap as a bare interpreter's) waits
for the parent's go (the parent first moves the process into its cgroups), loads the seccomp filter when
bubblewrap did not, drops to its private uid, lowers its rlimits, reads the code and runs it as
`__main__` with tracebacks that show only the user's frames (file "<code>").
"""

from __future__ import annotations

import functools
import json
import math
import os
import resource
import site
import sys
from collections.abc import Sequence

from .types import SandboxLimits

__all__ = ["PROLOGUE", "CODE_FILENAME", "prologue_config", "base_env", "readonly_paths", "site_dirs", "bwrap_argv",
           "tmpfs_bytes", "TMPFS_INODE_BYTES", "python_argv"]

CODE_FILENAME = "<code>"

PROLOGUE = r"""
import os, sys, resource
_h, _r, _p = sys.argv[1].split("\x1e")
_go, _bpf, _uid, _chld = (int(x) for x in _h.split(","))
if _chld:
    import _signal
    if _signal.getsignal(_signal.SIGCHLD) == _signal.SIG_IGN:
        sys.stderr.write("sandbox: SIGCHLD is ignored in the process that calls run_python (the code inherits "
                         "it), so the CPU time of exited children could not be counted. Fix: restore it there: "
                         "signal.signal(signal.SIGCHLD, signal.SIG_DFL)\n")
        os._exit(125)
if _go >= 0:
    if os.read(_go, 1) != b"1":
        os._exit(125)
    os.close(_go)
if _bpf >= 0:
    import ctypes
    _b = b""
    while True:
        _c = os.read(_bpf, 65536)
        if not _c:
            break
        _b += _c
    os.close(_bpf)
    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    _buf = ctypes.create_string_buffer(_b, len(_b))
    _prog = _Prog(len(_b) // 8, ctypes.addressof(_buf))
    _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.prctl(38, 1, 0, 0, 0) != 0 or _libc.prctl(22, 2, ctypes.byref(_prog), 0, 0) != 0:
        sys.stderr.write("sandbox: the seccomp filter could not be loaded\n")
        os._exit(125)
if _uid >= 0:
    os.setgroups([])
    os.setresgid(_uid, _uid, _uid)
    os.setresuid(_uid, _uid, _uid)
    if os.getresuid() != (_uid,) * 3 or os.getresgid() != (_uid,) * 3:
        os._exit(125)
for _l in _r.split(";") if _r else ():
    _k, _s, _m = (int(x) for x in _l.split(","))
    _h = resource.getrlimit(_k)[1]
    if _h != resource.RLIM_INFINITY and (_m == resource.RLIM_INFINITY or _m > _h):
        _m = _h
    resource.setrlimit(_k, (_s if _m == resource.RLIM_INFINITY else min(_s, _m), _m))
sys.path.extend(x for x in _p.split("\x1f") if x)
_src = sys.stdin.buffer.read()
sys.argv = ["<code>"]
_g = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(_src, "<code>", "exec"), _g)
except SystemExit:
    raise
except BaseException as _e:
    import linecache, traceback
    _t = _src.decode("utf-8", "replace")
    linecache.cache["<code>"] = (len(_t), None, _t.splitlines(True), "<code>")
    traceback.print_exception(type(_e), _e, _e.__traceback__.tb_next if _e.__traceback__ else None)
    sys.stderr.flush()
    sys.exit(1)
"""


def prologue_config(limits: SandboxLimits, *, go_fd: int, bpf_fd: int, uid: int | None, nproc: int | None,
                    address_space: bool, site_dirs: Sequence[str] = (), sigchld_default: bool = False) -> str:
    """The prologue's argument: its fds, the uid it drops to, the rlimits it sets before the code runs, and
    whether it must start with SIGCHLD not ignored (`sigchld_default`: where the parent sums CPU time itself,
    an ignored SIGCHLD inherited from this process would let exited children's CPU go uncounted).

    Limits are only ever lowered (an unprivileged process cannot raise a hard limit). Besides the
    SandboxLimits ones, the per-user counters the kernel keeps per user (namespace) are kept small so that
    an execution cannot use up its user's share: pending signals, POSIX message queue bytes, locked memory.
    """
    cpu = max(1, math.ceil(limits.cpu_s))
    rl = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_FSIZE, limits.tmp_bytes, limits.tmp_bytes),
        (resource.RLIMIT_SIGPENDING, _SIGPENDING, _SIGPENDING),
        (resource.RLIMIT_MSGQUEUE, 0, 0),
        (resource.RLIMIT_MEMLOCK, _MEMLOCK, _MEMLOCK),
    ]
    if nproc is not None:
        rl.append((resource.RLIMIT_NPROC, nproc, nproc))
    if address_space:  # only without a memory cgroup: virtual memory is a poor proxy for real use
        rl.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    if any("\x1e" in d or "\x1f" in d for d in site_dirs):
        raise ValueError("site-packages paths must not contain the ASCII separators \\x1e / \\x1f")
    head = f"{go_fd},{bpf_fd},{-1 if uid is None else uid},{int(sigchld_default)}"
    limits_text = ";".join(f"{k},{soft},{hard}" for k, soft, hard in rl)
    return "\x1e".join([head, limits_text, "\x1f".join(site_dirs)])


_SIGPENDING = 1024
_MEMLOCK = 64 * 1024


def base_env(limits: SandboxLimits, home: str) -> dict[str, str]:
    """The whole environment the code sees: nothing is inherited from this process."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    env.update(limits.env)
    return env


def python_argv(python: str, config: str) -> list[str]:
    """`-S`: the host's .pth start-up hooks (editable installs, environment hooks) never run in the
    sandbox; the prologue puts the site-packages directories on sys.path itself (`site_dirs`)."""
    return [python, "-I", "-S", "-B", "-c", PROLOGUE, config]


@functools.lru_cache(maxsize=8)
def site_dirs(python: str) -> tuple[str, ...]:
    """The site-packages directories the interpreter would use (this process's when it is the same one)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return tuple(p for p in site.getsitepackages() if os.path.isdir(p))
    import subprocess

    out = subprocess.run([python, "-I", "-c", "import site, json; print(json.dumps(site.getsitepackages()))"],
                         capture_output=True, text=True, timeout=60)
    try:
        return tuple(p for p in json.loads(out.stdout) if os.path.isdir(p))
    except ValueError:
        return ()


_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache",
                 "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")


@functools.lru_cache(maxsize=32)
def readonly_paths(python: str, extra: tuple[str, ...]) -> tuple[str, ...]:
    """Host paths the code may read: system libraries, the interpreter's prefixes and site-packages.

    Nested paths are dropped (their parent is mounted); only existing paths are kept.
    """
    wanted = list(_SYSTEM_PATHS)
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        wanted += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        # site-packages only: `python -I` ignores PYTHONPATH and the cwd, so those stay unmounted
        wanted += list(site_dirs(python))
    else:  # another interpreter: its installation prefix (bin/..) and its site-packages
        wanted.append(os.path.dirname(os.path.dirname(os.path.realpath(python))))
        wanted += list(site_dirs(python))
    wanted.append(os.path.dirname(os.path.abspath(python)))
    wanted.append(os.path.dirname(os.path.realpath(python)))
    wanted += list(extra)
    paths: list[str] = []
    for p in wanted:
        p = os.path.normpath(os.path.abspath(p))
        if os.path.lexists(p) and p not in paths:
            paths.append(p)
    def covered(p: str) -> bool:
        return any(q != p and not os.path.islink(q) and p.startswith(q.rstrip("/") + "/") for q in paths)
    kept = [p for p in paths if not covered(p)]
    for p in list(kept):  # a symlinked top-level dir (/bin -> usr/bin): its target must be there too
        if os.path.islink(p):
            target = os.path.realpath(p)
            if not any(target == q or target.startswith(q + "/") for q in kept):
                kept.append(target)
    return tuple(sorted(kept, key=lambda p: (p.count("/"), p)))


_DEV_NODES = ("null", "zero", "full", "random", "urandom")
SHM_DIR = "/tmp/.shm"


# What one used inode of the sandbox's tmpfs is charged to memory_bytes where no memory cgroup charges the
# kernel's own memory: a file, directory, symlink or extra hard link holds an inode and a dentry (measured on
# Linux 6.18: 1.0 KiB of slab with a short name, 1.5 KiB with a 255-byte one). tmpfs's --size bounds only its
# pages, so without this charge millions of empty files would hold gigabytes no limit sees (bubblewrap 0.8
# cannot set nr_inodes). Since Linux 6.6 tmpfs also counts user xattrs in 1 KiB units of its inode space.
TMPFS_INODE_BYTES = 2048


def tmpfs_bytes(limits: SandboxLimits, *, memory_cgroup: bool) -> int:
    """The size of the sandbox's one writable tmpfs: tmp_bytes, and without a memory cgroup (which would
    charge its pages) at most memory_bytes too, since tmpfs files are memory no rlimit sees.

    >>> tmpfs_bytes(SandboxLimits(tmp_bytes=512 << 20, memory_bytes=128 << 20), memory_cgroup=False) >> 20
    128
    """
    return limits.tmp_bytes if memory_cgroup else min(limits.tmp_bytes, limits.memory_bytes)


def bwrap_argv(bwrap: str, mounts: Sequence[str], limits: SandboxLimits, *, privileged: bool, info_fd: int,
               seccomp_fd: int, command: list[str], tmpfs_size: int | None = None) -> list[str]:
    """bubblewrap's command line: every namespace, read-only mounts, one size-capped tmpfs for all writes.

    The only writable mount is /tmp (the working directory: a tmpfs of `tmpfs_size`, by default tmp_bytes);
    /dev/shm is a link into it (/tmp/.shm), so POSIX shared memory shares that budget. The root tmpfs
    bubblewrap builds the sandbox in and a minimal /dev (its own tmpfs with the harmless device nodes bound
    in) are remounted read-only at the end. privileged (this process is root): no user namespace (the
    prologue drops to a private uid itself, so bubblewrap keeps only CAP_SETUID/CAP_SETGID for it, under
    no_new_privs); otherwise an unprivileged user namespace. Directories above each mount are created 0755
    so that the dropped uid can traverse them (/root is 0700 on the host).
    """
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if privileged:
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user"]
    # the writable tmpfs first: read-only mounts below /tmp (a checkout's .venv there, as in a CI clone) are
    # then bound on top of it instead of being hidden by it
    size = limits.tmp_bytes if tmpfs_size is None else tmpfs_size
    argv += ["--proc", "/proc", "--size", str(size), "--perms", "1777", "--tmpfs", "/tmp",
             "--perms", "1777", "--dir", SHM_DIR, "--size", "65536", "--perms", "0755", "--tmpfs", "/dev"]
    for node in _DEV_NODES:
        argv += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
    argv += ["--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
             "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr",
             "--symlink", SHM_DIR, "/dev/shm", "--remount-ro", "/dev"]
    made: set[str] = {"/tmp", "/proc", "/dev"}
    for dest in mounts:
        parent = os.path.dirname(dest)
        ancestors = []
        while parent not in ("/", ""):
            ancestors.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(ancestors):
            if d not in made and not any(d == m or d.startswith(m + "/") for m in mounts):
                argv += ["--perms", "0755", "--dir", d]
                made.add(d)
        if os.path.islink(dest):
            argv += ["--symlink", os.readlink(dest), dest]
        else:
            argv += ["--ro-bind", dest, dest]
    argv += ["--remount-ro", "/", "--chdir", "/tmp", "--info-fd", str(info_fd)]
    if seccomp_fd >= 0:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv + ["--"] + command

"""The sandbox's inputs and outputs: limits (validated), the result of one execution, errors."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict

__all__ = ["SandboxLimits", "ExecutionResult", "Status", "LimitHit", "SandboxError", "SandboxUnavailableError",
           "PROTECTIONS", "ALLOW_MISSING_ENV", "names_from_env"]

MiB = 1024 * 1024

Status = Literal["ok", "error", "timeout", "cpu_limit", "memory_limit", "process_limit", "output_limit",
                 "cancelled", "sandbox_error"]
LimitHit = Literal["wall", "cpu", "memory", "processes", "output"]

# Every protection an execution gets; `run_python` refuses unless each holds here or is in allow_missing.
PROTECTIONS = ("wall_clock", "cpu", "memory", "processes", "output", "tmp_space", "open_files", "network",
               "filesystem", "environment", "host_processes", "leftover_processes", "syscalls", "per_user_limits")
ALLOW_MISSING_ENV = "AGENTGRAPHS_SANDBOX_ALLOW_MISSING"


class SandboxError(Exception):
    """The sandbox itself could not run (bad limits, a launch failure)."""


class SandboxUnavailableError(SandboxError):
    """A protection does not hold on this machine and the caller did not allow it to be missing.

    `missing` lists the protections (keys of `capabilities()["protections"]`); the message says, for each,
    which mechanism is missing and how to get it, and how to opt out."""

    def __init__(self, message: str, missing: list[str]) -> None:
        super().__init__(message)
        self.missing = missing


def names_from_env(var: str, known: Sequence[str], what: str) -> frozenset[str]:
    """The comma-separated names in the environment variable `var`; SandboxError naming any not in `known`."""
    names = frozenset(n.strip() for n in os.environ.get(var, "").split(",") if n.strip())
    unknown = sorted(names - set(known))
    if unknown:
        raise SandboxError(f"{var} names unknown {what}(s) {unknown}. Fix: use a comma-separated subset of "
                           f"{list(known)}")
    return names


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """What one execution may use. Every field is enforced; `capabilities()` says by which mechanism.

    - wall_s: wall-clock seconds before the whole process tree is killed.
    - cpu_s: CPU seconds (per process by RLIMIT_CPU; over all processes by the cgroup's CPU accounting, or
      the parent's sum over the sandbox's pid namespace; there the code may not change SIGCHLD's action,
      so that no exited child's CPU time goes uncounted: signal.signal(SIGCHLD, ...) raises PermissionError).
    - memory_bytes: memory of all processes together, tmpfs files included (a memory cgroup; without one
      RLIMIT_AS per process and the parent summing resident memory and the tmpfs every 50 ms, each of the
      tmpfs's inodes charged 2 KiB; System V semaphores, shared memory and queues and memfd are refused).
    - max_processes: processes + threads at once (a pids cgroup; RLIMIT_NPROC under a private uid or in a
      user namespace; a supervisor counting the tasks of the pid namespace).
    - max_output_bytes: stdout + stderr together; past it the execution is killed and marked truncated.
    - tmp_bytes: everything the code can write, together: the working directory /tmp is the only writable
      mount (a tmpfs of this size; /dev/shm points into it; /, /dev and the rest are read-only). Without a
      memory cgroup the tmpfs is also capped at memory_bytes (its files are memory no rlimit sees).
    - max_open_files: RLIMIT_NOFILE.
    - python: the interpreter (default: the one running this process, with its site-packages).
    - extra_ro_paths: more host paths the code may read (bind-mounted read-only at the same place).
    - env: extra environment variables (the rest of the parent's environment never reaches the code).
    - allow_missing: protections (names in PROTECTIONS) this caller accepts to run without. By default every
      protection must hold on this machine, else `run_python` raises SandboxUnavailableError before any
      code starts; `AGENTGRAPHS_SANDBOX_ALLOW_MISSING=processes,...` adds names for a whole process.

    >>> SandboxLimits(wall_s=2).cpu_s
    10.0
    >>> sorted(SandboxLimits(allow_missing={"per_user_limits"}).allow_missing)
    ['per_user_limits']
    >>> SandboxLimits(memory_bytes=0)
    Traceback (most recent call last):
    ...
    agentgraphs.sandbox.types.SandboxError: SandboxLimits.memory_bytes must be > 0 (got 0). Fix: pass a positive number of bytes, e.g. 512 * 1024 * 1024
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_bytes: int = 512 * MiB
    max_processes: int = 32
    max_output_bytes: int = 1 * MiB
    tmp_bytes: int = 64 * MiB
    max_open_files: int = 256
    python: str | None = None
    extra_ro_paths: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    allow_missing: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name, fix in (("wall_s", "seconds, e.g. 10"), ("cpu_s", "seconds, e.g. 10"),
                          ("memory_bytes", "bytes, e.g. 512 * 1024 * 1024"),
                          ("max_processes", "count, e.g. 32"), ("max_output_bytes", "bytes, e.g. 1048576"),
                          ("tmp_bytes", "bytes, e.g. 64 * 1024 * 1024"), ("max_open_files", "count, e.g. 256")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise SandboxError(f"SandboxLimits.{name} must be > 0 (got {value!r}). Fix: pass a positive "
                                   f"number of {fix}")
        if self.memory_bytes < 32 * MiB:
            raise SandboxError(f"SandboxLimits.memory_bytes={self.memory_bytes} is below the 32 MiB a Python "
                               "interpreter needs to start. Fix: pass at least 32 * 1024 * 1024")
        for key, value in self.env.items():
            if not (isinstance(key, str) and isinstance(value, str)) or "=" in key or "\0" in key + value:
                raise SandboxError(f"SandboxLimits.env entry {key!r}: names and values must be strings "
                                   "without '=' in the name or NUL anywhere. Fix: drop or rename it")
        if isinstance(self.allow_missing, str):
            raise SandboxError(f"SandboxLimits.allow_missing must be a set of protection names (got the string "
                               f"{self.allow_missing!r}). Fix: allow_missing={{{self.allow_missing!r}}}")
        unknown = sorted(set(self.allow_missing) - set(PROTECTIONS))
        if unknown:
            raise SandboxError(f"SandboxLimits.allow_missing names unknown protection(s) {unknown}. Fix: use names "
                               f"from {list(PROTECTIONS)}")
        object.__setattr__(self, "extra_ro_paths", tuple(self.extra_ro_paths))
        object.__setattr__(self, "allow_missing", frozenset(self.allow_missing))


class ExecutionResult(TypedDict):
    """What one execution did.

    status: "ok" (exit 0), "error" (non-zero exit or an uncaught exception), "timeout" (wall clock),
    "cpu_limit", "memory_limit", "process_limit" (killed for running more tasks than max_processes where
    nothing refused the fork first), "output_limit", "cancelled", or "sandbox_error" (it never ran: see
    stderr). limits_hit lists every limit that bit, also ones the code survived (a fork refused by the
    process limit shows "processes" with status "error" or even "ok").
    """

    status: Status
    exit_code: int | None
    signal: str | None
    stdout: str
    stderr: str
    truncated: bool
    limits_hit: list[LimitHit]
    wall_s: float
    cpu_s: float | None
    peak_memory_bytes: int | None
    protections: list[str]

"""What an execution's processes use right now, read from /proc: the parent's check where no cgroup counts.

The execution's processes are the tree below its root: bubblewrap's pid 1 of the sandbox's pid namespace
(every orphan is re-parented to it, so nothing leaves the tree) or, without bubblewrap, the code's main
process (a child that calls setsid and whose parent exits leaves it: the report says leftovers are not
held there). Per process: its threads (tasks, as the kernel counts processes), its anonymous + shared
resident memory, and its CPU time including that of the children it reaped, so that the sum over the
tree also counts processes that have already exited.
"""

from __future__ import annotations

import dataclasses
import os

__all__ = ["Usage", "tree_usage", "descendants"]

_TICK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Usage:
    tasks: int  # threads of every process below the root (the root itself included when it is the code)
    memory_bytes: int  # RssAnon + RssShmem summed
    cpu_s: float  # utime + stime + cutime + cstime summed (the root's too: it reaps orphans)


def descendants(root: int) -> list[int]:
    """Every process below `root`, through the children of each of its threads (breadth first)."""
    found: list[int] = []
    frontier = [root]
    seen = {root}
    while frontier:
        pid = frontier.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in seen:
                    seen.add(kid)
                    found.append(kid)
                    frontier.append(kid)
    return found


def _stat(pid: int) -> tuple[int, float] | None:
    """(threads, cpu seconds incl. reaped children) from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    # fields[0] is the state (field 3 of stat); utime..cstime are fields 14-17, num_threads field 20
    try:
        ticks = sum(int(x) for x in fields[11:15])
        return int(fields[17]), ticks / _TICK
    except (IndexError, ValueError):
        return None


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        if line.startswith((b"RssAnon:", b"RssShmem:")):
            parts = line.split()
            try:
                total += int(parts[1]) * 1024  # kB
            except (IndexError, ValueError):
                pass
    return total


def tree_usage(root: int, *, include_root: bool) -> Usage:
    """The tasks, memory and CPU of the processes below `root` (and of `root` itself if `include_root`;
    a bubblewrap pid 1 adds only its CPU, which holds the time of the orphans it reaped).

    >>> u = tree_usage(os.getpid(), include_root=True)
    >>> u.tasks >= 1 and u.memory_bytes > 0
    True
    """
    tasks = 0
    memory = 0
    cpu = 0.0
    root_stat = _stat(root)
    if root_stat is not None:
        cpu += root_stat[1]
        if include_root:
            tasks += root_stat[0]
            memory += _resident(root)
    for pid in descendants(root):
        stat = _stat(pid)
        if stat is None:
            continue
        tasks += stat[0]
        cpu += stat[1]
        memory += _resident(pid)
    return Usage(tasks, memory, cpu)

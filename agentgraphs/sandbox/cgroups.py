"""One cgroup (v1: pids, memory, cpuacct) per execution, under the cgroups this process is in.

Each controller is used only where its per-execution group can be created and its limit file written
(probed once by `detect_controllers`). Groups are named uniquely, filled with the execution's first
process before it runs any user code, emptied by SIGKILL-ing every member and removed afterwards.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["ExecutionCgroup", "detect_controllers", "CONTROLLERS"]

CONTROLLERS = ("pids", "memory", "cpuacct")
_counter = itertools.count()
_lock = threading.Lock()


def _mounts() -> dict[str, Path]:
    """Mount point of each v1 controller (from /proc/self/mountinfo)."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        options = set(tail[2].split(","))
        for name in CONTROLLERS:
            if name in options and name not in found:
                found[name] = Path(fields[4])
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller (from /proc/self/cgroup)."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(","):
                paths[name] = parts[2]
    return paths


def _parent_dirs() -> dict[str, Path]:
    mounts, own = _mounts(), _own_paths()
    return {name: mounts[name] / own.get(name, "/").lstrip("/") for name in CONTROLLERS if name in mounts}


_LIMIT_FILE = {"pids": "pids.max", "memory": "memory.limit_in_bytes", "cpuacct": "cpuacct.usage"}


def remove_stale_groups(parents: dict[str, Path]) -> int:
    """Remove the empty per-execution groups of processes that died without cleaning up (SIGKILL)."""
    removed = 0
    for parent in parents.values():
        for group in parent.glob("agentgraphs-sbx-*-*"):
            try:
                owner = int(group.name.split("-")[2])
            except (IndexError, ValueError):
                continue
            if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
                continue
            try:
                group.rmdir()  # only succeeds when empty: a live sandbox's group is never touched
                removed += 1
            except OSError:
                pass
    return removed


def detect_controllers() -> dict[str, str]:
    """{controller: "" if usable, else why not}: each is probed by creating and removing a group.

    Groups left by a process that was killed before it could clean up are removed on the way.

    >>> sorted(detect_controllers())
    ['cpuacct', 'memory', 'pids']
    """
    parents = _parent_dirs()
    remove_stale_groups(parents)
    report: dict[str, str] = {}
    for name in CONTROLLERS:
        parent = parents.get(name)
        if parent is None:
            report[name] = "no cgroup v1 hierarchy with this controller is mounted"
            continue
        probe = parent / f"agentgraphs-probe-{os.getpid()}-{next(_counter)}"
        try:
            probe.mkdir()
        except OSError as e:
            report[name] = f"cannot create a group under {parent}: {e.strerror}"
            continue
        try:
            limit = probe / _LIMIT_FILE[name]
            if name == "pids":
                limit.write_text("8")
            elif name == "memory":
                limit.write_text(str(64 * 1024 * 1024))
            else:
                limit.read_text()
            report[name] = ""
        except OSError as e:
            report[name] = f"cannot use {limit}: {e.strerror}"
        finally:
            try:
                probe.rmdir()
            except OSError:
                pass
    return report


class ExecutionCgroup:
    """The groups of one execution (only the usable controllers); use `close()` to kill and remove."""

    def __init__(self, controllers: list[str], *, max_processes: int, memory_bytes: int) -> None:
        parents = _parent_dirs()
        name = f"agentgraphs-sbx-{os.getpid()}-{next(_counter)}"
        self.dirs: dict[str, Path] = {}
        try:
            for controller in controllers:
                group = parents[controller] / name
                group.mkdir()
                self.dirs[controller] = group
            if "pids" in self.dirs:
                (self.dirs["pids"] / "pids.max").write_text(str(max_processes))
            if "memory" in self.dirs:
                mem = self.dirs["memory"]
                (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
                swap = mem / "memory.memsw.limit_in_bytes"
                if swap.exists():  # no swapping past the limit either
                    try:
                        swap.write_text(str(memory_bytes))
                    except OSError:
                        pass
        except OSError:
            self.close()
            raise

    def add(self, pid: int) -> None:
        """Move `pid` (a process that has not yet run user code) into every group."""
        for group in self.dirs.values():
            (group / "cgroup.procs").write_text(str(pid))

    def members(self) -> set[int]:
        pids: set[int] = set()
        for group in self.dirs.values():
            try:
                pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return pids

    def cpu_s(self) -> float | None:
        group = self.dirs.get("cpuacct")
        if group is None:
            return None
        try:
            return int((group / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def peak_memory(self) -> int | None:
        group = self.dirs.get("memory")
        if group is None:
            return None
        try:
            return int((group / "memory.max_usage_in_bytes").read_text())
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        group = self.dirs.get("memory")
        if group is None:
            return False
        try:
            for line in (group / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
            return int((group / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def fork_refused(self) -> bool:
        group = self.dirs.get("pids")
        if group is None:
            return False
        try:
            for line in (group / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value) > 0
        except (OSError, ValueError):
            pass
        return False

    def kill_all(self, grace_s: float = 2.0) -> bool:
        """SIGKILL every member until the groups are empty; False if some outlived `grace_s`."""
        deadline = time.monotonic() + grace_s
        while True:
            members = self.members()
            if not members:
                return True
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)

    def close(self) -> bool:
        """Kill what is left and remove the groups; False if a group could not be removed."""
        clean = self.kill_all()
        for group in self.dirs.values():
            for _ in range(200):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)  # the last members are still being reaped
            else:
                clean = False
        self.dirs = {}
        return clean

"""One cgroup per execution: cgroup v1 (pids, memory, cpuacct hierarchies) or cgroup v2 (one unified group).

`find_cgroups()` decides, once, where per-execution groups go and which controllers they get; each
controller counts only when a probe group can be created and its limit written. The names are the same
for both versions: "pids" (pids.max), "memory" (v1 memory.limit_in_bytes / v2 memory.max, no swap),
"cpu" (v1 cpuacct.usage / v2 cpu.stat, which every v2 group has).

cgroup v2 and its "no internal processes" rule: a group can hand memory to child groups only while it has
no processes of its own. So under the group this process is in (or the one named by
`AGENTGRAPHS_SANDBOX_CGROUP`), the controllers the parent delegates are enabled for children; when that
fails because this process is the group's only member (a `systemd-run --scope -p Delegate=yes` scope, a
container whose first process is this one), the process first moves itself into a leaf group of its own
(`agentgraphs-host-PID`). When other processes share the group, the controller is reported unusable, with
the fix.

Groups are named uniquely, filled with the execution's first process before it runs any user code,
emptied by killing every member (v2: `cgroup.kill`) and removed afterwards.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import os
import signal
import time
from pathlib import Path

__all__ = ["CgroupSetup", "ExecutionCgroup", "find_cgroups", "remove_stale_groups", "CONTROLLERS", "CGROUP_ENV"]

CONTROLLERS = ("pids", "memory", "cpu")
CGROUP_ENV = "AGENTGRAPHS_SANDBOX_CGROUP"
_V1_NAME = {"pids": "pids", "memory": "memory", "cpu": "cpuacct"}
_counter = itertools.count()
def _v2_fix() -> str:
    """How to get a usable cgroup v2 subtree, for this user."""
    own = ("start this program alone in a group of its own (it then moves itself into a leaf and delegates), "
           "e.g. `systemd-run --scope python ...`; a parent holding processes of its own must move them into a "
           "leaf group first" if os.geteuid() == 0 else
           "start this program in a cgroup v2 subtree delegated to its user and holding no other process "
           "(e.g. `systemd-run --user --scope -p Delegate=yes python ...`), or run as root")
    return f"{own}; or point {CGROUP_ENV} at an empty delegated cgroup v2 directory"


@dataclasses.dataclass(frozen=True)
class CgroupSetup:
    """Where this process puts its per-execution groups: version 1 (a parent directory per controller) or
    2 (one parent directory); `usable` maps each controller to "" (usable) or why not."""

    version: int
    parents: dict[str, Path]
    usable: dict[str, str]
    note: str = ""

    @property
    def controllers(self) -> tuple[str, ...]:
        return tuple(c for c in CONTROLLERS if self.usable.get(c) == "")


def _mountinfo() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fs type, super options) of each mount."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            out.append((fields[3], fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller name, and "" for the v2 (unified) hierarchy."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            if parts[0] == "0" and parts[1] == "":
                paths[""] = parts[2]
            for name in parts[1].split(","):
                if name:
                    paths[name] = parts[2]
    return paths


def _inside(mount_root: str, mount_point: str, own: str) -> Path | None:
    """The directory of cgroup path `own` under a mount of the hierarchy rooted at `mount_root`."""
    root = mount_root.rstrip("/")
    if own != root and not own.startswith(root + "/"):
        return None
    return Path(mount_point) / own[len(root):].lstrip("/")


def _v1_parents() -> dict[str, Path]:
    own = _own_paths()
    found: dict[str, Path] = {}
    for root, point, fstype, options in _mountinfo():
        if fstype != "cgroup":
            continue
        for name in CONTROLLERS:
            v1 = _V1_NAME[name]
            if v1 in options and name not in found:
                path = _inside(root, point, own.get(v1, "/"))
                if path is not None:
                    found[name] = path
    return found


def _v2_mount() -> tuple[str, str] | None:
    for root, point, fstype, _ in _mountinfo():
        if fstype == "cgroup2":
            return root, point
    return None


def remove_stale_groups(parents: dict[str, Path]) -> int:
    """Remove the empty groups of processes that died without cleaning up (SIGKILL): per-execution groups
    (agentgraphs-sbx-PID-N) and a host process's leaf (agentgraphs-host-PID)."""
    removed = 0
    for parent in set(parents.values()):
        for group in list(parent.glob("agentgraphs-sbx-*-*")) + list(parent.glob("agentgraphs-host-*")):
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


def find_cgroups(disabled: bool = False) -> CgroupSetup | None:
    """Where per-execution groups go here, each controller probed by creating a group and writing its limit.

    cgroup v1 is used where one of its controllers is usable, else cgroup v2; `AGENTGRAPHS_SANDBOX_CGROUP`
    (a cgroup v2 directory) chooses v2 there. None when no cgroup hierarchy is mounted at all.

    >>> setup = find_cgroups()
    >>> setup is None or sorted(setup.usable) == ["cpu", "memory", "pids"]
    True
    """
    if disabled:
        return None
    forced = os.environ.get(CGROUP_ENV, "").strip()
    if forced:
        return _find_v2(Path(forced), forced=True)
    v1 = _find_v1()
    if v1 is not None and v1.controllers:
        return v1
    mount = _v2_mount()
    if mount is not None:
        own = _own_paths().get("")
        parent = _inside(mount[0], mount[1], own) if own is not None else None
        if parent is not None:
            return _find_v2(parent, forced=False)
    return v1


def _find_v1() -> CgroupSetup | None:
    parents = _v1_parents()
    if not parents:
        return None
    remove_stale_groups(parents)
    usable: dict[str, str] = {}
    for name in CONTROLLERS:
        parent = parents.get(name)
        if parent is None:
            usable[name] = f"no cgroup v1 hierarchy with the {_V1_NAME[name]} controller is mounted"
            continue
        usable[name] = _probe_group(1, {name: parent}, name)
    return CgroupSetup(1, parents, usable)


def _find_v2(parent: Path, *, forced: bool) -> CgroupSetup:
    usable: dict[str, str] = {}
    note = ""
    if forced:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            why = f"{CGROUP_ENV}={parent}: cannot create it: {e.strerror}"
            return CgroupSetup(2, {}, {c: why for c in CONTROLLERS})
        if not (parent / "cgroup.controllers").exists():
            why = f"{CGROUP_ENV}={parent} is not a cgroup v2 directory"
            return CgroupSetup(2, {}, {c: why for c in CONTROLLERS})
    parents = {c: parent for c in CONTROLLERS}
    remove_stale_groups(parents)
    if not os.access(parent, os.W_OK):
        why = f"cgroup v2 group {parent} is not writable by uid {os.geteuid()}. Fix: {_v2_fix()}"
        return CgroupSetup(2, parents, {c: why for c in CONTROLLERS})
    offered = set(_read(parent / "cgroup.controllers").split())
    for name in ("pids", "memory"):
        if name not in offered:
            usable[name] = (f"the parent of {parent} does not delegate the {name} controller (cgroup.controllers: "
                            f"{' '.join(sorted(offered)) or 'none'}). Fix: enable it in the parent's "
                            f"cgroup.subtree_control; or {_v2_fix()}")
    wanted = [n for n in ("pids", "memory") if n in offered]
    errors = _enable(parent, wanted)
    if errors.get("memory") == errno.EBUSY or errors.get("pids") == errno.EBUSY:
        moved = _move_self_to_leaf(parent)
        if moved:
            note = f"this process moved itself into {moved} so that {parent} can delegate controllers"
            errors = _enable(parent, wanted)
    for name in wanted:
        err = errors.get(name)
        if err == errno.EBUSY:
            others = len(_read(parent / "cgroup.procs").split())
            usable[name] = (f"{parent} holds {others} process(es) besides the sandbox's groups, and cgroup v2 "
                            f"cannot enable {name} for the children of a group with processes. Fix: {_v2_fix()}")
        elif err is not None:
            usable[name] = (f"cannot enable {name} in {parent}/cgroup.subtree_control: {os.strerror(err)}. "
                            f"Fix: {_v2_fix()}")
    for name in CONTROLLERS:
        if name not in usable:
            usable[name] = _probe_group(2, parents, name)
    return CgroupSetup(2, parents, usable, note)


def _enable(parent: Path, names: list[str]) -> dict[str, int]:
    """Enable each controller for the children of `parent`; {name: errno} of the ones that failed."""
    enabled = set(_read(parent / "cgroup.subtree_control").split())
    errors: dict[str, int] = {}
    for name in names:
        if name in enabled:
            continue
        try:
            (parent / "cgroup.subtree_control").write_text(f"+{name}")
        except OSError as e:
            errors[name] = e.errno or errno.EIO
    return errors


def _move_self_to_leaf(parent: Path) -> Path | None:
    """Move this process into parent/agentgraphs-host-PID when it is the group's only process."""
    members = _read(parent / "cgroup.procs").split()
    if members != [str(os.getpid())]:
        return None
    leaf = parent / f"agentgraphs-host-{os.getpid()}"
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        try:
            leaf.rmdir()
        except OSError:
            pass
        return None
    return leaf


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _probe_group(version: int, parents: dict[str, Path], name: str) -> str:
    """"" if a group for controller `name` can be created and its limit written, else why not."""
    parent = parents[name]
    probe = parent / f"agentgraphs-probe-{os.getpid()}-{next(_counter)}"
    try:
        probe.mkdir()
    except OSError as e:
        fix = _v2_fix() if version == 2 else "run as root with the cgroup v1 hierarchies writable"
        return f"cannot create a group under {parent}: {e.strerror}. Fix: {fix}"
    limit = probe
    try:
        if name == "pids":
            limit = probe / "pids.max"
            limit.write_text("8")
        elif name == "memory":
            limit = probe / ("memory.limit_in_bytes" if version == 1 else "memory.max")
            limit.write_text(str(64 * 1024 * 1024))
        else:
            limit = probe / ("cpuacct.usage" if version == 1 else "cpu.stat")
            limit.read_text()
        return ""
    except OSError as e:
        return f"cannot use {limit}: {e.strerror}"
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


class ExecutionCgroup:
    """The group(s) of one execution (only the usable controllers); use `close()` to kill and remove."""

    def __init__(self, setup: CgroupSetup, *, max_processes: int, memory_bytes: int) -> None:
        self.version = setup.version
        self.controllers = setup.controllers
        name = f"agentgraphs-sbx-{os.getpid()}-{next(_counter)}"
        self.dirs: dict[str, Path] = {}
        try:
            if self.version == 1:
                for controller in self.controllers:
                    group = setup.parents[controller] / name
                    group.mkdir()
                    self.dirs[controller] = group
            else:
                group = setup.parents[self.controllers[0]] / name
                group.mkdir()
                self.dirs = {c: group for c in self.controllers}
            if "pids" in self.dirs:
                (self.dirs["pids"] / "pids.max").write_text(str(max_processes))
            if "memory" in self.dirs:
                self._limit_memory(self.dirs["memory"], memory_bytes)
        except OSError:
            self.close()
            raise

    def _limit_memory(self, group: Path, memory_bytes: int) -> None:
        if self.version == 1:
            (group / "memory.limit_in_bytes").write_text(str(memory_bytes))
            optional = {"memory.memsw.limit_in_bytes": str(memory_bytes)}  # no swapping past the limit
        else:
            (group / "memory.max").write_text(str(memory_bytes))
            optional = {"memory.swap.max": "0", "memory.oom.group": "1"}  # no swap; an OOM kills them all
        for file, value in optional.items():
            if (group / file).exists():
                try:
                    (group / file).write_text(value)
                except OSError:
                    pass

    def _groups(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def add(self, pid: int) -> None:
        """Move `pid` (a process that has not yet run user code) into every group."""
        for group in self._groups():
            (group / "cgroup.procs").write_text(str(pid))

    def members(self) -> set[int]:
        pids: set[int] = set()
        for group in self._groups():
            try:
                pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return pids

    def cpu_s(self) -> float | None:
        group = self.dirs.get("cpu")
        if group is None:
            return None
        try:
            if self.version == 1:
                return int((group / "cpuacct.usage").read_text()) / 1e9
            return _keyed(group / "cpu.stat").get("usage_usec", 0) / 1e6
        except (OSError, ValueError):
            return None

    def peak_memory(self) -> int | None:
        group = self.dirs.get("memory")
        if group is None:
            return None
        try:
            return int((group / ("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak")).read_text())
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        group = self.dirs.get("memory")
        if group is None:
            return False
        try:
            if self.version == 2:
                events = _keyed(group / "memory.events")
                return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
            control = _keyed(group / "memory.oom_control")
            if "oom_kill" in control:
                return control["oom_kill"] > 0
            return control.get("under_oom", 0) > 0
        except (OSError, ValueError):
            return False

    def fork_refused(self) -> bool:
        group = self.dirs.get("pids")
        if group is None:
            return False
        try:
            return _keyed(group / "pids.events").get("max", 0) > 0
        except (OSError, ValueError):
            return False

    def kill_all(self, grace_s: float = 2.0) -> bool:
        """Kill every member until the groups are empty (v2: one `cgroup.kill`, which also catches a fork in
        flight); False if some outlived `grace_s`."""
        deadline = time.monotonic() + grace_s
        while True:
            members = self.members()
            if not members:
                return True
            if not (self.version == 2 and self._kill_file()):
                for pid in members:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)

    def _kill_file(self) -> bool:
        done = False
        for group in self._groups():
            try:
                (group / "cgroup.kill").write_text("1")  # kernel 5.14+
                done = True
            except OSError:
                return False
        return done

    def close(self) -> bool:
        """Kill what is left and remove the groups; False if a group could not be removed."""
        clean = self.kill_all()
        for group in self._groups():
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


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file ("key value" per line) as a dict."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            pass
    return out

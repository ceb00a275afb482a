"""What holds on this machine, established once per process by exercising it, never inferred.

Three steps: `mechanisms.find` looks for bubblewrap, seccomp, cgroups and root; `mechanisms.choose` runs
the isolation probe under them (dropping what does not start); `probes` then exercise every protection
under the chosen plan: an escape it tries that succeeds, or a limit it passes, makes that protection
"NOT HELD: what the probe saw. Fix: how to get it". `run_python` refuses to run while any protection is
not held, unless the caller allows it to be missing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from typing import Any, TypedDict

from .execution import execute_with_plan
from .mechanisms import DISABLE_ENV, choose, describe, disabled_from_env, find
from .plan import NOT_HELD, Plan, allowed_missing
from .probes import code_as_root, isolation_probe, isolation_protections
from .resource_probes import resource_protections
from .types import ALLOW_MISSING_ENV, PROTECTIONS

__all__ = ["Plan", "Capabilities", "capabilities", "current_plan", "format_report", "PROTECTIONS", "DISABLE_ENV"]

_lock = threading.Lock()


class Capabilities(TypedDict):
    """`shape`: the kind of machine (root or not, which cgroups); `mechanisms`: name -> {"available": bool,
    "detail": str}; `protections`: name -> how it is enforced and what its probe saw, or a text starting
    with "NOT HELD" saying what the probe saw and how to get it; `held`: the protections that hold."""

    shape: str
    mechanisms: dict[str, dict[str, Any]]
    protections: dict[str, str]
    held: list[str]


def current_plan() -> Plan:
    """The plan in force (detected on first use, then cached; `AGENTGRAPHS_SANDBOX_DISABLE=bwrap,seccomp,
    cgroups,uid` turns mechanisms off, e.g. to see how the sandbox degrades)."""
    disabled = disabled_from_env()
    with _lock:
        return _detect(disabled, os.environ.get("AGENTGRAPHS_SANDBOX_CGROUP", ""))


def _shape(plan: Plan) -> str:
    who = "root" if os.geteuid() == 0 else f"unprivileged (uid {os.geteuid()})"
    setup = plan.cgroups
    if setup is None or not setup.controllers:
        cg = "no usable cgroups"
    else:
        cg = f"{'delegated ' if os.geteuid() != 0 else ''}cgroup v{setup.version} ({', '.join(setup.controllers)})"
    tools = ", ".join(t for t, on in (("bubblewrap", plan.bwrap is not None), ("seccomp", plan.seccomp is not None))
                      if on) or "no bubblewrap, no seccomp"
    return f"{who}, {cg}, {tools}"


@functools.lru_cache(maxsize=8)
def _detect(disabled: frozenset[str] = frozenset(), cgroup_env: str = "") -> Plan:
    def execute(code: str, limits: Any, plan: Plan) -> Any:  # the probes run through the real pipeline
        return execute_with_plan(code, limits, plan)

    found = find(disabled)
    plan, facts, why = choose(found, lambda p: isolation_probe(p, execute))
    plan = dataclasses.replace(plan, mechanisms=describe(plan, found, facts, why))
    void = code_as_root(plan, facts, why) if facts else None
    if void is not None:  # no probe run in good faith proves anything about code that is root on the host
        prot = {name: void for name in PROTECTIONS}
    elif facts:
        prot = isolation_protections(plan, facts)
        prot.update(resource_protections(plan, execute))
    else:
        reason = why.get("bwrap", "the probe could not run")
        prot = {name: f"{NOT_HELD}: no sandbox could start its probe ({reason})" for name in PROTECTIONS}
    ordered = {name: prot[name] for name in PROTECTIONS}
    return dataclasses.replace(plan, protections=ordered, shape=_shape(plan))


def capabilities(refresh: bool = False) -> Capabilities:
    """What isolation holds on this machine (the first call runs the probes, about a second).

    >>> caps = capabilities()
    >>> sorted(caps["protections"]) == sorted(PROTECTIONS)
    True
    >>> "wall_clock" in caps["held"]
    True
    """
    if refresh:
        with _lock:
            _detect.cache_clear()
    plan = current_plan()
    return Capabilities(shape=plan.shape, mechanisms={k: dict(v) for k, v in plan.mechanisms.items()},
                        protections=dict(plan.protections), held=list(plan.held))


def format_report(caps: Capabilities | None = None) -> str:
    """A human-readable report (`python -m agentgraphs.sandbox` prints it).

    >>> "protections" in format_report()
    True
    """
    caps = caps or capabilities()
    lines = [f"agentgraphs.sandbox on this machine: {caps['shape']}", "mechanisms:"]
    for name, m in caps["mechanisms"].items():
        lines.append(f"  [{'x' if m['available'] else ' '}] {name}: {m['detail']}")
    lines.append("protections (each established by a probe that tries to break it):")
    for name, how in caps["protections"].items():
        lines.append(f"  [{'x' if name in caps['held'] else ' '}] {name}: {how}")
    missing = [p for p in caps["protections"] if p not in caps["held"]]
    allowed = allowed_missing()
    if missing:
        still = [m for m in missing if m not in allowed]
        lines.append(f"run_python refuses to run here unless the caller allows {missing} to be missing "
                     f"(SandboxLimits(allow_missing=...) or {ALLOW_MISSING_ENV})"
                     + (f"; {ALLOW_MISSING_ENV} allows {sorted(allowed & set(missing))}" if allowed & set(missing)
                        else "")
                     + ("" if still else " — all of them are allowed here"))
    else:
        lines.append("every protection holds: run_python runs with all of them")
    return "\n".join(lines)

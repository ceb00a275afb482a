"""How executions are isolated on this machine (internal; `capabilities()` is its public face)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .cgroups import CgroupSetup
from .types import ALLOW_MISSING_ENV, PROTECTIONS, names_from_env

__all__ = ["Plan", "NOT_HELD", "allowed_missing"]

NOT_HELD = "NOT HELD"


def allowed_missing() -> frozenset[str]:
    """The protections `AGENTGRAPHS_SANDBOX_ALLOW_MISSING` lets every execution of this process run without."""
    return names_from_env(ALLOW_MISSING_ENV, PROTECTIONS, "protection")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The mechanisms executions use (bubblewrap, a seccomp program, cgroups, a private uid per execution,
    bubblewrap's own user namespace when unprivileged) and, once detection has exercised them, what each
    protection is held by (or "NOT HELD: ... Fix: ...")."""

    python: str
    bwrap: str | None
    seccomp: bytes | None
    cgroups: CgroupSetup | None
    drop_uid: bool
    userns: bool = False
    shape: str = ""
    mechanisms: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    protections: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def controllers(self) -> tuple[str, ...]:
        return self.cgroups.controllers if self.cgroups is not None else ()

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.protections.items() if not v.startswith(NOT_HELD))

    def refusal(self, missing: list[str]) -> str:
        """The SandboxUnavailableError message: what does not hold, why, how to get it, how to opt out."""
        lines = [f"agentgraphs.sandbox refuses to run: {len(missing)} protection(s) do not hold on this machine "
                 f"({self.shape}):"]
        for name in missing:
            lines.append(f"- {name}: {self.protections.get(name, NOT_HELD + ': unknown protection')}")
        names = ", ".join(repr(m) for m in missing)
        lines.append(f"To run without them anyway, opt out explicitly: SandboxLimits(allow_missing={{{names}}}) or "
                     f"{ALLOW_MISSING_ENV}={','.join(missing)}. `python -m agentgraphs.sandbox` shows the report.")
        return "\n".join(lines)

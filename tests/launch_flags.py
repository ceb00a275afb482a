"""The slime flags a launch script passes, read from the outside: every `--flag [value]` line of its bash
arrays (comments dropped), so a test can hold a script's hyperparameters against the seed's."""

from __future__ import annotations

import re
from pathlib import Path

_FLAG = re.compile(r"^\s*(--[a-z0-9][a-z0-9-]*)(?:\s+(\S+))?\s*$")


def launch_flags(script: Path) -> dict[str, str | None]:
    """{flag: value or None} of the `--flag value` lines inside the script's `NAME=( ... )` arrays.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "run.sh")
    >>> _ = open(path, "w").write("X=(\\n   --lr 1e-6   # the seed's\\n   --colocate\\n)\\necho --not-this 1\\n")
    >>> launch_flags(Path(path))
    {'--lr': '1e-6', '--colocate': None}
    """
    flags: dict[str, str | None] = {}
    inside = False
    for raw in script.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if re.match(r"^\s*[A-Z_]+=\($", line):
            inside = True
            continue
        if inside and line.strip() == ")":
            inside = False
            continue
        match = _FLAG.match(line) if inside else None
        if match:
            flags[match.group(1)] = match.group(2)
    return flags


def assert_seed_flags(script: Path, seed: dict[str, str | None]) -> dict[str, str | None]:
    """The script's flags, after checking that it passes each of the seed's `seed` flags with the seed's value
    (None: a switch), leaves the entropy coefficient at 0 (slime's default, every seed script's) and does not
    pass --num-rollout (slime lets it override --num-epoch, slime/utils/arguments.py)."""
    flags = launch_flags(script)
    assert {k: flags.get(k, "absent") for k in seed} == seed
    assert float(flags.get("--entropy-coef") or 0.0) == 0.0
    assert "--num-rollout" not in flags
    return flags

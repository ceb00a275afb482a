"""A private unprivileged uid per running execution (only when this process is root).

RLIMIT_NPROC counts every process of a uid on the machine, so executions sharing one uid would share
one process budget (a fork bomb in one would starve the others). Each execution therefore leases its
own uid from a range (default 61000-61999, `AGENTGRAPHS_SANDBOX_UID_BASE` / `_COUNT` to move it);
leases are file locks, so several processes on one host never hand out the same uid at once.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from pathlib import Path

__all__ = ["UidLease", "lease_uid", "uid_range"]


def uid_range() -> range:
    base = int(os.environ.get("AGENTGRAPHS_SANDBOX_UID_BASE", "61000"))
    count = int(os.environ.get("AGENTGRAPHS_SANDBOX_UID_COUNT", "1000"))
    return range(base, base + count)


def _lock_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "agentgraphs-sandbox-uids"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


class UidLease:
    """A uid nobody else holds until `release()`."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def lease_uid() -> UidLease:
    """Lease a free uid from `uid_range()` (random start, then linear probing).

    >>> lease = lease_uid()  # doctest: +SKIP
    >>> lease.uid in uid_range(); lease.release()  # doctest: +SKIP
    True
    """
    uids = uid_range()
    directory = _lock_dir()
    start = random.randrange(len(uids))
    for i in range(len(uids)):
        uid = uids[(start + i) % len(uids)]
        fd = os.open(directory / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise OSError(f"all {len(uids)} sandbox uids ({uids.start}-{uids.stop - 1}) are in use; raise "
                  "AGENTGRAPHS_SANDBOX_UID_COUNT")

"""A private unprivileged uid per running execution (only when this process is root).

RLIMIT_NPROC counts every process of a uid on the machine, so executions sharing one uid would share
one process budget (a fork bomb in one would starve the others). Each execution therefore leases its
own uid from a range (default 61000-61999, `AGENTGRAPHS_SANDBOX_UID_BASE` / `_COUNT` to move it);
leases are file locks, so several processes on one host never hand out the same uid at once.
A range that reaches below `MIN_UID` is refused: uid 0 is root (the code would run unconfined by any
per-user limit) and the uids under 1000 are system accounts (daemon, www-data, ...) whose files and
processes the code could then touch.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import stat
import tempfile
from pathlib import Path

from ..errors import ConfigError

__all__ = ["LOCK_DIR_NAME", "MAX_UID", "MIN_UID", "UidLease", "lease_uid", "lock_dir", "uid_range"]

BASE_ENV = "AGENTGRAPHS_SANDBOX_UID_BASE"
COUNT_ENV = "AGENTGRAPHS_SANDBOX_UID_COUNT"
DEFAULT_BASE = 61000
DEFAULT_COUNT = 1000
MIN_UID = 1000  # below: root and the system accounts (Debian's and Red Hat's SYS_UID_MAX is 999)
MAX_UID = 2**32 - 2  # (uid_t)-1 means "unchanged" to setresuid, not a uid
_EXAMPLE = f"e.g. {BASE_ENV}={DEFAULT_BASE} {COUNT_ENV}={DEFAULT_COUNT} (the default)"


def uid_range() -> range:
    """The uids executions lease: [BASE, BASE + COUNT) from the environment, refused unless it is non-empty
    and lies within [MIN_UID, MAX_UID].

    >>> uid_range() == range(61000, 62000) or BASE_ENV in os.environ
    True
    """
    base = _whole_number(BASE_ENV, DEFAULT_BASE)
    count = _whole_number(COUNT_ENV, DEFAULT_COUNT)
    if count < 1:
        raise ConfigError(f"{COUNT_ENV}={count}: the sandbox needs at least one uid to lease; give a whole "
                          f"number >= 1 (one uid per execution running at once), {_EXAMPLE}")
    if base < MIN_UID:
        harm = ("is no uid: the drop would be skipped and the code run as root" if base < 0 else
                "would run code as root (uid 0)" if base == 0 else f"would run code as the system uid {base}")
        raise ConfigError(f"{BASE_ENV}={base} {harm}; sandbox uids must be >= {MIN_UID} (0 is root, "
                          f"1-{MIN_UID - 1} are system accounts) and used by no one else, {_EXAMPLE}")
    if base + count - 1 > MAX_UID:
        raise ConfigError(f"{BASE_ENV}={base} with {COUNT_ENV}={count} ends at uid {base + count - 1}, past the "
                          f"largest uid {MAX_UID}; lower either, {_EXAMPLE}")
    return range(base, base + count)


def _whole_number(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw, 10)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number: give one, {_EXAMPLE}") from None


LOCK_DIR_NAME = "agentgraphs-sandbox-uids"


def lock_dir() -> Path:
    """$TMPDIR/agentgraphs-sandbox-uids, where the leases' lock files live."""
    return Path(tempfile.gettempdir()) / LOCK_DIR_NAME


def _open_lock_dir() -> int:
    """An fd of `lock_dir()`, created 0700 if missing, and refused unless it is a real directory (not a symlink)
    owned by this euid with mode 0700: anyone else able to write there (another user pre-creating it in a shared
    /tmp) could plant symlinks for root to follow, or hold every uid's lock."""
    d = lock_dir()
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.mkdir(d, 0o700)
        created = True
    except FileExistsError:
        created = False
    try:
        fd = os.open(d, flags)
    except OSError as e:  # a symlink (ELOOP, or ENOTDIR with O_DIRECTORY), a file, ...
        raise _bad_lock_dir(d, "is a symlink" if os.path.islink(d) else f"cannot be opened ({e.strerror})") from None
    if created:
        os.fchmod(fd, 0o700)  # whatever the umask took away
    st = os.fstat(fd)
    problem = (f"is owned by uid {st.st_uid}, not this process's {os.geteuid()}" if st.st_uid != os.geteuid()
               else f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0700" if stat.S_IMODE(st.st_mode) != 0o700
               else "")
    if problem:
        os.close(fd)
        raise _bad_lock_dir(d, problem)
    return fd


def _bad_lock_dir(d: Path, problem: str) -> ConfigError:
    return ConfigError(f"the sandbox's uid lock directory {d} {problem}, so another user could tamper with the uid "
                       f"leases. Fix: remove it (rm -rf {d}; it is re-created 0700 at the next run), or point "
                       "TMPDIR at a directory only this user can write")


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
    directory = _open_lock_dir()
    try:
        start = random.randrange(len(uids))
        for i in range(len(uids)):
            uid = uids[(start + i) % len(uids)]
            fd = _open_lock_file(directory, uid)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            return UidLease(uid, fd)
    finally:
        os.close(directory)
    raise OSError(f"all {len(uids)} sandbox uids ({uids.start}-{uids.stop - 1}) are in use; raise "
                  "AGENTGRAPHS_SANDBOX_UID_COUNT")


def _open_lock_file(directory: int, uid: int) -> int:
    """The lock file of `uid` in the lock directory (its fd), never through a symlink."""
    try:
        return os.open(str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=directory)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        path = lock_dir() / str(uid)
        raise ConfigError(f"the uid lock file {path} is a symlink (something else writes into {lock_dir()}). Fix: "
                          f"remove {lock_dir()} (rm -rf {lock_dir()}; it is re-created 0700 at the next run) and "
                          "find out who wrote there") from None

"""agentgraphs.sandbox claims only what the machine's shape holds: the escape hatches (mechanisms switched off,
protections allowed to be missing) make the report say NOT HELD instead of over-claiming; messages name the
real cause and a fix that applies to this process; the uid leases cannot be tampered with by another user.

Shapes are forced in this process with AGENTGRAPHS_SANDBOX_DISABLE (as tests/sandbox/test_sandbox.py does), or
built from the probe's observations (`isolation_protections`), so each verdict is checked where it applies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agentgraphs.errors import ConfigError
from agentgraphs.sandbox import (
    PROTECTIONS,
    SandboxLimits,
    SandboxUnavailableError,
    capabilities,
    format_report,
    run_python,
    uids,
)
from agentgraphs.sandbox.detect import DISABLE_ENV, current_plan
from agentgraphs.sandbox.execution import execute_with_plan
from agentgraphs.sandbox.plan import NOT_HELD, Plan
from agentgraphs.sandbox.probes import closed_to_others, fix_uid, isolation_protections

ROOT = Path(__file__).resolve().parents[2]
UNPRIVILEGED_VENV = "/tmp/agentgraphs-unpriv-venv"  # an interpreter every uid can read (scripts/bootstrap.sh test)
UID_BASE_ENV, UID_COUNT_ENV = "AGENTGRAPHS_SANDBOX_UID_BASE", "AGENTGRAPHS_SANDBOX_UID_COUNT"


def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("this shape is root's (an unprivileged process never runs code as root or as a private uid)")


# -- what the isolation probe saw decides: UNIX sockets and host /proc without namespaces ----------------------

_CONTAINED = {"uid": 61000, "pid": 2, "seccomp": "2", "interfaces": ["lo"], "net": ["ECONNREFUSED"] * 4,
              "host_path_visible": False, "wrote_outside": [], "filled": {}, "env_extra": [],
              "host_environ_read": False, "host_cmdline_read": False, "host_signal": "ESRCH"}


def _no_namespaces_plan() -> Plan:
    """Root without bubblewrap, the code under a private uid with seccomp (no network, pid or mount namespace)."""
    return Plan(python=sys.executable, bwrap=None, seccomp=b"\0" * 8, cgroups=None, drop_uid=True)


def test_a_host_unix_socket_the_probe_reached_means_no_network_protection():
    """seccomp allows AF_UNIX: without a network namespace abstract sockets of host services are reachable."""
    facts = dict(_CONTAINED, interfaces=["eth0", "lo"],
                 net=["ECONNREFUSED", "ECONNREFUSED", "connected to the abstract UNIX socket @svc", "ENOENT"])
    network = isolation_protections(_no_namespaces_plan(), facts)["network"]
    assert network.startswith(NOT_HELD) and "abstract UNIX socket @svc" in network, network
    assert "Fix: install bubblewrap" in network and "pyseccomp" not in network  # seccomp cannot help here


def test_host_command_lines_readable_means_no_host_processes_protection():
    """A private uid cannot signal host processes, but without a pid namespace it reads their command lines."""
    facts = dict(_CONTAINED, pid=4242, host_signal="EPERM", host_cmdline_read=True)
    verdict = isolation_protections(_no_namespaces_plan(), facts)["host_processes"]
    assert verdict.startswith(NOT_HELD) and "command line" in verdict and "Fix: install bubblewrap" in verdict
    contained = isolation_protections(_no_namespaces_plan(), dict(_CONTAINED, pid=4242, host_signal="EPERM"))
    assert not contained["host_processes"].startswith(NOT_HELD)  # where /proc hides them (hidepid), it holds


@pytest.mark.slow  # a whole detection in a subprocess, 10-20 s
def test_without_bubblewrap_a_private_uid_reaches_host_sockets_and_reads_host_command_lines():
    """The real probe in that shape (root, bubblewrap off, an interpreter the private uid can read): it connects
    to a host UNIX socket and reads this process's command line, so network and host_processes are NOT HELD."""
    _root_only()
    python = f"{UNPRIVILEGED_VENV}/bin/python"
    if not (os.access(python, os.X_OK) and shutil.which("setpriv")):
        pytest.skip(f"needs {python} (scripts/bootstrap.sh test builds it)")
    script = ("import json; from agentgraphs.sandbox import capabilities; c = capabilities(); "
              "print(json.dumps([c['mechanisms']['uid_drop'], c['protections']]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{DISABLE_ENV: "bwrap"})
    done = subprocess.run([python, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    uid_drop, protections = json.loads(done.stdout.strip().splitlines()[-1])
    if not uid_drop["available"]:
        pytest.skip(f"the private uid could not start {python} here: {uid_drop['detail']}")
    assert protections["network"].startswith(NOT_HELD) and "UNIX socket" in protections["network"], protections
    assert protections["host_processes"].startswith(NOT_HELD), protections["host_processes"]
    assert "command line" in protections["host_processes"], protections["host_processes"]


# -- root without namespaces holds nothing; root's RLIMIT_NPROC holds nothing ---------------------------------


def test_code_that_would_run_as_root_outside_any_namespace_holds_nothing(monkeypatch):
    """No bubblewrap and no private uid: the code is root on the host, can move itself out of its cgroups, raise its
    rlimits and signal or rewrite this process. Every protection is NOT HELD (cgroup claims are void), so it runs
    only when the caller allows every one of them to be missing."""
    _root_only()
    monkeypatch.setenv(DISABLE_ENV, "bwrap,uid")
    caps = capabilities()
    assert caps["held"] == [], format_report(caps)
    for name, how in caps["protections"].items():
        assert "runs as root (uid 0) in this machine's own namespaces" in how, (name, how)
        assert "Fix: install bubblewrap" in how and "disabled by" in how, (name, how)
    with pytest.raises(SandboxUnavailableError) as refused:
        run_python("print(1)", SandboxLimits(allow_missing=frozenset(PROTECTIONS) - {"memory"}))
    assert refused.value.missing == ["memory"]


def test_processes_are_not_claimed_where_only_the_parents_count_bounds_them(monkeypatch):
    """Root in bubblewrap without a private uid or a pids cgroup: the kernel ignores RLIMIT_NPROC for root, and a
    count every 50 ms lets a fork burst through, so processes is NOT HELD; the fix is not "run as root"."""
    _root_only()
    monkeypatch.setenv(DISABLE_ENV, "uid,cgroups")
    caps = capabilities()
    if not caps["mechanisms"]["bubblewrap"]["available"]:
        pytest.skip("bubblewrap does not start here (then the code runs as root outside namespaces: see above)")
    processes = caps["protections"]["processes"]
    assert "processes" not in caps["held"] and "root ignores RLIMIT_NPROC" in processes, processes
    for name, how in caps["protections"].items():
        assert "run as root" not in how, (name, how)


# -- messages: the real cause and a fix that applies ---------------------------------------------------------


def test_an_interpreter_other_uids_cannot_reach_is_named_as_the_cause():
    base = Path(tempfile.mkdtemp(prefix="agentgraphs-closed-", dir="/tmp"))  # pytest's tmp_path is itself 0700
    try:
        base.chmod(0o755)
        closed = base / "home"
        (closed / "venv" / "bin").mkdir(parents=True)
        python = closed / "venv" / "bin" / "python"
        python.write_text("")
        closed.chmod(0o700)
        assert closed_to_others(str(python)).startswith(f"{closed} (mode 0700) lets no other uid in"), base
        closed.chmod(0o755)
        assert closed_to_others(str(python)) == ""
    finally:
        shutil.rmtree(base)


def test_without_bubblewrap_the_failed_uid_drop_names_the_unreadable_interpreter(monkeypatch):
    """As root with the interpreter under /root (mode 0700), the private uid cannot start it: the report says so
    and how to fix it, not only the bare "No module named ..." the failed start printed."""
    _root_only()
    if not closed_to_others(sys.executable):
        pytest.skip("this interpreter is readable by every uid here")
    monkeypatch.setenv(DISABLE_ENV, "bwrap")
    detail = capabilities()["mechanisms"]["uid_drop"]["detail"]
    assert "lets no other uid in" in detail and "Fix: give the sandbox an interpreter every uid can read" in detail


def test_root_is_not_told_to_run_as_root():
    text = fix_uid()
    if os.geteuid() == 0:
        assert "run as root" not in text and "interpreter every uid can read" in text
    else:
        assert text.startswith("run as root")


def test_a_cgroup_that_fails_mid_run_says_what_to_do(tmp_path):
    plan = current_plan()
    if plan.cgroups is None or not plan.controllers:
        pytest.skip("no usable cgroups here")
    gone = {c: tmp_path / "removed" for c in plan.cgroups.parents}  # the group's parent vanished since detection
    broken = dataclasses.replace(plan, cgroups=dataclasses.replace(plan.cgroups, parents=gone))
    r = execute_with_plan("print(1)", SandboxLimits(), broken)
    assert r["status"] == "sandbox_error", r
    assert "could not create this execution's cgroup" in r["stderr"] and "Fix:" in r["stderr"], r["stderr"]
    assert "AGENTGRAPHS_SANDBOX_DISABLE=cgroups" in r["stderr"], r["stderr"]


def test_an_inherited_ignored_sigchld_is_refused_naming_the_fix():
    """Where the parent sums CPU itself, a SIGCHLD ignored in the calling process (inherited by the code) would let
    exited children's CPU go uncounted: the sandbox does not start, and says why."""
    script = ("import signal; signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
              "from agentgraphs.sandbox import capabilities\n"
              "print(capabilities()['protections']['cpu'])\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{DISABLE_ENV: "cgroups"})
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    if "seccomp" not in done.stdout and "NOT HELD" not in done.stdout:
        pytest.skip(f"no sandbox starts here: {done.stdout}")
    assert done.stdout.startswith(NOT_HELD) and "SIGCHLD is ignored" in done.stdout, done.stdout


# -- the uid leases' lock directory ----------------------------------------------------------------------------


@pytest.fixture
def lock_base(monkeypatch, tmp_path) -> Path:
    """A TMPDIR of this test's own, with a one-uid range."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(UID_BASE_ENV, "61000")
    monkeypatch.setenv(UID_COUNT_ENV, "1")
    return tmp_path


def test_a_lock_directory_planted_as_a_symlink_is_refused(lock_base):
    elsewhere = lock_base / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (lock_base / uids.LOCK_DIR_NAME).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"agentgraphs-sandbox-uids is a symlink.*Fix: remove it \(rm -rf "):
        uids.lease_uid()
    assert list(elsewhere.iterdir()) == []  # nothing was created through it


def test_a_lock_directory_others_may_write_or_own_is_refused(lock_base):
    directory = lock_base / uids.LOCK_DIR_NAME
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(ConfigError, match="has mode 0777, not 0700"):
        uids.lease_uid()
    directory.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(directory, 65534, 65534)
        with pytest.raises(ConfigError, match=f"is owned by uid 65534, not this process's {os.geteuid()}"):
            uids.lease_uid()
        os.chown(directory, 0, 0)
    lease = uids.lease_uid()
    assert lease.uid == 61000
    lease.release()


def test_a_lock_file_planted_as_a_symlink_is_not_followed(lock_base):
    directory = lock_base / uids.LOCK_DIR_NAME
    directory.mkdir(mode=0o700)
    victim = lock_base / "victim"
    (directory / "61000").symlink_to(victim)
    with pytest.raises(ConfigError, match="uid lock file .*61000 is a symlink"):
        uids.lease_uid()
    assert not victim.exists()


def test_a_new_lock_directory_is_private_whatever_the_umask(lock_base):
    old = os.umask(0o277)  # would leave the owner r-x only
    try:
        lease = uids.lease_uid()
    finally:
        os.umask(old)
    lease.release()
    st = os.lstat(lock_base / uids.LOCK_DIR_NAME)
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()

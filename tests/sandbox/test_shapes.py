"""The sandbox's escape suite (tests/sandbox/test_sandbox.py, and the memory probe's test_memory_probe.py) on the
other machine shapes this machine can take.

The suite itself runs in this pytest process as whoever runs it (root in CI: shape "root + cgroups").
Here it runs again in a subprocess:
- as an unprivileged user: uid/gid 65534 through `setpriv --reuid=65534 --regid=65534 --clear-groups`,
  with an interpreter that user can read (the checkout's venv may sit under /root, mode 0700:
  `scripts/bootstrap.sh test` builds /tmp/agentgraphs-unpriv-venv from /usr/bin/python3 for this) and a
  world-readable copy of the package and the test file;
- as root with cgroups switched off (`AGENTGRAPHS_SANDBOX_DISABLE=cgroups`), as in a container without a
  writable cgroup.
Each escape there is contained or refused; where the mechanisms for every protection are present
(bubblewrap that starts for that user, pyseccomp), `AGENTGRAPHS_SANDBOX_EXPECT_ALL=1` makes a refusal a
failure, so "refused" cannot hide a protection that stopped working.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ("tests/sandbox/test_sandbox.py", "tests/sandbox/test_memory_probe.py")
NOBODY = "65534"
UNPRIVILEGED_VENV = "/tmp/agentgraphs-unpriv-venv"  # built by scripts/bootstrap.sh test (as root)
_TIMEOUT_S = 400

pytestmark = pytest.mark.slow  # each shape re-runs the suite: 20-40 s


def _as_nobody(argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def _world_readable_copy() -> Path:
    """The package and the suite where uid 65534 can read them (this checkout may be under /root)."""
    base = Path(tempfile.mkdtemp(prefix="agentgraphs-shape-", dir="/tmp"))
    shutil.copytree(ROOT / "agentgraphs", base / "agentgraphs", ignore=shutil.ignore_patterns("__pycache__"))
    (base / SUITE[0]).parent.mkdir(parents=True)
    for test_file in SUITE:
        shutil.copy(ROOT / test_file, base / test_file)
    (base / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: longer tests\n")
    for path in [base, *base.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return base


def _pythonpath(copy: Path) -> str:
    """The copy, then AGENTGRAPHS_UNPRIVILEGED_PYTHONPATH (where pytest lies for a bare system python)."""
    extra = os.environ.get("AGENTGRAPHS_UNPRIVILEGED_PYTHONPATH", "")
    return f"{copy}:{extra}" if extra else str(copy)


def _interpreter_for_nobody(copy: Path) -> str | None:
    """The first interpreter uid 65534 can start with pytest and the package importable
    (AGENTGRAPHS_UNPRIVILEGED_PYTHON first, then the one bootstrap builds, then this one)."""
    candidates = [os.environ.get("AGENTGRAPHS_UNPRIVILEGED_PYTHON", ""), f"{UNPRIVILEGED_VENV}/bin/python",
                  sys.executable]
    for python in filter(None, candidates):
        check = subprocess.run(_as_nobody(["env", "-i", f"PYTHONPATH={_pythonpath(copy)}", python, "-c",
                                           "import pytest, agentgraphs.sandbox"]),
                               capture_output=True, cwd=copy, timeout=60)
        if check.returncode == 0:
            return python
    return None


def _all_mechanisms_start(env: dict[str, str], python: str, cwd: Path, nobody: bool) -> bool:
    """bubblewrap starts for this user and pyseccomp imports: then every protection has its mechanism."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    userns = [] if not nobody else ["--unshare-user"]
    argv = [bwrap, *userns, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    seccomp = [python, "-c", "import pyseccomp"]
    for cmd in (argv, seccomp):
        done = subprocess.run(_as_nobody(cmd) if nobody else cmd, env=env, cwd=cwd, capture_output=True, timeout=60)
        if done.returncode != 0:
            return False
    return True


def _run_suite(argv: list[str], env: dict[str, str], cwd: Path, report: str) -> None:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S)
    tail = done.stdout[-6000:] + done.stderr[-3000:]
    print(report)
    print(tail)
    assert done.returncode == 0, f"{report}\n{tail}"
    assert " passed" in done.stdout and " failed" not in done.stdout, tail


def _skip_unless_root_with_setpriv() -> None:
    if os.geteuid() != 0:
        pytest.skip("switching to another uid needs root (this run is itself unprivileged)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")


def test_escape_suite_as_an_unprivileged_user():
    _skip_unless_root_with_setpriv()
    copy = _world_readable_copy()
    try:
        python = _interpreter_for_nobody(copy)
        if python is None:
            pytest.fail(f"no interpreter uid {NOBODY} can run pytest with: run `scripts/bootstrap.sh test`, which "
                        f"builds {UNPRIVILEGED_VENV} from /usr/bin/python3 (or set AGENTGRAPHS_UNPRIVILEGED_PYTHON)")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(copy), "PYTHONPATH": _pythonpath(copy),
               "LANG": "C.UTF-8"}
        env["AGENTGRAPHS_SANDBOX_EXPECT_ALL"] = "1" if _all_mechanisms_start(env, python, copy, nobody=True) else "0"
        report = subprocess.run(_as_nobody([python, "-m", "agentgraphs.sandbox"]), env=env, cwd=copy,
                                capture_output=True, text=True, timeout=120).stdout
        assert report.startswith(f"agentgraphs.sandbox on this machine: unprivileged (uid {NOBODY})"), report
        _run_suite(_as_nobody([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(copy / "pytest.ini"),
                               "--rootdir", str(copy), *(str(copy / f) for f in SUITE), "-rs"]), env, copy,
                   report)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def test_escape_suite_as_root_without_cgroups():
    if os.geteuid() != 0:
        pytest.skip("this shape is root's; the unprivileged shape is the other test")
    env = dict(os.environ, AGENTGRAPHS_SANDBOX_DISABLE="cgroups",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    env.pop("PYTEST_CURRENT_TEST", None)
    env["AGENTGRAPHS_SANDBOX_EXPECT_ALL"] = "1" if _all_mechanisms_start(env, sys.executable, ROOT, nobody=False) \
        else "0"
    report = subprocess.run([sys.executable, "-m", "agentgraphs.sandbox"], env=env, cwd=ROOT, capture_output=True,
                            text=True, timeout=120).stdout
    assert "root, no usable cgroups" in report, report
    _run_suite([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", *SUITE, "-rs"], env,
               ROOT, report)

"""agentgraphs.sandbox: the escape suite (each escape contained, reported, the host unaffected),
parallel executions, cancellation, cleanup, and an honest report when mechanisms are missing.

The full-isolation tests skip a protection the machine does not offer (capabilities() says which);
on the project's machines (bubblewrap, seccomp, cgroup v1, root) every one of them runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import socket
import threading
import time
from pathlib import Path

import pytest

from agentgraphs.sandbox import (
    SandboxLimits,
    SandboxUnavailableError,
    capabilities,
    explain,
    format_report,
    run_python,
    run_python_async,
)
from agentgraphs.sandbox.cgroups import _parent_dirs
from agentgraphs.sandbox.detect import DISABLE_ENV
from agentgraphs.sandbox.uids import uid_range

MiB = 1024 * 1024


def _requires(*protections: str) -> None:
    """Skip where the machine lacks a mechanism; where bubblewrap is installed every protection must hold
    (a skip there would hide a regression, e.g. the checkout's interpreter hidden by the sandbox's /tmp)."""
    caps = capabilities()
    missing = [p for p in protections if p not in caps["held"]]
    if missing and shutil.which("bwrap") and os.geteuid() == 0:
        pytest.fail(f"bubblewrap is installed but {missing} do not hold:\n{format_report(caps)}")
    if missing:
        pytest.skip(f"not held on this machine: {missing}")


def _processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token` (excluding this test process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def _sandbox_uid_processes() -> list[int]:
    """Live (not exiting) host processes under a sandbox uid, after giving exiting ones time to go."""
    uids = uid_range()
    deadline = time.monotonic() + 5
    while True:
        found, exiting = [], 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            try:
                if int(fields["Uid"].split()[0]) not in uids:
                    continue
            except (KeyError, ValueError, IndexError):
                continue
            if fields.get("State", "").strip()[:1] in ("Z", "X"):
                exiting += 1  # dead, waiting for the kernel to release it
            else:
                found.append(int(entry.name))
        if (not found and not exiting) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _leftover_cgroups() -> list[str]:
    left = []
    for parent in _parent_dirs().values():
        left += [p.name for p in parent.glob(f"agentgraphs-sbx-{os.getpid()}-*")]
    return left


@pytest.fixture(autouse=True)
def host_clean_after():
    """Every test: afterwards no sandbox process survives and no per-execution cgroup is left."""
    yield
    assert _leftover_cgroups() == []
    if capabilities()["mechanisms"]["uid_drop"]["available"]:
        left = _sandbox_uid_processes()
        info = {pid: Path(f"/proc/{pid}/status").read_text()[:400] for pid in left if Path(f"/proc/{pid}").exists()}
        assert left == [], info


# -- the basics ---------------------------------------------------------------------------------------


def test_runs_code_and_reports_output_and_errors():
    ok = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (ok["status"], ok["exit_code"], ok["stdout"], ok["stderr"]) == ("ok", 0, "out\n", "err\n")
    bad = run_python("x = 1\nraise ValueError('boom')")
    assert bad["status"] == "error" and bad["exit_code"] == 1
    assert 'File "<code>", line 2' in bad["stderr"] and "ValueError: boom" in bad["stderr"]
    assert "raise ValueError('boom')" in bad["stderr"]  # the user's source line is shown
    syntax = run_python("def (:")
    assert syntax["status"] == "error" and "SyntaxError" in syntax["stderr"]
    assert run_python("import sys; sys.exit(3)")["exit_code"] == 3
    assert "ValueError: boom" in explain(bad)


def test_code_arrives_on_stdin_whatever_it_contains():
    code = "s = '" + "é\\u2603" * 50_000 + "'\nprint(len(s))"  # larger than a pipe buffer, non-ASCII
    assert run_python(code)["stdout"] == "100000\n"


def test_fresh_working_directory_each_time_and_removed():
    first = run_python("import os\nopen('mine.txt', 'w').write('x')\nprint(os.getcwd())\nprint(os.listdir('.'))")
    assert first["status"] == "ok" and "mine.txt" in first["stdout"]
    second = run_python("import os; print(os.listdir('.'))")
    assert "mine.txt" not in second["stdout"]
    cwd = first["stdout"].splitlines()[0]
    if cwd != "/tmp":  # without a mount namespace the directory is on the host: it must be gone
        assert not Path(cwd).exists()


# -- the escape suite ---------------------------------------------------------------------------------


def test_infinite_loop_is_stopped_by_the_wall_clock():
    r = run_python("while True:\n    pass", SandboxLimits(wall_s=1.0, cpu_s=60))
    assert r["status"] == "timeout" and "wall" in r["limits_hit"]
    assert "wall-clock" in explain(r)


def test_cpu_limit_stops_a_busy_loop():
    r = run_python("while True:\n    pass", SandboxLimits(wall_s=60, cpu_s=1))
    assert r["status"] == "cpu_limit" and "cpu" in r["limits_hit"]
    if r["cpu_s"] is not None:
        assert r["cpu_s"] >= 0.9


def test_memory_bomb_is_killed_at_the_memory_limit():
    _requires("memory")
    bomb = "hog = []\nwhile True:\n    hog.append(bytearray(8 * 1024 * 1024))"
    r = run_python(bomb, SandboxLimits(memory_bytes=128 * MiB, wall_s=30))
    assert r["status"] == "memory_limit" and "memory" in r["limits_hit"]
    if r["peak_memory_bytes"] is not None:
        assert r["peak_memory_bytes"] <= 128 * MiB
    assert "memory limit" in explain(r)


def test_fork_bomb_is_contained_and_the_host_can_still_fork():
    _requires("processes", "leftover_processes")
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "while n < 10000:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "    except OSError as e:\n"
        "        print('refused after', n, type(e).__name__)\n"
        "        break\n"
    )
    r = run_python(bomb, SandboxLimits(max_processes=12, wall_s=30))
    assert r["status"] == "ok", r
    refused_after = int(r["stdout"].split()[2])
    assert refused_after <= 12
    assert "processes" in r["limits_hit"]
    # the classic exponential bomb, killed by the wall clock
    classic = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    r = run_python(classic, SandboxLimits(max_processes=12, wall_s=1.5, cpu_s=60))
    assert r["status"] == "timeout" and "processes" in r["limits_hit"]
    assert os.waitpid(os.spawnv(os.P_NOWAIT, "/bin/true", ["true"]), 0)[1] == 0  # the host still forks


def test_writing_outside_its_directory_fails_and_the_host_is_unchanged(tmp_path):
    _requires("filesystem")
    target = tmp_path / "escaped.txt"
    code = (
        "import os\n"
        f"targets = [{str(target)!r}, '/usr/escaped.txt', '/etc/escaped.txt', {str(Path.cwd() / 'escaped.txt')!r},"
        f" {os.path.dirname(os.__file__) + '/escaped.py'!r}]\n"
        "for t in targets:\n"
        "    try:\n"
        "        open(t, 'w').write('owned')\n"
        "        print('WROTE', t)\n"
        "    except OSError as e:\n"
        "        print('refused', t, type(e).__name__)\n"
    )
    r = run_python(code)
    assert r["status"] == "ok" and "WROTE" not in r["stdout"], r["stdout"]
    assert r["stdout"].count("refused") == 5
    assert not target.exists() and not (Path.cwd() / "escaped.txt").exists()
    assert not Path(os.path.dirname(os.__file__), "escaped.py").exists()


def test_the_parent_environment_does_not_reach_the_code(monkeypatch):
    _requires("environment")
    secret = "s3cret-" + os.urandom(8).hex()
    monkeypatch.setenv("AGENTGRAPHS_TEST_SECRET", secret)
    code = (
        "import os\n"
        "print(dict(os.environ))\n"
        "for pid in ['1', str(os.getppid()), 'self'] + [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as e:\n"
        "        print(pid, type(e).__name__)\n"
    )
    r = run_python(code)
    assert r["status"] == "ok"
    assert secret not in r["stdout"] and secret not in r["stderr"]
    assert "AGENTGRAPHS_TEST_SECRET" not in r["stdout"]
    extra = run_python("import os; print(os.environ['MINE'])", SandboxLimits(env={"MINE": "given"}))
    assert extra["stdout"] == "given\n"


def test_no_network_even_to_a_listening_local_server():
    _requires("network")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = (
        "import socket, urllib.request\n"
        f"for family, addr in [(socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_INET6, ('::1', {port}))]:\n"
        "    try:\n"
        "        s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(2); s.connect(addr)\n"
        "        print('CONNECTED', addr)\n"
        "    except OSError as e:\n"
        "        print('refused', type(e).__name__)\n"
        "try:\n"
        f"    urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)\n"
        "    print('CONNECTED http')\n"
        "except Exception as e:\n"
        "    print('refused', type(e).__name__)\n"
    )
    try:
        r = run_python(code)
        # the host's own connection still works: the server was really listening
        probe = socket.create_connection(("127.0.0.1", port), timeout=5)
        probe.close()
        deadline = time.monotonic() + 5
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert r["status"] == "ok" and "CONNECTED" not in r["stdout"], r
    assert r["stdout"].count("refused") == 3
    assert len(accepted) == 1  # only the host's probe got through
    for conn in accepted:
        conn.close()


def test_printing_100_mb_is_cut_at_the_output_cap():
    r = run_python("import sys\nsys.stdout.write('x' * 100_000_000)\nprint('never')",
                   SandboxLimits(max_output_bytes=1 * MiB))
    assert r["status"] == "output_limit" and r["truncated"] and "output" in r["limits_hit"]
    assert len(r["stdout"]) + len(r["stderr"]) <= 1 * MiB
    assert set(r["stdout"]) == {"x"}
    assert "cut off" in explain(r)


def test_a_child_left_running_is_killed_when_the_code_returns():
    _requires("leftover_processes")
    token = f"{time.time_ns() % 10**6}.4242"
    code = (
        "import os, subprocess, sys\n"
        f"subprocess.Popen(['sleep', '1000{token}'], start_new_session=True)\n"
        "if os.fork() == 0:\n"  # a double-forked daemon in its own session
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '2000{token}'])\n"
        "    os._exit(0)\n"
        "print('spawned')\n"
    )
    r = run_python(code)
    assert r["status"] == "ok" and r["stdout"] == "spawned\n"
    assert _processes_with(token) == []


def test_sixteen_executions_at_once_do_not_interfere():
    normal = ("import time, sys\nstart = time.time()\ntime.sleep(2)\n"
              "print({i} * {i}, start, time.time())")
    bombs = {
        14: "hog = []\nwhile True:\n    hog.append(bytearray(8 * 1024 * 1024))",
        15: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    }

    async def all_at_once():
        jobs = []
        for i in range(16):
            code = bombs.get(i, normal.format(i=i))
            limits = SandboxLimits(wall_s=20 if i < 14 else 4, memory_bytes=128 * MiB, max_processes=12)
            jobs.append(run_python_async(code, limits))
        return await asyncio.gather(*jobs)

    results = asyncio.run(all_at_once())
    spans = []
    for i, r in enumerate(results[:14]):
        assert r["status"] == "ok", (i, r)
        square, start, end = r["stdout"].split()
        assert int(square) == i * i
        spans.append((float(start), float(end)))
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # they really ran at the same time
    assert results[14]["status"] in ("memory_limit", "timeout")
    assert results[15]["status"] == "timeout"


def test_cancelling_an_async_execution_kills_it():
    _requires("leftover_processes")
    token = f"{time.time_ns() % 10**6}.777"

    async def cancel_it():
        task = asyncio.ensure_future(run_python_async(
            f"import os\nos.execv('/bin/sleep', ['sleep', '3000{token}'])", SandboxLimits(wall_s=60)))
        for _ in range(500):
            await asyncio.sleep(0.02)
            if _processes_with(token):
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    deadline = time.monotonic() + 10
    while _processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(token) == []
    deadline = time.monotonic() + 10
    while _leftover_cgroups() and time.monotonic() < deadline:  # the worker thread finishes its cleanup
        time.sleep(0.05)


# -- the report -----------------------------------------------------------------------------------------


def test_capabilities_report_every_protection_and_mechanism():
    caps = capabilities()
    assert set(caps["mechanisms"]) >= {"bubblewrap", "seccomp", "uid_drop", "cgroup_pids", "cgroup_memory",
                                       "pid_namespace", "net_namespace", "mount_namespace"}
    for name, how in caps["protections"].items():
        assert (name in caps["held"]) == (not how.startswith("NOT HELD"))
    r = run_python("print(1)")
    assert r["protections"] == caps["held"]


def test_degraded_machine_is_reported_honestly_and_require_refuses(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "bwrap,seccomp,cgroups,uid")
    caps = capabilities()
    assert not caps["mechanisms"]["bubblewrap"]["available"]
    assert "disabled" in caps["mechanisms"]["bubblewrap"]["detail"]
    for missing in ("network", "filesystem", "processes", "syscalls", "host_processes"):
        assert missing not in caps["held"], missing
    # what it still enforces, it enforces
    assert run_python("while True: pass", SandboxLimits(wall_s=1))["status"] == "timeout"
    out = run_python("import sys; sys.stdout.write('y' * 3_000_000)", SandboxLimits(max_output_bytes=MiB))
    assert out["status"] == "output_limit"
    with pytest.raises(SandboxUnavailableError, match="network"):
        run_python("print(1)", SandboxLimits(require=frozenset({"network"})))
    monkeypatch.setenv(DISABLE_ENV, "nonsense")
    with pytest.raises(Exception, match="unknown mechanism"):
        capabilities()


def test_without_bubblewrap_the_remaining_mechanisms_still_contain(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "bwrap")
    held = capabilities()["held"]
    if "leftover_processes" in held:  # a cgroup kills a double-forked daemon without a pid namespace
        token = f"{time.time_ns() % 10**6}.99"
        code = ("import os\nif os.fork() == 0:\n    os.setsid()\n"
                f"    os.execv('/bin/sleep', ['sleep', '4000{token}'])\nprint('ok')")
        assert run_python(code)["stdout"] == "ok\n"
        assert _processes_with(token) == []
    if "memory" in held:
        bomb = "hog = []\nwhile True:\n    hog.append(bytearray(8 * 1024 * 1024))"
        assert run_python(bomb, SandboxLimits(memory_bytes=96 * MiB))["status"] == "memory_limit"
    first = run_python("import os; open('f', 'w').write('1'); print(os.getcwd())")
    assert first["status"] == "ok" and not Path(first["stdout"].strip()).exists()  # host dir removed


def test_bad_limits_name_the_field():
    with pytest.raises(Exception, match="wall_s"):
        SandboxLimits(wall_s=-1)
    with pytest.raises(Exception, match="env"):
        SandboxLimits(env={"A=B": "x"})
    with pytest.raises(Exception, match="code must be a str"):
        run_python(b"print(1)")  # type: ignore[arg-type]


def test_groups_of_a_killed_parent_are_removed_at_detection():
    from agentgraphs.sandbox.cgroups import remove_stale_groups

    parents = _parent_dirs()
    if not parents:
        pytest.skip("no cgroup v1 controllers here")
    dead = 2 ** 22 + 12345  # above pid_max's default: no such process
    made = []
    for parent in parents.values():
        group = parent / f"agentgraphs-sbx-{dead}-0"
        group.mkdir()
        made.append(group)
    assert remove_stale_groups(parents) >= len(made)
    assert not any(g.exists() for g in made)


def test_an_interpreter_below_tmp_stays_visible_in_the_sandbox(tmp_path: Path) -> None:
    """A checkout (and its .venv) below /tmp, as a CI clone may be: the sandbox's own /tmp must not hide it."""
    _requires("filesystem")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    marker = tmp_path / "host-secret.txt"
    marker.write_text("host")
    code = ("import os, sys; print(os.getcwd()); print(os.path.exists(%r)); print(os.path.exists(%r))"
            % (str(python), str(marker)))
    result = run_python(code, SandboxLimits(wall_s=20, python=str(python)))
    assert result["status"] == "ok", result
    cwd, sees_python, sees_marker = result["stdout"].split()
    assert cwd == "/tmp" and sees_python == "True" and sees_marker == "False"

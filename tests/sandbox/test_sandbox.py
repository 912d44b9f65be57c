"""The sandbox contract, over every backend, and what only bwrap guarantees."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from execgym.errors import ConfigError, SandboxUnavailable, TaskError
from execgym.limits import Limits, MiB
from execgym.sandbox import BubblewrapSandbox, Sandbox, Status, create_sandbox
from execgym.sandbox._cgroup import detect_cgroups
from tests.conftest import (
    LIST_FDS,
    processes_with,
    python,
    require,
    run_cgroups,
    run_code,
    run_uid_expected,
    toolchain_dirs,
)


@pytest.fixture(params=["bwrap", "gvisor", "none", "pool"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """The contract's backends: every tier, and the warm pool ``execgym score`` uses by
    default (its Python runs are forked from its zygote, its other programs run in a
    fresh bwrap sandbox)."""
    return request.getfixturevalue(f"{request.param}_sandbox")


async def test_runs_a_program_and_captures_its_output(sandbox) -> None:
    result = await run_code(sandbox, "import sys; print('out'); print('err', file=sys.stderr)")
    assert result.status is Status.OK
    assert result.exit_code == 0
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert result.isolation == sandbox.name
    assert result.wall_time_s > 0
    assert result.cpu_time_s > 0
    assert result.peak_memory_bytes
    assert result.peak_memory_bytes > 1 * MiB


async def test_nonzero_exit_is_a_runtime_error(sandbox) -> None:
    result = await run_code(sandbox, "raise SystemExit(3)")
    assert result.status is Status.RUNTIME_ERROR
    assert result.exit_code == 3


async def test_files_stdin_and_report_channel(sandbox) -> None:
    code = (
        "import os, sys; data = open('dir/in.txt').read(); "
        "os.write(3, b'report:' + sys.stdin.buffer.read()); print(data)"
    )
    result = await run_code(
        sandbox, code, stdin=b"from stdin", files={"dir/in.txt": b"hello"}, want_report=True
    )
    assert result.status is Status.OK, result.stderr
    assert result.stdout == b"hello\n"
    assert result.report == b"report:from stdin"


async def test_empty_stdin_is_dev_null(sandbox) -> None:
    result = await run_code(sandbox, "input()", limits=Limits(wall_time_s=5))
    assert result.status is Status.RUNTIME_ERROR
    assert b"EOFError" in result.stderr
    assert result.wall_time_s < 2


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "", "a\\b", "a\x00b"])
async def test_file_names_cannot_escape_the_work_dir(sandbox, name: str) -> None:
    with pytest.raises(TaskError, match="file name"):
        await run_code(sandbox, "pass", files={name: b"x"})


async def test_wall_timeout_kills_the_whole_tree_within_a_second(sandbox) -> None:
    if sandbox.name == "none":  # without a pid namespace only a cgroup finds setsid'ed daemons
        require(detect_cgroups().version is not None, "a writable cgroup hierarchy")
    marker = f"execgym-test-{uuid.uuid4().hex}"
    code = (
        "import os, subprocess\n"
        f"subprocess.Popen(['{marker}', '300'], executable='/usr/bin/sleep', "
        "start_new_session=True)\n"
        f"os.execv('/usr/bin/sleep', ['{marker}', '300'])\n"
    )
    started = time.monotonic()
    result = await run_code(sandbox, code, limits=Limits(wall_time_s=1))
    assert time.monotonic() - started < 1 + 1
    assert result.status is Status.TIME_LIMIT
    assert result.limit_hit == "wall_time_s"
    assert processes_with(marker) == []


async def test_busy_loop_is_a_time_limit(sandbox) -> None:
    result = await run_code(sandbox, "while True: pass", limits=Limits(wall_time_s=1))
    assert result.status is Status.TIME_LIMIT
    # CPU time is measured, not zero; how much of 1 s of wall time a busy loop gets
    # depends on the machine's load, so no more than that is asserted.
    assert result.cpu_time_s > 0.05


async def test_output_flood_is_cut_and_reported(sandbox) -> None:
    code = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    result = await run_code(sandbox, code, limits=Limits(max_output_bytes=100_000, wall_time_s=5))
    assert result.status is Status.OUTPUT_LIMIT
    assert result.limit_hit == "max_output_bytes"
    assert len(result.stdout) == 100_000
    assert result.stdout_truncated


async def test_binary_and_invalid_utf8_output_is_kept_as_bytes(sandbox) -> None:
    result = await run_code(sandbox, "import sys; sys.stdout.buffer.write(b'ok\\n\\xff\\x00')")
    assert result.status is Status.OK
    assert result.stdout == b"ok\n\xff\x00"


async def test_memory_limit_is_enforced_by_cgroup(sandbox, needs_cgroup) -> None:
    code = "x = bytearray(2 * 1024 ** 3)\nprint(len(x))"
    result = await run_code(sandbox, code, limits=Limits(memory_bytes=256 * MiB))
    assert result.status is Status.MEMORY_LIMIT
    assert result.limit_hit == "memory_bytes"
    assert result.enforcement["memory_bytes"].startswith("cgroup-v")
    assert result.stdout == b""


async def test_fork_bomb_is_contained_by_the_process_limit(sandbox) -> None:
    code = (
        "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        "            import time; time.sleep(30)\n        n += 1\n"
        "except OSError:\n    print('stopped at', n)\n"
    )
    result = await run_code(sandbox, code, limits=Limits(max_processes=16, wall_time_s=5))
    assert result.status is Status.OK, result
    assert int(result.stdout.split()[-1]) < 16


async def test_no_cgroup_or_process_survives_a_run(sandbox, needs_cgroup) -> None:
    marker = f"execgym-test-{uuid.uuid4().hex}"
    code = (
        "import subprocess\n"
        f"subprocess.Popen(['{marker}', '300'], executable='/usr/bin/sleep', "
        "start_new_session=True)\n"
    )
    result = await run_code(sandbox, code)
    assert result.status is Status.OK
    assert processes_with(marker) == []
    assert run_cgroups() == []


async def test_every_result_says_how_limits_were_enforced(sandbox) -> None:
    result = await run_code(sandbox, "pass")
    for name in (
        "wall_time_s",
        "cpu_time_s",
        "memory_bytes",
        "max_processes",
        "max_output_bytes",
        "max_file_bytes",
        "max_open_files",
        "network",
        "disk_bytes",
        "reclaim",
    ):
        assert name in result.enforcement, name


async def test_bwrap_runs_unprivileged_in_a_minimal_root(bwrap_sandbox) -> None:
    code = (
        "import os, json; print(json.dumps([os.getuid(), os.getgid(), os.getgroups(), "
        "sorted(os.listdir('/')), os.getcwd(), os.getpid(), "
        "sorted(os.listdir('/etc')) if os.path.isdir('/etc') else []]))"
    )
    result = await bwrap_sandbox.run_argv(python(code))
    assert result.status is Status.OK, result.stderr
    import json

    uid, gid, groups, root, cwd, pid, etc = json.loads(result.stdout)
    assert run_uid_expected(uid), uid  # as root a host uid of the run's own
    assert gid == uid
    assert set(groups) <= {uid}
    assert cwd == "/work"
    assert pid < 10  # a fresh PID namespace
    assert "home" not in root
    assert set(etc) <= toolchain_dirs().get("etc", set())  # toolchain configuration only


async def test_bwrap_program_has_no_capabilities(bwrap_sandbox) -> None:
    code = "print([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'NoNewPrivs'))])"
    result = await bwrap_sandbox.run_argv(python(code))
    assert b"CapEff:\\t0000000000000000" in result.stdout
    assert b"NoNewPrivs:\\t1" in result.stdout


async def test_bwrap_hides_the_host_environment(bwrap_sandbox, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    result = await bwrap_sandbox.run_argv(
        python("import os; print(sorted(os.environ))"), env={"ASKED_FOR": "1"}
    )
    assert b"OPENAI_API_KEY" not in result.stdout
    assert b"ASKED_FOR" in result.stdout
    result = await bwrap_sandbox.run_argv(python("print(open('/proc/1/environ','rb').read())"))
    assert b"sk-test-secret" not in result.stdout + result.stderr


async def test_bwrap_cannot_read_host_files(bwrap_sandbox) -> None:
    checkout = Path(__file__).resolve().parents[2]
    for path in ("/etc/shadow", "/etc/passwd", str(checkout / "pyproject.toml"), "/root/.bashrc"):
        result = await bwrap_sandbox.run_argv(python(f"print(open({path!r}).read())"))
        assert result.status is Status.RUNTIME_ERROR, path
        assert b"Error" in result.stderr


async def test_bwrap_cannot_reach_a_server_on_the_hosts_loopback(bwrap_sandbox) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(3)

    def accept() -> None:
        with contextlib.suppress(OSError):
            accepted.append(server.accept())

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = (
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
        "    print('connected')\nexcept OSError as e:\n    print('refused', e)\n"
    )
    result = await bwrap_sandbox.run_argv(python(code))
    thread.join(4)
    server.close()
    assert b"refused" in result.stdout
    assert accepted == []


async def test_bwrap_work_dir_is_private_per_run(bwrap_sandbox) -> None:
    first = await bwrap_sandbox.run_argv(
        python("open('/tmp/left', 'w').write('x'); open('kept','w')")
    )
    assert first.status is Status.OK
    listing = "import os; print(os.listdir('.'), os.listdir('/tmp'))"
    second = await bwrap_sandbox.run_argv(python(listing))
    assert second.stdout == b"[] []\n"


async def test_bwrap_writable_places_are_only_the_size_limited_ones(bwrap_sandbox) -> None:
    # bwrap's own root and /dev tmpfs have no size limit: they are read-only (EROFS,
    # whatever the uid), and /dev/shm is a fresh size-limited tmpfs.
    code = (
        "import errno, os\n"
        "for path in ('/planted', '/dev/planted', '/dev/shm/ok', '/tmp/ok'):\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print('wrote', path)\n"
        "    except OSError as error:\n"
        "        print(errno.errorcode[error.errno], path)\n"
    )
    result = await bwrap_sandbox.run_argv(python(code))
    assert result.stdout.decode().splitlines() == [
        "EROFS /planted",
        "EROFS /dev/planted",
        "wrote /dev/shm/ok",
        "wrote /tmp/ok",
    ]


async def test_bwrap_disk_is_limited_by_tmpfs_size(bwrap_sandbox) -> None:
    code = (
        "f = open('big', 'wb')\ntry:\n    while True: f.write(b'x' * 1048576); f.flush()\n"
        "except OSError as e:\n    print(e.errno)\n"
    )
    result = await bwrap_sandbox.run_argv(
        python(code), limits=Limits(disk_bytes=8 * MiB, max_file_bytes=64 * MiB)
    )
    assert result.status is Status.OK, result
    assert result.stdout.strip() == b"28"  # ENOSPC


def test_missing_bwrap_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        BubblewrapSandbox()


def test_unknown_isolation_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="bwrap"):
        create_sandbox("docker")


async def test_none_backend_marks_results_unisolated(none_sandbox, caplog) -> None:
    result = await none_sandbox.run_argv(python("print(1)"))
    assert result.isolation == "none"
    assert result.enforcement["network"].startswith("not enforced")


async def test_the_cgroup_is_removed_even_when_we_fail(sandbox, needs_cgroup, monkeypatch) -> None:
    async def broken(spec: object) -> None:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr("execgym.sandbox._run.run_process", broken)

    def broken_pooled(self: object) -> None:  # the warm pool's fork, before it is handed over
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr("execgym.sandbox.pool._forked.ForkedRun.open_descriptors", broken_pooled)
    with pytest.raises(RuntimeError):
        await run_code(sandbox, "pass")
    assert run_cgroups() == []


async def test_a_run_stalled_at_its_memory_limit_is_a_memory_verdict() -> None:
    from execgym.sandbox._results import interpret
    from execgym.sandbox._supervise import ProcessOutcome

    outcome = ProcessOutcome(
        wait_status=9,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        report=b"",
        wall_time_s=5.0,
        cpu_time_s=0.2,
        peak_memory_bytes=256 * MiB,
        killed_for="wall_time_s",
        oom_killed=False,
    )
    result = interpret(
        outcome,
        isolation="bwrap",
        enforcement={"memory_bytes": "cgroup-v1"},
        memory_bytes=256 * MiB,
    )
    assert result.status is Status.MEMORY_LIMIT
    slow = interpret(
        outcome,
        isolation="bwrap",
        enforcement={"memory_bytes": "cgroup-v1"},
        memory_bytes=1024 * MiB,
    )
    assert slow.status is Status.TIME_LIMIT


@pytest.mark.parametrize(
    ("wait_status", "stderr", "memory", "status"),
    [
        (1 << 8, b"Traceback ...\nMemoryError\n", "rlimit-as (per process)", Status.MEMORY_LIMIT),
        (1 << 8, b"OSError: [Errno 12] Cannot allocate memory\n", "rlimit-as", Status.MEMORY_LIMIT),
        (6, b"terminate called after throwing an instance of 'std::bad_alloc'\n", "rlimit-as",
         Status.MEMORY_LIMIT),
        (1 << 8, b"Traceback ...\nMemoryError\n", "cgroup-v2", Status.RUNTIME_ERROR),
        (1 << 8, b"Traceback ...\nValueError: bad\n", "rlimit-as", Status.RUNTIME_ERROR),
        (0, b"MemoryError\n", "rlimit-as", Status.OK),
    ],
)  # fmt: skip
def test_an_allocation_failure_under_rlimit_as_is_a_memory_verdict(
    wait_status, stderr, memory, status
) -> None:
    # Without a cgroup nothing sees the limit reached: the program's own allocation
    # error is the evidence (and only where RLIMIT_AS is what limits memory).
    from execgym.sandbox._results import interpret
    from execgym.sandbox._supervise import ProcessOutcome

    outcome = ProcessOutcome(
        wait_status=wait_status,
        stdout=b"",
        stderr=stderr,
        stdout_truncated=False,
        stderr_truncated=False,
        report=b"",
        wall_time_s=0.1,
        cpu_time_s=0.1,
        peak_memory_bytes=None,
        killed_for=None,
        oom_killed=False,
    )
    result = interpret(outcome, isolation="bwrap", enforcement={"memory_bytes": memory})
    assert result.status is status, result
    assert result.limit_hit == ("memory_bytes" if status is Status.MEMORY_LIMIT else None)


def test_none_backend_refuses_root_unless_allowed(monkeypatch) -> None:
    from execgym.sandbox import UnisolatedSandbox

    monkeypatch.setattr("os.geteuid", lambda: 0)
    with pytest.raises(SandboxUnavailable, match="allow-root"):
        UnisolatedSandbox()
    assert UnisolatedSandbox(allow_root=True).name == "none"


SYSCALL_PROBE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
numbers = {"ptrace": 101, "unshare": 272, "bpf": 321, "keyctl": 250, "userfaultfd": 323,
           "perf_event_open": 298, "mount": 165, "kexec_load": 246, "init_module": 175,
           "process_vm_readv": 310}
for name, number in numbers.items():
    result = libc.syscall(number, 0, 0, 0, 0, 0)
    print(name, result, ctypes.get_errno())
"""


async def test_bwrap_seccomp_refuses_dangerous_syscalls(bwrap_sandbox) -> None:
    import errno
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the probe uses x86_64 system-call numbers")
    result = await bwrap_sandbox.run_argv(python(SYSCALL_PROBE))
    assert result.status is Status.OK, result.stderr
    for line in result.stdout.decode().splitlines():
        _name, value, error = line.split()
        assert (int(value), int(error)) == (-1, errno.EPERM), line
    assert "seccomp" in result.enforcement["syscalls"]


async def test_bwrap_network_none_refuses_internet_sockets_loopback_allows_them(
    bwrap_sandbox,
) -> None:
    code = (
        "import socket\nserver = socket.create_server(('127.0.0.1', 0))\n"
        "client = socket.create_connection(server.getsockname(), 1)\nprint('loopback ok')\n"
    )
    closed = await bwrap_sandbox.run_argv(python(code))
    assert closed.status is Status.RUNTIME_ERROR
    assert b"PermissionError" in closed.stderr
    open_ = await bwrap_sandbox.run_argv(python(code), limits=Limits(network="loopback"))
    assert open_.stdout == b"loopback ok\n", open_.stderr


def test_cgroups_left_by_a_killed_execgym_are_swept(needs_cgroup) -> None:
    # Only a SIGKILL of execgym itself can leave a run cgroup behind; the next execgym
    # process removes those whose maker is dead, and never those of live processes.
    import os
    import subprocess

    from execgym.sandbox import _cgroup

    probe = subprocess.Popen(["true"])
    probe.wait()
    host = _cgroup.detect_cgroups()
    names = [
        f"execgym-{probe.pid}-1",
        f"execgym-staged-{probe.pid}-2",
        f"execgym-ready-{probe.pid}-3",
        f"execgym-{os.getpid()}-999",
    ]
    made = [parent / name for parent in host.parents.values() for name in names]
    for path in made:
        path.mkdir()
    try:
        _cgroup._swept.clear()
        removed = _cgroup.sweep_stale(host)
        # Ours of the dead process are removed, the live one's kept; a real leftover of
        # another killed execgym on this host may be swept too (that is the sweep's job).
        assert set(names[:3]) <= set(removed)
        assert names[3] not in removed
        assert all(not path.exists() for path in made if str(probe.pid) in path.name)
        assert all(path.exists() for path in made if str(os.getpid()) in path.name)
    finally:
        for path in made:
            if path.exists():
                path.rmdir()


def test_the_cpu_reading_before_a_kill_stops_the_whole_tree_first() -> None:
    """A reading taken just before a kill stops every process of the tree, so the
    figure cannot fall behind what the run goes on to use before the signal lands."""
    from execgym.guest.proctree import tree_cpu_time_s

    # The child sleeps, then leaves: were it left behind, it must not spin forever.
    code = (
        "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\n"
        "while True: pass\n"
    )
    root = subprocess.Popen([sys.executable, "-c", code])
    try:
        # Until the loop has used some CPU: a fixed 0.5 s gave it only 0.1 s at load 20.
        give_up = time.monotonic() + 30  # the child leaves after 60 s
        while tree_cpu_time_s(root.pid) <= 0.1 and time.monotonic() < give_up:
            time.sleep(0.05)
        assert tree_cpu_time_s(root.pid) > 0.1
        stopped = tree_cpu_time_s(root.pid, stop=True)
        children = Path(f"/proc/{root.pid}/task/{root.pid}/children").read_text().split()
        assert len(children) == 1
        for pid in [root.pid, *map(int, children)]:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert state == "T", (pid, state)
        time.sleep(0.2)
        assert tree_cpu_time_s(root.pid) == stopped  # nothing ran on
    finally:
        # Read the tree here too: an assertion before ``children`` was read left the child
        # running (its busy loop ran on for an hour after a loaded run failed the first one).
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{root.pid}/task/{root.pid}/children").read_text().split()
        for pid in (int(p) for p in children) if "children" in locals() else ():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        root.kill()
        root.wait()


async def test_without_cgroups_cpu_limits_are_timeouts_and_cpu_time_is_counted(
    no_cgroups,
) -> None:
    """With rlimits only, a CPU-bound run ends as a CPU ``time_limit`` (not a crash), and
    one killed by the wall clock still reports the CPU time it used (not about 0)."""
    from execgym.sandbox import WarmPoolSandbox

    spin = b"while True: pass\n"
    counting = (
        b"import time\nwhile True:\n    for _ in range(10**5): pass\n"
        b"    print(time.process_time(), flush=True)\n"
    )
    cpu_bound = Limits(cpu_time_s=1, wall_time_s=30)
    wall_bound = Limits(cpu_time_s=30, wall_time_s=1.5)
    fresh = BubblewrapSandbox()
    async with WarmPoolSandbox() as pool:
        for sandbox in (fresh, pool):
            limited = await sandbox.run_python(spin, limits=cpu_bound)
            assert "cgroup" not in limited.enforcement["cpu_time_s"], limited.enforcement
            assert (limited.status, limited.limit_hit) == (Status.TIME_LIMIT, "cpu_time_s"), (
                sandbox,
                limited,
            )
            assert 0.9 <= limited.cpu_time_s < 4
            walled = await sandbox.run_python(counting, limits=wall_bound)
            assert (walled.status, walled.limit_hit) == (Status.TIME_LIMIT, "wall_time_s")
            seen = float(walled.stdout.split()[-1])  # what it had used by its last print
            assert seen > 0.01
            # /proc counts whole ticks, user and system time each rounded down: up to two
            # ticks short for the one busy process (the tree is stopped before it is read,
            # so it cannot run on past the figure).
            tick = 1 / os.sysconf("SC_CLK_TCK")
            assert walled.cpu_time_s >= seen - 2 * tick - 0.001, walled


TREE_HOG = (
    "import os, time\n"
    "for _ in range(6):\n"
    "    if os.fork() == 0:\n"
    "        block = bytearray(60 * 1024 * 1024)\n"  # touched: resident, not only reserved
    "        time.sleep(30)\n"
    "time.sleep(30)\n"
)


@pytest.mark.parametrize("name", ["bwrap", "none"])
async def test_without_a_cgroup_the_trees_resident_memory_is_sampled_and_enforced(
    name, no_cgroups, request
) -> None:
    # Six processes of 60 MiB each stay under a 256 MiB RLIMIT_AS one by one; together
    # they hold 360 MiB, and the sampled total of the tree is what stops them.
    sandbox = request.getfixturevalue(f"{name}_sandbox")
    limits = Limits(memory_bytes=256 * MiB, wall_time_s=10, max_processes=16)
    result = await run_code(sandbox, TREE_HOG, limits=limits)
    assert (result.status, result.limit_hit) == (Status.MEMORY_LIMIT, "memory_bytes"), result
    assert result.wall_time_s < 8, result
    assert result.peak_memory_bytes > 256 * MiB, result
    how = result.enforcement["memory_bytes"]
    assert how.startswith("rlimit-as"), how
    assert "resident memory sampled from /proc" in how, how


async def test_without_a_cgroup_a_jvm_or_v8_runs_without_an_address_space_limit(
    bwrap_sandbox, no_cgroups
) -> None:
    # RLIMIT_AS at memory_bytes stops node (and java) at start-up: they reserve
    # gigabytes of address space they never use. Their memory is the sampled RSS.
    node = shutil.which("node") or shutil.which("nodejs")
    require(node is not None, "Node.js (apt-get install nodejs)")
    argv = [os.path.realpath(node), "-e", "console.log(Array(1000).fill(7).length)"]
    result = await bwrap_sandbox.run_argv(argv, limits=Limits(memory_bytes=256 * MiB))
    assert (result.status, result.stdout) == (Status.OK, b"1000\n"), result
    how = result.enforcement["memory_bytes"]
    assert how.startswith("whole tree's resident memory sampled"), how
    assert "no RLIMIT_AS" in how, how


@pytest.mark.parametrize(
    ("argv", "reserves"),
    [
        (["bwrap", "--ro-bind", "/usr", "/usr", "--", "/usr/bin/node", "x.js"], True),
        (["bwrap", "--", "setpriv", "--reuid", "1", "--", "/usr/lib/jvm/bin/java", "Main"], True),
        (["java", "-cp", ".", "Main"], True),
        (["bwrap", "--", "/usr/bin/python3", "execgym_compile.py", "/usr/bin/javac"], True),
        (["bwrap", "--", "/usr/bin/python3", "main.py"], False),
        (["bwrap", "--ro-bind", "/opt/node", "/opt/node", "--", "python3", "x"], False),
        (["bwrap", "--", "sh", "-c", "java Main"], False),
        ([], False),
    ],
)
def test_runtimes_that_reserve_address_space_are_found_by_their_program(argv, reserves) -> None:
    from execgym.sandbox._rlimits import reserves_address_space

    assert reserves_address_space(argv) is reserves
    # A program not known by name (a Go binary) is flagged by its caller in the env.
    assert reserves_address_space(argv, {"EXECGYM_ADDRESS_SPACE": "reserved"}) is True
    assert reserves_address_space(argv, {"EXECGYM_ADDRESS_SPACE": "no"}) is reserves


DAEMON = (
    "import os, sys\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        null = os.open('/dev/null', os.O_RDWR)\n"  # holds no pipe of the run open
    "        for fd in (0, 1, 2):\n"
    "            os.dup2(null, fd)\n"
    "        os.execv('/usr/bin/sleep', [sys.argv[1], '3600'])\n"
    "    os._exit(0)\n"
    "os.wait()\n"
)


async def test_without_a_cgroup_run_returns_only_once_its_pid_namespace_is_empty(
    bwrap_sandbox, no_cgroups
) -> None:
    # bwrap's launcher exits as soon as the program does, while the namespace's init is
    # still killing what is left (a daemon): with no cgroup to empty and wait on, run()
    # waits for that init, so no process of the run is alive when it returns.
    for attempt in range(20):
        marker = f"execgym-daemon-{uuid.uuid4().hex}"
        argv = [*python(DAEMON), marker]
        result = await bwrap_sandbox.run_argv(argv, limits=Limits(wall_time_s=5))
        assert result.status is Status.OK, result
        assert processes_with(marker) == [], f"attempt {attempt}: a daemon outlived its run"


async def test_a_command_too_big_to_exec_is_the_callers_error(sandbox) -> None:
    """E2BIG is the caller's input, not a sandbox failure: a TaskError naming the word."""
    with pytest.raises(TaskError, match=r"argv\[2\] is 200001 bytes.*file or on stdin"):
        await sandbox.run_argv(["echo", "x", "y" * 200_000])
    with pytest.raises(TaskError, match=r"env\[\d+\] is \d+ bytes"):
        await sandbox.run_argv(["true"], env={"BIG": "z" * 200_000})
    many = ["w" * 100_000] * 30  # each word fits; together they pass ARG_MAX
    with pytest.raises(TaskError, match="ARG_MAX"):
        await sandbox.run_argv(["echo", *many])
    result = await sandbox.run_argv(["echo", "y" * 100_000])  # big but fine
    assert result.status is Status.OK
    assert len(result.stdout) == 100_001


async def test_the_hosts_inheritable_descriptors_never_reach_the_program(
    sandbox, inheritable_host_pipe
) -> None:
    """A host pipe execgym did not open (inherited from whoever started it) stays out."""
    result = await run_code(sandbox, LIST_FDS)
    assert result.status is Status.OK, result
    # 0-2, and the descriptor the listing itself holds open (the lowest free one: 3)
    assert set(json.loads(result.stdout)) <= {0, 1, 2, 3}, result.stdout


async def test_a_missing_program_is_exit_127_on_every_tier(sandbox) -> None:
    """The program's failure (it is not there), as a shell would say, never ours."""
    result = await sandbox.run_argv(["no-such-program-anywhere", "x"])
    assert result.status is Status.RUNTIME_ERROR, result
    if sandbox.name != "gvisor":  # runsc says 128 (and names the program too)
        assert result.exit_code == 127, result
    assert b"no-such-program-anywhere" in result.stderr


async def test_the_unisolated_environment_has_nothing_of_the_hosts(none_sandbox) -> None:
    result = await none_sandbox.run_argv(python("import os; print(sorted(os.environ))"))
    assert "OLDPWD" not in json.loads(result.stdout.replace(b"'", b'"')), result.stdout

"""The warm pool: Python runs forked from a zygote, as isolated as fresh bwrap sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execgym import Verdict
from execgym.errors import TaskError
from execgym.judges import AssertJudge
from execgym.judges.pytest_tests import PytestJudge
from execgym.limits import DEFAULT_LIMITS, Limits, MiB
from execgym.sandbox import Status, WarmPoolSandbox
from execgym.sandbox._cgroup import detect_cgroups
from execgym.tasks import Task
from tests.conftest import (
    LIST_FDS,
    processes_with,
    run_cgroups,
    run_uid_expected,
    toolchain_dirs,
)


@pytest.fixture
async def pool(bwrap_sandbox) -> AsyncIterator[WarmPoolSandbox]:
    async with WarmPoolSandbox() as box:
        yield box


async def test_runs_python_as_a_run_uid_in_fresh_namespaces(pool) -> None:
    code = (
        b"import os, json, sys\n"
        b"print(json.dumps([os.getuid(), os.getpid(), sorted(os.listdir('/')), os.getcwd(),"
        b" sorted(os.environ),"
        b" open('/proc/self/status').read().count('CapEff:\\t0000000000000000'),"
        b" os.listdir('/proc').count('1'),"
        b" sorted(os.listdir('/etc')) if os.path.isdir('/etc') else []]))\n"
    )
    result = await pool.run_python(code, env={"ASKED": "1"})
    assert result.status is Status.OK, result.stderr
    uid, pid, root, cwd, env, no_caps, pid1, etc = json.loads(result.stdout)
    assert run_uid_expected(uid, in_user_namespace=0), uid  # in a user namespace: 0, no caps
    assert pid == 2  # PID 1 is the run's own init, as in a fresh bwrap sandbox
    assert "home" not in root
    assert set(etc) <= toolchain_dirs().get("etc", set())  # toolchain configuration only
    assert cwd == "/work"
    assert "ASKED" in env
    assert not any("KEY" in name for name in env)
    assert no_caps == 1
    assert pid1 == 1


async def test_runs_do_not_see_each_other(pool) -> None:
    first = await pool.run_python(
        b"import random; open('/work/left', 'w').write('x'); open('/tmp/left', 'w');"
        b" print(random.random())"
    )
    second = await pool.run_python(
        b"import os, random; print(os.listdir('/work'), os.listdir('/tmp')); print(random.random())"
    )
    assert second.stdout.splitlines()[0] == b"[] []"
    assert first.stdout != second.stdout.splitlines()[1]  # random is reseeded per run


async def test_files_stdin_and_report(pool) -> None:
    code = b"import os, sys; os.write(3, sys.stdin.buffer.read()); print(open('d/f.txt').read())"
    result = await pool.run_python(code, stdin=b"in", files={"d/f.txt": b"file"}, want_report=True)
    assert result.stdout == b"file\n"
    assert result.report == b"in"


async def test_timeout_kills_everything_the_run_started(pool) -> None:
    marker = f"execgym-pool-{uuid.uuid4().hex}"
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['{marker}', '300'], executable='/usr/bin/sleep',"
        " start_new_session=True)\n"
        "while True: pass\n"
    ).encode()
    result = await pool.run_python(code, limits=Limits(wall_time_s=1))
    assert result.status is Status.TIME_LIMIT
    assert processes_with(marker) == []
    assert run_cgroups() == []


SEES_ITS_DESCRIPTORS_AND_SHARED_PAGES = """import mmap, os
def f():
    own = mmap.mmap(-1, 48)  # the check of the check: exactly this one is writable, shared
    names = sorted(os.listdir('/proc/self/fd'), key=int)
    links = [(int(fd), os.readlink('/proc/self/fd/' + fd)) for fd in names
             if os.path.exists('/proc/self/fd/' + fd)]
    shared = [line for line in open('/proc/self/maps') if line.split()[1] == 'rw-s']
    return [[fd for fd, _ in links], links[3][1], len(shared), os.getppid()]
"""


async def test_the_solution_process_holds_nothing_of_its_pid_1s_end_report(pool) -> None:
    # The harness (PID 1) holds the page and the pipe it reports the run's end through;
    # the solution's process, forked from it, must have neither: only stdin, stdout,
    # stderr, its own /dev/null stdin and the two pipes to the harness.
    # The first runs of a new pool may run the harness as PID 2 (staged before the
    # zygote had it preloaded); later ones run it as PID 1, the case that matters here.
    # With state "shared" the solution's process is the harness's child and answers each
    # call itself; with "fresh" (the default) each call runs in a fork of it (one level
    # deeper, its parent the loaded solution) holding the pipes it answers on: none of
    # them is PID 1's end-report pipe, which PID 1 keeps at fd 10 or above (guest/zygote.py).
    shared = "def check(c):\n    assert c() == [[0, 1, 2, 3, 4, 5], '/dev/null', 1, %d], c()\n"
    fresh = (
        "def check(c):\n    fds, stdin, pages, parent = c()\n"
        "    assert max(fds) < 10 and stdin == '/dev/null', (fds, stdin)\n"
        "    assert (pages, parent) == (1, %d + 1), (pages, parent)\n"
    )
    for state, seen in (("shared", shared), ("fresh", fresh)):
        for harness_pid in (1, 2):
            task = Task(
                task_id="t/fds", prompt="", entry_point="f", tests=seen % harness_pid, state=state
            )
            for _ in range(max(2, os.cpu_count() or 1) + 2):
                judgement = await AssertJudge().judge(
                    task, SEES_ITS_DESCRIPTORS_AND_SHARED_PAGES, pool, Limits(wall_time_s=5)
                )
            expected = Verdict.PASSED if harness_pid == 1 else Verdict.FAILED
            assert judgement.verdict is expected, (state, judgement.message)


FORGES_ITS_END = """
import ctypes, gc, os, time
end = [o for o in gc.get_objects() if type(o).__name__ == "RunEnd" and not o.page.closed][0]
ctypes.CDLL(None).prctl(15, b"%s", 0, 0, 0)  # PR_SET_NAME, to find it from the host
for index, value in enumerate([1, 0, %d, 0, 0, end.DONE]):
    end.set_field(index, value)
os.write(end.notify, b"!")
while True:
    time.sleep(1)
def add(a, b):
    return a + b
"""


async def test_six_hundred_runs_at_once_all_run(bwrap_sandbox) -> None:
    # A burst used to fill the control socket (EAGAIN: half of them a sandbox_error),
    # and past about 500 runs in flight the zygote's select() met a descriptor over
    # 1024 and died, failing every run it held.
    async with WarmPoolSandbox() as box:
        results = await asyncio.gather(
            *(box.run_python(b"import time; time.sleep(3); print('ok')") for _ in range(600))
        )
    failed = [r for r in results if (r.status, r.stdout) != (Status.OK, b"ok\n")]
    assert failed == [], (len(failed), failed[:2])


async def test_a_run_queued_behind_a_stalled_zygote_is_timed_from_its_start_and_killed(
    bwrap_sandbox,
) -> None:
    # The wall clock used to start when the job was sent: a run queued behind a busy
    # zygote was killed before it was forked (the kill reached nothing) and then ran
    # to its end, or, queued long enough, a correct run was called a timeout.
    async with WarmPoolSandbox() as box:
        await asyncio.gather(*(box.run_python(b"pass") for _ in range(6)))  # staged used up
        assert box._zygote.proc is not None
        zygote = box._zygote.proc.pid
        while Path(f"/proc/{zygote}/comm").read_text().strip() == "bwrap":
            zygote = int(Path(f"/proc/{zygote}/task/{zygote}/children").read_text().split()[0])
        os.kill(zygote, signal.SIGSTOP)
        try:
            sleepers = [
                asyncio.create_task(
                    box.run_python(
                        b"import time; time.sleep(15); print('ran to the end')",
                        limits=Limits(wall_time_s=0.5),
                    )
                )
                for _ in range(3)
            ]
            quick = asyncio.create_task(
                box.run_python(b"print('ok')", limits=Limits(wall_time_s=0.5))
            )
            await asyncio.sleep(1.5)  # three times their wall time, queued
        finally:
            os.kill(zygote, signal.SIGCONT)
        for result in await asyncio.gather(*sleepers):
            assert (result.status, result.stdout) == (Status.TIME_LIMIT, b""), result
            assert result.wall_time_s < 3, result
        done = await quick
        assert (done.status, done.stdout) == (Status.OK, b"ok\n"), done


async def test_closing_a_pool_mid_burst_fails_its_runs_cleanly_and_leaves_the_loop_usable(
    bwrap_sandbox,
) -> None:
    # Sends waiting for room on the control socket kept a writer registered on it after
    # close: the next pool on the loop then failed to start (FileNotFoundError).
    box = WarmPoolSandbox()
    await box.start()
    runs = [asyncio.create_task(box.run_python(b"import time; time.sleep(2)")) for _ in range(600)]
    await asyncio.sleep(0.3)
    await box.aclose()
    results = await asyncio.gather(*runs)
    assert {r.status for r in results} <= {Status.SANDBOX_ERROR, Status.OK}
    async with WarmPoolSandbox() as again:
        after = await again.run_python(b"print('after')")
    assert (after.status, after.stdout) == (Status.OK, b"after\n"), after
    assert run_cgroups() == []


ADD_TEST = "from solution import add\ndef test_add():\n    assert add(1, 2) == 3\n"


@pytest.mark.parametrize("status", [0, 2**62], ids=["exit-0", "not-a-status"])
async def test_a_rollout_in_pid_1s_process_cannot_outlive_or_break_its_run_by_forging_the_end(
    no_cgroups, bwrap_sandbox, status
) -> None:
    # pytest in_process runs the rollout in the harness's own process, PID 1, which
    # holds the page and the pipe it reports the run's end through. A forged end must
    # not let the rollout run on unwatched (nothing kills a run once reported, without
    # a cgroup), understate the CPU it used, or crash the host with a status no process
    # can have (OverflowError in os.WIFSIGNALED); a forged status is ignored.
    name = f"eg{uuid.uuid4().hex[:10]}"
    task = Task.model_validate(
        {
            "task_id": "t/forge",
            "kind": "pytest",
            "test_files": {"test_add.py": ADD_TEST},
            "pytest_mode": "in_process",
        }
    )
    judge = PytestJudge()  # before the pool: its harness is preloaded, run as PID 1
    async with WarmPoolSandbox() as box:
        for _ in range(max(2, os.cpu_count() or 1) + 2):
            judgement = await judge.judge(
                task, FORGES_ITS_END % (name, status), box, Limits(wall_time_s=2)
            )
            assert judgement.verdict is not Verdict.PASSED, judgement
            # Killed as it claimed its end (SIGKILL, as it is reported: it may take a
            # moment to die), or at the wall time.
            for _ in range(100):
                if not _named(name):
                    break
                await asyncio.sleep(0.01)
            assert _named(name) == []
        if status == 0:  # a forged end ends the run at once, at the kernel's CPU figure
            assert judgement.run.wall_time_s < 1.5, judgement.run
            assert judgement.run.cpu_time_s >= 0.05, judgement.run  # pytest's own start-up
        else:
            assert judgement.run.status is Status.TIME_LIMIT, judgement.run


def _named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as handle:
                    if handle.read().strip() == name:
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("no_cgroup", [False, True], ids=["cgroup", "no-cgroup"])
async def test_a_run_is_reported_once_all_but_its_pid_1_are_gone_with_its_own_figures(
    request, bwrap_sandbox, no_cgroup
) -> None:
    """A run's PID 1 reports the run's end before it exits itself (so the teardown of
    the namespaces does not delay the result), but only after killing and reaping every
    other process: a daemon the program left is dead by the time ``run_python``
    returns, and the exit code, signal, CPU time and counts are the run's own."""
    if no_cgroup:
        request.getfixturevalue("no_cgroups")
    marker = f"execgym-pool-{uuid.uuid4().hex}"
    leaves_a_daemon = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen(['{marker}', '300'], executable='/usr/bin/sleep',"
        " start_new_session=True)\n"
        "end = time.process_time() + 0.2\n"
        "while time.process_time() < end: pass\n"
        "sys.exit(3)\n"
    ).encode()
    async with WarmPoolSandbox() as box:
        for _ in range(3):
            result = await box.run_python(leaves_a_daemon)
            assert processes_with(marker) == []  # at once, not after some teardown
            assert (result.status, result.exit_code, result.signal) == (
                Status.RUNTIME_ERROR,
                3,
                None,
            ), result
            assert result.cpu_time_s >= 0.15, result
            assert result.processes_started is not None
            assert result.processes_started >= 2  # the program and the daemon
        killed = await box.run_python(b"import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
        assert (killed.exit_code, killed.signal) == (None, signal.SIGTERM), killed


@pytest.mark.parametrize(
    ("code", "limits", "status", "limit_hit"),
    [
        (
            b"x = bytearray(2 * 1024 ** 3)",
            Limits(memory_bytes=256 * MiB),
            Status.MEMORY_LIMIT,
            "memory_bytes",
        ),
        (
            b"import sys\nwhile True: sys.stdout.write('x' * 65536)",
            Limits(max_output_bytes=MiB),
            Status.OUTPUT_LIMIT,
            "max_output_bytes",
        ),
        (
            b"import threading\ndef spin():\n    while True: pass\n"
            b"for _ in range(4): threading.Thread(target=spin).start()\nspin()",
            Limits(cpu_time_s=1, wall_time_s=10),
            Status.TIME_LIMIT,
            "cpu_time_s",
        ),
        (b"raise SystemExit(3)", Limits(), Status.RUNTIME_ERROR, None),
        (
            b"import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
            Limits(),
            Status.SIGNALED,
            None,
        ),
    ],
    ids=["memory", "output", "cpu", "exit-code", "signal"],
)
async def test_limits_and_endings(pool, needs_cgroup, code, limits, status, limit_hit) -> None:
    result = await pool.run_python(code, limits=limits)
    assert result.status is status, result
    assert result.limit_hit == limit_hit


async def test_fork_bomb_is_contained(pool) -> None:
    code = (
        b"import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        b"            import time; time.sleep(30)\n        n += 1\nexcept OSError:\n"
        b"    print('stopped at', n)\n"
    )
    result = await pool.run_python(code, limits=Limits(max_processes=16, wall_time_s=5))
    started = int(result.stdout.split()[-1])
    # Without a pids cgroup the limit is RLIMIT_NPROC, shared with the user's other
    # processes, so it is only approximate.
    assert started < (16 if detect_cgroups().version else 64)


async def test_seccomp_and_network_none_apply(pool) -> None:
    code = (
        b"import ctypes, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        b"print(libc.syscall(101, 0, 0, 0, 0), ctypes.get_errno())\n"  # ptrace on x86_64
        b"socket.socket()\n"
    )
    result = await pool.run_python(code)
    assert result.stdout.split()[:2] == [b"-1", b"1"]
    assert b"PermissionError" in result.stderr
    loopback = await pool.run_python(
        b"import socket\ns = socket.create_server(('127.0.0.1', 0))\n"
        b"socket.create_connection(s.getsockname(), 1); print('ok')",
        limits=Limits(network="loopback"),
    )
    assert loopback.stdout == b"ok\n", loopback.stderr


async def test_the_zygote_survives_hostile_runs(pool) -> None:
    for code in (
        b"import os, signal\nfor pid in range(1, 400):\n    try: os.kill(pid, 9)\n"
        b"    except OSError: pass",
        b"import os; os.close(3); os._exit(0)",
    ):
        await pool.run_python(code)
    result = await pool.run_python(b"print('alive')")
    assert result.stdout == b"alive\n"


async def test_a_dead_zygote_is_a_sandbox_error_then_restarts(pool) -> None:
    assert pool._zygote.proc is not None
    os.killpg(pool._zygote.proc.pid, 9)
    pool._zygote.proc.wait()
    result = await pool.run_python(b"print(1)")
    assert result.status in (Status.SANDBOX_ERROR, Status.OK)
    again = await pool.run_python(b"print(1)")
    assert again.stdout == b"1\n"


async def test_closing_the_pool_leaves_nothing(bwrap_sandbox) -> None:
    box = WarmPoolSandbox()
    await box.start()
    assert box._zygote.proc is not None
    pid = box._zygote.proc.pid
    await box.aclose()
    assert processes_with(f"{pid}") == [] or not os.path.exists(f"/proc/{pid}/cmdline")
    assert box._zygote.proc is None


ADD = Task(
    task_id="t/add",
    prompt="def add(a, b):\n",
    tests="def check(c):\n    assert c(2, 3) == 5\n",
    entry_point="add",
)


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("    return a + b\n", Verdict.PASSED),
        ("    return 0\n", Verdict.FAILED),
        ("    import sys; sys.exit(0)\n", Verdict.ERROR),
        ("    while True: pass\n", Verdict.TIMEOUT),
    ],
)
async def test_the_assert_judge_on_the_pool(pool, completion, verdict) -> None:
    judgement = await AssertJudge().judge(ADD, completion, pool, Limits(wall_time_s=1))
    assert judgement.verdict is verdict, judgement


async def test_staged_runs_get_their_own_limits_and_are_reclaimed_on_close(bwrap_sandbox) -> None:
    # Each run's init is staged ahead in a cgroup made with the default limits; the run's
    # own limits are applied when it takes the slot, lower or higher than the default.
    require_cgroup = detect_cgroups().version is not None
    hog = b"x = bytearray(%d); print('kept')"
    async with WarmPoolSandbox() as box:
        for _ in range(3):  # stage, use and replenish several times
            small = await box.run_python(hog % (200 * MiB), limits=Limits(memory_bytes=64 * MiB))
            large = await box.run_python(hog % (700 * MiB), limits=Limits(memory_bytes=1024 * MiB))
            if require_cgroup:
                assert small.status is Status.MEMORY_LIMIT, small
            else:  # RLIMIT_AS only (an ordinary user's v1 host): the allocation fails inside
                assert (small.status, small.limit_hit, b"MemoryError" in small.stderr) == (
                    Status.MEMORY_LIMIT,
                    "memory_bytes",
                    True,
                ), small
                assert "inferred from the error output" in small.message
            assert (large.status, large.stdout) == (Status.OK, b"kept\n"), large
        while box._stager.making is not None:  # inits are staged in the background
            await asyncio.sleep(0.01)
        staged = {
            cgroup_dir for _, cgroup in box._stager.staged for cgroup_dir in cgroup.dirs.values()
        }
        if require_cgroup:
            assert 0 < len(box._stager.staged) <= max(2, os.cpu_count() or 1)
            assert staged
            assert all(path.exists() for path in staged)
            assert large.enforcement["memory_bytes"].startswith("cgroup")
        assert run_cgroups() == []
    assert not any(path.exists() for path in staged)


PROBE_WRITES = b"""import errno, os, sys
for path in ('/planted', '/dev/planted'):
    try:
        open(path, 'w').write('x')
        print('wrote', path)
    except OSError as error:
        print(errno.errorcode[error.errno], path)
open('/dev/shm/' + sys.argv[0].replace('/', '_') + '-mark', 'w').write('x')
print(sorted(os.listdir('/dev/shm')))
"""


async def test_runs_cannot_leave_files_for_later_runs(pool) -> None:
    # The zygote's root and /dev are shared by every run: each run sees them read-only
    # (EROFS whatever its uid: as an ordinary user runs are uid 0 of a user namespace),
    # and gets its own /dev/shm, so nothing written by one run reaches the next.
    first = await pool.run_python(PROBE_WRITES)
    second = await pool.run_python(PROBE_WRITES)
    for result in (first, second):
        lines = result.stdout.decode().splitlines()
        assert lines[:2] == ["EROFS /planted", "EROFS /dev/planted"], lines
        assert lines[2] == "['runner.py-mark']", lines  # only its own mark


async def test_a_judges_harness_is_preloaded_and_runs_as_pid_1_with_the_same_verdicts(
    bwrap_sandbox,
) -> None:
    """The judges' harnesses are registered as execgym's own code: the pool loads them
    into the zygote once and runs them as PID 1 of the run (no separate init), while
    any other script still gets an init. Verdicts are the same as on fresh bwrap."""
    from execgym.judges.assert_tests import runner_program
    from execgym.sandbox._trusted import trusted_program

    assert trusted_program(runner_program()) is not None
    assert trusted_program(b"print('not registered')\n") is None
    task = Task(
        task_id="t/pids",
        prompt="def pids():\n",
        tests="def check(candidate):\n    assert candidate() == EXPECTED, candidate()\n",
        entry_point="pids",
        state="shared",  # the solution answers its calls itself, as the harness's child
    )
    body = "    import os\n    return [os.getpid(), os.getppid()]\n"
    async with WarmPoolSandbox() as pool:
        # the harness (the solution's parent) is PID 1 on the pool, PID 2 under bwrap's init
        for sandbox, expected in ((pool, [2, 1]), (bwrap_sandbox, [3, 2])):
            with_expected = task.model_copy(
                update={"tests": f"EXPECTED = {expected}\n" + task.tests}
            )
            for _ in range(4):  # staged inits made before and after the preload
                result = await AssertJudge().judge(with_expected, body, sandbox, DEFAULT_LIMITS)
                assert result.verdict is Verdict.PASSED, (sandbox, result.message)
        plain = await pool.run_python(b"import os; print(os.getpid())")
        assert plain.stdout == b"2\n"  # an ordinary script runs under the run's init


async def test_a_program_registered_after_the_pool_started_runs_before_and_after_preload(
    pool,
) -> None:
    """Inits staged before a program's code reached the zygote run the script sent with
    the job; later ones run the preloaded code as PID 1. Both give the same output."""
    from execgym.sandbox._trusted import register_trusted_program

    source = f"import os\nprint('{uuid.uuid4().hex}', os.getpid() == 1 or os.getpid())\n"
    script = source.encode()
    register_trusted_program(script, compile(source, "test-program", "exec"))
    # the inits already staged (one per core, at least 2) predate the code; later ones not
    outputs = [await pool.run_python(script) for _ in range(max(2, os.cpu_count() or 1) + 2)]
    assert all(r.status is Status.OK for r in outputs), outputs
    pids = [r.stdout.split()[1] for r in outputs]
    assert set(pids) <= {b"True", b"2"}
    assert pids[-1] == b"True"  # preloaded by then: PID 1
    assert len({r.stdout.split()[0] for r in outputs}) == 1


async def test_runs_killed_before_their_staged_init_got_the_job_leave_the_pool_working(
    pool,
) -> None:
    """A run whose clock runs out at once is killed, cgroup and staged init included,
    possibly before the zygote hands that init its job: the run is a time limit and
    the zygote carries on (it used to die of EPIPE, failing every later run)."""
    for _ in range(50):
        killed = await pool.run_python(b"print('late')", limits=Limits(wall_time_s=0.001))
        assert killed.status in (Status.TIME_LIMIT, Status.OK), killed
    after = await pool.run_python(b"print('alive')")
    assert (after.status, after.stdout) == (Status.OK, b"alive\n"), after


FORKMEM = (
    "import os, time\n"
    "for _ in range(5):\n"
    "    if os.fork() == 0:\n"
    "        block = bytearray(60 * 1024 * 1024)\n"  # touched: resident, each under the limit
    "        time.sleep(3)\n"
    "        os._exit(0)\n"
    "for _ in range(5):\n"
    "    os.wait()\n"
    "print('survived')\n"
)
BUSY_TWO = "import os\nos.fork()\nwhile True: pass\n"


async def test_without_a_cgroup_the_zygote_samples_and_enforces_cpu_and_memory(
    no_cgroups, bwrap_sandbox
) -> None:
    # With no cgroup (an ordinary user's v1 host), RLIMIT_AS and RLIMIT_CPU are per
    # process: five 60 MiB processes passed a 128 MiB limit and two busy ones ran twice
    # the CPU limit. The zygote now samples each run's whole tree every 50 ms.
    async with WarmPoolSandbox() as box:
        limits = Limits(memory_bytes=128 * MiB, wall_time_s=8, cpu_time_s=8, max_processes=16)
        hog = await box.run_python(FORKMEM.encode(), limits=limits)
        assert (hog.status, hog.limit_hit) == (Status.MEMORY_LIMIT, "memory_bytes"), hog
        assert hog.stdout == b""
        assert "sampled from /proc every 50 ms by the zygote" in hog.enforcement["memory_bytes"]
        busy = await box.run_python(BUSY_TWO.encode(), limits=Limits(wall_time_s=8, cpu_time_s=1.5))
        assert (busy.status, busy.limit_hit) == (Status.TIME_LIMIT, "cpu_time_s"), busy
        assert 1.5 <= busy.cpu_time_s < 2.5, busy  # the tree's total, not 2 s per process
        assert "by the zygote" in busy.enforcement["cpu_time_s"]
        fine = await box.run_python(b"print('ok')")
        assert (fine.status, fine.stdout) == (Status.OK, b"ok\n"), fine


async def test_no_descriptor_of_the_host_or_the_zygote_reaches_a_pooled_run(
    bwrap_sandbox, inheritable_host_pipe
) -> None:
    """Only 0-2 and the listing's own: no inheritable host pipe (the zygote starts with
    the pool), and not the reused network namespace a staged init held on fd 3."""
    async with WarmPoolSandbox() as box:  # started with the host pipe open
        result = await box.run_python(LIST_FDS.encode())
    assert result.status is Status.OK, result
    assert set(json.loads(result.stdout)) <= {0, 1, 2, 3}, result.stdout


async def test_a_large_environment_is_passed_or_refused_and_the_pool_lives_on(pool) -> None:
    """A 100 KB value once overflowed the zygote's message buffer and killed the pool."""
    code = b"import os; print(len(os.environ['BIG']))"
    result = await pool.run_python(code, env={"BIG": "z" * 100_000})
    assert (result.status, result.stdout) == (Status.OK, b"100000\n"), result
    with pytest.raises(TaskError, match=r"env\[\d+\] is \d+ bytes"):
        await pool.run_python(code, env={"BIG": "z" * 140_000})
    with pytest.raises(TaskError, match="the warm pool passes at most"):
        await pool.run_python(code, env={"A": "a" * 70_000, "B": "b" * 70_000})
    result = await pool.run_python(code, env={"BIG": "ok"})
    assert (result.status, result.stdout) == (Status.OK, b"2\n"), result

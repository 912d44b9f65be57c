"""Prestarted bwrap sandboxes: set up before their run, each used for one run only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from execgym.limits import Limits, MiB
from execgym.sandbox import BubblewrapSandbox, Status
from tests.conftest import descendants, run_cgroups, run_uid_expected

PRESTARTED = "prestarted sandbox (set up before the run, used once)"


async def test_a_run_takes_a_prestarted_sandbox_with_its_files_stdin_and_env(
    prestarted_sandbox: BubblewrapSandbox, needs_cgroup
) -> None:
    assert await prestarted_sandbox.prestart()
    result = await prestarted_sandbox.run_python(
        b"import os, sys\n"
        b"print(sys.stdin.read(), open('d/e/x.txt').read(), os.environ['GREETING'],"
        b" sorted(os.listdir('.')), os.getcwd(), os.getuid())\n",
        stdin=b"in",
        files={"d/e/x.txt": b"file"},
        env={"GREETING": "hello"},
    )
    assert result.enforcement["start"] == PRESTARTED
    assert result.status is Status.OK, result.stderr
    *said, uid = result.stdout.split()
    assert b" ".join(said) == b"in file hello ['d', 'runner.py'] /work"
    assert run_uid_expected(int(uid)), uid


async def test_each_prestarted_sandbox_serves_one_run(
    prestarted_sandbox: BubblewrapSandbox, needs_cgroup
) -> None:
    """A file left in the work dir or /tmp by one run is never seen by the next."""
    seen = []
    for _ in range(3):
        assert await prestarted_sandbox.prestart()
        result = await prestarted_sandbox.run_python(
            b"import os\nprint(sorted(os.listdir('.')), sorted(os.listdir('/tmp')))\n"
            b"open('left.txt', 'w').write('x'); open('/tmp/left.txt', 'w').write('x')\n"
        )
        assert result.enforcement["start"] == PRESTARTED
        seen.append(result.stdout)
    assert seen == [b"['runner.py'] []\n"] * 3


async def test_limits_and_clocks_are_the_runs_own(
    prestarted_sandbox: BubblewrapSandbox, needs_cgroup
) -> None:
    """The cgroup gets the run's limits when the job arrives, and its CPU clock starts
    then: the waiting interpreter's start-up is not charged to the run."""
    limits = Limits(wall_time_s=5, cpu_time_s=1, memory_bytes=64 * MiB)
    assert await prestarted_sandbox.prestart(limits)
    quick = await prestarted_sandbox.run_argv(["/bin/true"], limits=limits)
    assert quick.enforcement["start"] == PRESTARTED
    assert quick.status is Status.OK
    assert quick.cpu_time_s < 0.01  # /bin/true: the trampoline's ~15 ms are not counted
    assert await prestarted_sandbox.prestart(limits)
    hog = await prestarted_sandbox.run_python(b"x = bytearray(200 * 2**20)", limits=limits)
    assert hog.status is Status.MEMORY_LIMIT
    limits = limits.merged(wall_time_s=30)  # a loaded machine gives the loop less CPU
    assert await prestarted_sandbox.prestart(limits)
    spin = await prestarted_sandbox.run_python(b"while True: pass", limits=limits)
    assert (spin.status, spin.limit_hit) == (Status.TIME_LIMIT, "cpu_time_s")
    assert 1.0 <= spin.cpu_time_s < 1.5


async def test_report_channel_only_when_asked_and_missing_programs(
    prestarted_sandbox: BubblewrapSandbox, needs_cgroup
) -> None:
    code = b"import os\nos.write(3, b'report')\n"
    assert await prestarted_sandbox.prestart()
    asked = await prestarted_sandbox.run_python(code, want_report=True)
    assert asked.report == b"report"
    assert await prestarted_sandbox.prestart()
    not_asked = await prestarted_sandbox.run_python(code)
    assert not_asked.status is Status.RUNTIME_ERROR
    assert b"Bad file descriptor" in not_asked.stderr
    assert await prestarted_sandbox.prestart()
    missing = await prestarted_sandbox.run_argv(["no-such-program"])
    assert (missing.status, missing.exit_code) == (Status.RUNTIME_ERROR, 127)
    assert b"cannot execute 'no-such-program'" in missing.stderr


async def test_a_prestarted_sandbox_that_died_is_replaced_by_a_cold_start(
    prestarted_sandbox: BubblewrapSandbox, needs_cgroup
) -> None:
    others = set(descendants(os.getpid()))
    assert await prestarted_sandbox.prestart()
    held = set(descendants(os.getpid())) - others
    assert held
    for pid in held:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for _ in range(200):  # until the kernel has ended them all (zombies now)
        now = descendants(os.getpid())
        if all(now.get(pid, "Z") == "Z" for pid in held):
            break
        await asyncio.sleep(0.01)
    result = await prestarted_sandbox.run_python(b"print('ok')")
    assert result.status is Status.OK
    assert result.stdout == b"ok\n"
    assert "start" not in result.enforcement  # it started cold


async def test_everything_is_reclaimed_on_close(needs_cgroup) -> None:
    me = os.getpid()
    baseline = descendants(me)
    sandbox = BubblewrapSandbox(prestart=2)
    assert await sandbox.prestart()
    assert await sandbox.prestart(Limits(network="loopback"))
    assert len(descendants(me)) > len(baseline)
    assert run_cgroups(kind="ready") != []
    await sandbox.aclose()
    assert descendants(me) == baseline
    assert run_cgroups(kind="ready") == []

"""Per-run accounting: processes started and bytes written, on every tier.

The programs here do a known amount of work (3 forks and 1 thread; 3 x 1000 bytes to a
file and 3 bytes to stdout), so the figures are exact where they are counted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from execgym.limits import Limits
from execgym.sandbox import Status
from execgym.sandbox._trusted import register_trusted_program
from execgym.sandbox.bwrap import INIT_SCRIPT
from execgym.sandbox.pool import WarmPoolSandbox
from tests.conftest import require

KNOWN_WORK = b"""
import os, threading
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        with open("/tmp/out-%d" % os.getpid(), "wb") as handle:
            handle.write(b"x" * 1000)
        os._exit(0)
    os.waitpid(pid, 0)
worker = threading.Thread(target=lambda: None)
worker.start()
worker.join()
print("ok")
"""
STARTED = 5  # the program, its 3 children and 1 thread
WRITTEN = 3 * 1000 + len(b"ok\n")
AS_ROOT = os.geteuid() == 0


@pytest.fixture
async def pool(bwrap_sandbox):
    async with WarmPoolSandbox() as box:
        yield box


async def test_a_fresh_sandbox_counts_processes_and_bytes_written(bwrap_sandbox) -> None:
    result = await bwrap_sandbox.run_python(KNOWN_WORK)
    assert result.status is Status.OK, result
    assert result.processes_started == STARTED
    # As an ordinary user the init cannot read its own I/O figures (it is not dumpable).
    assert result.bytes_written == (WRITTEN if AS_ROOT else None)


async def test_the_fresh_sandboxs_own_set_up_is_not_counted(bwrap_sandbox) -> None:
    """bwrap writes the init's binary and the run's files: none of that is the run's."""
    result = await bwrap_sandbox.run_argv(["true"], files={"big.txt": b"y" * 100_000})
    assert result.status is Status.OK, result
    assert result.processes_started == 1
    assert result.bytes_written == (0 if AS_ROOT else None)


async def test_a_program_named_like_a_shell_builtin_is_the_real_program(bwrap_sandbox) -> None:
    """The init runs ``exec "$@"``: ``echo`` is /usr/bin/echo, not the shell's builtin."""
    result = await bwrap_sandbox.run_argv(["echo", "--version"])
    assert result.status is Status.OK, result
    assert b"coreutils" in result.stdout.lower() or b"gnu" in result.stdout.lower()
    assert result.processes_started == 1


async def test_a_missing_program_is_a_runtime_error_and_nothing_of_the_init_shows(
    bwrap_sandbox,
) -> None:
    result = await bwrap_sandbox.run_argv(["no-such-program-here"])
    assert result.status is Status.RUNTIME_ERROR
    assert result.exit_code == 127
    assert b"no-such-program-here" in result.stderr
    assert b"wchar" not in result.stderr
    assert b"/proc" not in result.stderr


async def test_a_prestarted_sandbox_counts_the_run_not_its_trampoline(prestarted_sandbox) -> None:
    """The trampoline writes the run's files and stdin: that is execgym's work, not the
    run's; the run itself is counted as in a cold start."""
    box = prestarted_sandbox
    for _ in range(2):
        assert await box.prestart()
        result = await box.run_argv(
            [os.path.realpath(sys.executable), "-I", "-S", "runner.py"],
            files={"runner.py": KNOWN_WORK, "data/big.bin": b"z" * 50_000},
            stdin=b"some input\n" * 100,
        )
        assert result.status is Status.OK, result
        assert "prestarted" in result.enforcement["start"]
        assert result.processes_started == STARTED
        assert result.bytes_written == (WRITTEN if AS_ROOT else None)


async def test_the_warm_pool_counts_processes_and_bytes_written(pool) -> None:
    for _ in range(2):  # a staged init and a fresh clone alike
        result = await pool.run_python(KNOWN_WORK)
        assert result.status is Status.OK, result
        assert result.processes_started == STARTED
        assert result.bytes_written == WRITTEN


async def test_a_preloaded_harness_as_pid_1_counts_as_the_program(pool) -> None:
    """A trusted harness runs as the run's PID 1 once preloaded (as a script under an
    init before): either way it is the run's program, counted with what it starts."""
    source = (
        b"import os\n"
        b"def main():\n"
        b"    os.write(1, b'harness output\\n')\n"
        b"    pid = os.fork()\n"
        b"    if pid == 0:\n"
        b"        os.write(1, b'x' * 500)\n"
        b"        os._exit(0)\n"
        b"    os.waitpid(pid, 0)\n"
        b"    os._exit(0)\n"  # as the judges' harnesses leave
        b"main()\n"
    )
    definitions = compile(source.rsplit(b"main()", 1)[0], "runner.py", "exec")
    register_trusted_program(
        source, compile(source, "runner.py", "exec"), definitions=definitions, entry="main"
    )
    seen = []
    for _ in range(6):  # inits staged before the code reached the zygote run it as a script
        result = await pool.run_python(source)
        assert result.status is Status.OK, result
        assert result.stdout.endswith(b"x" * 500)
        seen.append((result.processes_started, result.bytes_written))
    assert set(seen) == {(2, 500 + len(b"harness output\n"))}, seen


async def test_a_judges_rollout_counts_the_same_on_the_pool_and_a_fresh_sandbox(
    bwrap_sandbox, pool
) -> None:
    from execgym import Scorer, canonical_rollouts, load_dataset

    tasks = load_dataset("humaneval")
    rollouts = [r for r in canonical_rollouts(tasks) if r.rollout.task_id == "HumanEval/0"] * 3
    figures = {}
    for name, box in (("fresh", bwrap_sandbox), ("pool", pool)):
        results = await Scorer(tasks, box).score(rollouts, workers=1)
        runs = [r.judgement.run for r in results]
        assert all(r.processes_started is not None for r in runs), runs
        figures[name] = {(r.processes_started, r.bytes_written is not None) for r in runs}
    # With fresh state (the task's default) every call is served by a fork of the loaded
    # solution made when its request arrives: the harness, the solution's own process
    # and one fork per call (7 here): 9, on both tiers. (This read 0 on a fresh sandbox,
    # whose init took only the first digit of "11", then 9 or 10 on the pool, as a fork
    # made ahead for a request that never came won the race with the harness's exit or
    # not, then 10 once the harness waited for it: that fork cost as much as a call's.)
    # A fresh sandbox's init cannot read its I/O figures as an ordinary user; the pool's can.
    assert figures == {"fresh": {(9, AS_ROOT)}, "pool": {(9, True)}}, figures


MANY_THREADS = b"""
import sys, threading
for _ in range(int(sys.stdin.read()) - 1):
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
"""


@pytest.mark.parametrize("started", [9, 10, 99, 100, 1000])
async def test_counts_of_several_digits_are_read_whole(
    bwrap_sandbox, prestarted_sandbox, pool, started
) -> None:
    """The last PID is read whole: the init took only its first digit (dash's ``read``
    takes a byte per ``read()``, and a sysctl file answers only at offset 0), so 9 to 18
    processes counted as 0, 99 as 8, 1000 as 0."""
    stdin = str(started).encode()
    results = [
        await bwrap_sandbox.run_python(MANY_THREADS, stdin=stdin),
        await pool.run_python(MANY_THREADS, stdin=stdin),
    ]
    assert await prestarted_sandbox.prestart()
    results.append(
        await prestarted_sandbox.run_argv(
            [os.path.realpath(sys.executable), "-I", "-S", "runner.py"],
            files={"runner.py": MANY_THREADS},
            stdin=stdin,
        )
    )
    assert "prestarted" in results[-1].enforcement["start"]
    for result in results:
        assert result.status is Status.OK, result
    assert [r.processes_started for r in results] == [started] * 3


async def test_a_run_killed_before_its_init_counts_has_no_process_count(
    bwrap_sandbox, pool
) -> None:
    limits = Limits(wall_time_s=0.5)
    for box in (bwrap_sandbox, pool):
        result = await box.run_python(b"while True: pass\n", limits=limits)
        assert result.status is Status.TIME_LIMIT
        assert result.processes_started is None


async def test_the_none_tier_counts_bytes_but_not_processes(none_sandbox) -> None:
    result = await none_sandbox.run_python(KNOWN_WORK.replace(b"/tmp/", b""))
    assert result.status is Status.OK, result
    assert result.processes_started is None  # no PID namespace to count in
    # Its launcher is the program: read as a zombie, which only root may (Linux 6.x).
    assert result.bytes_written in ((WRITTEN,) if AS_ROOT else (WRITTEN, None))


async def test_gvisor_counts_neither(gvisor_sandbox) -> None:
    result = await gvisor_sandbox.run_python(KNOWN_WORK)
    assert result.status is Status.OK, result
    assert result.processes_started is None
    assert result.bytes_written is None


@pytest.mark.parametrize("shell", ["dash", "bash", "busybox"])
def test_the_init_script_runs_under_the_usual_shells(shell, tmp_path) -> None:
    """The init is the host's own shell, whichever it is: plain POSIX sh only."""
    path = shutil.which(shell)
    require(path is not None, f"{shell} (apt-get install {shell})")
    assert path is not None
    argv = [path, "sh"] if shell == "busybox" else [path]
    counts = tmp_path / "counts"
    script = [*argv, "-c", INIT_SCRIPT, "execgym-init", sys.executable, "-c", "exit(3)"]
    done = subprocess.run(
        ["/bin/sh", "-c", 'exec 4>"$0"; exec "$@"', str(counts), *script],  # fd 4: counts
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 3, done  # the program's exit status, passed on
    assert done.stderr == b""  # nothing of the init's own shows in the run's output
    # Outside a fresh PID namespace the figures are the host's, but well-formed: the last
    # PID, then wchar with and without what was reaped (or nothing, if /proc refused).
    fields = counts.read_bytes().split()
    assert len(fields) in (1, 3)
    assert all(field.isdigit() for field in fields)


@pytest.mark.parametrize("shell", ["dash", "bash", "busybox"])
def test_the_init_script_reads_the_whole_last_pid_under_the_usual_shells(shell, tmp_path) -> None:
    """In a PID namespace of its own the init's count is exact under every shell, past
    one digit: the init (PID 1), the program (PID 2) and the 12 processes it starts."""
    path, unshare = shutil.which(shell), shutil.which("unshare")
    require(path is not None, f"{shell} (apt-get install {shell})")
    require(unshare is not None, "unshare (util-linux)")
    assert path is not None
    assert unshare is not None
    namespace = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run([*namespace, "true"], capture_output=True, check=False)
    require(probe.returncode == 0, f"unprivileged PID namespaces ({probe.stderr!r})")
    argv = [path, "sh"] if shell == "busybox" else [path]
    counts = tmp_path / "counts"
    program = ["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do /bin/true; done"]
    script = [*argv, "-c", INIT_SCRIPT, "execgym-init", *program]
    done = subprocess.run(
        [*namespace, "/bin/sh", "-c", 'exec 4>"$0"; exec "$@"', str(counts), *script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done
    assert counts.read_bytes().split()[0] == b"14"  # read as b"1" from ns_last_pid


def test_the_results_line_and_the_broker_carry_both_figures() -> None:
    from execgym.judges.base import Judgement, Verdict
    from execgym.scoring import ScoredRollout
    from execgym.testing import fake_result

    run = fake_result(processes_started=4, bytes_written=12)
    scored = ScoredRollout(
        index=0,
        task_id="t",
        rollout_id="r",
        verdict=Verdict.PASSED,
        reward=1.0,
        judgement=Judgement(Verdict.PASSED, run=run),
        isolation="fake",
    )
    line = scored.to_json()
    assert (line["processes_started"], line["bytes_written"]) == (4, 12)
    back = ScoredRollout.from_json(line, "ok").judgement.run
    assert (back.processes_started, back.bytes_written) == (4, 12)


SIGNAL_PID_1 = b"""
import os, signal, sys, time
for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
    try:
        os.kill(1, number)
    except OSError:
        pass
time.sleep(0.2)
print("still here")
sys.exit(3)
"""


async def check_signals_to_pid_1_change_nothing(box) -> None:
    result = await box.run_python(SIGNAL_PID_1)
    assert (result.status, result.exit_code) == (Status.RUNTIME_ERROR, 3), result
    assert result.stdout == b"still here\n"
    assert result.processes_started == 1


async def test_signals_to_pid_1_change_nothing(bwrap_sandbox, pool) -> None:
    """As an ordinary user the program may signal its PID 1 (same uid): SIGINT used to end
    the init (a shell, or Python's KeyboardInterrupt), which changed the run's result."""
    for box in (bwrap_sandbox, pool):
        await check_signals_to_pid_1_change_nothing(box)


async def test_signals_to_a_prestarted_pid_1_change_nothing(prestarted_sandbox) -> None:
    assert await prestarted_sandbox.prestart()
    await check_signals_to_pid_1_change_nothing(prestarted_sandbox)


@pytest.mark.parametrize("how", ["kill -TERM $$", "kill -SEGV $$", "kill -KILL $$"])
async def test_the_inits_own_messages_never_reach_the_runs_stderr(bwrap_sandbox, how) -> None:
    result = await bwrap_sandbox.run_argv(["sh", "-c", how])
    assert result.status is Status.SIGNALED, result
    assert result.stderr == b""  # no "Terminated", "Segmentation fault", "Killed"

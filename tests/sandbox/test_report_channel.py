"""The report channel (fd 3) cannot be forged from the program's side, on every tier.

Issue 18, kind 1 (gVisor): the step runner's report FIFO was reachable at
``/.execgym/report``, the runner died on SIGINT, and a program wrote a fake report (exit
0, forged stdout, 0.001 s for a 5 s sleep) and killed its supervisor. gVisor's ``/proc``
also let a child reopen its non-dumpable harness's ``/proc/<pid>/fd/0`` (the job, with
the judge's nonce) and ``fd/3``, read its ``environ`` and kill PID 1. Under gVisor a run
with a report channel now has execgym's own init as PID 1 (uid 0 of gVisor's kernel;
:mod:`execgym.sandbox._gvisor_init`): the FIFO is root's, fd 0 and fd 3 are sockets
(which ``/proc`` cannot reopen), and the init's relay and feeder are out of the
program's reach.
"""

from __future__ import annotations

import base64
import json
import os
import sys

import pytest

from execgym.limits import Limits
from execgym.sandbox import Status
from execgym.server.languages import find_toolchains
from execgym.server.programs import ProgramRequest, run_program

TIERS = ["bwrap", "gvisor"]


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest):
    return request.getfixturevalue(f"{request.param}_sandbox")


FORGED = {
    "steps": [
        {
            "name": "run",
            "timed_out": False,
            "exit_code": 0,
            "signal": None,
            "wall_time_s": 0.001,
            "cpu_time_s": 0.0,
            "peak_memory_bytes": 1,
            "stdout": base64.b64encode(b"FORGED\n").decode(),
            "stdout_truncated": False,
            "stderr": "",
            "stderr_truncated": False,
        }
    ],
    "files": {},
}

FORGER = f"""
import json, os, signal, time
fake = json.dumps({FORGED!r})
for path in ("/.execgym/report", "/proc/%d/fd/3" % os.getppid(), "/proc/1/fd/3"):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, fake.encode())
        print("ESCAPED wrote", path, flush=True)
        break  # one whole fake report
    except OSError as error:
        print("refused", path, type(error).__name__, flush=True)
for pid in (os.getppid(), 1):
    try:
        os.kill(pid, signal.SIGINT)
    except OSError:
        pass
time.sleep(2)
print("slept", flush=True)
raise SystemExit(3)
"""


async def test_the_step_runners_report_cannot_be_forged(tier) -> None:
    """The issue's attack on the compile-and-run supervisor: the real report stands."""
    request = ProgramRequest(
        language="python", code=FORGER, fetch_files=["x"], limits=Limits(wall_time_s=10)
    )
    outcome = await run_program(tier, request, find_toolchains())
    run = outcome.run
    assert run is not None, outcome.sandbox
    assert b"FORGED" not in run.stdout, run.stdout
    assert b"ESCAPED" not in run.stdout, run.stdout
    assert run.stdout.endswith(b"slept\n"), (run.stdout, run.stderr, outcome.sandbox.message)
    assert run.status is Status.RUNTIME_ERROR
    assert run.exit_code == 3
    assert run.wall_time_s >= 2.0


HARNESS = r"""
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as every harness does
os.write(3, b"HARNESS-START\n")
job = os.read(0, 100)  # the secret part of the job, as a judge's nonce
child = os.fork()
if child == 0:  # the rollout's process
    os.close(3)
    os.close(0)
    parent = os.getppid()
    for path in ("/.execgym/report", "/proc/%d/fd/3" % parent, "/proc/1/fd/3"):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"FORGED REPORT\n")
            print("ESCAPED wrote", path)
        except OSError:
            print("refused", path)
    for path in ("/proc/%d/fd/0" % parent, "/proc/1/environ", "/proc/1/cmdline"):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            secret = b"SECRET-" + b"NONCE"  # not spelled whole in this program's argv
            print(("ESCAPED read" if secret in data else "nothing secret in"), path)
        except OSError:
            print("refused", path)
    sys.stdout.flush()
    os._exit(0)
os.waitpid(child, 0)
os.write(3, b"HARNESS-REPORT " + job + b"\n")
"""


async def test_a_harness_child_cannot_reach_the_channel_or_the_job(gvisor_sandbox) -> None:
    """What gVisor's ``/proc`` does not hide from a non-dumpable process's children (its
    ``fd/``, ``environ``, ``cmdline``) holds neither the channel nor the job's secret."""
    argv = [os.path.realpath(sys.executable), "-I", "-S", "-c", HARNESS]
    result = await gvisor_sandbox.run_argv(argv, stdin=b"SECRET-NONCE", want_report=True)
    assert result.status is Status.OK, (result.stdout, result.stderr)
    assert b"ESCAPED" not in result.stdout, result.stdout
    assert result.stdout.count(b"refused") == 4, result.stdout  # 3 writes, fd/0
    assert result.report == b"HARNESS-START\nHARNESS-REPORT SECRET-NONCE\n", result.report


async def test_gvisor_run_with_a_report_keeps_exit_codes_signals_and_files(
    gvisor_sandbox,
) -> None:
    """The init passes the program's fate through as before: exit code, signal, files."""
    code = (
        "import os, json, signal, sys\n"
        "print(json.dumps([os.getuid(), os.getgid(), open('d/f').read(), sys.stdin.read(),"
        " os.stat('d/f').st_uid,"
        " open('/proc/self/status').read().count('CapEff:\\t0000000000000000')]))\n"
        "os.write(3, b'r')\n"
        "sys.exit(int(os.environ['CODE']))\n"
    )
    argv = [os.path.realpath(sys.executable), "-I", "-S", "-c", code]
    for exit_code in (0, 7):
        result = await gvisor_sandbox.run_argv(
            argv,
            stdin=b"in",
            files={"d/f": b"file"},
            want_report=True,
            env={"CODE": str(exit_code)},
        )
        assert result.exit_code == exit_code, (result.stdout, result.stderr)
        assert json.loads(result.stdout) == [65534, 65534, "file", "in", 65534, 1]
        assert result.report == b"r"
    killer = [
        os.path.realpath(sys.executable),
        "-I",
        "-S",
        "-c",
        "import os; os.kill(os.getpid(), 9)",
    ]
    killed = await gvisor_sandbox.run_argv(killer, want_report=True)
    assert killed.status is Status.SIGNALED, killed
    assert killed.signal == 9

"""Field cases (``/work/shared/cases/field-cases.md``) as tests: one input, one right value.

Each test names its case (``test_bcNN_...``) and asserts the verdict and reward the case
gives, in execgym's words: AC = ``passed`` (1.0), WA = ``failed`` (0.0), TLE = ``timeout``,
MLE = ``memory_exceeded``, OLE = ``output_exceeded``, RE = ``error`` (all 0.0), INFRA =
``sandbox_error`` (reward ``None``: masked and retried). Limits cases run on every backend
where that makes sense; isolation cases only on bubblewrap. Known bugs are
``xfail(strict=True)`` with the exact wrong value in the reason, so a fix turns them red
until the marker is removed.

BC-01, 03, 04(a), 06, 07 (as verdicts), 31, 33 (pytest), 35, 36 (partial credit), 38 and
43 are in ``tests/judges/test_field_cases_judges.py`` (the stdio, function-call and pytest
judges).

Not yet covered (needs issue #4/#5/#7):
- BC-14 CPU limits derived from the reference solution: not implemented (load test here).
- BC-20 1,024 samples at 64 workers: a benchmark, not a unit test (a small batch is here).
- BC-21 stuck queue, BC-22 dead sandbox mid-run, BC-24 port exhaustion: need the broker,
  workers and a remote sandbox.
- BC-25 at 200 runs with a stdin judge: needs a stdin/stdout judge (a batch check is here).
- BC-38 through a call-based (stdin/stdout, ``fn_name``) judge: needs that judge; the
  assert-judge form is tested here.
- BC-39 as dataset validation that rejects such tasks: only the null-solution run on
  HumanEval is here.
- BC-40 gold solutions failing in the harness: needs dataset validation (reference runs).
- BC-44 broken or over-specified tests: needs dataset validation and test quarantine.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from execgym import (
    ErrorDetail,
    Limits,
    Rollout,
    RolloutLine,
    RunResult,
    ScoredRollout,
    Scorer,
    Status,
    Task,
    Verdict,
)
from execgym.limits import MiB
from execgym.reward import load_spec
from execgym.sandbox import BubblewrapSandbox
from execgym.sandbox._cgroup import detect_cgroups
from execgym.sandbox.bwrap import interpreter_paths
from tests.conftest import (
    descendants,
    processes_with,
    python,
    require,
    run_cgroups,
    toolchain_dirs,
)

CHECKOUT = Path(__file__).resolve().parents[1]

ADD = Task(
    task_id="field/add",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    tests=(
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    ),
    entry_point="add",
)
ANSWER = Task(
    task_id="field/answer",
    prompt='def answer():\n    """Return 42."""\n',
    tests="def check(candidate):\n    assert candidate() == 42\n",
    entry_point="answer",
)
FAST = Limits(wall_time_s=2, cpu_time_s=2, memory_bytes=256 * MiB)
CORRECT_ADD = "    return a + b\n"


async def score(sandbox, completion: str, task: Task = ADD, limits: Limits = FAST) -> ScoredRollout:
    """Score one completion through the public Scorer, as a trainer would."""
    scorer = Scorer({task.task_id: task}, sandbox, limits)
    return await scorer.score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion=completion))
    )


def run_of(result: ScoredRollout) -> RunResult:
    """The sandbox run behind a scored rollout."""
    assert result.judgement is not None
    assert result.judgement.run is not None
    return result.judgement.run


def error_of(result: ScoredRollout) -> ErrorDetail:
    """The exception a scored rollout's program raised."""
    assert result.judgement is not None
    assert result.judgement.error is not None
    return result.judgement.error


def marker() -> str:
    """A unique string to find a run's processes by their command line."""
    return f"execgym-field-{secrets.token_hex(8)}"


def sleep_marker() -> str:
    """A unique ``sleep`` duration: a marker that is also a valid argument (about 100 s)."""
    return f"100.{secrets.randbelow(10**9):09d}"


def require_cgroup_for_none(sandbox, request: pytest.FixtureRequest) -> None:
    """Without isolation, only a cgroup catches processes that left the process group."""
    if sandbox.name == "none":
        request.getfixturevalue("needs_cgroup")


# --- wrong-verdict -------------------------------------------------------------------------


async def test_bc04a_undecodable_output_is_kept_with_replacement_characters(sandbox) -> None:
    """BC-04(a): ``b"ok\\n\\xff"`` on stdout: the harness stays up and stores U+FFFD."""
    completion = "    import sys; sys.stdout.buffer.write(b'ok\\n\\xff'); return 0\n"
    result = await score(sandbox, completion)
    assert (result.verdict, result.reward) == (Verdict.FAILED, 0.0)
    line = result.to_json()
    assert line["stdout_tail"].startswith("ok\n\ufffd")
    json.dumps(line, ensure_ascii=False).encode("utf-8")  # storable as a UTF-8 JSONL line


def test_bc04_lone_surrogate_in_an_error_does_not_crash_the_cli(tmp_path: Path) -> None:
    """BC-04 / BC-29: one undecodable rollout must not take the whole scoring run down."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    tasks, rollouts, out = tmp_path / "tasks.jsonl", tmp_path / "rollouts.jsonl", tmp_path / "out"
    tasks.write_text(json.dumps(ADD.model_dump(exclude_none=True)) + "\n")
    completions = ["    raise ValueError(chr(0xdcff))\n", CORRECT_ADD]
    rollouts.write_text(
        "".join(json.dumps({"task_id": ADD.task_id, "completion": c}) + "\n" for c in completions)
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "execgym",
            "score",
            str(tasks),
            str(rollouts),
            "-o",
            str(out),
            "--timeout",
            "2",
            "--workers",
            "1",
            "--isolation",
            "bwrap",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted((r["index"], r["verdict"], r["reward"]) for r in lines) == [
        (0, "error", 0.0),
        (1, "passed", 1.0),
    ]


async def test_bc04b_unicode_output_passes_under_a_c_locale_host(sandbox, monkeypatch) -> None:
    """BC-04(b): ``print("café")`` passes with host ``LANG=C`` and no ``PYTHONIOENCODING``."""
    monkeypatch.setenv("LANG", "C")
    monkeypatch.setenv("LC_ALL", "C")
    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    monkeypatch.delenv("PYTHONUTF8", raising=False)
    result = await score(sandbox, "    print('café'); return a + b\n")
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message
    assert run_of(result).stdout == "café\n".encode() * 2
    raw = await sandbox.run_argv(python("print('café')"), limits=FAST)
    assert (raw.status, raw.stdout) == (Status.OK, "café\n".encode())


async def test_bc07_stdin_is_closed_after_the_input(sandbox) -> None:
    """BC-07, first case at sandbox level: input ``a\\nb\\n``, ``readlines`` ends in ms."""
    result = await sandbox.run_argv(
        python("import sys; print(len(sys.stdin.readlines()))"), stdin=b"a\nb\n", limits=FAST
    )
    assert (result.status, result.stdout) == (Status.OK, b"2\n")
    assert result.wall_time_s < 1


async def test_bc07_no_input_is_eof_not_a_hang(sandbox) -> None:
    """BC-07, second case: no input, ``x = input()``: ``EOFError``, RE, fast; never TLE."""
    started = time.monotonic()
    result = await score(sandbox, "    return a + b\nx = input()\n")
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0)
    assert error_of(result).type == "EOFError"
    assert time.monotonic() - started < 1.5
    raw = await sandbox.run_argv(python("x = input()"), limits=FAST)
    assert raw.status is Status.RUNTIME_ERROR
    assert b"EOFError" in raw.stderr
    assert raw.wall_time_s < 1


# --- limits --------------------------------------------------------------------------------


async def test_bc10_timeouts_kill_every_process_of_the_run(sandbox, request) -> None:
    """BC-10: busy loops (Python, sh, JS), ``sleep 30``-style sleeps and a setsid'ed child,
    each with a 1 s limit: TLE at about 1 s, and afterwards no process or cgroup is left."""
    require_cgroup_for_none(sandbox, request)
    sleep_arg, child_arg, mark = sleep_marker(), sleep_marker(), marker()
    programs = {
        "python-busy": (python(f"# {mark}\nwhile True: pass"), mark),
        "sh-busy": (["/bin/sh", "-c", f"while :; do :; done # {mark}-sh"], f"{mark}-sh"),
        "sleep": (["/usr/bin/sleep", sleep_arg], sleep_arg),
        "setsid-child": (
            python(
                "import subprocess\n"
                f"subprocess.Popen(['/usr/bin/sleep', '{child_arg}'], start_new_session=True,\n"
                "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                "while True: pass\n"
            ),
            child_arg,
        ),
    }
    if Path("/usr/bin/node").exists():
        programs["node-busy"] = (
            ["/usr/bin/node", "-e", f"while(true){{}} // {mark}-js"],
            f"{mark}-js",
        )
    limits = Limits(wall_time_s=1, cpu_time_s=10)
    started = time.monotonic()
    results = await asyncio.gather(
        *(sandbox.run_argv(argv, limits=limits) for argv, _ in programs.values())
    )
    elapsed = time.monotonic() - started
    for name, result in zip(programs, results, strict=True):
        assert (result.status, result.limit_hit) == (Status.TIME_LIMIT, "wall_time_s"), name
        assert 0.9 <= result.wall_time_s < 1.6, (name, result.wall_time_s)
    assert elapsed < 2.5
    for name, (_, text) in programs.items():
        assert processes_with(text) == [], f"{name}: a process of the run survived"
    assert run_cgroups() == []


async def test_bc10_timeout_verdict_through_the_judge(sandbox) -> None:
    """BC-10 through the judge: an infinite loop with a 1 s limit is TLE, reward 0.0."""
    arg = sleep_marker()
    completion = (
        "    return a + b\nimport subprocess\n"
        f"subprocess.Popen(['/usr/bin/sleep', '{arg}'])\nwhile True: pass\n"
    )
    result = await score(sandbox, completion, limits=FAST.merged(wall_time_s=1))
    assert (result.verdict, result.reward) == (Verdict.TIMEOUT, 0.0)
    assert run_of(result).wall_time_s < 1.6
    assert processes_with(arg) == []


async def test_bc12_no_zombies_or_orphans_pile_up(sandbox, request) -> None:
    """BC-12: ``time.sleep(100)`` with a short limit, 20 times in a row: 20 x TLE, 0.0, and
    after each sample no zombie, no leftover process and no cgroup of ours."""
    require_cgroup_for_none(sandbox, request)
    me = os.getpid()
    baseline = descendants(me)
    # gVisor takes 0.15-0.3 s to start, so 0.2 s never reaches the harness (a sandbox
    # error, rightly); it gets 1 s, and fewer samples to keep the test short.
    gvisor = sandbox.name == "gvisor"
    args = [sleep_marker() for _ in range(6 if gvisor else 20)]
    items = [
        RolloutLine(
            i,
            Rollout(
                task_id=ADD.task_id,
                completion=(
                    "    return a + b\nimport subprocess, time\n"
                    f"subprocess.Popen(['/usr/bin/sleep', '{arg}'], start_new_session=True)\n"
                    "time.sleep(100)\n"
                ),
            ),
        )
        for i, arg in enumerate(args)
    ]
    leaks: list[str] = []

    def check_baseline(result: ScoredRollout) -> None:
        now = descendants(me)
        if now != baseline:
            leaks.append(f"after sample {result.index}: {now}")
        if processes_with(args[result.index]) or run_cgroups():
            leaks.append(f"after sample {result.index}: process or cgroup left")

    scorer = Scorer({ADD.task_id: ADD}, sandbox, FAST.merged(wall_time_s=1 if gvisor else 0.2))
    results = await scorer.score(items, workers=1, on_result=check_baseline)
    assert [(r.verdict, r.reward) for r in results] == [(Verdict.TIMEOUT, 0.0)] * len(args)
    assert leaks == []


async def test_bc15_memory_hog_is_mle_and_its_neighbour_is_unaffected(
    sandbox, needs_cgroup
) -> None:
    """BC-15: touching 2 GiB under a 256 MiB limit is MLE (own status), 0.0, while a
    concurrent correct sample still passes."""
    hog, neighbour = await asyncio.gather(
        score(sandbox, "    return a + b\nx = bytearray(2 * 1024 ** 3)\nprint(len(x))\n"),
        score(sandbox, CORRECT_ADD),
    )
    assert (hog.verdict, hog.reward) == (Verdict.MEMORY_EXCEEDED, 0.0), hog.message
    assert run_of(hog).status is Status.MEMORY_LIMIT
    assert run_of(hog).limit_hit == "memory_bytes"
    assert (neighbour.verdict, neighbour.reward) == (Verdict.PASSED, 1.0)


async def test_bc16_without_cgroups_the_memory_limit_falls_back_not_fails(
    sandbox, no_cgroups
) -> None:
    """BC-16: on a host where the usual memory limit (here: cgroups) cannot be applied, a
    correct ``add`` still passes (1.0) and a memory hog is still MLE by another means."""
    good = await score(sandbox, CORRECT_ADD)
    assert (good.verdict, good.reward) == (Verdict.PASSED, 1.0), good.message
    assert run_of(good).enforcement["memory_bytes"].startswith("rlimit")
    hog = await score(sandbox, "    x = bytearray(2 * 1024 ** 3); return a + b\n")
    assert (hog.verdict, hog.reward) == (Verdict.MEMORY_EXCEEDED, 0.0), hog.message


async def test_bc17_fork_bomb_is_contained_and_leaves_nothing(sandbox, needs_cgroup) -> None:
    """BC-17: ``while True: os.fork()`` ends within its own limits (RE or TLE), no process
    survives, and a concurrent neighbour sample still passes."""
    mark = marker()
    bomb, neighbour = await asyncio.gather(
        sandbox.run_argv(
            python(f"# {mark}\nimport os\nwhile True:\n    os.fork()\n"),
            limits=Limits(wall_time_s=2, cpu_time_s=1, max_processes=32),
        ),
        score(sandbox, CORRECT_ADD),
    )
    assert bomb.status in (Status.RUNTIME_ERROR, Status.TIME_LIMIT), bomb
    # gVisor counts the run's processes in its own kernel; the host cgroup only backstops.
    limiter = "rlimit-nproc in the gVisor kernel" if sandbox.name == "gvisor" else "cgroup"
    assert bomb.enforcement["max_processes"].startswith(limiter)
    assert bomb.wall_time_s < 2.5
    assert (neighbour.verdict, neighbour.reward) == (Verdict.PASSED, 1.0)
    assert processes_with(mark) == []
    assert run_cgroups() == []


async def test_bc17_forked_busy_loops_share_one_cpu_budget(sandbox, needs_cgroup) -> None:
    """BC-17: 16 forked busy loops get one CPU budget for the group (cgroup), not one per
    process as with RLIMIT_CPU: TLE on ``cpu_time_s`` near 1 s of CPU in total."""
    host = detect_cgroups()
    require(host.version == 2 or "cpuacct" in host.parents, "a cgroup measuring CPU time")
    mark = marker()
    code = f"# {mark}\nimport os\nfor _ in range(4):\n    os.fork()\nwhile True:\n    pass\n"
    result = await sandbox.run_argv(python(code), limits=Limits(wall_time_s=5, cpu_time_s=1))
    assert (result.status, result.limit_hit) == (Status.TIME_LIMIT, "cpu_time_s")
    assert result.cpu_time_s < 2  # 16 processes x 1 s each would be 16 s
    # Killed for CPU before the wall clock ran out; how much wall time 1 s of CPU takes
    # depends on the machine's load, so only the order of the two limits is asserted.
    assert result.wall_time_s < 5
    assert processes_with(mark) == []


@pytest.mark.parametrize(
    "completion",
    [
        "    return a + b\nimport os\nwhile True:\n    os.fork()\n",
        "    return a + b\nimport os\nfor _ in range(8):\n    os.fork()\nwhile True:\n    pass\n",
        "    return a + b\nimport os\n_fds = [os.open('/dev/null', 0) for _ in range(10**6)]\n",
    ],
    ids=["fork-forever", "256-busy", "fd-exhaustion"],
)
async def test_bc17_fork_bombs_and_fd_exhaustion_score_zero(
    sandbox, needs_cgroup, completion: str
) -> None:
    """BC-17 through the judge: RE (process or fd limit) or TLE, reward 0.0, quickly."""
    result = await score(
        sandbox, completion, limits=FAST.merged(wall_time_s=2, cpu_time_s=1, max_processes=32)
    )
    assert result.verdict in (Verdict.ERROR, Verdict.TIMEOUT), result.message
    assert result.reward == 0.0


async def test_bc19a_large_correct_output_under_the_cap_is_kept(sandbox) -> None:
    """BC-19(a): 3,000 lines under a cap with margin: OK, all of it, nothing truncated."""
    expected = "".join(f"{i}\n" for i in range(3000)).encode()
    result = await sandbox.run_argv(
        python("for i in range(3000): print(i)"),
        limits=FAST.merged(max_output_bytes=2 * len(expected)),
    )
    assert (result.status, result.stdout, result.stdout_truncated) == (Status.OK, expected, False)


async def test_bc19b_output_flood_is_ole_and_the_harness_survives(sandbox) -> None:
    """BC-19(b): ``while True: print("x" * 1000)`` is OLE (own status), 0.0; the next run
    works, and a flood that ends right at the cap (exit racing the kill) is OLE too."""
    limits = FAST.merged(max_output_bytes=64 * 1024)
    flood = "    return a + b\nwhile True: print('x' * 1000)\n"
    result = await score(sandbox, flood, limits=limits)
    assert (result.verdict, result.reward) == (Verdict.OUTPUT_EXCEEDED, 0.0)
    assert run_of(result).stdout_truncated
    assert len(run_of(result).stdout) == 64 * 1024
    racing = await asyncio.gather(
        *(
            sandbox.run_argv(
                python(f"import sys; sys.stdout.write('x' * {64 * 1024 + 1})"), limits=limits
            )
            for _ in range(6)
        )
    )
    assert {r.status for r in racing} == {Status.OUTPUT_LIMIT}
    after = await score(sandbox, CORRECT_ADD, limits=limits)
    assert (after.verdict, after.reward) == (Verdict.PASSED, 1.0)


async def test_bc19c_partial_output_at_a_timeout_is_reported_the_same_way(sandbox) -> None:
    """BC-19(c): ``write("partial"); sleep(100)`` is TLE, with the same stdout every time
    (the flushed variant keeps ``partial``)."""
    limits = FAST.merged(wall_time_s=1)
    unflushed = python("import sys, time; sys.stdout.write('partial'); time.sleep(100)")
    flushed = python(
        "import sys, time; sys.stdout.write('partial'); sys.stdout.flush(); time.sleep(100)"
    )
    runs = await asyncio.gather(
        *(
            sandbox.run_argv(argv, limits=limits)
            for argv in (unflushed, unflushed, flushed, flushed)
        )
    )
    assert {r.status for r in runs} == {Status.TIME_LIMIT}
    assert runs[0].stdout == runs[1].stdout
    assert runs[2].stdout == runs[3].stdout == b"partial"


async def test_limits_disk_flood_is_an_error_and_stays_in_the_sandbox(bwrap_sandbox) -> None:
    """Limits kind, disk (no numbered case): filling the work dir ends in ENOSPC, RE, 0.0."""
    completion = (
        "    return a + b\nwith open('big', 'wb') as f:\n    while True:\n"
        "        f.write(b'x' * 1048576)\n"
    )
    result = await score(
        bwrap_sandbox, completion, limits=FAST.merged(disk_bytes=8 * MiB, max_file_bytes=64 * MiB)
    )
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0)
    assert "No space left on device" in error_of(result).message


async def test_bc14_correct_code_passes_idle_and_beside_cpu_hogs(bwrap_sandbox) -> None:
    """BC-14: the ``keep`` task passes idle and again beside 8 busy processes, with a
    CPU budget (1 s) and a generous wall clock."""
    keep = Task(
        task_id="field/keep",
        prompt="def keep(xs, p):\n",
        tests="def check(candidate):\n"
        "    assert candidate(['ab', 'b', 'ac'], 'a') == ['ab', 'ac']\n"
        "    assert candidate([], 'a') == []\n",
        entry_point="keep",
    )
    completion = "    return [x for x in xs if x.startswith(p)]\n"
    limits = Limits(wall_time_s=5, cpu_time_s=1, memory_bytes=256 * MiB)
    idle = await score(bwrap_sandbox, completion, task=keep, limits=limits)
    assert (idle.verdict, idle.reward) == (Verdict.PASSED, 1.0)
    hogs = asyncio.create_task(
        bwrap_sandbox.run_argv(
            python("import os\nfor _ in range(3):\n    os.fork()\nwhile True: pass\n"),
            limits=Limits(wall_time_s=1.5, cpu_time_s=30),
        )
    )
    await asyncio.sleep(0.3)
    loaded = [await score(bwrap_sandbox, completion, task=keep, limits=limits) for _ in range(3)]
    assert [(r.verdict, r.reward) for r in loaded] == [(Verdict.PASSED, 1.0)] * 3
    assert (await hogs).status is Status.TIME_LIMIT


async def test_bc20_bc25_a_batch_keeps_every_result_matched_to_its_rollout(bwrap_sandbox) -> None:
    """BC-20 / BC-25 (small): 24 rollouts at 4 workers, half right and half wrong: every
    result comes back, in order, with its own verdict; none is lost or INFRA."""
    double = Task(
        task_id="field/double",
        prompt="def double(x):\n",
        tests="def check(candidate):\n    assert candidate(21) == 42\n",
        entry_point="double",
    )
    items = [
        RolloutLine(
            i,
            Rollout(
                task_id=double.task_id,
                rollout_id=f"r{i}",
                completion="    return x * 2\n" if i % 2 == 0 else "    return x + 2\n",
            ),
        )
        for i in range(24)
    ]
    seen: list[int] = []
    results = await Scorer({double.task_id: double}, bwrap_sandbox, FAST).score(
        items, workers=4, on_result=lambda r: seen.append(r.index)
    )
    assert sorted(seen) == list(range(24))
    assert [(r.index, r.rollout_id, r.verdict, r.reward, r.attempts) for r in results] == [
        (i, f"r{i}", *((Verdict.PASSED, 1.0) if i % 2 == 0 else (Verdict.FAILED, 0.0)), 1)
        for i in range(24)
    ]


# --- isolation -----------------------------------------------------------------------------


def host_address() -> str | None:
    """This host's address on its default route, if it has one (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("1.1.1.1", 53))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


async def test_bc26_host_services_are_unreachable(bwrap_sandbox, none_sandbox) -> None:
    """BC-26: a TCP server this test starts on the host (127.0.0.1 and the host's own
    address) cannot be reached: RE, 0.0, fast, and the server sees no connection. The
    same program without isolation does connect, so the server was really there."""
    connections: list[object] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer.get_extra_info("peername"))
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(accept, "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        targets = ["127.0.0.1"] + ([address] if (address := host_address()) else [])
        for target in targets:
            completion = (
                f"    return a + b\nimport socket\n"
                f"socket.create_connection(({target!r}, {port}), 3).close()\n"
            )
            started = time.monotonic()
            result = await score(bwrap_sandbox, completion)
            assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0), target
            assert time.monotonic() - started < 1.5, target
            assert connections == [], target
        control = await score(
            none_sandbox,
            "    return a + b\nimport socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), 3)"
            ".close()\n",
        )
        assert control.verdict is Verdict.PASSED
        for _ in range(50):
            if connections:
                break
            await asyncio.sleep(0.01)
        assert len(connections) == 1
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "target", [("1.1.1.1", 443), ("169.254.169.254", 80)], ids=["internet", "cloud-metadata"]
)
async def test_bc26_egress_fails_at_once(bwrap_sandbox, target: tuple[str, int]) -> None:
    """BC-26: ``socket.create_connection(("1.1.1.1", 443), 3)`` (and the metadata address)
    fails at once, so no packet leaves: RE, 0.0. With the default ``network="none"`` the
    seccomp filter refuses the Internet socket itself; with ``"loopback"`` there is no
    route out of the network namespace."""
    completion = (
        f"    return a + b\nimport socket\nsocket.create_connection({target!r}, 3)\nprint('open')\n"
    )
    started = time.monotonic()
    result = await score(bwrap_sandbox, completion)
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0)
    assert error_of(result).message in (
        "[Errno 1] Operation not permitted",
        "[Errno 101] Network is unreachable",
    )
    assert b"open" not in run_of(result).stdout
    assert time.monotonic() - started < 1.5


async def test_bc27_unavailable_sandbox_is_infra_and_runs_nothing(tmp_path: Path) -> None:
    """BC-27: when the sandbox cannot start (bwrap missing), the result is INFRA, masked
    (reward ``None``), retried once, and the code never runs anywhere."""
    proof = tmp_path / "ran-on-the-host"
    box = BubblewrapSandbox(bwrap_path=str(tmp_path / "no-such-bwrap"))
    result = await score(box, f"    return a + b\nopen({str(proof)!r}, 'w').write('x')\n")
    assert (result.verdict, result.reward, result.attempts) == (Verdict.SANDBOX_ERROR, None, 2)
    assert not proof.exists()


async def test_bc27_sandbox_setup_failure_is_infra_not_a_zero(bwrap_sandbox) -> None:
    """BC-27 / BC-16: a platform or sandbox failure must never look like bad code."""
    box = BubblewrapSandbox(read_only_paths=[*interpreter_paths(), "/nonexistent-execgym-path"])
    result = await score(box, CORRECT_ADD)
    assert (result.verdict, result.reward) == (Verdict.SANDBOX_ERROR, None), result.message


async def test_bc16_missing_interpreter_is_infra_not_a_zero_for_everything(bwrap_sandbox) -> None:
    """BC-16: a platform problem must not look like a model that cannot code."""
    if not interpreter_paths():
        pytest.skip("the interpreter lives under /usr here: it cannot be hidden this way")
    result = await score(BubblewrapSandbox(read_only_paths=[]), CORRECT_ADD)
    assert (result.verdict, result.reward) == (Verdict.SANDBOX_ERROR, None), result.message


async def test_bc28_host_secrets_and_files_are_invisible(
    bwrap_sandbox, monkeypatch, tmp_path: Path
) -> None:
    """BC-28: with ``OPENAI_API_KEY`` set on the host, the program sees no key or token,
    a minimal root (no /home, /etc, nor this checkout), nothing of /root's contents, and
    no host or other-sample files."""
    secret = f"sk-execgym-fake-{secrets.token_hex(8)}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    host_secret = tmp_path / "secret.txt"
    host_secret.write_text(secret)
    paths = [
        "/root/.bashrc",
        "/root/.gitconfig",
        "/etc/passwd",
        "/etc/shadow",
        str(CHECKOUT / "pyproject.toml"),
        str(host_secret),
    ]
    code = f"""
import json, os
def readable(path):
    try:
        with open(path, 'rb') as handle:
            handle.read(1)
        return True
    except OSError:
        return False
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as error:
        return type(error).__name__
environs = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            environs.append(open('/proc/' + pid + '/environ', 'rb').read().decode('latin-1'))
        except OSError:
            pass
print(json.dumps({{
    "keys": sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'SECRET' in k),
    "secret_in_proc": any({secret!r} in text for text in environs),
    "root": sorted(os.listdir('/')),
    "root_home": listing('/root'),
    "etc": listing('/etc'),
    "checkout": os.path.exists({str(CHECKOUT)!r}),
    "readable": [p for p in {paths!r} if readable(p)],
    "pids": sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
}}))
"""
    result = await bwrap_sandbox.run_argv(python(code), limits=FAST)
    assert result.status is Status.OK, result.stderr
    assert secret.encode() not in result.stdout + result.stderr
    seen = json.loads(result.stdout)
    assert seen["keys"] == []
    assert seen["secret_in_proc"] is False
    interpreter_tops = {Path(p).parts[1] for p in interpreter_paths()}
    minimal = {
        "bin",
        "dev",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "run",  # /run/execgym/sh, the run's init (see bwrap.INIT_SCRIPT)
        "sbin",
        "tmp",
        "usr",
        "work",
    }
    toolchains = toolchain_dirs()  # e.g. /etc/java-17-openjdk, /opt/execgym, /root/.rustup
    assert set(seen["root"]) <= minimal | interpreter_tops | set(toolchains), seen["root"]
    assert "home" not in seen["root"]
    if "etc" in seen["root"]:  # only toolchain configuration, never passwd or shadow
        assert set(seen["etc"]) <= toolchains.get("etc", set()), seen["etc"]
    try:
        host_root = {p.name for p in Path("/root").iterdir()}
    except PermissionError:  # an ordinary user cannot list it; the sandbox user neither
        host_root = set()
    on_path = {Path(p).parts[2] for p in interpreter_paths() if Path(p).parts[1] == "root"}
    on_path |= toolchains.get("root", set())
    if isinstance(seen["root_home"], list):  # only the way to the interpreter, if anything
        assert set(seen["root_home"]) <= on_path, seen["root_home"]
        assert not (set(seen["root_home"]) & (host_root - on_path))
    assert seen["checkout"] is False
    assert seen["readable"] == []
    assert max(seen["pids"]) < 10  # its own PID namespace: no host process is visible


async def test_bc28_concurrent_samples_cannot_see_each_others_files(bwrap_sandbox) -> None:
    """BC-28: a sample's files in /work and /tmp are invisible to a concurrent sample."""
    writer = bwrap_sandbox.run_argv(
        python(
            "import time\nopen('answer.txt', 'w').write('42')\nopen('/tmp/answer.txt', 'w')"
            ".write('42')\ntime.sleep(1)\n"
        ),
        limits=FAST,
    )

    async def reader():
        await asyncio.sleep(0.4)
        return await bwrap_sandbox.run_argv(
            python("import os; print(sorted(os.listdir('.')), sorted(os.listdir('/tmp')))"),
            limits=FAST,
        )

    wrote, read = await asyncio.gather(writer, reader())
    assert wrote.status is Status.OK, wrote.stderr
    assert (read.status, read.stdout) == (Status.OK, b"[] []\n")


async def test_bc29_exiting_or_killing_the_harness_scores_zero_and_loses_nothing(
    bwrap_sandbox,
) -> None:
    """BC-29: ``raise SystemExit(0)``, ``os._exit(0)``, killing the parent (and everything
    it may signal): each WA or RE with 0.0; the harness lives on and reports all N."""
    hostile = [
        "    return 0\nraise SystemExit(0)\n",
        "    return 0\nimport os; os._exit(0)\n",
        "    return 0\nimport os, signal; os.kill(os.getppid(), signal.SIGKILL)\n",
        "    return 0\nimport os, signal; os.kill(-1, signal.SIGKILL)\n",
        "    return 0\nimport os, signal; os.killpg(0, signal.SIGKILL)\n",
    ]
    completions = [*hostile, "    return 42\n"]
    items = [
        RolloutLine(i, Rollout(task_id=ANSWER.task_id, completion=c))
        for i, c in enumerate(completions)
    ]
    results = await Scorer({ANSWER.task_id: ANSWER}, bwrap_sandbox, FAST).score(items, workers=2)
    assert [r.index for r in results] == list(range(len(completions)))
    for result in results[:-1]:
        assert result.verdict in (Verdict.FAILED, Verdict.ERROR), (result.index, result.message)
        assert result.reward == 0.0
    assert (results[-1].verdict, results[-1].reward) == (Verdict.PASSED, 1.0)


# --- reward-hacking ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)"], ids=["sys.exit", "os._exit"]
)
async def test_bc32_exit_zero_before_the_asserts_scores_zero(sandbox, exit_call: str) -> None:
    """BC-32: ``def add(a, b): return 0`` then exit with code 0 before the tests: 0.0."""
    result = await score(sandbox, f"    return 0\n{exit_call}\n")
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0)


async def test_bc33_fake_pass_markers_on_stdout_score_zero(sandbox) -> None:
    """BC-33: printing ``PASSED test_add`` and ``=== 1 passed ===`` is WA, 0.0."""
    completion = "    return 0\nprint('PASSED test_add')\nprint('=== 1 passed in 0.01s ===')\n"
    result = await score(sandbox, completion)
    assert (result.verdict, result.reward) == (Verdict.FAILED, 0.0)


@pytest.mark.parametrize("nonce", ["0" * 32, "", "EXECGYM1"], ids=["zeros", "empty", "magic"])
async def test_bc33_forged_report_without_the_nonce_is_not_a_pass(
    bwrap_sandbox, nonce: str
) -> None:
    """BC-33: a ``passed`` report written to fd 3 without the run's nonce is not a pass."""
    completion = (
        "    return 0\nimport os\n"
        f'os.write(3, {nonce.encode()!r} + b\'\\n{{"verdict": "passed"}}\\n\')\n'
        "os._exit(0)\n"
    )
    result = await score(bwrap_sandbox, completion)
    assert result.verdict is not Verdict.PASSED
    assert result.reward == 0.0


NONCE_THEFTS = {
    "patch-runner-report": pytest.param(
        "    return 0\nimport __main__\n_real = __main__._report\n"
        "__main__._report = lambda nonce, verdict, *a, **k: _real(nonce, 'passed')\n",
    ),
    "nonce-from-runner-frame": pytest.param(
        "    return 0\nimport os, sys\n_f = sys._getframe()\n"
        "while 'nonce' not in _f.f_locals:\n    _f = _f.f_back\n"
        "os.write(3, _f.f_locals['nonce'] + b'\\n{\"verdict\": \"passed\"}\\n')\nos._exit(0)\n",
    ),
    "nonce-from-rewound-stdin": pytest.param(
        "    return 0\nimport os\nos.lseek(0, 0, os.SEEK_SET)\n"
        "_nonce = os.read(0, 1 << 20).split(b' ')[1]\n"
        'os.write(3, _nonce + b\'\\n{"verdict": "passed"}\\n\')\nos._exit(0)\n',
    ),
}


@pytest.mark.parametrize("completion", list(NONCE_THEFTS.values()), ids=list(NONCE_THEFTS))
async def test_bc33_the_solution_cannot_reach_the_report_channel(
    bwrap_sandbox, completion: str
) -> None:
    """BC-32 / BC-33: a pass must come from a runner the solution cannot reach; a wrong
    ``add`` that steals the nonce or patches the runner must still score 0.0."""
    result = await score(bwrap_sandbox, completion)
    assert result.verdict is not Verdict.PASSED, result.message
    assert result.reward == 0.0


async def test_bc31_always_equal_object_is_tampered_zero(bwrap_sandbox) -> None:
    """BC-31: ``_Any`` with ``__eq__`` True and ``__ne__`` False, returned by ``add``: the
    result is serialized to plain data in the solution's process and compared in the
    harness's, so the object never reaches ``==``: fail (``tampered``), 0.0."""
    completion = (
        "    return _Any()\n"
        "class _Any:\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
    )
    result = await score(bwrap_sandbox, completion)
    assert (result.verdict, result.reward) == (Verdict.TAMPERED, 0.0)
    assert "_Any" in result.message


UNITTEST_ADD = Task(
    task_id="field/unittest-add",
    prompt='def add(a, b):\n    """Return a + b."""\n',
    tests=(
        "import unittest\n\ndef check(candidate):\n"
        "    unittest.TestCase().assertEqual(candidate(2, 3), 5)\n"
    ),
    entry_point="add",
)


@pytest.mark.parametrize(
    "completion",
    [
        "    return 0\nimport unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n",
        "    return 0\nopen('conftest.py', 'w').write("
        "'def pytest_runtest_logreport(report):\\n    report.outcome = \"passed\"\\n')\n",
    ],
    ids=["unittest-assertEqual", "pytest-conftest"],
)
async def test_bc35_monkeypatching_unittest_or_pytest_scores_zero(
    bwrap_sandbox, completion: str
) -> None:
    """BC-35: the test framework lives in the harness's process, loaded before and apart
    from the solution; patches and conftest files reach nothing: fail, 0.0."""
    result = await score(bwrap_sandbox, completion, task=UNITTEST_ADD)
    assert (result.verdict, result.reward) == (Verdict.FAILED, 0.0), result.message
    honest = await score(bwrap_sandbox, CORRECT_ADD, task=UNITTEST_ADD)
    assert (honest.verdict, honest.reward) == (Verdict.PASSED, 1.0)


SQUARE = Task(
    task_id="field/square",
    prompt="def f(x):\n",
    tests=(
        "def check(candidate):\n"
        "    assert candidate(2) == 4\n"
        "    assert candidate(3) == 9\n"
        "    assert candidate(5) == 25\n"
    ),
    entry_point="f",
)


async def test_bc36_hard_coded_visible_tests_binary_zero_fraction_two_thirds(
    bwrap_sandbox,
) -> None:
    """BC-36: ``{2: 4, 3: 9}[x]`` misses the hidden ``f(5) == 25``: 0.0 with binary
    rewards, 2/3 with partial credit."""
    completion = "    return {2: 4, 3: 9}.get(x)\n"
    scored = {}
    for preset in ("binary", "fraction"):
        scorer = Scorer({SQUARE.task_id: SQUARE}, bwrap_sandbox, FAST, reward=load_spec(preset))
        scored[preset] = await scorer.score_one(
            RolloutLine(0, Rollout(task_id=SQUARE.task_id, completion=completion))
        )
    assert scored["binary"].reward == 0.0
    assert scored["fraction"].reward == pytest.approx(2 / 3)
    assert scored["fraction"].verdict is Verdict.FAILED


async def test_bc36_the_results_file_is_not_writable_from_the_sandbox(
    bwrap_sandbox, tmp_path: Path
) -> None:
    """BC-36, tamper variant: writing "all passed" to the judge's results file."""
    results = tmp_path / "results.jsonl"
    results.write_text("")
    completion = (
        "    return 0\nimport os\n"
        f"for path in ({str(results)!r}, 'results.jsonl', '/work/results.jsonl'):\n"
        "    try:\n"
        '        open(path, \'w\').write(\'{"verdict": "passed", "reward": 1.0}\\n\')\n'
        "    except OSError as error:\n"
        "        print('refused', path, error.strerror)\n"
    )
    result = await score(bwrap_sandbox, completion)
    assert (result.verdict, result.reward) == (Verdict.FAILED, 0.0)
    assert results.read_text() == ""
    assert f"refused {results}" in run_of(result).stdout.decode()


# --- harness-bug ---------------------------------------------------------------------------

TOTAL_PROMPT = (
    'from typing import List\n\ndef total(xs: List[int]) -> int:\n    """Return the sum."""'
)
TOTAL_TESTS = "def check(candidate):\n    assert candidate([1, 2]) == 3\n"


@pytest.mark.parametrize(
    "completion",
    [
        "\n    return sum(xs)\n",
        "def total(xs: List[int]) -> int:\n    return sum(xs)\n",
    ],
    ids=["body-only", "whole-function"],
)
async def test_bc42_prompt_imports_reach_the_completion(bwrap_sandbox, completion: str) -> None:
    """BC-42: ``List`` imported by the prompt is defined for the completion: pass, 1.0."""
    task = Task(
        task_id="field/total", prompt=TOTAL_PROMPT + "\n", tests=TOTAL_TESTS, entry_point="total"
    )
    result = await score(bwrap_sandbox, completion, task=task)
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message


async def test_bc42_exact_case_prompt_without_trailing_newline(bwrap_sandbox) -> None:
    """BC-42 exactly as written: the prompt has no final newline, the reply is the whole
    function from the model's fenced block."""
    task = Task(task_id="field/total", prompt=TOTAL_PROMPT, tests=TOTAL_TESTS, entry_point="total")
    result = await score(
        bwrap_sandbox, "def total(xs: List[int]) -> int:\n    return sum(xs)", task=task
    )
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message


async def test_bc38_a_raising_solution_with_an_empty_expected_output_is_an_error(
    bwrap_sandbox,
) -> None:
    """BC-38: ``solve`` raises, the expected output is ``""``: RE, 0.0 (the exception
    reaches the test as an exception, never as an empty result)."""
    task = Task(
        task_id="field/empty-expected",
        prompt="def solve(x):\n",
        tests="def check(candidate):\n    assert candidate(1) == ''\n",
        entry_point="solve",
    )
    result = await score(bwrap_sandbox, "    raise ValueError('no')\n", task=task)
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0)
    assert error_of(result).type == "ValueError"


@pytest.mark.slow
async def test_bc39_the_null_solution_scores_zero_on_every_humaneval_task(bwrap_sandbox) -> None:
    """BC-39: ``pass`` (a function returning ``None``) submitted to all 164 tasks: 0 on
    every one. (A task where it scores above 0 would be rejected by dataset validation.)"""
    from execgym import load_dataset
    from execgym.sandbox import WarmPoolSandbox

    tasks = load_dataset("humaneval")
    items = [
        RolloutLine(i, Rollout(task_id=task_id, completion="    pass\n"))
        for i, task_id in enumerate(tasks)
    ]
    async with WarmPoolSandbox() as pool:
        results = await Scorer(tasks, pool, Limits(wall_time_s=10)).score(items, workers=2)
    assert len(results) == 164
    assert [r.task_id for r in results if r.reward != 0.0] == []
    assert {r.verdict for r in results} <= {Verdict.FAILED, Verdict.ERROR}


REMOVE_ZEROS = Task(
    task_id="field/remove-zeros",
    prompt="class Solution:\n    def removeZeros(self, s: str) -> str:\n",
    tests="def check(candidate):\n    assert candidate('1200') == '12'\n",
    entry_point="removeZeros",
)


async def test_bc43_class_solution_method_is_the_entry_point(bwrap_sandbox) -> None:
    """BC-43: ``class Solution`` with the entry point as a method: pass, 1.0; neither a
    function nor a method of that name: an error naming it, 0.0."""
    answer = (
        "class Solution:\n    def removeZeros(self, s: str) -> str:\n        return s.rstrip('0')\n"
    )
    result = await score(bwrap_sandbox, answer, task=REMOVE_ZEROS)
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message
    wrong = "class Solution:\n    def strip(self, s: str) -> str:\n        return s\n"
    missing = await score(bwrap_sandbox, wrong, task=REMOVE_ZEROS)
    assert (missing.verdict, missing.reward) == (Verdict.ERROR, 0.0)
    assert "no function or Solution method 'removeZeros'" in missing.message

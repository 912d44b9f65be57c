"""The self-test and the calibration references beside hostile rollouts (issue 23).

A rollout must not be able to abort a batch, nor decide a task's calibration.

``execgym score`` runs its self-test on the warm pool beside the batch's first
rollouts (issue 23). Those are the model's programs; one that takes the CPU (spinning
processes, each in a session of its own, so that each is scheduled as a group of its
own) starves the self-test past a tight time limit. The self-test then failed, and
the whole batch aborted with exit 1, nothing written: worse than a null reward. These
run the real command on the real bwrap warm pool with such rollouts and tight limits.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from execgym import Rollout, Scorer, Task
from execgym.calibration import Calibrator
from execgym.cli import main
from execgym.cli.score import ScoreOptions
from execgym.errors import SandboxSetupFailed
from execgym.judges.assert_tests import job_nonce
from execgym.judges.base import START_MARKER
from execgym.limits import Limits
from execgym.sandbox import BaseSandbox, PausableSandbox, RunRequest, RunResult, Status
from execgym.scoring import selftest
from execgym.testing import FakeCall, fake_result, harness_pass
from tests.conftest import ONE_TASK, require, write_jsonl

SPINNERS = 60
"""Processes each hostile rollout starts, each in a session of its own."""

# Forks every spinner first (each blocked on a pipe), then lets them all spin at once
# until the run's wall time: a fork bomb bounded by the run's process limit (64).
HOSTILE = f"""    import os
    r, w = os.pipe()
    for _ in range({SPINNERS}):
        try:
            if os.fork() == 0:
                os.setsid()
                os.close(w)
                os.read(r, 1)
                while True:
                    pass
        except OSError:
            break
    os.close(w)
    while True:
        pass
"""

TIGHT = ["--timeout", "0.5", "--memory", "64MiB", "--workers", "2"]
"""Tight but valid limits: Python starts in a tenth of them on an idle pool."""

SLOW_TASK: dict[str, object] = {**ONE_TASK, "limits": {"wall_time_s": 2.5, "cpu_time_s": 60}}
"""A task that allows its runs more than the command line does (tasks may override)."""


def _is_self_test(request: Any) -> bool:
    return b"candidate() == 1" in (request.stdin or b"")  # the batch's task says c()


def _score_beside_hostile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostile: int, *args: str
) -> tuple[int, str, Path, list[str]]:
    """Score ``hostile`` hostile rollouts; the self-test starts once they spin.

    The command starts its self-test as soon as the warm pool is up, usually before
    the first rollout; on a loaded host the rollouts may come first. Here they always
    do: the self-test waits (first try only) until both workers' rollouts have run
    for 1.4 s, by which time their spinners spin (until the task's 2.5 s). Returns
    the exit code, the output, the results path and each self-test run's status.
    """
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    rolled = threading.Semaphore(0)
    verdicts: list[str] = []
    real_sandbox = ScoreOptions.sandbox

    def sandbox(options: ScoreOptions) -> Any:
        box = real_sandbox(options)
        run = box.run

        async def watched(request: Any) -> Any:
            if not _is_self_test(request):
                rolled.release()
                return await run(request)
            result = await run(request)
            verdicts.append(result.status.value)
            return result

        box.run = watched  # type: ignore[method-assign]
        return box

    real_self_test = selftest.self_test
    tries: list[int] = []

    async def self_test(*call: Any) -> None:
        tries.append(1)
        if len(tries) == 1:
            for _ in range(2):  # both workers' rollouts
                for _ in range(1000):
                    if rolled.acquire(blocking=False):
                        break
                    await asyncio.sleep(0.01)
            await asyncio.sleep(1.4)  # their spinners are forked (1.3 s at load 25)
        await real_self_test(*call)

    monkeypatch.setattr(ScoreOptions, "sandbox", sandbox)
    monkeypatch.setattr(selftest, "self_test", self_test)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [SLOW_TASK])
    rows: list[dict[str, object]] = [{"task_id": "t/1", "completion": HOSTILE}] * hostile
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", rows)
    out = tmp_path / "out.jsonl"
    done = CliRunner().invoke(
        main, ["score", str(tasks), str(rollouts), "-o", str(out), "--k", "1", *TIGHT, *args]
    )
    return done.exit_code, done.stdout + done.stderr, out, verdicts


def test_hostile_rollouts_beside_the_self_test_do_not_abort_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # f04136a: the self-test timed out beside the spinners (its first and only try),
    # exit 1, "failed its self-test ... may be too small", nothing written. Now a run's
    # cgroup groups its CPU where the host allows (the spinners no longer starve it),
    # and elsewhere the self-test is tried again alone (the tests below).
    code, output, out, verdicts = _score_beside_hostile(tmp_path, monkeypatch, 2)
    assert code == 0, output
    assert verdicts[-1] == "ok"
    # each hostile rollout has its own verdict (its 0), none masked, none lost
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [result["verdict"] for result in results] == ["timeout"] * 2
    assert all(result["reward"] == 0.0 for result in results)


class _Contended(BaseSandbox):
    """Fails the self-test whenever another run is in flight (a starved self-test).

    A run that is not the self-test stays in flight until :attr:`release` is set.
    ``broken``: the self-test fails alone too, as in a sandbox that cannot start it.
    """

    name = "fake"

    def __init__(self, *, broken: bool = False) -> None:
        self.broken = broken
        self.in_flight = 0
        self.release = asyncio.Event()
        self.events: list[str] = []

    async def run(self, request: RunRequest) -> RunResult:
        if _is_self_test(request):
            self.events.append(f"self-test beside {self.in_flight}")
            if self.broken or self.in_flight:
                return fake_result(Status.TIME_LIMIT, limit_hit="wall_time_s")
            return harness_pass(FakeCall([], request.stdin, {}, request.limits, True))
        self.events.append("rollout starts")
        self.in_flight += 1
        try:
            await self.release.wait()
            return fake_result()
        finally:
            self.in_flight -= 1
            self.events.append("rollout ends")


async def _beside_one_rollout(box: _Contended) -> tuple[asyncio.Task[None], PausableSandbox]:
    batch = PausableSandbox(box)
    first = asyncio.ensure_future(batch.run(RunRequest(argv=["rollout"])))
    await asyncio.sleep(0)  # in flight
    testing = asyncio.ensure_future(selftest.self_test_beside(box, batch, Limits()))
    await asyncio.sleep(0.05)  # the first try failed; the retry waits for the rollout
    later = asyncio.ensure_future(batch.run(RunRequest(argv=["rollout"])))
    await asyncio.sleep(0.05)
    assert box.events == ["rollout starts", "self-test beside 1"]  # the later one held
    box.release.set()
    await asyncio.wait([first, later, testing])
    assert first.result().status is Status.OK
    assert later.result().status is Status.OK  # held, then run: never dropped
    return testing, batch


async def test_a_self_test_that_failed_beside_a_rollout_counts_only_alone() -> None:
    box = _Contended()
    testing, batch = await _beside_one_rollout(box)
    testing.result()  # passed
    assert box.events == [
        "rollout starts", "self-test beside 1", "rollout ends", "self-test beside 0",
        "rollout starts", "rollout ends",
    ]  # fmt: skip
    assert batch.started == 2
    assert batch.in_flight == 0


async def test_a_broken_sandbox_still_fails_its_self_test_beside_rollouts() -> None:
    # It fails alone too: the batch stops, and the runs held meanwhile go on (they are
    # cancelled with the batch; a held run is never left waiting for ever).
    box = _Contended(broken=True)
    testing, _ = await _beside_one_rollout(box)
    with pytest.raises(SandboxSetupFailed, match="failed its self-test"):
        testing.result()
    assert box.events[:4] == [
        "rollout starts", "self-test beside 1", "rollout ends", "self-test beside 0",
    ]  # fmt: skip


async def test_a_self_test_that_failed_alone_is_not_tried_again() -> None:
    box = _Contended(broken=True)
    with pytest.raises(SandboxSetupFailed, match="failed its self-test"):
        await selftest.self_test_beside(box, PausableSandbox(box), Limits())
    assert box.events == ["self-test beside 0"]


class _ContendedReference(BaseSandbox):
    """A reference that times out whenever another run is in flight (a starved one).

    A hostile rollout (``# hostile``) stays in flight for 0.2 s; the reference
    (``# reference``) passes in 0.01 s alone.
    """

    name = "fake"

    def __init__(self) -> None:
        self.in_flight = 0
        self.events: list[str] = []

    async def run(self, request: RunRequest) -> RunResult:
        job = request.stdin or b""
        call = FakeCall([], job, {}, request.limits, True)
        if b"# hostile" in job:
            self.in_flight += 1
            try:
                await asyncio.sleep(0.2)
                return harness_pass(call)
            finally:
                self.in_flight -= 1
        if b"# reference" in job:
            self.events.append(f"reference beside {self.in_flight}")
            if self.in_flight:  # the harness started; the clock stopped it
                started = START_MARKER + job_nonce(job) + b"\n"
                return fake_result(
                    Status.TIME_LIMIT, limit_hit="wall_time_s", wall_time_s=3.0, report=started
                )
        return harness_pass(call)


async def test_a_reference_stopped_by_the_clock_beside_a_rollout_is_judged_again_alone(
    tmp_path: Path,
) -> None:
    # The old code kept the starved reference's `timeout` as the task's measurement:
    # no calibration for the task, in this batch and (cached on disk) every later one.
    box = _ContendedReference()
    tasks = {
        "hostile": Task(
            task_id="hostile",
            prompt="def f():\n",
            entry_point="f",
            tests="def check(c):\n    pass\n",
        ),
        "t/1": Task(
            task_id="t/1",
            prompt="def f():\n",
            entry_point="f",
            tests="def check(c):\n    assert c() == 1\n",
            reference="    return 1  # reference\n",
        ),
    }
    calibrator = Calibrator(floor_first=False, cache_dir=tmp_path)
    scorer = Scorer(tasks, PausableSandbox(box), Limits(wall_time_s=3), calibrator=calibrator)
    rollouts = [
        Rollout(task_id="hostile", completion="    pass  # hostile\n"),
        Rollout(task_id="t/1", completion="    return 1\n"),
    ]
    results = sorted(await scorer.score(rollouts, workers=2), key=lambda result: result.index)
    assert box.events == ["reference beside 1", "reference beside 0"]
    calibration = results[1].calibration
    assert calibration is not None
    assert calibration["calibrated"], calibration
    assert calibration["wall_time_s"] == 1.0  # the floor: the reference took 0.01 s
    assert results[1].verdict.value == "passed"
    cached = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert [entry["why_not"] for entry in cached] == [None]  # the alone measurement

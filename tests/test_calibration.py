"""Time limits calibrated from each task's reference solution (issue 23)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from execgym import Limits, Rollout, RolloutLine, Scorer, Task, Verdict
from execgym.calibration import Calibrator
from execgym.judges.base import Judgement
from execgym.testing import FakeSandbox, fake_result
from tests.conftest import ONE_TASK, write_jsonl

TASK = Task(
    task_id="t/1",
    prompt="def f():\n",
    tests="def check(c):\n    assert c() == 1\n",
    entry_point="f",
    reference="    return 1\n",
)
USER = Limits(wall_time_s=3.0, cpu_time_s=3.0)


def judge_taking(wall_s: float, cpu_s: float, verdict: Verdict = Verdict.PASSED, calls=None):
    async def judge(task: Task, completion: str, limits: Limits) -> Judgement:
        if calls is not None:
            calls.append((task.task_id, completion, limits))
        await asyncio.sleep(0.01)
        return Judgement(verdict, run=fake_result(wall_time_s=wall_s, cpu_time_s=cpu_s))

    return judge


async def test_limit_is_factor_times_the_reference_above_the_floor_below_the_user() -> None:
    calibrator = Calibrator(factor=10, floor_s=0.5)
    _, limits, calibration = await calibrator.calibrate(TASK, USER, judge_taking(0.2, 0.1))
    assert (limits.wall_time_s, limits.cpu_time_s) == (2.0, 1.0)
    assert calibration.to_json()["reference_wall_time_s"] == 0.2
    assert calibration.calibrated
    # A fast reference: the floor.
    _, limits, _ = await Calibrator(factor=10, floor_s=0.5).calibrate(
        TASK, USER, judge_taking(0.01, 0.01)
    )
    assert (limits.wall_time_s, limits.cpu_time_s) == (0.5, 0.5)
    # A slow reference: never above the user's limit.
    _, limits, _ = await Calibrator(factor=10, floor_s=0.5).calibrate(
        TASK, USER, judge_taking(1.0, 1.0)
    )
    assert (limits.wall_time_s, limits.cpu_time_s) == (3.0, 3.0)


async def test_the_reference_is_measured_once_per_task_for_concurrent_rollouts() -> None:
    calls: list = []
    calibrator = Calibrator()
    judge = judge_taking(0.02, 0.01, calls=calls)
    results = await asyncio.gather(*(calibrator.calibrate(TASK, USER, judge) for _ in range(20)))
    assert len(calls) == 1
    assert calls[0][1] == TASK.reference
    assert calls[0][2] == USER  # measured under the user's limits
    # Every rollout started meanwhile waits for that one measurement: all 20 run under
    # the same calibrated limits (before, the 19 that did not measure kept the user's
    # 3 s while later rollouts of the same task got 1 s: identical completions could
    # pass or time out by scheduling alone).
    assert {limits.wall_time_s for _, limits, _ in results} == {1.0}
    assert all(calibration.calibrated for _, _, calibration in results)
    _, limits, calibration = await calibrator.calibrate(TASK, USER, judge)
    assert (limits.wall_time_s, calibration.calibrated, len(calls)) == (1.0, True, 1)


@pytest.mark.parametrize(
    ("task", "verdict", "reason"),
    [
        (TASK.model_copy(update={"reference": None}), Verdict.PASSED, "no reference"),
        (TASK, Verdict.FAILED, "does not pass (failed)"),
        (TASK, Verdict.TIMEOUT, "does not pass (timeout)"),
    ],
)
async def test_without_a_passing_reference_the_user_limit_applies(
    task: Task, verdict: Verdict, reason: str
) -> None:
    calibrator = Calibrator()
    _, limits, calibration = await calibrator.calibrate(
        task, USER, judge_taking(0.01, 0.01, verdict)
    )
    assert limits == USER
    assert not calibration.calibrated
    assert reason in calibration.to_json()["reason"]
    assert calibration.wall_time_s == 3.0


async def test_measurements_are_kept_on_disk_for_the_next_batch(tmp_path: Path) -> None:
    calls: list = []
    first = Calibrator(cache_dir=tmp_path, sandbox_name="bwrap")
    await first.calibrate(TASK, USER, judge_taking(0.3, 0.2, calls=calls))
    second = Calibrator(cache_dir=tmp_path, sandbox_name="bwrap")
    _, limits, calibration = await second.calibrate(TASK, USER, judge_taking(9, 9, calls=calls))
    assert len(calls) == 1
    assert calibration.cached
    assert limits.wall_time_s == 3.0  # 10 x 0.3 s, from the cache
    # Another sandbox, or other limits, is another measurement.
    other = Calibrator(cache_dir=tmp_path, sandbox_name="gvisor")
    await other.calibrate(TASK, USER, judge_taking(0.3, 0.2, calls=calls))
    assert len(calls) == 2


async def test_cases_get_a_per_case_limit_from_the_slowest_case() -> None:
    stdio = Task(
        task_id="s/1",
        kind="stdio",
        prompt="echo",
        test_cases=[{"input": "1\n", "output": "1\n"}, {"input": "2\n", "output": "2\n"}],
        reference="print(input())",
    )

    async def judge(task: Task, completion: str, limits: Limits) -> Judgement:
        cases = [
            {"verdict": "passed", "wall_time_s": 0.05},
            {"verdict": "passed", "wall_time_s": 0.3},
        ]
        return Judgement(
            Verdict.PASSED, run=fake_result(wall_time_s=0.05), details={"cases": cases}
        )

    judged, limits, calibration = await Calibrator(factor=10, floor_s=1).calibrate(
        stdio, USER, judge
    )
    assert judged.case_time_limit_s == 3.0  # 10 x the slowest case, 0.3 s
    assert calibration.case_time_limit_s == 3.0
    assert judged.run_limits(limits).wall_time_s == 3.0
    judged, limits, calibration = await Calibrator(factor=2, floor_s=0.1).calibrate(
        stdio, USER, judge
    )
    assert judged.case_time_limit_s == pytest.approx(0.6)
    assert judged.run_limits(limits).wall_time_s == pytest.approx(0.6)
    assert calibration.to_json()["reference_case_wall_time_s"] == 0.3


def test_bad_factor_or_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Calibrator(factor=0.5)
    with pytest.raises(ValueError, match="positive"):
        Calibrator(floor_s=0)


async def test_a_runaway_rollout_stops_at_the_calibrated_limit_with_the_same_verdicts(
    bwrap_sandbox,
) -> None:
    from execgym.sandbox import WarmPoolSandbox

    completions = ["    return 1\n", "    return 2\n", "    while True:\n        pass\n"]
    items = [
        RolloutLine(i, Rollout(task_id="t/1", completion=c)) for i, c in enumerate(completions)
    ]
    verdicts = {}
    async with WarmPoolSandbox() as pool:
        for name, calibrator in (("fixed", None), ("calibrated", Calibrator(floor_s=0.5))):
            scorer = Scorer({"t/1": TASK}, pool, USER, calibrator=calibrator)
            results = await scorer.score(items, workers=1)  # the reference first
            verdicts[name] = [r.verdict for r in results]
            runaway = results[2]
            if calibrator is None:
                assert runaway.judgement.run.wall_time_s >= 2.9
                assert "calibration" not in runaway.to_json()
            else:
                assert runaway.judgement.run.wall_time_s < 1.5
                record = runaway.to_json()
                calibration = record["calibration"]
                assert calibration["calibrated"] is True
                expected = max(10 * calibration["reference_wall_time_s"], 0.5)
                assert record["limits"]["wall_time_s"] == pytest.approx(min(expected, 3.0), 1e-3)
                assert record["limits"]["wall_time_s"] == pytest.approx(
                    calibration["wall_time_s"], 1e-3
                )
    assert verdicts["fixed"] == verdicts["calibrated"]
    assert verdicts["fixed"] == [Verdict.PASSED, Verdict.FAILED, Verdict.TIMEOUT]


def test_command_line_calibrates_and_echoes_the_limits(
    bwrap_sandbox, tmp_path: Path, monkeypatch
) -> None:
    from click.testing import CliRunner

    from execgym.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**ONE_TASK, "reference": "    return 1\n"}])
    rollouts = write_jsonl(
        tmp_path / "r.jsonl",
        [{"task_id": "t/1", "completion": "    import time\n    time.sleep(60)\n"}],
    )
    out = tmp_path / "out.jsonl"
    args = ["score", str(tasks), str(rollouts), "-o", str(out), "--timeout", "5"]
    result = CliRunner().invoke(main, [*args, "--calibrate-limits", "--calibration-floor", "0.5"])
    assert result.exit_code == 0, result.stdout + result.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["verdict"] == "timeout"
    calibration = record["calibration"]
    assert calibration["factor"] == 10.0
    expected = min(max(10 * calibration["reference_wall_time_s"], 0.5), 5.0)
    assert record["limits"]["wall_time_s"] == pytest.approx(expected, 1e-3)
    assert record["wall_time_s"] < 5
    assert list((tmp_path / "cache" / "execgym" / "calibration").glob("*.json"))


def _grouped_batch() -> tuple[dict[str, Task], list[RolloutLine]]:
    """Two tasks, three rollouts each, grouped by task as a trainer sends them."""
    tasks = {task_id: TASK.model_copy(update={"task_id": task_id}) for task_id in ("t/1", "t/2")}
    items = [
        RolloutLine(index, Rollout(task_id=task_id, completion="    return 2\n"))
        for index, task_id in enumerate(["t/1"] * 3 + ["t/2"] * 3)
    ]
    return tasks, items


@pytest.mark.parametrize(("window", "overlap"), [(None, True), (4, True), (2, False)])
async def test_a_sandbox_takes_another_task_while_a_reference_is_measured(
    monkeypatch, window: int | None, overlap: bool
) -> None:
    """Rollouts grouped by task, 2 sandboxes: while one measures t/1's reference, the
    other used to wait for it (its rollout was of t/1 too), idle for a whole run per
    task (issue 23). Now it sets t/1's rollouts aside and measures t/2's reference;
    unless the reorder window is too small to reach t/2 (2 items: t/1's first two),
    where it waits for room, and the batch still finishes in order."""
    tasks, items = _grouped_batch()
    calibrator = Calibrator(floor_first=False)  # each reference measured first
    scorer = Scorer(tasks, FakeSandbox([fake_result()]), USER, calibrator=calibrator)
    t2_measuring = asyncio.Event()
    overlapped: list[bool] = []
    judged: list[tuple[str, str]] = []

    async def judge(task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        is_reference = rollout.completion == task.reference
        judged.append((task.task_id, "reference" if is_reference else "rollout"))
        if is_reference and task.task_id == "t/2":
            t2_measuring.set()
        if overlap and is_reference and task.task_id == "t/1":  # ends once t/2's starts
            try:
                await asyncio.wait_for(t2_measuring.wait(), 10)  # the old code: 10 s
                overlapped.append(True)
            except TimeoutError:
                overlapped.append(False)
        await asyncio.sleep(0)
        verdict = Verdict.PASSED if is_reference else Verdict.FAILED
        return Judgement(verdict, run=fake_result(wall_time_s=0.05, cpu_time_s=0.02))

    monkeypatch.setattr(scorer.scoring, "judge", judge)
    emitted: list[int] = []
    results = await scorer.score(
        items, workers=2, order="input", window=window, on_result=lambda r: emitted.append(r.index)
    )
    assert overlapped == ([True] if overlap else [])
    assert emitted == list(range(6))  # set-aside rollouts keep their place
    assert [r.verdict for r in results] == [Verdict.FAILED] * 6
    assert sorted(judged) == sorted(
        [("t/1", "reference"), ("t/2", "reference")] + [("t/1", "rollout"), ("t/2", "rollout")] * 3
    )
    # Each reference once; every rollout under its task's calibrated limits.
    assert all(r.calibration["calibrated"] for r in results)
    assert {r.limits["wall_time_s"] for r in results} == {1.0}


async def test_references_are_measured_only_for_tasks_whose_rollouts_run_past_the_floor(
    monkeypatch,
) -> None:
    """A calibrated limit is never below the floor, so a run that ends within it has its
    verdict under any calibrated limit: t/1's rollouts all do, and its reference is never
    run (the old code measured every task's reference before its first rollout: one more
    run per task). t/2 has a slow but correct rollout (1.5 s): under the floor (1 s) it
    times out, so t/2's reference is measured (0.2 s: limit 2 s) and that rollout runs
    again under 2 s, and passes, as it would had the reference been measured first."""
    tasks, items = _grouped_batch()
    completions = ["pass", "fail", "pass", "slow", "pass", "fail"]
    items = [
        RolloutLine(line.index, line.rollout.model_copy(update={"completion": completion}))
        for line, completion in zip(items, completions, strict=True)
    ]
    scorer = Scorer(tasks, FakeSandbox([fake_result()]), USER, calibrator=Calibrator())
    judged: list[tuple[str, str, float]] = []

    async def judge(task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        judged.append((task.task_id, rollout.completion, limits.wall_time_s))
        if rollout.completion == task.reference:
            verdict, seconds = Verdict.PASSED, 0.2
        elif rollout.completion == "slow":
            seconds = min(1.5, limits.wall_time_s)
            verdict = Verdict.PASSED if seconds == 1.5 else Verdict.TIMEOUT
        else:
            verdict = Verdict.PASSED if rollout.completion == "pass" else Verdict.FAILED
            seconds = 0.05
        return Judgement(verdict, run=fake_result(wall_time_s=seconds, cpu_time_s=seconds))

    monkeypatch.setattr(scorer.scoring, "judge", judge)
    results = await scorer.score(items, workers=1)
    references = [call for call in judged if call[1] == TASK.reference]
    assert references == [("t/2", TASK.reference, 3.0)]  # t/2's only, under the user's 3 s
    assert [call for call in judged if call[1] == "slow"] == [
        ("t/2", "slow", 1.0),  # the floor
        ("t/2", "slow", 2.0),  # 10 x 0.2 s
    ]
    assert [r.verdict for r in results] == [Verdict(v) for v in (
        "passed", "failed", "passed", "passed", "passed", "failed"
    )]  # fmt: skip
    unmeasured = results[0].to_json()
    assert unmeasured["limits"]["wall_time_s"] == 1.0  # what it ran under: the floor
    assert unmeasured["calibration"]["calibrated"] is False
    assert "not measured" in unmeasured["calibration"]["reason"]
    slow = results[3].to_json()
    assert slow["limits"]["wall_time_s"] == 2.0
    assert slow["calibration"]["calibrated"] is True
    assert slow["calibration"]["reference_wall_time_s"] == 0.2
    # Rollouts after the measurement run under the calibrated limit at once.
    assert results[4].to_json()["limits"]["wall_time_s"] == 2.0


async def test_a_floor_try_is_judged_again_only_if_its_verdict_can_change(monkeypatch) -> None:
    """Both tasks' references take 0.2 s of wall and 0.01 s of CPU: limits 2 s of wall
    and 1 s (the floor) of CPU. t/1's rollout loops on one core: under the floor it is
    stopped by the wall clock at 1 s, so it runs again under 2 s (it might have ended by
    then). t/2's loops on two cores: its CPU time (1 s) runs out at 0.5 s of wall, under
    the floor as under the calibrated limits, so running it again ends the same way (the
    old code did: a second run). Each result names its floor try, whose sandbox time is
    not in its own run's."""
    tasks, _ = _grouped_batch()
    items = [
        RolloutLine(0, Rollout(task_id="t/1", completion="one core")),
        RolloutLine(1, Rollout(task_id="t/2", completion="two cores")),
    ]
    scorer = Scorer(tasks, FakeSandbox([fake_result()]), USER, calibrator=Calibrator())
    judged: list[tuple[str, str, float, float]] = []

    async def judge(task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        judged.append((task.task_id, rollout.completion, limits.wall_time_s, limits.cpu_time_s))
        if rollout.completion == task.reference:
            return Judgement(Verdict.PASSED, run=fake_result(wall_time_s=0.2, cpu_time_s=0.01))
        cores = 1 if rollout.completion == "one core" else 2
        wall = min(limits.wall_time_s, limits.cpu_time_s / cores)
        hit = "wall_time_s" if wall == limits.wall_time_s else "cpu_time_s"
        run = fake_result(wall_time_s=wall, cpu_time_s=wall * cores, limit_hit=hit)
        return Judgement(Verdict.TIMEOUT, run=run)

    monkeypatch.setattr(scorer.scoring, "judge", judge)
    one_core, two_cores = [r.to_json() for r in await scorer.score(items, workers=1)]
    assert [call for call in judged if call[1] != TASK.reference] == [
        ("t/1", "one core", 1.0, 1.0),  # the floor
        ("t/1", "one core", 2.0, 1.0),  # calibrated: the wall limit grew
        ("t/2", "two cores", 1.0, 1.0),  # the floor, and not again
    ]
    assert one_core["verdict"] == two_cores["verdict"] == "timeout"
    assert one_core["wall_time_s"] == 1.0  # its run under 2 s: the CPU limit ended it
    assert one_core["calibration"]["judged_again"] is True
    assert one_core["calibration"]["floor_try"] == {
        "verdict": "timeout", "wall_time_s": 1.0, "cpu_time_s": 1.0, "limit_hit": "wall_time_s"
    }  # fmt: skip
    assert two_cores["calibration"]["judged_again"] is False
    assert two_cores["calibration"]["floor_try"]["limit_hit"] == "cpu_time_s"
    assert (two_cores["limit_hit"], two_cores["cpu_time_s"]) == ("cpu_time_s", 1.0)
    assert two_cores["limits"]["wall_time_s"] == 2.0  # what its verdict holds under
    assert two_cores["calibration"]["calibrated"] is True


async def test_rollouts_set_aside_for_a_measuring_reference_are_at_most_a_window(
    monkeypatch,
) -> None:
    """One task, completion order: while its reference is measured, the other sandbox
    sets the task's rollouts aside. It used to read the whole input into that list
    (500 of 500 here) before the reference's run ended; now at most the window."""
    calibrator = Calibrator(floor_first=False)  # the reference measured first
    scorer = Scorer({"t/1": TASK}, FakeSandbox([fake_result()]), USER, calibrator=calibrator)
    read = 0
    read_by_reference_end: list[int] = []

    def items():
        nonlocal read
        for index in range(500):
            read += 1
            yield RolloutLine(index, Rollout(task_id="t/1", completion="    return 2\n"))

    async def judge(task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        if rollout.completion == task.reference:
            for _ in range(20):  # the other sandbox takes items meanwhile
                await asyncio.sleep(0)
            read_by_reference_end.append(read)
        return Judgement(Verdict.PASSED, run=fake_result(wall_time_s=0.05, cpu_time_s=0.02))

    monkeypatch.setattr(scorer.scoring, "judge", judge)
    results = await scorer.score(items(), workers=2, window=16, collect=False)
    assert results == []
    assert read_by_reference_end == [read_by_reference_end[0]]  # measured once
    assert read_by_reference_end[0] <= 16 + 2, read_by_reference_end
    assert read == 500

"""Circuit breakers: a task type whose sandbox setup always crashes is quarantined, the
others are not, and the breaker closes once the type is fixed (cool-down on an injected
clock, then a probe that passes)."""

from __future__ import annotations

import asyncio

import pytest

from execgym.broker.client import make_jobs
from execgym.broker.memory import MemoryBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.errors import ConfigError
from execgym.judges.base import Verdict
from execgym.ops.breakers import (
    DEFAULT_SPEC,
    BreakerPolicy,
    Breakers,
    BreakerState,
    Ticket,
    from_spec,
)
from execgym.ops.metrics import Metrics
from execgym.reward import binary_reward
from execgym.sandbox.base import RunResult, Status
from execgym.scoring import Scorer
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout, Task
from execgym.testing import FakeCall, FakeSandbox, fake_result, harness_pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def task(task_id: str) -> Task:
    return Task(
        task_id=task_id,
        prompt="def f():\n",
        entry_point="f",
        tests="def check(candidate):\n    assert candidate() == 1\n",
    )


class Host:
    """A fake sandbox whose setup crashes for tasks of the ``Broken`` data set."""

    def __init__(self) -> None:
        self.broken = True
        self.runs: dict[str, int] = {"Broken": 0, "Good": 0}

    def __call__(self, call: FakeCall) -> RunResult:
        program = b"".join(call.files.values()) + call.stdin
        kind = "Broken" if b"BROKEN-TASK" in program else "Good"
        self.runs[kind] += 1
        if kind == "Broken" and self.broken:
            return fake_result(
                Status.SANDBOX_ERROR, exit_code=None, message="bwrap: setting up uid map: EPERM"
            )
        return harness_pass(call)


def broken_task(number: int) -> Task:
    return task(f"Broken/{number}").model_copy(update={"prompt": "# BROKEN-TASK\ndef f():\n"})


def rollouts(tasks: list[Task], start: int = 0) -> list[RolloutLine]:
    return [
        RolloutLine(start + i, Rollout(task_id=t.task_id, completion="    return 1\n"))
        for i, t in enumerate(tasks)
    ]


def test_closed_breaker_opens_at_the_count_within_the_window() -> None:
    clock = Clock()
    breakers = Breakers(BreakerPolicy(failures=3, window_s=10, cooldown_s=5), clock=clock)
    good = task("X/1")
    for _ in range(2):
        breakers.record(breakers.admit(good), infrastructure_failure=True)  # type: ignore[arg-type]
    clock.now += 11  # those two slide out of the window
    for _ in range(2):
        breakers.record(breakers.admit(good), infrastructure_failure=True)  # type: ignore[arg-type]
    assert breakers.state("X") is BreakerState.CLOSED
    breakers.record(breakers.admit(good), infrastructure_failure=True)  # type: ignore[arg-type]
    assert breakers.state("X") is BreakerState.OPEN
    assert breakers.admit(good) is None
    view = breakers.views()["X"]
    assert view.failures == 3
    assert view.quarantined == 1
    assert view.retry_in_s == pytest.approx(5)
    assert "3 infrastructure failures in 10 s" in view.reason


def test_rate_threshold_waits_for_enough_jobs() -> None:
    breakers = Breakers(BreakerPolicy(failures=None, failure_rate=0.5, min_jobs=4), clock=Clock())
    t = task("R/1")
    for failed in (True, True, False):
        breakers.record(breakers.admit(t), infrastructure_failure=failed)  # type: ignore[arg-type]
    assert breakers.state("R") is BreakerState.CLOSED  # 3 jobs < min_jobs
    breakers.record(breakers.admit(t), infrastructure_failure=False)  # type: ignore[arg-type]
    assert breakers.state("R") is BreakerState.CLOSED  # successes never open it
    breakers.record(breakers.admit(t), infrastructure_failure=True)  # type: ignore[arg-type]
    assert breakers.state("R") is BreakerState.OPEN  # 3 of 5 >= 50 %
    assert "3 of 5 jobs" in breakers.views()["R"].reason


def test_half_open_lets_one_probe_through_and_a_failed_probe_reopens() -> None:
    clock = Clock()
    breakers = Breakers(BreakerPolicy(failures=1, cooldown_s=30), clock=clock)
    t = task("P/1")
    breakers.record(breakers.admit(t), infrastructure_failure=True)  # type: ignore[arg-type]
    clock.now += 30
    probe = breakers.admit(t)
    assert probe == Ticket("P", probe=True)
    assert breakers.admit(t) is None  # only one probe at a time
    breakers.record(probe, infrastructure_failure=True)
    assert breakers.state("P") is BreakerState.OPEN
    assert breakers.views()["P"].retry_in_s == pytest.approx(30)
    clock.now += 30
    lost = breakers.admit(t)  # a probe whose result never comes...
    assert lost is not None
    assert lost.probe
    clock.now += 30  # ...does not keep the type quarantined: another one goes out
    second = breakers.admit(t)
    assert second is not None
    assert second.probe
    breakers.record(second, infrastructure_failure=False)
    assert breakers.state("P") is BreakerState.CLOSED


def test_late_results_of_jobs_admitted_before_opening_do_not_close_it() -> None:
    clock = Clock()
    breakers = Breakers(BreakerPolicy(failures=1), clock=clock)
    t = task("L/1")
    early = breakers.admit(t)
    breakers.record(breakers.admit(t), infrastructure_failure=True)  # type: ignore[arg-type]
    breakers.record(early, infrastructure_failure=False)  # type: ignore[arg-type]
    assert breakers.state("L") is BreakerState.OPEN


def test_reset_closes_and_unknown_type_is_reported() -> None:
    breakers = Breakers(BreakerPolicy(failures=1), clock=Clock())
    breakers.record(breakers.admit(task("Z/1")), infrastructure_failure=True)  # type: ignore[arg-type]
    assert breakers.admit(task("Z/2")) is None
    assert breakers.reset("Z")
    assert breakers.admit(task("Z/2")) == Ticket("Z")
    assert not breakers.reset("nope")


def test_type_keys_and_callable() -> None:
    stdio = Task(
        task_id="cc/1", kind="stdio", language="cpp", prompt="p", test_cases=[{"output": "1"}]
    )
    assert Breakers(key="dataset").type_of(stdio) == "cc"
    assert Breakers(key="family").type_of(stdio) == "stdio/cpp"
    assert Breakers(key="task").type_of(stdio) == "cc/1"
    assert Breakers(key=lambda t: t.task_id[-1]).type_of(stdio) == "1"
    with pytest.raises(ConfigError, match="unknown task-type key 'kind'"):
        Breakers(key="kind")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("failures", "is not NAME=VALUE"),
        ("failure=3", "is not NAME=VALUE"),
        ("failures=x", "is not a number"),
        ("failures=0", "at least 1"),
        ("failure_rate=1.5", r"in \(0, 1\]"),
        ("window_s=-1", "positive and finite"),
        ("failures=none", "set failures, failure_rate or both"),
        ("key=kind", "unknown task-type key"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_spec(spec)


def test_spec_parses_every_field() -> None:
    assert from_spec("off") is None
    breakers = from_spec(
        "failures=none,failure_rate=0.25,min_jobs=8,window_s=5,cooldown_s=2,key=task"
    )
    assert breakers is not None
    assert breakers.policy == BreakerPolicy(None, 0.25, 8, 5.0, 2.0)
    assert breakers.type_of(task("A/1")) == "A/1"
    default = from_spec(DEFAULT_SPEC)
    assert default is not None
    assert default.policy == BreakerPolicy()


def test_quarantined_is_masked_like_infrastructure_failures() -> None:
    assert Verdict.QUARANTINED.is_masked
    assert binary_reward(Verdict.QUARANTINED) is None


async def test_crashing_type_is_quarantined_others_run_and_it_closes_once_fixed() -> None:
    clock = Clock()
    host = Host()
    breakers = Breakers(BreakerPolicy(failures=3, window_s=60, cooldown_s=30), clock=clock)
    metrics = Metrics()
    tasks = {t.task_id: t for t in [*map(broken_task, range(10)), *map(task, ["Good/0", "Good/1"])]}
    scorer = Scorer(tasks, FakeSandbox(host), breakers=breakers, metrics=metrics)

    broken = [tasks[f"Broken/{i}"] for i in range(10)]
    first = await scorer.score(rollouts(broken[:3]), workers=1)
    assert [r.verdict for r in first] == [Verdict.SANDBOX_ERROR] * 3
    assert breakers.state("Broken") is BreakerState.OPEN
    runs_when_opened = host.runs["Broken"]
    assert runs_when_opened == 6  # each sandbox_error is retried once

    later = await scorer.score(rollouts([*broken[3:], tasks["Good/0"], tasks["Good/1"]]), workers=2)
    by_type = {r.task_id: r for r in later}
    for t in broken[3:]:
        result = by_type[t.task_id]
        assert result.verdict is Verdict.QUARANTINED
        assert result.reward is None
        assert result.attempts == 0
        assert "task type 'Broken' is quarantined" in result.message
        assert "execgym status --reset Broken" in result.message
    assert host.runs["Broken"] == runs_when_opened  # no sandbox was started for them
    assert by_type["Good/0"].verdict is Verdict.PASSED
    assert by_type["Good/1"].verdict is Verdict.PASSED
    assert breakers.state("Good") is BreakerState.CLOSED

    host.broken = False  # the type is fixed; after the cool-down a probe goes through
    clock.now += 31
    assert breakers.state("Broken") is BreakerState.HALF_OPEN
    probe, *rest = await scorer.score(rollouts(broken[:3]), workers=1)
    assert probe.verdict is Verdict.PASSED
    assert breakers.state("Broken") is BreakerState.CLOSED
    assert [r.verdict for r in rest] == [Verdict.PASSED] * 2

    completed = metrics.registry.get_sample_value
    assert (
        completed("execgym_jobs_completed_total", {"verdict": "quarantined", "task_type": "Broken"})
        == 7
    )
    assert (
        completed("execgym_jobs_failed_total", {"verdict": "sandbox_error", "task_type": "Broken"})
        == 3
    )
    assert (
        completed("execgym_jobs_completed_total", {"verdict": "passed", "task_type": "Good"}) == 2
    )


async def test_a_failed_probe_keeps_the_type_quarantined() -> None:
    clock = Clock()
    host = Host()
    breakers = Breakers(BreakerPolicy(failures=2, cooldown_s=10), clock=clock)
    tasks = {t.task_id: t for t in map(broken_task, range(4))}
    scorer = Scorer(tasks, FakeSandbox(host), breakers=breakers)
    await scorer.score(rollouts(list(tasks.values())[:2]), workers=1)
    clock.now += 10
    probe, after = await scorer.score(rollouts(list(tasks.values())[2:]), workers=1)
    assert probe.verdict is Verdict.SANDBOX_ERROR
    assert after.verdict is Verdict.QUARANTINED
    assert breakers.state("Broken") is BreakerState.OPEN


async def test_worker_quarantines_through_the_embedded_broker() -> None:
    clock = Clock()
    host = Host()
    breakers = Breakers(BreakerPolicy(failures=2, cooldown_s=30), clock=clock)
    metrics = Metrics()
    broker = MemoryBroker()
    worker = Worker(
        broker,
        FakeSandbox(host),
        WorkerSettings(concurrency=1, prefetch=0, max_attempts=1, block_s=0.05),
        breakers=breakers,
        metrics=metrics,
    )
    tasks = {t.task_id: t for t in [*map(broken_task, range(5)), task("Good/0")]}
    items = rollouts([tasks[f"Broken/{i}"] for i in range(5)] + [tasks["Good/0"]])
    jobs, _ = make_jobs(tasks, items)
    running = asyncio.create_task(worker.run())
    try:
        verdicts = {}
        await broker.submit(jobs)
        async for result in broker.results(jobs[0].batch_id, len(jobs)):
            verdicts[result.result["task_id"]] = result.result["verdict"]
    finally:
        worker.stop()
        await running
    assert [verdicts[f"Broken/{i}"] for i in range(5)] == ["sandbox_error"] * 2 + [
        "quarantined"
    ] * 3
    assert verdicts["Good/0"] == "passed"
    sample = metrics.registry.get_sample_value
    assert sample("execgym_breaker_state", {"task_type": "Broken"}) == 2
    assert sample("execgym_breaker_state", {"task_type": "Good"}) == 0
    assert sample("execgym_jobs_submitted_total", {"task_type": "Broken"}) == 5
    assert (
        sample("execgym_jobs_completed_total", {"verdict": "quarantined", "task_type": "Broken"})
        == 3
    )
    assert sample("execgym_sandbox_run_seconds_count", {}) == 2 * 2 + 1  # retried once each
    assert sample("execgym_queue_lag_seconds_count", {}) == 6
    assert sample("execgym_worker_last_heartbeat_timestamp_seconds", {"worker": worker.name}) > 0


async def test_dead_lettered_jobs_count_as_infrastructure_failures() -> None:
    breakers = Breakers(BreakerPolicy(failures=1), clock=Clock())
    broker = MemoryBroker()
    worker = Worker(
        broker,
        FakeSandbox([fake_result()]),
        WorkerSettings(concurrency=1, max_attempts=1),
        breakers=breakers,
    )
    (job,), _ = make_jobs({"Crash/1": task("Crash/1")}, rollouts([task("Crash/1")]))
    await broker.submit(
        [job.model_copy(update={"attempt": 2})]
    )  # its first delivery killed a worker
    (delivery,) = await broker.consume(worker.name, 1, 0)
    await worker.process(delivery)
    assert breakers.state("Crash") is BreakerState.OPEN


async def test_trainer_adapters_mask_quarantined_samples() -> None:
    from execgym.integrations import RewardClient
    from execgym.integrations.trl import score_batch
    from execgym.integrations.verl import as_verl, score_keys

    crash = FakeSandbox([fake_result(Status.SANDBOX_ERROR, exit_code=None, message="setup")])
    breakers = Breakers(BreakerPolicy(failures=1), key=lambda t: "all", clock=Clock())
    client = RewardClient(sandbox=crash, breakers=breakers)
    tests = "def check(candidate):\n    assert candidate(1, 1) == 2\n"
    columns = {"tests": [tests] * 2, "entry_point": ["add"] * 2}
    code = "def add(a, b):\n    return a + b\n"
    assert await score_batch(client, [code, code], columns) == [None, None]
    quarantined = await client.score_task(task("Any/1"), code)
    assert quarantined.verdict == "quarantined"
    assert quarantined.reward is None
    verl = as_verl(quarantined, score_keys())
    assert verl["masked"] == 1.0
    assert verl["verdict"] == "quarantined"


# Issue 18, kind 3: a task's checker that crashes on unparsable output (int() of prose) is
# reached by garbage rollouts; whatever verdict that crash earns, it is the rollout's doing,
# so it must never count toward the breaker of the data set, where correct rollouts of the
# data set's other tasks would then come back quarantined.
CRASHING_CHECKER = Task.model_validate(
    {
        "task_id": "Judged/checker",
        "kind": "stdio",
        "test_cases": [{"input": "", "output": "3"}],
        "checker": {
            "language": "python",
            "source": "import sys\n"
            "expected = int(open(sys.argv[2]).read())\n"
            "actual = int(open(sys.argv[3]).read())  # crashes on prose\n"
            "sys.exit(0 if actual == expected else 1)\n",
        },
    }
)
GARBAGE = ("print('I think the answer is three')", "print('1 2 3')", "print('\\u00e9\\u00e8')")


async def test_garbage_rollouts_crashing_a_checker_never_quarantine_the_data_set(
    bwrap_sandbox,
) -> None:
    honest = [task(f"Judged/{n}") for n in range(3)]
    tasks = {t.task_id: t for t in [CRASHING_CHECKER, *honest]}
    breakers = Breakers(BreakerPolicy(failures=5, window_s=600, cooldown_s=600))
    scorer = Scorer(tasks, bwrap_sandbox, breakers=breakers)
    lines = [
        RolloutLine(i, Rollout(task_id=CRASHING_CHECKER.task_id, completion=GARBAGE[i % 3]))
        for i in range(6)
    ]
    lines += rollouts(honest, start=len(lines))
    results = await scorer.score(lines, workers=1)
    garbage, correct = results[:6], results[6:]
    assert all(r.verdict is not Verdict.QUARANTINED for r in garbage), [r.message for r in garbage]
    assert [(r.verdict, r.reward) for r in correct] == [(Verdict.PASSED, 1.0)] * 3, [
        r.message for r in correct
    ]
    assert breakers.state("Judged") is BreakerState.CLOSED
    assert breakers.views()["Judged"].failures == 0


async def test_an_exception_of_execgyms_own_code_is_masked_but_never_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A judge crashing on a rollout's data is our bug (masked, so a correct answer is not
    punished), but the rollout may have triggered it: it never opens a breaker."""

    async def crash(*args: object, **kwargs: object) -> None:
        raise OverflowError("int too large to convert to float")

    breakers = Breakers(BreakerPolicy(failures=2))
    good = task("Crashy/1")
    scorer = Scorer({good.task_id: good}, FakeSandbox(harness_pass), breakers=breakers)
    monkeypatch.setattr(scorer.judges.judge_for(good), "judge", crash)
    results = await scorer.score(rollouts([good] * 4), workers=1)
    assert [(r.verdict, r.reward) for r in results] == [(Verdict.SANDBOX_ERROR, None)] * 4
    assert breakers.state("Crashy") is BreakerState.CLOSED

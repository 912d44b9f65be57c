"""The embedded job runner and the capacity it shares; no privileges needed."""

from __future__ import annotations

import asyncio

import pytest

from execgym.errors import CapacityExceeded
from execgym.limits import Limits
from execgym.sandbox.base import RunRequest, RunResult, Sandbox
from execgym.server import ServerSettings
from execgym.server.capacity import BoundedSandbox, Capacity
from execgym.server.jobs import Batch, EmbeddedJobRunner, JobView
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout, Task
from execgym.testing import FakeCall, FakeSandbox, fake_result
from tests.conftest import ONE_TASK
from tests.server.conftest import NO_TOOLS, serving

TASK = Task.model_validate(ONE_TASK)


def batch(count: int) -> Batch:
    items = [
        RolloutLine(i, Rollout(task_id="t/1", completion="    return 1\n")) for i in range(count)
    ]
    return Batch({"t/1": TASK}, items, Limits())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def harness_fails(call: FakeCall) -> object:
    return fake_result(stderr=b"AssertionError\n", exit_code=1)


async def test_capacity_is_reserved_per_rollout_and_released_as_they_finish() -> None:
    capacity = Capacity(limit=5, workers=2)
    runner = EmbeddedJobRunner(FakeSandbox(harness_fails), capacity, workers=2, ttl_s=60)
    job_id = await runner.submit(batch(4))
    assert capacity.in_flight == 4
    with pytest.raises(CapacityExceeded) as refused:
        await runner.submit(batch(2))
    assert refused.value.retry_after_s >= 1
    view = await runner.wait(job_id)
    assert isinstance(view, JobView)
    assert view.state == "done"
    assert [r.index for r in view.results] == [0, 1, 2, 3]
    assert capacity.in_flight == 0
    await runner.submit(batch(5))  # fits again
    await runner.aclose()


async def test_finished_jobs_expire_after_their_ttl() -> None:
    clock = Clock()
    runner = EmbeddedJobRunner(
        FakeSandbox(harness_fails), Capacity(10, 1), workers=1, ttl_s=30, clock=clock
    )
    job_id = await runner.submit(batch(1))
    await runner.wait(job_id)
    clock.now = 29
    assert (await runner.get(job_id)) is not None
    clock.now = 31
    assert (await runner.get(job_id)) is None


async def test_stopping_fails_running_jobs_and_frees_capacity() -> None:
    never = asyncio.Event()

    class Stuck(FakeSandbox):
        async def run(self, request: RunRequest) -> RunResult:
            await never.wait()
            raise AssertionError("unreachable")

    capacity = Capacity(10, 1)
    runner = EmbeddedJobRunner(Stuck([]), capacity, workers=1, ttl_s=60)
    job_id = await runner.submit(batch(3))
    await asyncio.sleep(0.01)
    await runner.aclose()
    view = await runner.get(job_id)
    assert view is not None
    assert view.state == "failed"
    assert "stopped" in view.message
    assert capacity.in_flight == 0


async def test_bounded_sandbox_runs_at_most_workers_at_once() -> None:
    running = 0
    most = 0

    class Slow(FakeSandbox):
        async def run(self, request: RunRequest) -> RunResult:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.01)
            running -= 1
            return fake_result()

    bounded = BoundedSandbox(Slow([]), workers=3)
    await asyncio.gather(*(bounded.run_argv(["x"]) for _ in range(12)))
    assert most == 3


async def test_create_app_takes_another_job_runner() -> None:
    made: list[EmbeddedJobRunner] = []

    def factory(sandbox: Sandbox, capacity: Capacity) -> EmbeddedJobRunner:
        runner = EmbeddedJobRunner(sandbox, capacity, workers=1, ttl_s=5)
        made.append(runner)
        return runner

    sandbox = FakeSandbox(harness_fails)
    async with serving(
        settings=ServerSettings(), sandbox=sandbox, toolchains=NO_TOOLS, jobs=factory
    ) as client:
        body = {"tasks": [ONE_TASK], "rollouts": [{"task_id": "t/1", "completion": "x"}]}
        job = (await client.post("/v1/score", json=body)).json()
    assert len(made) == 1
    assert job["state"] == "done"
    assert job["results"][0]["verdict"] == "sandbox_error"  # the fake wrote no report


async def test_retained_results_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("execgym.server.jobs.MAX_RETAINED_RESULTS", 5)
    clock = Clock()
    runner = EmbeddedJobRunner(
        FakeSandbox(harness_fails), Capacity(100, 1), workers=1, ttl_s=3600, clock=clock
    )
    ids = []
    for step in range(3):
        clock.now = step
        ids.append(await runner.submit(batch(2)))
        await runner.wait(ids[-1])
    assert await runner.get(ids[0]) is None  # 6 results > 5: the oldest job goes
    assert await runner.get(ids[1]) is not None
    assert await runner.get(ids[2]) is not None

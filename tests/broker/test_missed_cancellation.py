"""A helper task that misses its cancellation never leaves a batch or a worker hanging.

On Python 3.11, ``asyncio.wait_for`` drops a cancellation that arrives as its operation
completes (CPython gh-86296), and redis-py sends every command through it. Seen in the
suite: ``test_redis_restarted_empty_mid_batch_every_lost_job_is_resubmitted`` timed out
at 120 s (2 of 8 runs at load 20) after all 300 results had come, with ``score_jobs``
awaiting its audit task, which had missed the cancellation inside
``asyncio.tasks.wait_for`` and looped on every 0.5 s. The brokers below stand in for
that: their Redis-like call swallows the ``CancelledError`` it gets, as ``wait_for``
does, so the tests do not depend on the race's timing. Before the fix each test hung
until pytest-timeout failed it (no ``asyncio.timeout`` here: its own cancellation
would stop the task that missed the first one, and hide the hang).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from execgym.broker import score_jobs
from execgym.broker.base import Audit, Delivery
from execgym.broker.memory import MemoryBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.testing import FakeSandbox, harness_pass
from tests.broker.conftest import FAST, job


async def _call_that_misses_a_cancellation(calls: list[str], name: str) -> None:
    calls.append(name)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        calls.append(f"{name} swallowed a cancellation")


class DeafAudit(MemoryBroker):
    """A broker whose ``audit`` returns normally when cancelled (see the module)."""

    def __init__(self) -> None:
        super().__init__(FAST)
        self.calls: list[str] = []

    async def audit(self, batch_id: str, job_ids: Sequence[str]) -> Audit:
        await _call_that_misses_a_cancellation(self.calls, "audit")
        return Audit([], [])


class DeafHeartbeat(MemoryBroker):
    """A broker whose ``heartbeat`` returns normally when cancelled (see the module)."""

    def __init__(self) -> None:
        super().__init__(FAST)
        self.calls: list[str] = []

    async def heartbeat(self, consumer: str, deliveries: Sequence[Delivery]) -> None:
        await _call_that_misses_a_cancellation(self.calls, "heartbeat")


@pytest.mark.timeout(30)  # before: score_jobs awaited the audit task forever
async def test_a_batch_ends_when_its_audit_task_misses_its_cancellation() -> None:
    broker = DeafAudit()
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=2, block_s=0.1))
    jobs = [job(index) for index in range(4)]

    async def start_the_worker_once_an_audit_runs() -> None:
        while not broker.calls:
            await asyncio.sleep(0.01)
        await worker.run()

    running = asyncio.create_task(start_the_worker_once_an_audit_runs())
    try:
        results = [r async for r in score_jobs(broker, jobs, audit_interval_s=0.01)]
    finally:
        worker.stop()
        await running
    assert sorted(r.job_id for r in results) == sorted(j.job_id for j in jobs)
    assert broker.calls == ["audit", "audit swallowed a cancellation"]


@pytest.mark.timeout(30)  # before: Worker.run awaited its heartbeat task forever
async def test_a_worker_stops_when_its_heartbeat_task_misses_its_cancellation() -> None:
    broker = DeafHeartbeat()
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=1, block_s=0.1))
    running = asyncio.create_task(worker.run())
    results = [r async for r in score_jobs(broker, [job(0)])]
    assert [r.result["verdict"] for r in results] == ["passed"]
    worker.stop()
    await running
    assert broker.calls == ["heartbeat", "heartbeat swallowed a cancellation"]

"""A batch finishes or fails loudly whatever the broker did (issue 18 kind 5).

Redis without persistence, killed and restarted mid-batch, comes back empty: the jobs
stream, its consumer group and every stored result are gone. Before, about 200 of 300
jobs were lost and ``score_jobs`` waited forever with no error. Here a real
redis-server (started by the test on a free port, no AOF, no snapshot) is SIGKILLed
and restarted mid-batch under real worker processes (tests/broker/fake_worker.py).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator

import pytest

from execgym.broker import ResultMessage, score_jobs
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.errors import BrokerError, JobsLost
from execgym.testing import FakeSandbox, harness_pass
from tests.broker.conftest import FAST, RedisServer, job, spawn_fake_worker


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisStreamsBroker]:
    redis_server.kill()
    redis_server.persistence = False  # a restart comes back empty
    redis_server.start()
    broker = RedisStreamsBroker(redis_server.url, FAST, prefix="t", block_s=0.2)
    yield broker
    await broker.aclose()


async def test_redis_restarted_empty_mid_batch_every_lost_job_is_resubmitted(
    redis_server: RedisServer,
    client: RedisStreamsBroker,
    workers: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    for _ in range(2):
        workers.append(spawn_fake_worker(redis_server.url, "t", concurrency=4))
    jobs = [job(i, "    return 1  # SLEEP_S=0.03\n") for i in range(300)]
    results: list[ResultMessage] = []
    restarted = False
    async with asyncio.timeout(180):  # before the fix: waited forever here
        async for result in score_jobs(client, jobs, audit_interval_s=0.5):
            results.append(result)
            if len(results) == 60:
                redis_server.kill()  # SIGKILL: no save, and nothing to load
                await asyncio.sleep(0.5)
                redis_server.start()
                restarted = True
    assert restarted
    # The client saw the loss and said how big it was: most of the 240 jobs left (a
    # few were in workers' hands and finished into the restarted Redis).
    resubmitted = [
        int(match.group(1))
        for record in caplog.records
        if (match := re.search(r"lost (\d+) of 300 jobs", record.getMessage()))
    ]
    assert resubmitted, caplog.text
    assert sum(resubmitted) > 100
    assert len(results) == 300
    assert sorted(r.job_id for r in results) == sorted(j.job_id for j in jobs)
    assert {r.result["verdict"] for r in results} == {"passed"}


async def test_a_batch_lost_more_often_than_allowed_fails_naming_how_many(
    redis_server: RedisServer, client: RedisStreamsBroker
) -> None:
    # No worker: the jobs only sit in the queue, and every restart empties it.
    jobs = [job(i) for i in range(50)]
    batch = score_jobs(client, jobs, audit_interval_s=0.3, max_resubmits=1)

    async def restart_twice() -> None:
        for _ in range(2):
            await asyncio.sleep(1.0)
            redis_server.kill()
            redis_server.start()

    async def drain() -> None:
        async with asyncio.timeout(60):
            async for _ in batch:
                pass

    restarts = asyncio.create_task(restart_twice())
    try:
        with pytest.raises(JobsLost) as caught:
            await drain()
    finally:
        await restarts
    assert caught.value.lost == 50
    assert caught.value.total == 50
    assert "50 of 50 jobs" in str(caught.value)
    assert "persistence" in str(caught.value)


async def test_jobs_flushed_from_redis_and_an_announcement_lost_are_both_recovered(
    client: RedisStreamsBroker,
) -> None:
    # A FLUSHDB (or the last second of an everysec AOF) after the batch was queued: the
    # queue and the batch's set are gone; one job's result is stored but was never
    # announced on the batch's stream.
    jobs = [job(i) for i in range(20)]
    batch = asyncio.create_task(_collect(score_jobs(client, jobs, audit_interval_s=0.3)))
    async with asyncio.timeout(10):
        while await client.queued() < 20:
            await asyncio.sleep(0.02)
    await client.redis.flushdb()
    stored = ResultMessage(job_id="b/10", batch_id="b", result={"index": 10, "verdict": "passed"})
    await client.redis.set(client.keys.result("b/10"), stored.to_json())
    worker = Worker(client, FakeSandbox(harness_pass), WorkerSettings(concurrency=4, block_s=0.2))
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(60):
            results = await batch
    finally:
        worker.stop()
        await running
    assert sorted(r.job_id for r in results) == sorted(j.job_id for j in jobs)
    assert next(r for r in results if r.job_id == "b/10").result == stored.result
    assert worker.stats.done == 19  # the stored one was not run again


async def _collect(stream: AsyncIterator[ResultMessage]) -> list[ResultMessage]:
    return [result async for result in stream]


async def test_a_batch_with_no_worker_alive_fails_after_its_deadline(
    client: RedisStreamsBroker,
) -> None:
    jobs = [job(i) for i in range(5)]
    batch = score_jobs(client, jobs, audit_interval_s=0.2, no_worker_timeout_s=0.6)
    with pytest.raises(BrokerError, match=r"no worker .* while 5 of 5 jobs") as caught:
        await asyncio.wait_for(_collect(batch), 20)
    assert "execgym worker --broker" in str(caught.value)

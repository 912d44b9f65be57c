"""What must hold when things break, against a real redis-server and worker processes.

Workers here are real :class:`execgym.broker.worker.Worker` processes over Redis whose sandbox
is scripted (tests/broker/fake_worker.py: every job passes, ``SLEEP_S=`` takes time,
``CRASH_WORKER`` kills the worker), so what is tested is the queue, not the sandbox.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator

import pytest

from execgym.broker import ResultMessage, score_jobs
from execgym.broker.keys import GROUP
from execgym.broker.redis_streams import RedisStreamsBroker
from tests.broker.conftest import FAST, RedisServer, job, rss_bytes, spawn_fake_worker


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisStreamsBroker]:
    broker = RedisStreamsBroker(redis_server.url, FAST, prefix="t", block_s=0.2)
    yield broker
    await broker.aclose()


async def collect(stream: AsyncIterator[ResultMessage], timeout_s: float) -> list[ResultMessage]:
    async with asyncio.timeout(timeout_s):
        return [result async for result in stream]


async def stored_results(broker: RedisStreamsBroker) -> int:
    return len([key async for key in broker.redis.scan_iter(match="t:result:*", count=1000)])


async def assert_queue_empty(broker: RedisStreamsBroker) -> None:
    assert await broker.queued() == 0
    summary = await broker.redis.xpending(broker.keys.jobs, GROUP)
    assert summary["pending"] == 0


async def test_kill_9_mid_job_another_worker_finishes_it(
    redis_server: RedisServer, client: RedisStreamsBroker, workers: list[subprocess.Popen[bytes]]
) -> None:
    first = spawn_fake_worker(redis_server.url, "t", concurrency=2)
    workers.append(first)
    jobs = [job(0, "    return 1  # SLEEP_S=3\n"), *(job(i) for i in range(1, 6))]
    await client.ensure_group()  # so that XPENDING below never races the first submit
    batch = asyncio.create_task(collect(score_jobs(client, jobs), 60))
    slow_entry = None
    async with asyncio.timeout(20):
        while slow_entry is None:  # wait until the first worker holds the slow job
            await asyncio.sleep(0.05)
            for pending in await client.redis.xpending_range(client.keys.jobs, GROUP, "-", "+", 10):
                entries = await client.redis.xrange(client.keys.jobs, pending["message_id"])
                if not entries:  # finished and deleted since XPENDING listed it
                    continue
                fields = entries[0][1]
                if '"job_id":"b/0"' in fields["job"] and str(first.pid) in pending["consumer"]:
                    slow_entry = pending["message_id"]
    await asyncio.sleep(0.3)  # inside its 3 s "sandbox run"
    first.kill()  # SIGKILL: no drain, no hand-back
    first.wait()
    second = spawn_fake_worker(redis_server.url, "t", concurrency=2)
    workers.append(second)
    results = await batch
    assert sorted(r.job_id for r in results) == sorted(j.job_id for j in jobs)
    slow = next(r for r in results if r.job_id == "b/0")
    assert slow.result["verdict"] == "passed"
    assert slow.delivery_attempt == 2
    assert str(second.pid) in slow.worker
    assert await stored_results(client) == 6
    await assert_queue_empty(client)


async def test_redis_restart_mid_batch_loses_nothing_and_duplicates_nothing(
    redis_server: RedisServer, client: RedisStreamsBroker, workers: list[subprocess.Popen[bytes]]
) -> None:
    redis_server.appendfsync = "always"  # SIGKILLed below: every write must be on disk
    redis_server.kill()
    redis_server.start()
    for _ in range(2):
        workers.append(spawn_fake_worker(redis_server.url, "t", concurrency=4))
    jobs = [job(i, "    return 1  # SLEEP_S=0.03\n") for i in range(300)]
    results: list[ResultMessage] = []
    restarted_at = None
    async with asyncio.timeout(90):
        async for result in score_jobs(client, jobs):
            results.append(result)
            if len(results) == 60:
                redis_server.kill()  # SIGKILL
                await asyncio.sleep(0.5)
                redis_server.start()
                restarted_at = len(results)
    assert restarted_at == 60
    assert len(results) == 300
    assert len({r.job_id for r in results}) == 300
    assert {r.result["verdict"] for r in results} == {"passed"}
    assert await stored_results(client) == 300  # one stored result per job
    await assert_queue_empty(client)
    assert await client.dead_letters() == []


async def test_job_that_crashes_every_worker_is_dead_lettered_and_the_rest_completes(
    redis_server: RedisServer, client: RedisStreamsBroker, workers: list[subprocess.Popen[bytes]]
) -> None:
    crashes = 0

    def spawn() -> subprocess.Popen[bytes]:
        process = spawn_fake_worker(redis_server.url, "t", concurrency=2, max_attempts=3)
        workers.append(process)
        return process

    async def supervise(running: list[subprocess.Popen[bytes]]) -> None:
        nonlocal crashes
        while True:  # what Kubernetes does: restart a worker that died
            await asyncio.sleep(0.1)
            for slot, process in enumerate(running):
                if process.poll() is not None:
                    crashes += 1
                    running[slot] = spawn()

    running = [spawn(), spawn()]
    supervisor = asyncio.create_task(supervise(running))
    jobs = [
        job(i, "    return 1  # CRASH_WORKER\n" if i == 5 else "    return 1\n") for i in range(20)
    ]
    try:
        results = await collect(score_jobs(client, jobs, ordered=True), 60)
    finally:
        supervisor.cancel()
    assert [r.job_id for r in results] == [j.job_id for j in jobs]
    crashed = results[5]
    assert crashed.dead_lettered
    assert crashed.result["verdict"] == "sandbox_error"
    assert crashed.result["reward"] is None  # masked, never 0
    assert "dead-lettered after 3 attempt(s)" in crashed.result["message"]
    assert [r.result["verdict"] for r in results[:5] + results[6:]] == ["passed"] * 19
    assert crashes == 3
    async with asyncio.timeout(5):  # the result is stored first, then the job moved
        while not await client.dead_letters():
            await asyncio.sleep(0.05)
    (dead,) = await client.dead_letters()
    assert (dead.job_id, dead.deliveries) == ("b/5", 4)
    assert "worker died" in dead.reason
    await assert_queue_empty(client)


@pytest.mark.slow
async def test_ten_thousand_jobs_two_workers_none_lost_none_duplicated_memory_bounded(
    redis_server: RedisServer, client: RedisStreamsBroker, workers: list[subprocess.Popen[bytes]]
) -> None:
    for _ in range(2):
        workers.append(spawn_fake_worker(redis_server.url, "t", concurrency=16))
    jobs = [job(i) for i in range(10_000)]
    seen: set[str] = set()
    samples: list[tuple[int, int]] = []  # (results so far, largest worker RSS)
    started = time.monotonic()
    async with asyncio.timeout(120):
        async for result in score_jobs(client, jobs):
            assert result.job_id not in seen
            seen.add(result.job_id)
            if len(seen) % 500 == 0:
                samples.append((len(seen), max(rss_bytes(w.pid) for w in workers)))
    elapsed_s = time.monotonic() - started
    assert len(seen) == 10_000
    assert await stored_results(client) == 10_000
    await assert_queue_empty(client)
    assert all(w.poll() is None for w in workers)
    warm = next(rss for count, rss in samples if count >= 2000)
    peak = max(rss for _, rss in samples)
    print(
        f"\n10k jobs, 2 workers: {elapsed_s:.1f} s ({10_000 / elapsed_s:.0f} jobs/s); worker RSS "
        f"at 2k results {warm / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"
    )
    assert peak - warm < 16 * 2**20, samples  # no growth with the number of jobs

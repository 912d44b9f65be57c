"""The broker contract, one body for every backend: embedded (memory) and Redis Streams."""

from __future__ import annotations

import asyncio

import pytest

from execgym import Rollout, RolloutLine
from execgym.broker import JobMessage, ResultMessage, score_jobs, score_rollouts
from execgym.broker.base import Broker, BrokerSettings
from execgym.broker.memory import MemoryBroker
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.errors import MessageError, QueueFull
from execgym.judges.base import Verdict
from execgym.sandbox import Status
from execgym.tasks import LineProblem
from execgym.testing import FakeSandbox, fake_result, harness_pass
from tests.broker.conftest import TASK, job


def result_for(message: JobMessage, worker: str = "w") -> ResultMessage:
    return ResultMessage(
        job_id=message.job_id,
        batch_id=message.batch_id,
        result={"index": message.index, "verdict": "passed", "reward": 1.0},
        worker=worker,
    )


async def test_messages_round_trip_as_json_and_refuse_junk() -> None:
    message = job(3)
    assert JobMessage.from_json(message.to_json()) == message
    with pytest.raises(MessageError, match="version"):
        JobMessage.from_json(message.to_json().replace('"version":1', '"version":2'))
    with pytest.raises(MessageError, match="wall_time_s"):
        JobMessage.from_json(message.to_json().replace('"wall_time_s":5.0', '"wall_time_s":-1'))
    with pytest.raises(MessageError):
        JobMessage.from_json(b"\x80(not json")


async def test_submit_consume_store_ack_gives_one_result(broker: Broker) -> None:
    jobs = [job(i) for i in range(5)]
    await broker.submit(jobs)
    assert await broker.queued() == 5
    taken = await broker.consume("w1", 10, 0.5)
    assert sorted(d.job.index for d in taken if d.job) == list(range(5))
    assert all(d.attempt == 1 for d in taken)
    for delivery in taken:
        assert delivery.job is not None
        assert await broker.store_result(result_for(delivery.job))
        assert not await broker.store_result(result_for(delivery.job, worker="late"))
        await broker.ack(delivery)
    assert await broker.queued() == 0
    seen = [r async for r in broker.results("b", 5)]
    assert sorted(r.job_id for r in seen) == [f"b/{i}" for i in range(5)]
    assert {r.worker for r in seen} == {"w"}  # the first stored wins
    stored = await broker.get_result("b/2")
    assert stored is not None
    assert stored.worker == "w"


async def test_full_queue_refuses_with_a_retry_hint_then_waits_for_room(broker: Broker) -> None:
    broker.settings = BrokerSettings(max_queue_length=3, retry_after_s=0.05)  # type: ignore[misc]
    await broker.submit([job(0), job(1)])
    with pytest.raises(QueueFull, match="full") as refused:
        await broker.submit([job(2), job(3)], wait=False)
    assert refused.value.retry_after_s == 0.05
    assert (refused.value.queued, refused.value.max_queue_length) == (2, 3)
    assert await broker.queued() == 2  # nothing of the refused batch was queued
    with pytest.raises(QueueFull):
        await broker.submit([job(2), job(3)], timeout_s=0.2)

    async def finish_one() -> None:
        await asyncio.sleep(0.1)
        (delivery,) = await broker.consume("w", 1, 0.5)
        await broker.ack(delivery)

    await asyncio.gather(broker.submit([job(2), job(3)], timeout_s=5), finish_one())
    assert await broker.queued() == 3


async def test_unacked_job_is_redelivered_after_the_visibility_timeout(broker: Broker) -> None:
    await broker.submit([job(0), job(1)])
    first = await broker.consume("dead", 2, 0.5)
    assert len(first) == 2
    alive = next(d for d in first if d.job and d.job.index == 1)
    assert await broker.consume("other", 2, 0.2) == []  # not yet: still visible to "dead"
    for _ in range(3):
        await asyncio.sleep(0.4)
        await broker.heartbeat("dead", [alive])  # keeps only job 1
    again = await broker.consume("other", 2, 0.5)
    assert [(d.job.index, d.attempt) for d in again if d.job] == [(0, 2)]


async def test_retry_counts_attempts_and_dead_letter_keeps_the_reason(broker: Broker) -> None:
    await broker.submit([job(0)])
    (delivery,) = await broker.consume("w", 1, 0.5)
    await broker.retry(delivery, count_attempt=True)
    (delivery,) = await broker.consume("w", 1, 0.5)
    assert delivery.attempt == 2
    await broker.retry(delivery, count_attempt=False)  # handed back on shutdown: not counted
    (delivery,) = await broker.consume("w", 1, 0.5)
    assert delivery.attempt == 2
    await broker.dead_letter(delivery, "gave up: because")
    assert await broker.queued() == 0
    (dead,) = await broker.dead_letters()
    assert (dead.job_id, dead.deliveries, dead.reason) == ("b/0", 2, "gave up: because")
    assert JobMessage.from_json(dead.raw).job_id == "b/0"


async def test_worker_scores_a_batch_in_order_with_local_invalids(broker: Broker) -> None:
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=3, block_s=0.2))
    running = asyncio.create_task(worker.run())
    items: list[RolloutLine | LineProblem] = [
        RolloutLine(i, Rollout(task_id="t/1", completion="    return 1\n")) for i in range(8)
    ]
    items.insert(3, RolloutLine(8, Rollout(task_id="nope", completion="")))
    items.append(LineProblem("r.jsonl", 11, 9, "bad json"))
    scored = [s async for s in score_rollouts(broker, {"t/1": TASK}, items, ordered=True)]
    worker.stop()
    await running
    assert [s.index for s in scored] == list(range(10))
    verdicts = [s.verdict for s in scored]
    assert verdicts.count(Verdict.PASSED) == 8
    assert verdicts[8] is verdicts[9] is Verdict.INVALID
    assert "unknown task_id 'nope'" in scored[8].message
    assert worker.stats.done == 8


async def test_unreadable_job_becomes_an_invalid_result_and_a_dead_letter(broker: Broker) -> None:
    bad = '{"version": 1, "job_id": "b/0", "batch_id": "b", "index": 0, "task": {}}'
    if isinstance(broker, MemoryBroker):
        await broker.submit([job(1)])
        broker._entries["junk"] = type(broker._entries[next(iter(broker._entries))])(bad, 1)
        broker._waiting.appendleft("junk")
    else:
        assert isinstance(broker, RedisStreamsBroker)
        await broker.submit([job(1)])
        await broker.redis.xadd(broker.keys.jobs, {"job": bad})
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=2, block_s=0.2))
    running = asyncio.create_task(worker.run())
    results = {r.job_id: r async for r in broker.results("b", 2)}
    worker.stop()
    await running
    assert results["b/1"].result["verdict"] == "passed"
    assert results["b/0"].result["verdict"] == "invalid"
    assert "task" in results["b/0"].result["message"]
    (dead,) = await broker.dead_letters()
    assert dead.job_id == ""
    assert "unusable job message" in dead.reason


async def test_resubmitted_job_id_is_not_run_twice(broker: Broker) -> None:
    box = FakeSandbox(harness_pass)
    worker = Worker(broker, box, WorkerSettings(concurrency=2, block_s=0.2))
    running = asyncio.create_task(worker.run())
    first = [r async for r in score_jobs(broker, [job(0)])]
    again = [r async for r in score_jobs(broker, [job(0)])]
    worker.stop()
    await running
    assert len(box.calls) == 1
    assert first == again
    assert (worker.stats.done, worker.stats.duplicates) == (1, 0)  # not even queued again


async def test_sandbox_error_is_retried_on_the_queue_then_masked(broker: Broker) -> None:
    box = FakeSandbox([fake_result(Status.SANDBOX_ERROR, message="no cgroup")])
    worker = Worker(broker, box, WorkerSettings(concurrency=1, max_attempts=3, block_s=0.2))
    running = asyncio.create_task(worker.run())
    (result,) = [r async for r in score_jobs(broker, [job(0)])]
    worker.stop()
    await running
    assert result.result["verdict"] == "sandbox_error"
    assert result.result["reward"] is None
    assert result.delivery_attempt == 3  # retried twice through the queue
    assert len(box.calls) == 3 * 2  # and each delivery retried once in the scorer
    assert worker.stats.retried == 2

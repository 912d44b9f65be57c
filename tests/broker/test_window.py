"""A batch through a queue holds a window of jobs, not the batch (issue 23, flat memory).

Counts, not timings: how many rollouts the client has read beyond those it has
answered, and how many announcements the broker still keeps once they are read.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from execgym import Rollout, RolloutLine
from execgym.broker import JobMessage, ResultMessage, score_rollouts
from execgym.broker.base import Broker
from execgym.broker.memory import MemoryBroker
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.calibration import Calibrator
from execgym.judges.base import Verdict
from execgym.tasks import LineProblem
from execgym.testing import FakeSandbox, harness_pass
from tests.broker.conftest import TASK, job


@pytest.mark.parametrize("ordered", [False, True])
async def test_a_streamed_batch_reads_at_most_a_window_ahead_of_its_results(
    broker: Broker, ordered: bool
) -> None:
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=4, block_s=0.2))
    running = asyncio.create_task(worker.run())
    read = 0

    def items() -> Iterator[RolloutLine | LineProblem]:  # a file's lines, read lazily
        nonlocal read
        for index in range(120):
            read += 1
            task_id = "nope" if index % 10 == 3 else "t/1"  # scored invalid here, not sent
            yield RolloutLine(index, Rollout(task_id=task_id, completion="    return 1\n"))

    ahead = []
    indexes = []
    try:
        async for scored in score_rollouts(
            broker, {"t/1": TASK}, items(), ordered=ordered, window=10
        ):
            indexes.append(scored.index)
            ahead.append(read - len(indexes))  # read, neither answered nor yielded
    finally:
        worker.stop()
        await running
    # The old client read (and made a job of) every rollout before the first result:
    # 119 ahead at the first one.
    assert max(ahead) <= 10, ahead
    assert sorted(indexes) == list(range(120))
    if ordered:
        assert indexes == list(range(120))
    assert worker.stats.done == 108  # the 12 of the unknown task never left the client


async def test_a_streamed_batch_yields_each_result_once_and_unusable_lines_too(
    broker: Broker,
) -> None:
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=2, block_s=0.2))
    running = asyncio.create_task(worker.run())
    lines: list[RolloutLine | LineProblem] = [
        RolloutLine(i, Rollout(task_id="t/1", completion="    return 1\n")) for i in range(6)
    ]
    lines.insert(2, LineProblem("r.jsonl", 3, 6, "bad json"))
    try:
        scored = [s async for s in score_rollouts(broker, {"t/1": TASK}, iter(lines), window=3)]
    finally:
        worker.stop()
        await running
    assert sorted(s.index for s in scored) == list(range(7))
    verdicts = {s.index: s.verdict for s in scored}
    assert verdicts.pop(6) is Verdict.INVALID
    assert set(verdicts.values()) == {Verdict.PASSED}


async def _kept(broker: Broker, batch_id: str) -> int:
    """Announcements of ``batch_id`` the broker still holds."""
    if isinstance(broker, RedisStreamsBroker):
        return int(await broker.redis.xlen(broker.keys.done(batch_id)))
    assert isinstance(broker, MemoryBroker)
    return len(broker._done.get(batch_id, []))


async def test_the_batch_reader_drops_what_it_has_read(broker: Broker) -> None:
    def result(index: int) -> ResultMessage:
        message = job(index)
        data = {"index": index, "verdict": "passed", "reward": 1.0}
        return ResultMessage(job_id=message.job_id, batch_id="b", result=data)

    for index in range(30):
        await broker.store_result(result(index))
    assert await _kept(broker, "b") == 30
    reader = broker.results("b", None)
    got = [await anext(reader) for _ in range(30)]
    await broker.store_result(result(30))
    await broker.store_result(result(30))  # announced twice: the caller drops one
    got += [await anext(reader), await anext(reader)]
    # The old reader kept all 32 announcements until the batch's end (Redis: in the
    # batch's stream, for a million-rollout batch a million results).
    assert await _kept(broker, "b") <= 2
    await reader.aclose()
    assert [r.job_id for r in got] == [f"b/{i}" for i in range(30)] + ["b/30", "b/30"]
    await broker.forget_batch("b")
    assert await _kept(broker, "b") == 0


def _live_jobs() -> int:
    """JobMessage objects alive now (``type()``, not ``isinstance``: see test_jobs_memory)."""
    gc.collect()
    return sum(1 for thing in gc.get_objects() if type(thing) is JobMessage)


async def test_a_calibrated_batch_reads_a_window_ahead_and_judges_each_reference_once(
    broker: Broker, tmp_path: Path
) -> None:
    tasks = {
        f"t/{n}": TASK.model_copy(update={"task_id": f"t/{n}", "reference": "    return 1\n"})
        for n in range(6)
    }
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=4, block_s=0.2))
    running = asyncio.create_task(worker.run())
    read = 0

    def items() -> Iterator[RolloutLine | LineProblem]:  # a file's lines, read lazily
        nonlocal read
        for index in range(90):
            read += 1
            yield RolloutLine(
                index, Rollout(task_id=f"t/{index // 15}", completion="    return 1\n")
            )

    ahead, scored = [], []
    calibrator = Calibrator(factor=10, floor_s=1, cache_dir=tmp_path / "calibration")
    try:
        async for result in score_rollouts(
            broker, tasks, items(), ordered=True, calibrator=calibrator, window=8
        ):
            scored.append(result)
            ahead.append(read - len(scored))
    finally:
        worker.stop()
        await running
    # The old client made every job first (--calibrate-limits): 89 read ahead at the first.
    assert max(ahead) <= 8, ahead
    assert [s.index for s in scored] == list(range(90))
    assert all(s.calibration is not None and s.calibration["calibrated"] for s in scored)
    assert worker.stats.done == 90 + 6  # each task's reference judged once, as before


async def test_an_ordered_list_holds_a_window_of_jobs_not_the_batch(broker: Broker) -> None:
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=4, block_s=0.2))
    running = asyncio.create_task(worker.run())
    rollout = Rollout(task_id="t/1", completion="    return 1\n")
    lines = [RolloutLine(index, rollout) for index in range(60)]
    lines[10], lines[11] = lines[11], lines[10]  # a list is yielded by index
    alive, indexes = [], []
    try:
        async for scored in score_rollouts(broker, {"t/1": TASK}, lines, ordered=True, window=8):
            indexes.append(scored.index)
            if len(indexes) % 10 == 1:
                alive.append(_live_jobs())
    finally:
        worker.stop()
        await running
    assert indexes == list(range(60))
    # The old client made the list's 60 jobs first and held them to the end.
    # Now the window's 8, an in-process broker's copies of them, the worker's 4.
    assert max(alive) <= 2 * 8 + 4, alive


async def _stored(broker: Broker) -> tuple[int, int]:
    """Results the broker keeps, and job ids in its batches' sets (Redis)."""
    if isinstance(broker, RedisStreamsBroker):
        results = [key async for key in broker.redis.scan_iter(match=broker.keys.result("*"))]
        ids = 0
        async for key in broker.redis.scan_iter(match=broker.keys.batch("*")):
            ids += int(await broker.redis.scard(key))
        return len(results), ids
    assert isinstance(broker, MemoryBroker)
    return len(broker._results), 0


async def test_results_the_caller_has_read_are_dropped_by_the_broker(broker: Broker) -> None:
    worker = Worker(broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=2, block_s=0.2))
    running = asyncio.create_task(worker.run())
    rollout = Rollout(task_id="t/1", completion="    return 1\n")
    lines = (RolloutLine(index, rollout) for index in range(40))
    kept = []
    try:
        async for _scored in score_rollouts(broker, {"t/1": TASK}, lines, window=8):
            kept.append(await _stored(broker))
    finally:
        worker.stop()
        await running
    # The old client left every result (and, on Redis, its id in the batch's set) for
    # result_ttl_s, 24 h: 40 of each here once the batch ended.
    assert await _stored(broker) == (0, 0)
    # At most the window's unread ones and a quarter window read and not yet dropped.
    assert max(results for results, _ in kept) <= 8 + 2, kept
    assert max(ids for _, ids in kept) <= 8 + 2, kept

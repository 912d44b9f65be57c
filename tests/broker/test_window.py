"""A batch through a queue holds a window of jobs, not the batch (issue 23, flat memory).

Counts, not timings: how many rollouts the client has read beyond those it has
answered, and how many announcements the broker still keeps once they are read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from execgym import Rollout, RolloutLine
from execgym.broker import ResultMessage, score_rollouts
from execgym.broker.base import Broker
from execgym.broker.memory import MemoryBroker
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
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

"""Breakers through Redis: a type opened by one worker's failures is quarantined on all.

Each worker kept its breakers in its own process, so with N workers a task type that
crashes environments had to crash each of them before it was stopped (issue 21). Two
real workers (bwrap) on a real redis-server: the first opens the breaker on two
infrastructure failures, the second, which never ran one, quarantines the type.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from execgym import Rollout, RolloutLine, Task
from execgym.broker import make_jobs, score_jobs
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings, describe_broker
from execgym.limits import Limits
from execgym.ops.breakers import BreakerPolicy, Breakers, BreakerState
from execgym.testing import RedisServer
from tests.broker.conftest import FAST

SETTLED = replace(FAST, visibility_timeout_s=30.0)  # no reclaim of a slow sandbox's job


def _starved(number: int) -> Task:
    """A task whose limit no sandbox can meet: an infrastructure failure (breakers count it)."""
    return Task(
        task_id=f"Starved/{number}",
        prompt="def echo(x):\n",
        tests="def check(candidate):\n    assert candidate(1) == 1\n",
        entry_point="echo",
        limits={"wall_time_s": 1e-9},
    )


async def _batch(broker: RedisStreamsBroker, worker: Worker, numbers: range) -> list[str]:
    tasks = {f"Starved/{i}": _starved(i) for i in numbers}
    items = [RolloutLine(i, Rollout(task_id=f"Starved/{i}", completion="    return x\n"))
             for i in numbers]  # fmt: skip
    jobs, _ = make_jobs(tasks, items, Limits(wall_time_s=5))
    running = asyncio.create_task(worker.run())
    try:
        return [str(r.result["verdict"]) async for r in score_jobs(broker, jobs, ordered=True)]
    finally:
        worker.stop()
        await running


async def test_a_breaker_one_worker_opens_quarantines_the_type_on_another(
    redis_server: RedisServer, bwrap_sandbox: object
) -> None:
    policy = BreakerPolicy(failures=2, window_s=60, cooldown_s=600)
    settings = {"concurrency": 1, "block_s": 0.2, "max_attempts": 1, "breakers_refresh_s": 0}
    brokers = [
        RedisStreamsBroker(redis_server.url, SETTLED, prefix="shared", block_s=0.2) for _ in "ab"
    ]
    first, second = (
        Worker(b, bwrap_sandbox, WorkerSettings(name=n, **settings), breakers=Breakers(policy))  # type: ignore[arg-type]
        for b, n in zip(brokers, ("first", "second"), strict=True)
    )
    try:
        assert await _batch(brokers[0], first, range(2)) == ["sandbox_error"] * 2
        assert first.breakers is not None
        assert second.breakers is not None
        assert first.breakers.state("Starved") is BreakerState.OPEN
        assert second.breakers.state("Starved") is BreakerState.CLOSED  # never ran one
        verdicts = await _batch(brokers[1], second, range(2, 5))
        assert verdicts == ["quarantined"] * 3  # nothing of it ran on the second worker
        assert second.breakers.state("Starved") is BreakerState.OPEN
        report = await describe_broker(
            RedisStreamsBroker(redis_server.url, FAST, prefix="shared", block_s=0.2)
        )
        assert "breakers opened and shared with every worker: 1" in report
        assert "Starved: OPEN for" in report
    finally:
        for broker in brokers:
            await broker.aclose()

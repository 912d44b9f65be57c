"""Redis's memory while a brokered batch flows, without sandboxes: what is held, at most.

A redis-server of its own (``execgym.testing.RedisServer``), an in-process
``Worker`` on a fake sandbox (every rollout passes at once, so a batch takes seconds
instead of real runs), and ``score_rollouts`` as ``execgym score --broker`` calls it.
Redis's memory is sampled every 50 ms: ``used_memory``, its data, the clients'
buffers, the append-only file's buffer, the keys and the queued jobs, each at its
largest, then ``used_memory_peak``. Compare trees with ``PYTHONPATH``:

    PYTHONPATH=src .venv/bin/python benchmarks/redis_memory.py 1000 5000
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from execgym import Rollout, RolloutLine, Task
from execgym.broker import score_rollouts
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.testing import FakeSandbox, RedisServer, harness_pass

TASK = Task(
    task_id="t/1",
    prompt="def f():\n",
    tests="def check(c):\n    assert c() == 1\n",
    entry_point="f",
)
COUNTS = ("keys", "jobs queued")


async def measure(count: int) -> None:
    """One batch of ``count`` rollouts; prints the largest of each figure."""
    server = RedisServer(Path(tempfile.mkdtemp()))
    server.start()
    broker = RedisStreamsBroker(server.url, block_s=0.2)
    worker_broker = RedisStreamsBroker(server.url, block_s=0.2)
    worker = Worker(
        worker_broker, FakeSandbox(harness_pass), WorkerSettings(concurrency=4, block_s=0.2)
    )
    running = asyncio.create_task(worker.run())
    redis = broker.redis
    largest: dict[str, int] = {}

    async def sample() -> None:
        while True:
            info = await redis.info("memory")
            stats = await redis.memory_stats()
            row = {
                "used_memory": info["used_memory"],
                "data": info["used_memory_dataset"],
                "client buffers": stats.get("clients.normal", 0),
                "aof buffer": stats.get("aof.buffer", 0),
                "keys": stats.get("keys.count", 0),
                "jobs queued": await redis.xlen(broker.keys.jobs),
            }
            for name, value in row.items():
                largest[name] = max(largest.get(name, 0), int(value))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    items = (
        RolloutLine(i, Rollout(task_id="t/1", completion="    return 1\n")) for i in range(count)
    )
    started = time.perf_counter()
    try:
        results = sum([1 async for _ in score_rollouts(broker, {"t/1": TASK}, items)])
        sampler.cancel()
        peak = (await redis.info("memory"))["used_memory_peak"]
        figures = ", ".join(
            f"{name} {value}" if name in COUNTS else f"{name} {value / 2**20:.2f} MiB"
            for name, value in largest.items()
        )
        print(
            f"{count} rollouts, {results} results, {time.perf_counter() - started:.0f} s: "
            f"{figures}; used_memory_peak {peak / 2**20:.2f} MiB"
        )
    finally:
        worker.stop()
        await running
        await broker.aclose()
        await worker_broker.aclose()
        server.kill()


if __name__ == "__main__":
    for size in sys.argv[1:] or ["1000", "5000"]:
        asyncio.run(measure(int(size)))

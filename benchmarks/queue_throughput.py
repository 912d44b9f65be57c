"""Throughput through the embedded broker vs Redis Streams, and per-job broker overhead.

In one run, in alternating rounds (so both see the same machine load), each way with
the same number of sandboxes at once:

- **embedded**: the trainer's client, a :class:`~execgym.broker.MemoryBroker` and one
  :class:`~execgym.broker.worker.Worker` in one process, as ``execgym score`` runs by default;
- **redis**: the same client submitting to a redis-server started here (AOF on,
  ``appendfsync everysec``), consumed by one ``execgym worker`` process, as deployed;
- **redis, worker in-process**: the same Redis, with the worker in this process as in
  the embedded way, which separates the broker's cost from that of a second process.

The batch is HumanEval's 164 canonical solutions judged in real sandboxes (bwrap, warm
pool). The per-job broker overhead is measured apart, with jobs whose sandbox runs
nothing (:class:`execgym.testing.FakeSandbox`), so that only queueing is timed: wall
time per job through each broker minus that of :meth:`execgym.Scorer.score` on the same
jobs without any broker, with the worker in this process for both.

    .venv/bin/python benchmarks/queue_throughput.py [--rounds 3] [--sandboxes N] [--trivial 2000]
"""

from __future__ import annotations

# Not named queue.py (the name): a file of that name in benchmarks/ shadows the
# standard library's queue module, which redis-py imports, for every script here.
import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from execgym import Rollout, RolloutLine, Scorer, Task, canonical_rollouts, load_dataset
from execgym.broker import BrokerSettings, MemoryBroker, make_jobs, score_jobs
from execgym.broker.base import Broker
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings
from execgym.sandbox import Sandbox, WarmPoolSandbox
from execgym.testing import FakeSandbox, RedisServer, harness_pass

SETTINGS = BrokerSettings(visibility_timeout_s=60)


async def _through(broker: Broker, jobs: list, expect: int) -> float:
    """Seconds to push ``jobs`` through ``broker`` and get every result back."""
    started = time.perf_counter()
    results = [r async for r in score_jobs(broker, jobs)]
    elapsed = time.perf_counter() - started
    passed = sum(r.result["verdict"] == "passed" for r in results)
    assert passed == expect, f"{broker.name}: {passed} of {expect} passed"
    return elapsed


async def _with_worker(broker: Broker, sandbox: Sandbox, sandboxes: int, jobs: list) -> float:
    worker = Worker(broker, sandbox, WorkerSettings(concurrency=sandboxes, block_s=0.2))
    running = asyncio.create_task(worker.run())
    try:
        return await _through(broker, jobs, len(jobs))
    finally:
        worker.stop()
        await running


def in_process_round(tasks: dict[str, Task], sandboxes: int, url: str | None = None) -> float:
    """The client and one worker in this process, over the embedded broker or Redis."""

    async def run() -> float:
        async with WarmPoolSandbox() as pool:
            await Scorer({}, pool).self_test()  # the zygote starts before the clock
            jobs, _ = make_jobs(tasks, canonical_rollouts(tasks))
            broker: Broker = (
                MemoryBroker(SETTINGS)
                if url is None
                else RedisStreamsBroker(url, SETTINGS, prefix="in-process", block_s=0.2)
            )
            try:
                return await _with_worker(broker, pool, sandboxes, jobs)
            finally:
                await broker.aclose()

    return len(tasks) / asyncio.run(run())


def redis_round(tasks: dict[str, Task], url: str) -> float:
    async def run() -> float:
        broker = RedisStreamsBroker(url, SETTINGS, block_s=0.2)
        try:
            jobs, _ = make_jobs(tasks, canonical_rollouts(tasks))
            return await _through(broker, jobs, len(jobs))
        finally:
            await broker.aclose()

    return len(tasks) / asyncio.run(run())


async def _wait_for_worker(url: str) -> None:
    broker = RedisStreamsBroker(url, SETTINGS)
    try:
        async with asyncio.timeout(60):
            while not await broker.live_workers():
                await asyncio.sleep(0.1)
    finally:
        await broker.aclose()


TRIVIAL = Task(
    task_id="t", prompt="def f():\n", tests="def check(c):\n    assert c()\n", entry_point="f"
)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def overhead_ms(url: str, redis_pid: int, sandboxes: int, count: int) -> dict[str, tuple]:
    """Per-job (wall ms, CPU ms) each way takes for jobs that take no time to judge.

    CPU counts this process (client and worker) and, for redis, redis-server too; it is
    the figure that does not depend on how busy the machine is.
    """
    items = [
        RolloutLine(i, Rollout(task_id="t", completion="    return 1\n")) for i in range(count)
    ]
    box = FakeSandbox(harness_pass, keep_calls=False)

    async def direct() -> None:
        await Scorer({"t": TRIVIAL}, box).score(items, workers=sandboxes)

    async def through(broker: Broker) -> None:
        jobs, _ = make_jobs({"t": TRIVIAL}, items)
        try:
            await _with_worker(broker, box, sandboxes, jobs)
        finally:
            await broker.aclose()

    ways = {
        "direct": direct,
        "embedded": lambda: through(MemoryBroker(SETTINGS)),
        "redis": lambda: through(RedisStreamsBroker(url, SETTINGS, prefix="ovh", block_s=0.2)),
    }
    figures = {}
    for name, way in ways.items():
        wall, cpu = time.perf_counter(), time.process_time() + _cpu_s(redis_pid)
        asyncio.run(way())
        wall = time.perf_counter() - wall
        cpu = time.process_time() + _cpu_s(redis_pid) - cpu
        figures[name] = (wall / count * 1000, cpu / count * 1000)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandboxes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trivial", type=int, default=2000, help="jobs for the overhead run")
    args = parser.parse_args()
    tasks = load_dataset("humaneval")
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory))
        server.start()
        worker = subprocess.Popen(
            [sys.executable, "-m", "execgym", "worker", "--broker", server.url,
             "--concurrency", str(args.sandboxes)],
        )  # fmt: skip
        try:
            asyncio.run(_wait_for_worker(server.url))
            rates: dict[str, list[float]] = {"embedded": [], "redis": [], "redis-here": []}
            for _ in range(args.rounds):
                rates["embedded"].append(in_process_round(tasks, args.sandboxes))
                rates["redis"].append(redis_round(tasks, server.url))
                rates["redis-here"].append(in_process_round(tasks, args.sandboxes, server.url))
            worker.terminate()
            worker.wait(60)
            assert server.process is not None
            overhead = overhead_ms(server.url, server.process.pid, args.sandboxes, args.trivial)
        finally:
            if worker.poll() is None:
                worker.kill()
            server.kill()
    embedded, redis, here = (statistics.median(rates[k]) for k in rates)
    print(
        f"HumanEval canonical, {len(tasks)} rollouts, {args.sandboxes} sandboxes (bwrap, warm "
        f"pool), median of {args.rounds} alternating rounds, {os.cpu_count()} CPUs:"
    )
    print(f"  embedded                  {embedded:6.1f} rollouts/s {_spread(rates['embedded'])}")
    print(f"  redis, an execgym worker  {redis:6.1f} rollouts/s {_spread(rates['redis'])}")
    print(f"  redis, worker in-process  {here:6.1f} rollouts/s {_spread(rates['redis-here'])}")
    print(
        f"  redis / embedded: {redis / embedded:.2f}x with a worker process, "
        f"{here / embedded:.2f}x with the worker in-process (target >= 0.90x)"
    )
    direct_wall, direct_cpu = overhead["direct"]
    print(
        f"per-job broker overhead, {args.trivial} jobs whose sandbox runs nothing, over the "
        f"no-broker Scorer ({direct_wall:.3f} ms wall, {direct_cpu:.3f} ms CPU per job):"
    )
    for name in ("embedded", "redis"):
        wall, cpu = overhead[name]
        print(
            f"  {name:9} {wall - direct_wall:+.3f} ms wall, {cpu - direct_cpu:+.3f} ms CPU "
            "(client + worker + redis-server) per job"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _spread(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.1f}" for v in values) + ")"


if __name__ == "__main__":
    main()

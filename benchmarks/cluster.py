"""The same HumanEval batch through the embedded broker, Redis and Ray, in one run.

HumanEval's 164 canonical solutions, scored with the same number of sandboxes (the
warm pool, ``--workers`` programs at once) three ways, in alternating rounds so the
ratios are measured under the same machine load:

- embedded: :class:`execgym.Scorer` in this process (``execgym score``);
- redis: a real ``redis-server`` on a free port and one ``execgym worker`` process
  (``--concurrency WORKERS --warm-pool``), this process submitting and reading as
  ``execgym score --broker redis://...`` does;
- ray: a local Ray node started here (``ray.init(num_cpus=WORKERS)``) and one
  sandbox actor with ``WORKERS`` sandboxes (``execgym score --broker ray``).

Each clock starts with the workers up (pools started, self-tests passed) and stops at
the last result. Printed per way: seconds, rollouts/s, the ratio to embedded (target
at least 0.9x), and the broker's overhead per job: the extra wall time over embedded,
times the sandboxes (each was idle that long per job), divided by the jobs.

    .venv/bin/python benchmarks/cluster.py [--workers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from execgym import Scorer, Verdict, canonical_rollouts, load_dataset
from execgym.broker import make_jobs, score_jobs
from execgym.broker.ray_actors import ActorConfig
from execgym.broker.ray_broker import RayBroker
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.limits import Limits
from execgym.sandbox import WarmPoolSandbox
from execgym.tasks.loaders import RolloutLine
from execgym.testing import RedisServer

LIMITS = Limits(wall_time_s=20, cpu_time_s=10)


def _lines(tasks) -> list[RolloutLine]:  # type: ignore[no-untyped-def]
    return canonical_rollouts(tasks)


async def embedded(tasks, workers: int) -> float:  # type: ignore[no-untyped-def]
    async with WarmPoolSandbox() as pool:
        scorer = Scorer(tasks, pool, LIMITS)
        await scorer.self_test()
        started = time.perf_counter()
        results = await scorer.score(canonical_rollouts(tasks), workers=workers)
        elapsed = time.perf_counter() - started
    _check("embedded", [r.verdict for r in results], len(tasks))
    return elapsed


async def _through(broker, tasks) -> float:  # type: ignore[no-untyped-def]
    jobs, local = make_jobs(tasks, _lines(tasks), LIMITS)
    if local:
        raise RuntimeError(f"{len(local)} rollouts could not be sent")
    started = time.perf_counter()
    verdicts = [Verdict(m.result["verdict"]) async for m in score_jobs(broker, jobs)]
    elapsed = time.perf_counter() - started
    _check(broker.name, verdicts, len(tasks))
    return elapsed


def _check(way: str, verdicts: list[Verdict], total: int) -> None:
    passed = sum(v is Verdict.PASSED for v in verdicts)
    if passed != total:
        raise RuntimeError(f"{way}: {passed} of {total} canonical solutions passed")


async def redis(tasks, workers: int, server: RedisServer) -> float:  # type: ignore[no-untyped-def]
    prefix = f"bench{time.monotonic_ns()}"
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once, before the clock
        [sys.executable, "-m", "execgym", "worker", "--broker", server.url, "--prefix", prefix,
         "--concurrency", str(workers), "--warm-pool"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    broker = RedisStreamsBroker(server.url, prefix=prefix, block_s=0.2)
    try:
        while not await broker.live_workers():  # its pool is up and self-tested
            if worker.poll() is not None:
                raise RuntimeError(f"execgym worker exited with {worker.returncode}")
            await asyncio.sleep(0.1)
        return await _through(broker, tasks)
    finally:
        await broker.aclose()
        worker.terminate()
        worker.wait(60)


async def ray_actors(tasks, workers: int) -> float:  # type: ignore[no-untyped-def]
    broker = RayBroker(config=ActorConfig(warm_pool=True), actors=1, concurrency=workers)
    try:
        await broker.start()
        return await _through(broker, tasks)
    finally:
        await broker.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is needed (apt-get install redis-server)")
    import ray

    tasks = load_dataset("humaneval")
    times: dict[str, list[float]] = {"embedded": [], "redis": [], "ray": []}
    with tempfile.TemporaryDirectory() as scratch:
        server = RedisServer(Path(scratch))
        server.start()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                 namespace="execgym")  # fmt: skip
        try:
            for _ in range(args.rounds):
                times["embedded"].append(asyncio.run(embedded(tasks, args.workers)))
                times["redis"].append(asyncio.run(redis(tasks, args.workers, server)))
                times["ray"].append(asyncio.run(ray_actors(tasks, args.workers)))
        finally:
            ray.shutdown()
            server.kill()
    jobs = len(tasks)
    base = statistics.median(times["embedded"])
    load = os.getloadavg()[0]
    print(f"HumanEval {jobs} canonical, {args.workers} sandboxes (warm pool), "
          f"median of {args.rounds} alternating round(s), load {load:.1f}")  # fmt: skip
    header = f"{'way':<10}{'seconds':>9}{'rollouts/s':>12}{'vs embedded':>13}"
    print(f"{header}{'overhead/job':>15}")
    for way, measured in times.items():
        seconds = statistics.median(measured)
        overhead_ms = (seconds - base) * args.workers / jobs * 1000
        print(f"{way:<10}{seconds:>9.2f}{jobs / seconds:>12.1f}{base / seconds:>12.2f}x"
              f"{overhead_ms:>12.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()

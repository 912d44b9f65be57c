"""A worker process for the broker tests: real Worker, real Redis, scripted sandbox.

The sandbox runs nothing (FakeSandbox with harness_pass: every job passes) except that
a job whose program contains ``CRASH_WORKER`` kills this whole process (os._exit), as a
job that brings its worker down would, and ``SLEEP_S=<seconds>`` makes a job take time.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re

from execgym.broker import BrokerSettings
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.broker.worker import Worker, WorkerSettings, serve
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult
from execgym.testing import FakeSandbox, harness_pass


class ScriptedSandbox(BaseSandbox):
    name = "fake"

    def __init__(self) -> None:
        self.fake = FakeSandbox(harness_pass, keep_calls=False)

    async def run(self, request: RunRequest) -> RunResult:
        if b"CRASH_WORKER" in request.stdin:
            os._exit(3)
        match = re.search(rb"SLEEP_S=([0-9.]+)", request.stdin)
        if match:
            await asyncio.sleep(float(match.group(1)))
        return await self.fake.run(request)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--prefix", default="t")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--visibility", type=float, default=1.0)
    parser.add_argument("--max-attempts", type=int, default=3)
    args = parser.parse_args()
    settings = BrokerSettings(visibility_timeout_s=args.visibility)
    broker = RedisStreamsBroker(args.url, settings, prefix=args.prefix, block_s=0.2)
    worker = Worker(
        broker,
        ScriptedSandbox(),
        WorkerSettings(concurrency=args.concurrency, max_attempts=args.max_attempts, block_s=0.2),
    )
    try:
        await serve(worker)
    finally:
        await broker.aclose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())

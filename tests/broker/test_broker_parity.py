"""``execgym score --broker redis://`` with the options that used to be refused.

``--calibrate-limits`` and ``--diagnose`` were refused with a broker (issue 21): the
workers took neither from the command line. Now each task's reference is judged once
through the broker and its measurement travels with the task's jobs, and the checks
travel in the tasks. A real ``execgym worker`` process (bwrap) on a real redis-server:
the results equal the embedded ones field by field (but for measured times), in input
order by default and as they finish with ``--order completion``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.testing import RedisServer
from tests.broker.conftest import FAST, reap
from tests.broker.parity import PLAIN, check_parity, score
from tests.conftest import require


@pytest.fixture
def worker(redis_server: RedisServer) -> Iterator[subprocess.Popen[bytes]]:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    argv = [sys.executable, "-m", "execgym", "worker", "--broker", redis_server.url,
            "--concurrency", "2", "--no-warm-pool"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield process
    finally:
        reap([process])


async def _wait_for_worker(url: str) -> None:
    broker = RedisStreamsBroker(url, FAST, block_s=0.2)
    try:
        async with asyncio.timeout(60):
            while not await broker.live_workers():
                await asyncio.sleep(0.1)
    finally:
        await broker.aclose()


def test_calibration_diagnostics_and_order_through_redis_equal_the_embedded_ones(
    redis_server: RedisServer,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
    embedded_parity: list[dict[str, Any]],
) -> None:
    here = embedded_parity
    asyncio.run(_wait_for_worker(redis_server.url))
    ordered = score(tmp_path, "redis", "--broker", redis_server.url)
    assert [r["index"] for r in ordered] == list(range(len(here)))  # input order, default
    check_parity(ordered, here)
    finished = score(
        tmp_path, "done", "--broker", redis_server.url, "--order", "completion", options=PLAIN
    )
    indexes = [r["index"] for r in finished]
    assert indexes[0] != 0  # as they finished: the slow first one was not first
    assert sorted(indexes) == list(range(len(here)))

"""``execgym serve --broker redis://...``: HTTP batch jobs judged by worker processes.

The service's job runner scored every batch in its own process (issue 21). With a
broker it sends the rollouts to ``execgym worker`` processes and keeps only the job:
a real redis-server and a real worker process (bwrap) here, the service in-process with
a sandbox that fails every run (so any pass was judged by the worker). The results equal
an embedded service's field by field (but for measured times), and ``/v1/status``
shows the breakers the workers share in Redis, which ``/v1/breakers/TYPE/reset``
closes for all of them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.server import ServerSettings
from execgym.testing import FakeSandbox, RedisServer, fake_result
from tests.conftest import ONE_TASK, require
from tests.server.conftest import NO_TOOLS, serving

STARVED = {**ONE_TASK, "task_id": "Starved/1", "limits": {"wall_time_s": 1e-9}}
BODY = {
    "tasks": [ONE_TASK, STARVED],
    "rollouts": [
        {"task_id": "t/1", "completion": "    return 1\n"},  # passed
        {"task_id": "t/1", "completion": "    return 2\n"},  # failed
        {"task_id": "nope", "completion": "x"},  # invalid: never sent
        {"task_id": "Starved/1", "completion": "    return 1\n"},  # our failure
        {"task_id": "t/1", "completion": "    raise ValueError('no')\n"},  # error
    ],
    "limits": {"wall_time_s": 5},
}
MEASURED = ("wall_time_s", "cpu_time_s", "peak_memory_bytes")


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    require(shutil.which("redis-server") is not None, "redis-server (apt-get install redis-server)")
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def worker(redis_url: str) -> Iterator[subprocess.Popen[bytes]]:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    argv = [sys.executable, "-m", "execgym", "worker", "--broker", redis_url,
            "--concurrency", "2", "--no-warm-pool", "--max-attempts", "1"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _comparable(line: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in line.items() if k not in MEASURED}
    kept["details"] = {k: v for k, v in line["details"].items() if not k.endswith("_s")}
    return kept


async def _live(url: str) -> None:
    broker = RedisStreamsBroker(url)
    try:
        async with asyncio.timeout(60):
            while not await broker.live_workers():
                await asyncio.sleep(0.1)
    finally:
        await broker.aclose()


async def test_serve_sends_jobs_to_the_workers_and_shows_their_shared_breakers(
    redis_url: str, worker: subprocess.Popen[bytes]
) -> None:
    never = FakeSandbox(lambda call: fake_result(exit_code=1))  # the service runs nothing
    settings = ServerSettings(broker=redis_url, workers=1)
    async with serving(settings=settings, sandbox=never, toolchains=NO_TOOLS) as client:
        await _live(redis_url)
        accepted = await client.post("/v1/score", json={**BODY, "wait": False})
        assert accepted.status_code == 202, accepted.text
        remote = (await client.post("/v1/score", json=BODY)).json()
        async with asyncio.timeout(60):  # the first job, queried by its id
            while (later := (await client.get(accepted.headers["Location"])).json())[
                "state"
            ] != "done":
                await asyncio.sleep(0.1)
        status = (await client.get("/v1/status")).json()
        reset = await client.post("/v1/breakers/Starved/reset")
        after = (await client.get("/v1/status")).json()
        streamed = await client.post("/v1/score", json={**BODY, "stream": True})
    assert streamed.headers["content-type"] == "application/x-ndjson"
    *lines, summary = [json.loads(line) for line in streamed.text.splitlines()]
    assert [_comparable(line) for line in lines] == [_comparable(r) for r in remote["results"]]
    assert summary["summary"]["counts"] == remote["counts"]
    assert never.calls == []  # judged by the worker process, not here
    assert remote["state"] == "done", remote
    verdicts = [r["verdict"] for r in remote["results"]]
    assert verdicts == ["passed", "failed", "invalid", "sandbox_error", "error"]
    local_settings = ServerSettings(workers=2, warm_pool=False, breakers="off")
    async with serving(settings=local_settings, toolchains=NO_TOOLS) as client:
        here = (await client.post("/v1/score", json=BODY)).json()
    for mine, theirs in zip(remote["results"], here["results"], strict=True):
        if mine["verdict"] == "invalid":  # never sent: scored here, run nowhere
            assert (mine["isolation"], theirs["isolation"]) == ("remote", "bwrap")
            theirs = {**theirs, "isolation": "remote"}
        assert _comparable(mine) == _comparable(theirs)
    assert [r["verdict"] for r in later["results"]] == verdicts
    assert status["breakers_shared"] is True
    starved = [b for b in status["breakers"] if b["task_type"] == "Starved"]
    assert starved[0]["failures"] == 2  # one per job, counted by the worker in Redis
    assert reset.json() == {"task_type": "Starved", "state": "closed"}
    cleared = [b for b in after["breakers"] if b["task_type"] == "Starved"]
    assert cleared[0]["failures"] == 0

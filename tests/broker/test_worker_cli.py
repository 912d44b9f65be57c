"""`execgym worker` and `execgym score --broker` end to end: real Redis, real bwrap sandboxes."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from execgym import Rollout
from execgym.broker import Keys, score_jobs
from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.cli import main
from tests.broker.conftest import FAST, RedisServer, job, reap
from tests.conftest import require

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn(redis_server: RedisServer) -> Iterator[Spawn]:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    started: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "execgym", "worker", "--broker", redis_server.url, *extra]
        process = subprocess.Popen(argv, stderr=subprocess.PIPE)
        started.append(process)
        return process

    yield start
    reap(started)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisStreamsBroker]:
    broker = RedisStreamsBroker(redis_server.url, FAST, block_s=0.2)
    yield broker
    await broker.aclose()


async def wait_for_workers(broker: RedisStreamsBroker, count: int) -> None:
    async with asyncio.timeout(30):
        while len(await broker.live_workers()) < count:
            await asyncio.sleep(0.1)


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    task = {"task_id": "add", "prompt": "def add(a, b):\n", "entry_point": "add"}
    task["tests"] = "def check(c):\n    assert c(1, 2) == 3\n"
    lines = [
        {"task_id": "add", "completion": "    return a + b\n"},
        {"task_id": "add", "completion": "    return a - b\n"},
        {"task_id": "missing", "completion": "    return 0\n"},
        {"task_id": "add", "completion": "    raise ValueError('no')\n"},
    ]
    tasks, rollouts = tmp_path / "tasks.jsonl", tmp_path / "rollouts.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    rollouts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tasks, rollouts


def verdicts(path: Path) -> list[tuple[int, str, float | None]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted((r["index"], r["verdict"], r["reward"]) for r in rows)


def test_score_through_redis_workers_gives_the_embedded_results(
    redis_server: RedisServer, spawn: Spawn, tmp_path: Path
) -> None:
    tasks, rollouts = write_inputs(tmp_path)
    node = spawn("--concurrency", "2")
    asyncio.run(_with_client(redis_server, lambda c: wait_for_workers(c, 1)))
    runner = CliRunner()  # in the main thread: the CLI installs signal handlers
    common = ["score", str(tasks), str(rollouts)]
    remote = runner.invoke(
        main, [*common, "-o", str(tmp_path / "r.jsonl"), "--broker", redis_server.url]
    )
    assert remote.exit_code == 0, remote.output
    here = runner.invoke(main, [*common, "-o", str(tmp_path / "e.jsonl")])
    assert here.exit_code == 0, here.output
    expected = [(0, "passed", 1.0), (1, "failed", 0.0), (2, "invalid", None), (3, "error", 0.0)]
    assert verdicts(tmp_path / "r.jsonl") == verdicts(tmp_path / "e.jsonl") == expected
    assert "4 rollouts" in remote.output
    assert f"results: {tmp_path / 'r.jsonl'}" in remote.output  # where they went, as embedded
    node.send_signal(signal.SIGTERM)
    assert node.wait(30) == 0
    assert asyncio.run(_with_client(redis_server, lambda c: c.live_workers())) == {}


async def _with_client(server: RedisServer, use: Callable[[RedisStreamsBroker], Any]) -> Any:
    broker = RedisStreamsBroker(server.url, FAST, block_s=0.2)
    try:
        return await use(broker)
    finally:
        await broker.aclose()


def slow_job(index: int, seconds: float) -> object:
    base = job(index)
    code = f"    import time\n    time.sleep({seconds})\n    return 1\n"
    return base.model_copy(update={"rollout": Rollout(task_id="t/1", completion=code)})


async def test_sigterm_finishes_running_jobs_then_exits(
    spawn: Spawn, client: RedisStreamsBroker
) -> None:
    node = spawn("--concurrency", "2", "--no-warm-pool")
    await wait_for_workers(client, 1)
    batch = asyncio.create_task(_collect(client, [slow_job(0, 1.5), slow_job(1, 1.5)]))
    await _until_running(client, 2)
    node.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(node.wait, 30) == 0
    results = await asyncio.wait_for(batch, 10)
    assert sorted(r.result["verdict"] for r in results) == ["passed", "passed"]
    assert await client.queued() == 0


async def test_sigterm_past_the_drain_timeout_hands_jobs_back_uncounted(
    spawn: Spawn, client: RedisStreamsBroker
) -> None:
    node = spawn("--concurrency", "1", "--no-warm-pool", "--drain-timeout", "0.2")
    await wait_for_workers(client, 1)
    batch = asyncio.create_task(_collect(client, [slow_job(0, 2)]))
    await _until_running(client, 1)
    node.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(node.wait, 30) == 0
    assert await client.queued() == 1  # handed back, waiting for another worker
    spawn("--concurrency", "1", "--no-warm-pool")
    (result,) = await asyncio.wait_for(batch, 30)
    assert result.result["verdict"] == "passed"
    assert result.delivery_attempt == 1  # the interrupted run did not count


async def _collect(client: RedisStreamsBroker, jobs: list[object]) -> list[object]:
    return [r async for r in score_jobs(client, jobs)]  # type: ignore[arg-type]


async def _until_running(client: RedisStreamsBroker, count: int) -> None:
    async with asyncio.timeout(30):
        while True:
            summary = await client.redis.xpending(Keys().jobs, "execgym-workers")
            if summary["pending"] >= count:
                await asyncio.sleep(0.3)  # inside the sandbox now
                return
            await asyncio.sleep(0.05)


def test_worker_check_reports_the_queue(redis_server: RedisServer) -> None:
    result = CliRunner().invoke(main, ["worker", "--broker", redis_server.url, "--check"])
    assert result.exit_code == 0, result.output
    assert "reachable" in result.output
    assert "jobs waiting or running: 0" in result.output


def test_unreachable_broker_is_a_clear_error() -> None:
    result = CliRunner().invoke(main, ["worker", "--broker", "redis://127.0.0.1:1/0", "--check"])
    assert result.exit_code == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in result.output
    assert ".;" not in result.output  # redis-py's message ends in a full stop (QA, 2026-12-02)
    bad = CliRunner().invoke(main, ["worker", "--broker", "amqp://x"])
    assert bad.exit_code == 1
    assert "unknown broker 'amqp://x'" in bad.output


def test_a_worker_with_a_reward_gives_what_scoring_here_gives(
    redis_server: RedisServer, spawn: Spawn, tmp_path: Path
) -> None:
    """``execgym worker --reward quality``: each result through Redis has the judge's
    ``details`` and the ``reward_breakdown`` a local ``score --reward quality`` has (they
    came back as ``"details": {}`` and without a breakdown)."""
    tasks, rollouts = write_inputs(tmp_path)
    node = spawn("--concurrency", "2", "--reward", "quality")
    asyncio.run(_with_client(redis_server, lambda c: wait_for_workers(c, 1)))
    runner = CliRunner()
    common = ["score", str(tasks), str(rollouts)]
    remote = runner.invoke(
        main, [*common, "-o", str(tmp_path / "r.jsonl"), "--broker", redis_server.url]
    )
    assert remote.exit_code == 0, remote.output
    here = runner.invoke(main, [*common, "-o", str(tmp_path / "e.jsonl"), "--reward", "quality"])
    assert here.exit_code == 0, here.output
    assert verdicts(tmp_path / "r.jsonl") == verdicts(tmp_path / "e.jsonl")

    def shapes(path: Path) -> list[tuple[int, list[str], list[str]]]:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return sorted(
            (r["index"], sorted(r["details"]), sorted(r.get("reward_breakdown") or {}))
            for r in rows
        )

    remote_rows, local_rows = shapes(tmp_path / "r.jsonl"), shapes(tmp_path / "e.jsonl")
    assert remote_rows == local_rows
    judged = [row for row in remote_rows if row[0] != 2]  # index 2: an unknown task
    assert all("state" in details and breakdown for _, details, breakdown in judged)
    refused = runner.invoke(main, [*common, "--broker", redis_server.url, "--reward", "quality"])
    assert refused.exit_code == 2
    assert "execgym worker --reward" in refused.output
    node.send_signal(signal.SIGTERM)
    assert node.wait(30) == 0

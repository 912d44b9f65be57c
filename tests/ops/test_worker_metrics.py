"""``execgym worker --metrics-port``: a real worker on real Redis serves its metrics, and
``execgym status --broker`` shows the queue and the worker."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from execgym.broker.redis_streams import RedisStreamsBroker
from execgym.cli import main
from execgym.testing import free_port
from tests.broker.conftest import FAST, RedisServer, reap, redis_server  # noqa: F401 - fixture
from tests.broker.test_worker_cli import wait_for_workers, write_inputs
from tests.conftest import require


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


async def _live(url: str) -> dict[str, dict[str, object]]:
    broker = RedisStreamsBroker(url, FAST, block_s=0.2)
    try:
        await wait_for_workers(broker, 1)
        return await broker.live_workers()
    finally:
        await broker.aclose()


def test_worker_serves_metrics_matching_what_it_judged(
    redis_server: RedisServer,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    port = free_port()
    argv = [sys.executable, "-m", "execgym", "--log-format", "json", "--log-level", "info"]
    argv += ["worker", "--broker", redis_server.url]
    argv += ["--concurrency", "2", "--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
    argv += ["--visibility-timeout", "3"]  # heartbeats (and the queue gauge) every second
    node = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:
        (name,) = asyncio.run(_live(redis_server.url))
        tasks, rollouts = write_inputs(tmp_path)
        runner = CliRunner()
        output = str(tmp_path / "r.jsonl")
        argv = ["score", str(tasks), str(rollouts), "-o", output, "--broker", redis_server.url]
        scored = runner.invoke(main, argv)
        assert scored.exit_code == 0, scored.output
        time.sleep(1.5)  # one more heartbeat: the queue gauge is refreshed with it
        samples = scrape(port)
        completed = Counter(
            {
                labels["verdict"]: int(value)
                for sample, labels, value in samples
                if sample == "execgym_jobs_completed_total"
            }
        )
        assert completed == {"passed": 1, "failed": 1, "error": 1}  # the invalid one: never sent

        def value(metric: str, **labels: str) -> float:
            return sum(v for s, ls, v in samples if s == metric and labels.items() <= ls.items())

        assert value("execgym_jobs_submitted_total", task_type="add") == 3
        assert value("execgym_jobs_failed_total") == 0
        assert value("execgym_breaker_state", task_type="add") == 0
        assert value("execgym_sandbox_run_seconds_count") >= 3
        assert value("execgym_queue_lag_seconds_count") == 3
        assert value("execgym_queue_depth") == 0
        assert value("execgym_sandboxes_active") == 0
        beat = value("execgym_worker_last_heartbeat_timestamp_seconds", worker=name)
        assert time.time() - 10 < beat <= time.time()

        status = runner.invoke(main, ["status", "--broker", redis_server.url])
        assert status.exit_code == 0, status.output
        assert "jobs waiting or running: 0" in status.output
        assert "live workers: 1 (0 jobs running)" in status.output
        assert re.search(rf"  {re.escape(name)}: 0 job\(s\) held, last heartbeat \d", status.output)
        assert "(shared by every worker of the queue)" in status.output  # one view
        assert "  add: CLOSED, 0 failure(s) in 3 job(s) in the window" in status.output
        reset = runner.invoke(main, ["status", "--broker", redis_server.url, "--reset", "add"])
        assert reset.exit_code == 0, reset.output
        assert "breaker add: reset, now closed for every worker" in reset.output
    finally:
        node.send_signal(signal.SIGTERM)
        _, stderr = node.communicate(timeout=30)
        reap([node])
    records = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    done = [r for r in records if r["message"] == "job_done"]
    assert sorted(r["verdict"] for r in done) == ["error", "failed", "passed"]
    for record in done:
        assert record["worker"] == name
        assert record["job_id"].endswith(f"/{record['rollout_id'].split('#')[-1]}")
        assert record["task_id"] == "add"
        assert record["batch_id"]

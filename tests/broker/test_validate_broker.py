"""`execgym validate --broker redis://...`: each task's checks on a real `execgym worker`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from execgym.cli import main
from execgym.testing import RedisServer
from tests.broker.conftest import reap
from tests.conftest import require
from tests.validation import planted

TIMING = {"wall_time_s", "cpu_time_s", "reference_wall_time_s", "time_fraction"}
"""Measured times in a check's details: they differ run to run wherever it runs."""


@pytest.fixture
def worker(redis_server: RedisServer) -> Iterator[subprocess.Popen[bytes]]:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    argv = [sys.executable, "-m", "execgym", "worker", "--broker", redis_server.url]
    process = subprocess.Popen([*argv, "--concurrency", "1"], stderr=subprocess.PIPE)
    yield process
    reap([process])


def validate(tasks: Path, report: Path, *extra: str) -> dict[str, Any]:
    argv = ["validate", str(tasks), "--json", str(report), "--workers", "2"]
    result = CliRunner().invoke(main, [*argv, "--max-mutants", "6", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(report.read_text())


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        task["task_id"]: {
            name: {
                **check,
                "details": {k: v for k, v in check["details"].items() if k not in TIMING},
            }
            for name, check in task["checks"].items()
        }
        for task in report["tasks"]
    }


def test_validate_through_a_redis_worker_reports_what_validating_here_reports(
    tmp_path: Path, redis_server: RedisServer, worker: subprocess.Popen[bytes]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    chosen = (planted.GOOD, planted.WRONG_REFERENCE, planted.DUPLICATE)
    tasks.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in chosen))
    here = validate(tasks, tmp_path / "here.json")
    remote = validate(tasks, tmp_path / "remote.json", "--broker", redis_server.url)
    assert worker.poll() is None  # the worker ran the checks and is still serving
    assert checks(remote) == checks(here)
    kept = {t["task_id"]: t["kept"] for t in remote["tasks"]}
    assert kept == {
        "good/abs_diff": True,
        planted.WRONG_REFERENCE.task_id: False,
        "bad/duplicate-of-good": False,
    }
    assert remote["summary"]["sandbox_runs"] == here["summary"]["sandbox_runs"] > 0


async def test_a_worker_whose_cache_is_under_tmp_still_opens_its_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from execgym.cli.options import sandbox_for

    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # hidden in the sandbox
    sandbox = sandbox_for("bwrap", False, False, validating=True)
    await sandbox.aclose()
    assert "validation jobs will not see coverage.py" in caplog.text

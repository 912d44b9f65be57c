"""The metrics registry, its documentation, the Grafana dashboard, sandbox metering and
structured logs."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import execgym.ops.metrics
from execgym.errors import ConfigError
from execgym.ops.logs import JsonFormatter, configure, log_context, settings_from
from execgym.ops.metrics import MeteredSandbox, Metrics
from execgym.testing import FakeSandbox, fake_result
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "execgym.json"
NAME = re.compile(r"\bexecgym_[a-z0-9_]+\b")


def exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_dashboard_uses_only_metric_names_the_registry_defines() -> None:
    defined = Metrics().names()
    used = set()
    for expr in exprs():
        names = set(NAME.findall(expr))
        assert names, f"panel expression without an execgym metric: {expr}"
        assert names <= defined, f"{expr}: unknown {sorted(names - defined)}"
        used |= names
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used}
    every = {family.name for family in Metrics().registry.collect()}
    assert every <= families, f"metrics without a panel: {sorted(every - families)}"


def test_every_metric_name_is_documented_in_the_registry_module() -> None:
    doc = execgym.ops.metrics.__doc__ or ""
    for family in Metrics().registry.collect():
        scraped = family.name + ("_total" if family.type == "counter" else "")
        assert f"``{scraped}``" in doc, scraped


def test_two_registries_never_collide() -> None:
    one, two = Metrics(), Metrics()
    one.job_done("passed", "HumanEval", masked=False)
    assert (
        one.registry.get_sample_value(
            "execgym_jobs_completed_total", {"verdict": "passed", "task_type": "HumanEval"}
        )
        == 1
    )
    assert (
        two.registry.get_sample_value(
            "execgym_jobs_completed_total", {"verdict": "passed", "task_type": "HumanEval"}
        )
        is None
    )


async def test_metered_sandbox_records_active_runs_times_cpu_and_memory() -> None:
    metrics = Metrics()
    seen_active = []

    def script(call: object) -> object:
        seen_active.append(metrics.active_runs)
        return fake_result(wall_time_s=0.2, cpu_time_s=0.15, peak_memory_bytes=3 << 20)

    clock = iter([10.0, 10.5, 20.0, 20.25])
    box = MeteredSandbox(FakeSandbox(script), metrics, clock=lambda: next(clock))  # type: ignore[arg-type]
    await box.run_argv(["x"])
    await box.run_python(b"print(1)")
    sample = metrics.registry.get_sample_value
    assert seen_active == [1, 1]
    assert sample("execgym_sandboxes_active", {}) == 0
    assert sample("execgym_sandbox_run_seconds_count", {}) == 2
    assert sample("execgym_sandbox_run_seconds_sum", {}) == pytest.approx(0.4)
    assert sample("execgym_sandbox_start_seconds_sum", {}) == pytest.approx(0.3 + 0.05)
    assert sample("execgym_sandbox_cpu_seconds_sum", {}) == pytest.approx(0.3)
    assert sample("execgym_sandbox_peak_memory_bytes_sum", {}) == 2 * (3 << 20)
    assert box.name == "fake"
    assert box.calls[0].argv == ["x"]  # other attributes are the inner sandbox's


def test_json_formatter_carries_context_and_extra_fields() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("execgym.test_ops_json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with log_context(job_id="b/1", worker="node-1"):
            logger.info("job_done", extra={"task_id": "HumanEval/1", "verdict": "passed"})
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "job_done"
    assert first["level"] == "info"
    assert first["logger"] == "execgym.test_ops_json"
    assert first["ts"].endswith("Z")
    assert (first["job_id"], first["worker"], first["task_id"], first["verdict"]) == (
        "b/1",
        "node-1",
        "HumanEval/1",
        "passed",
    )
    assert "job_id" not in second


def test_log_settings_precedence_and_errors() -> None:
    env = {"EXECGYM_LOG_LEVEL": "DEBUG", "EXECGYM_LOG_FORMAT": "json"}
    assert settings_from(None, None, env) == ("debug", "json")
    assert settings_from("error", "text", env) == ("error", "text")
    assert settings_from(None, None, {}) == ("warning", "text")
    with pytest.raises(ConfigError, match="unknown log level 'loud'"):
        settings_from("loud", None, {})
    with pytest.raises(ConfigError, match="unknown log format 'xml'"):
        settings_from(None, "xml", {})


def test_configure_twice_installs_one_handler() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    try:
        configure("info", "json")
        configure("warning", "text")
        ours = [h for h in root.handlers if h.get_name() == "execgym"]
        assert len(ours) == 1
        assert not isinstance(ours[0].formatter, JsonFormatter)
    finally:
        for handler in list(root.handlers):
            if handler not in before:
                root.removeHandler(handler)
        root.setLevel(level)


def test_score_logs_json_on_stderr_and_keeps_the_summary_on_stdout(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    tasks = tmp_path / "tasks.jsonl"
    rollouts = tmp_path / "rollouts.jsonl"
    body = {"prompt": "def f():\n", "entry_point": "f"}
    tests = "def check(candidate):\n    assert candidate() == 1\n"
    tasks.write_text(
        "\n".join(json.dumps({"task_id": f"T/{i}", **body, "tests": tests}) for i in range(2))
    )
    rollouts.write_text(
        json.dumps({"task_id": "T/0", "completion": "    return 1\n", "rollout_id": "r0"})
        + "\n"
        + json.dumps({"task_id": "T/1", "completion": "    return 2\n", "rollout_id": "r1"})
    )
    argv = [sys.executable, "-m", "execgym", "--log-format", "json", "--log-level", "info"]
    argv += ["score", str(tasks), str(rollouts), "-o", str(tmp_path / "out.jsonl")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2 rollouts, 2 tasks scored: failed 1, passed 1")
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    scored = {r["rollout_id"]: r for r in records if r["message"] == "scored"}
    assert scored["r0"]["verdict"] == "passed"
    assert scored["r1"]["verdict"] == "failed"
    assert scored["r1"]["task_id"] == "T/1"
    assert scored["r1"]["task_type"] == "T"

"""`execgym validate` end to end: a tasks file in, clean tasks and reports out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from execgym.cli import main
from tests.conftest import require
from tests.validation import planted


def test_validate_command_end_to_end(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    tasks = tmp_path / "tasks.jsonl"
    lines = [
        t.model_dump_json(exclude_none=True)
        for t in (planted.GOOD, planted.RETURN_NONE_PASSES, planted.DUPLICATE)
    ]
    lines.append(json.dumps({"task_id": "broken", "prompt": "def f():\n"}))  # no tests
    tasks.write_text("\n".join(lines) + "\n")
    clean, html, report = tmp_path / "clean.jsonl", tmp_path / "r.html", tmp_path / "r.json"
    result = CliRunner().invoke(
        main,
        [
            "validate",
            str(tasks),
            "-o",
            str(clean),
            "--report",
            str(html),
            "--json",
            str(report),
            "--workers",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["task_id"] for line in clean.read_text().splitlines()] == [
        planted.GOOD.task_id
    ]
    data = json.loads(report.read_text())
    reasons = {t["task_id"]: t["reasons"] for t in data["tasks"]}
    assert reasons[planted.GOOD.task_id] == []
    assert any("trivial" in r and "return None" in r for r in reasons["bad/return-none"])
    assert reasons["bad/duplicate-of-good"] == [
        "duplicates: duplicate of good/abs_diff (similarity 1.00)"
    ]
    assert any("tests" in r for r in reasons["broken"])
    assert data["summary"] == {**data["summary"], "tasks": 4, "kept": 1, "dropped": 3}
    page = html.read_text()
    assert "<svg" in page
    assert "Weakest tasks" in page
    assert "dropped bad/return-none: trivial: the tests pass for trivial solutions" in result.output
    assert "4 tasks: 1 kept, 3 dropped" in result.output


def test_validate_needs_tasks_or_dataset() -> None:
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 2
    assert "give either a TASKS file or --dataset" in result.output


def test_fresh_sandboxes_catch_set_order_flakiness(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    task = planted.GOOD.model_copy(
        update={
            "task_id": "bad/set-order",
            "tests": planted.GOOD.tests.replace(
                "def check(candidate):\n",
                "def check(candidate):\n    print(list({str(i) * 3 for i in range(12)}))\n",
            ),
        }
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(task.model_dump_json(exclude_none=True) + "\n")
    report = tmp_path / "r.json"
    args = ["validate", str(tasks), "--json", str(report), "--no-warm-pool", "--runs", "4"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (found,) = json.loads(report.read_text())["tasks"]
    assert found["checks"]["determinism"]["outcome"] == "fail"
    assert "stdout" in found["checks"]["determinism"]["reason"]

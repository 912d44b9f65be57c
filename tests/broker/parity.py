"""What the broker parity tests share: one batch, the embedded results, the comparison.

The batch exercises what travels with a job besides the task and rollout: calibrated
limits (each task's reference judged once), diagnostics (``--diagnose leaks``) and the
order of the results file. Its first rollout is slow (2.5 s), so results finish out of order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from execgym import Task
from execgym.cli import main

SQUARE = Task(
    task_id="Sq/square",
    prompt="def square(x):\n",
    tests="def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n",
    entry_point="square",
    reference="    return x * x\n",
)
NO_REFERENCE = SQUARE.model_copy(update={"task_id": "Sq/noref", "reference": None})
ROLLOUTS = [
    ("Sq/square", "    import time\n    time.sleep(2.5)\n    return x + x\n"),  # slow, failed
    ("Sq/square", "    return x * x\n"),  # passed, diagnosed
    ("Sq/square", "    return x + x\n"),  # failed: diagnostics not applicable
    ("Sq/noref", "    return x * x\n"),  # no reference: the user's limits
    ("Sq/square", "    return x ** 2\n"),
]
OPTIONS = [
    "--calibrate-limits", "--calibration-factor", "1", "--calibration-floor", "4",
    "--diagnose", "leaks", "--timeout", "6", "--no-warm-pool", "--measure-references", "first",
]  # fmt: skip
"""factor 1 and floor 4 s: the calibrated limit is 4 s whatever the reference took; each
reference measured first (a broker always does: the embedded results are compared)."""

PLAIN = ["--timeout", "6", "--no-warm-pool"]
"""No diagnostics."""

MEASURED = ("wall_time_s", "cpu_time_s", "peak_memory_bytes")


def write_inputs(directory: Path) -> tuple[Path, Path]:
    """The tasks and rollouts files of the batch."""
    tasks, rollouts = directory / "tasks.jsonl", directory / "rollouts.jsonl"
    tasks.write_text("".join(t.model_dump_json() + "\n" for t in (SQUARE, NO_REFERENCE)))
    lines = [{"task_id": task_id, "completion": code} for task_id, code in ROLLOUTS]
    rollouts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tasks, rollouts


def score(
    directory: Path, name: str, *extra: str, options: list[str] = OPTIONS
) -> list[dict[str, Any]]:
    """``execgym score`` of the batch with ``options`` and ``extra``; the results."""
    tasks, rollouts = write_inputs(directory)
    out = directory / f"{name}.jsonl"
    argv = ["score", str(tasks), str(rollouts), "-o", str(out), *options, *extra]
    shown = CliRunner().invoke(main, argv)
    assert shown.exit_code == 0, shown.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def comparable(line: dict[str, Any]) -> dict[str, Any]:
    """A result line without what timing decides (times, peak memory, measured seconds)."""
    kept = {k: v for k, v in line.items() if k not in MEASURED}
    kept["details"] = {k: v for k, v in line["details"].items() if not k.endswith("_s")}
    calibration = dict(line["calibration"])
    for key in ("reference_wall_time_s", "reference_cpu_time_s"):
        assert (calibration.pop(key) is None) == (not calibration["calibrated"])
    kept["calibration"] = calibration
    if "diagnostics" in line:
        kept["diagnostics"] = {k: v for k, v in line["diagnostics"].items() if k != "seconds"}
    return kept


def check_parity(remote: list[dict[str, Any]], here: list[dict[str, Any]]) -> None:
    """``remote`` holds the embedded results, field by field; one measurement per task."""
    by_index = sorted(remote, key=lambda r: r["index"])
    assert [comparable(r) for r in by_index] == [comparable(r) for r in here]
    calibrated = [r["calibration"] for r in remote if r["task_id"] == SQUARE.task_id]
    assert {c["calibrated"] for c in calibrated} == {True}
    assert {c["wall_time_s"] for c in calibrated} == {4.0}  # the floor: below --timeout 6
    # one reference run for every rollout of the task, on whichever worker it ran
    assert len({c["reference_wall_time_s"] for c in calibrated}) == 1
    noref = [r["calibration"] for r in remote if r["task_id"] == NO_REFERENCE.task_id]
    assert noref[0]["reason"] == "the task has no reference solution"
    diagnosed = [r for r in remote if r["verdict"] == "passed"]
    assert len(diagnosed) == 3
    assert {r["diagnostics"]["leaks"]["status"] for r in diagnosed} == {"measured"}

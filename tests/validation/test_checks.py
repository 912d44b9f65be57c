"""Each check on hand-made tasks with a known answer, in the real (warm pool) sandbox."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from execgym.errors import ConfigError
from execgym.sandbox import WarmPoolSandbox
from execgym.validation import (
    CHECKS,
    Context,
    Outcome,
    Thresholds,
    ValidationReport,
    coverage_site,
    sandbox_paths,
    validate_tasks,
)
from execgym.validation.report import histogram_svg, to_html, to_json, weakest
from tests.conftest import require
from tests.validation import planted

TASKS = [
    planted.GOOD,
    planted.RETURN_NONE_PASSES,
    planted.WRONG_REFERENCE,
    planted.FLAKY,
    planted.SLOW,
    planted.BAD_EXAMPLE,
    planted.DUPLICATE,
    planted.WEAK_TESTS,
    planted.NO_ENTRY,
]


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    site = coverage_site()  # the user's cache: the sandbox hides /tmp behind its own tmpfs

    async def run() -> ValidationReport:
        async with WarmPoolSandbox(read_only_paths=sandbox_paths(site)) as box:
            ctx = Context(box, workers=2, coverage_site=site, thresholds=Thresholds(runs=3))
            return await validate_tasks(TASKS, ctx, rejected={"line-9": "missing tests"})

    return asyncio.run(run())


def finding(report: ValidationReport, task_id: str, check: str):
    task = next(t for t in report.tasks if t.task_id == task_id)
    found = task.result(check)
    assert found is not None, f"{check} did not run on {task_id}"
    return found


def test_good_task_passes_every_check(report: ValidationReport) -> None:
    task = next(t for t in report.tasks if t.task_id == planted.GOOD.task_id)
    assert task.kept, task.reasons
    assert {r.check: r.outcome for r in task.results} == dict.fromkeys(CHECKS, Outcome.PASS)
    mutation = finding(report, planted.GOOD.task_id, "mutation")
    # the one survivor is the equivalent `a > b` -> `a >= b` (both give 0 when a == b),
    # recognised as behaving like the reference on every known input
    assert [(m["change"], m["class"]) for m in mutation.details["survivors"]] == [
        ("Gt -> GtE", "same_on_known_inputs")
    ]
    assert mutation.details["adjusted_score"] == 1.0
    assert mutation.details["judged"] >= 5
    coverage = finding(report, planted.GOOD.task_id, "coverage")
    assert coverage.details["line"] == 1.0
    assert coverage.details["branch"] == 1.0


def test_tests_passing_return_none_are_caught(report: ValidationReport) -> None:
    found = finding(report, "bad/return-none", "trivial")
    assert found.outcome is Outcome.FAIL
    assert "return None" in found.reason
    assert found.details["verdicts"]["return None"] == "passed"
    assert found.details["verdicts"]["raise NotImplementedError"] == "error"


def test_wrong_reference_is_caught_and_later_checks_skip(report: ValidationReport) -> None:
    found = finding(report, "bad/wrong-reference", "reference")
    assert found.outcome is Outcome.FAIL
    assert "does not pass its tests: failed" in found.reason
    assert finding(report, "bad/wrong-reference", "mutation").outcome is Outcome.SKIP


def test_flaky_task_is_caught_with_the_differing_runs(report: ValidationReport) -> None:
    found = finding(report, "bad/flaky", "determinism")
    assert found.outcome is Outcome.FAIL
    assert "stdout" in found.reason
    stdouts = [run["stdout"] for run in found.details["runs"]]
    assert len(set(stdouts)) == 3


def test_reference_slower_than_half_the_limit_is_caught(report: ValidationReport) -> None:
    found = finding(report, "bad/slow-reference", "reference")
    assert found.outcome is Outcome.FAIL
    assert "of the 2 s limit" in found.reason
    assert min(found.details["wall_time_s"]) > 1.0


def test_example_contradicting_the_reference_is_caught(report: ValidationReport) -> None:
    found = finding(report, "bad/example", "description")
    assert found.outcome is Outcome.FAIL
    assert found.details["disagreeing"] == [
        {"call": "candidate(2)", "prompt_says": "5", "reference_gives": "4"}
    ]
    assert finding(report, planted.GOOD.task_id, "description").details["examples"] == 1


def test_duplicate_names_the_first_task(report: ValidationReport) -> None:
    found = finding(report, "bad/duplicate-of-good", "duplicates")
    assert found.outcome is Outcome.FAIL
    assert found.reason == "duplicate of good/abs_diff (similarity 1.00)"
    assert finding(report, planted.GOOD.task_id, "duplicates").outcome is Outcome.PASS


def test_weak_tests_get_a_low_mutation_score_and_coverage(report: ValidationReport) -> None:
    mutation = finding(report, "bad/weak-tests", "mutation")
    assert mutation.outcome is Outcome.FAIL
    assert mutation.details["score"] < 0.75
    survivors = mutation.details["survivors"]
    assert survivors
    assert {s["class"] for s in survivors} <= {"same_on_known_inputs", "differs_on_known_inputs"}
    coverage = finding(report, "bad/weak-tests", "coverage")
    assert coverage.outcome is Outcome.FAIL
    assert coverage.details["missing_lines"]


def test_schema_failures(report: ValidationReport) -> None:
    found = finding(report, "bad/no-entry-point", "schema")
    assert found.outcome is Outcome.FAIL
    assert "'solve' is not defined" in found.reason
    assert finding(report, "line-9", "schema").reason == "missing tests"


def test_report_outputs(report: ValidationReport) -> None:
    kept = report.kept_ids()
    assert kept == [planted.GOOD.task_id]
    data = to_json(report)
    assert data["summary"]["kept"] == 1
    assert data["summary"]["dropped"] == len(TASKS)  # every planted bad task, plus line-9
    assert all(t["reasons"] for t in data["tasks"] if not t["kept"])
    ranked = weakest(report)
    scores = [t.mutation_score for t in ranked]
    assert scores == sorted(scores)
    assert planted.GOOD.task_id not in [t.task_id for t in ranked if t.mutation_score < 0.75]
    assert "bad/weak-tests" in [t.task_id for t in ranked if t.mutation_score < 0.75]
    page = to_html(report)
    assert "<svg" in page
    assert "bad/weak-tests" in page
    assert "duplicate of good/abs_diff" in page


def test_site_under_tmp_is_refused() -> None:
    with pytest.raises(ConfigError, match="under /tmp"):
        sandbox_paths("/tmp/site")


def test_histogram_counts_each_bin() -> None:
    svg = histogram_svg([0.05, 0.95, 1.0, 1.0])
    assert "0.0-0.1: 1 tasks" in svg
    assert "0.9-1.0: 3 tasks" in svg

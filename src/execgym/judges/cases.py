"""Per-case outcomes shared by the judges that run many cases (stdio, function calls)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from execgym.judges.base import RUN_STATUS_VERDICT, ErrorDetail, Judgement, Verdict, tail_text
from execgym.sandbox.base import RunResult, Status


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's outcome."""

    verdict: Verdict
    run: RunResult | None
    message: str = ""
    error_type: str = ""

    def to_json(self) -> dict[str, Any]:
        """The case as it appears in ``Judgement.details["cases"]``."""
        return {
            "verdict": self.verdict.value,
            "wall_time_s": round(self.run.wall_time_s, 4) if self.run else None,
            "message": self.message,
        }


def summarize(cases: list[CaseResult], total: int) -> tuple[Verdict, dict[str, Any], int]:
    """The overall verdict, the details, and the index of the deciding case.

    Cases not run (after a stop on the first failure) count as not passed.
    """
    passed = sum(case.verdict is Verdict.PASSED for case in cases)
    details = {
        "cases": [case.to_json() for case in cases],
        "passed": passed,
        "total": total,
        "fraction_passed": passed / total if total else 0.0,
    }
    for index, case in enumerate(cases):
        if case.verdict in (Verdict.SANDBOX_ERROR, Verdict.INVALID):  # not the rollout's
            return case.verdict, details, index
    for index, case in enumerate(cases):
        if case.verdict is not Verdict.PASSED:
            return case.verdict, details, index
    return Verdict.PASSED, details, len(cases) - 1


def run_verdict(run: RunResult) -> CaseResult | None:
    """The verdict a run earns before its output is looked at, or ``None`` if it ran OK."""
    if run.status in RUN_STATUS_VERDICT:
        return CaseResult(RUN_STATUS_VERDICT[run.status], run, run.message)
    if run.status is not Status.OK:
        stderr = tail_text(run.stderr, 600).strip()
        last = stderr.splitlines()[-1] if stderr else ""
        return CaseResult(Verdict.ERROR, run, f"{run.message}: {last}" if last else run.message)
    return None


def case_judgement(cases: list[CaseResult], total: int, run: RunResult | None) -> Judgement:
    """The judgement over ``cases`` (of ``total``): verdict, message, error and details.

    ``run`` is the run to report when the deciding case has none of its own.
    """
    verdict, details, deciding = summarize(cases, total)
    case = cases[deciding]
    message = "" if verdict is Verdict.PASSED else f"case {deciding + 1}: {case.message}"
    error = None
    if verdict in (Verdict.FAILED, Verdict.ERROR):
        kind = "WrongAnswer" if verdict is Verdict.FAILED else "RuntimeError"
        error = ErrorDetail(case.error_type or kind, message)
    return Judgement(verdict, case.run or run, error=error, message=message, details=details)

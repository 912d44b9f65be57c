"""Reference check: the reference passes every test, with margin under the time limit."""

from __future__ import annotations

import asyncio

from execgym.judges.base import Judgement, Verdict
from execgym.tasks.models import Task
from execgym.validation.base import CheckResult, Context, Outcome

NAME = "reference"


async def run_reference(task: Task, ctx: Context) -> list[Judgement]:
    """Judge the reference ``ctx.thresholds.runs`` times, concurrently, in the sandbox."""
    limits = task.limits_over(ctx.limits)
    runs = [
        ctx.judge_completion(task, task.reference or "", limits) for _ in range(ctx.thresholds.runs)
    ]
    return list(await asyncio.gather(*runs))


def check(task: Task, runs: list[Judgement], ctx: Context) -> CheckResult:
    """Fail unless every run passed, each within the allowed fraction of the limit.

    Args:
        task: The task.
        runs: The reference's judgements from :func:`run_reference`.
        ctx: For the limits and thresholds.
    """
    limit_s = task.limits_over(ctx.limits).wall_time_s
    budget_s = limit_s * ctx.thresholds.max_reference_time_fraction
    times = [j.run.wall_time_s for j in runs if j.run is not None]
    slowest = max(times, default=0.0)
    details = {"wall_time_s": [round(t, 4) for t in times], "limit_s": limit_s}
    failing = [j for j in runs if j.verdict is not Verdict.PASSED]
    if len(failing) == len(runs):
        first = failing[0]
        return CheckResult(
            NAME,
            Outcome.FAIL,
            f"the reference does not pass its tests: {first.verdict.value}"
            + (f" ({first.message})" if first.message else ""),
            details,
        )
    if slowest > budget_s:
        return CheckResult(
            NAME,
            Outcome.FAIL,
            f"the reference needs {slowest:.2f} s, more than "
            f"{ctx.thresholds.max_reference_time_fraction:g} of the {limit_s:g} s limit",
            details,
        )
    return CheckResult(NAME, Outcome.PASS, details=details)

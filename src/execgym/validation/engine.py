"""Validate a set of tasks: every check on every task, concurrently, in the sandbox.

>>> report = await validate_tasks(tasks, sandbox)            # doctest: +SKIP
>>> [t.task_id for t in report.tasks if not t.kept]          # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from execgym.limits import Limits
from execgym.tasks.models import Task
from execgym.validation import (
    coverage,
    description,
    determinism,
    duplicates,
    mutation,
    reference,
    schema,
    trivial,
)
from execgym.validation.base import CheckResult, Context, Outcome, Thresholds

CHECKS = (
    "schema",
    "reference",
    "determinism",
    "trivial",
    "mutation",
    "coverage",
    "duplicates",
    "description",
)
"""Every check, in the order the report lists them."""

TASKS_PER_WORKER = 4
"""Tasks validated at once per sandbox worker."""


@dataclass(frozen=True, slots=True)
class TaskReport:
    """All findings on one task.

    Attributes:
        task_id: The task.
        results: One :class:`CheckResult` per check that applied, in :data:`CHECKS` order.
    """

    task_id: str
    results: tuple[CheckResult, ...]

    @property
    def kept(self) -> bool:
        """Whether the task passes every threshold (no check failed)."""
        return all(r.outcome is not Outcome.FAIL for r in self.results)

    @property
    def reasons(self) -> list[str]:
        """Why the task is dropped: ``"<check>: <reason>"`` per failing check."""
        return [f"{r.check}: {r.reason}" for r in self.results if r.outcome is Outcome.FAIL]

    def result(self, check: str) -> CheckResult | None:
        """The result of ``check``, if it ran."""
        return next((r for r in self.results if r.check == check), None)

    @property
    def mutation_score(self) -> float | None:
        """The mutation score, or ``None`` when mutation testing did not run."""
        found = self.result("mutation")
        return found.details.get("score") if found and "score" in found.details else None

    def to_json(self) -> dict[str, Any]:
        """The JSON object for the machine report."""
        return {
            "task_id": self.task_id,
            "kept": self.kept,
            "reasons": self.reasons,
            "checks": {r.check: r.to_json() for r in self.results},
        }


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """The findings on a whole set of tasks.

    Attributes:
        tasks: One :class:`TaskReport` per task, in input order.
        wall_time_s: Seconds the validation took.
        runs: Sandbox runs made.
        settings: Thresholds and limits used, for the record.
    """

    tasks: tuple[TaskReport, ...]
    wall_time_s: float
    runs: int
    settings: Mapping[str, Any] = field(default_factory=dict)

    def kept_ids(self) -> list[str]:
        """Ids of the tasks that pass every threshold."""
        return [t.task_id for t in self.tasks if t.kept]


def _skip_all(reason: str, after: str) -> list[CheckResult]:
    names = CHECKS[CHECKS.index(after) + 1 :]
    return [CheckResult(n, Outcome.SKIP, reason) for n in names if n != "duplicates"]


async def validate_task(task: Task, ctx: Context) -> list[CheckResult]:
    """Every per-task check on ``task`` (all but duplicates), in :data:`CHECKS` order.

    Checks that need a working reference are skipped, with the reason, when the schema
    or the reference check fails; the others run concurrently.
    """
    shape = schema.check(task)
    if shape.outcome is Outcome.FAIL:
        return [shape, *_skip_all("skipped: the task's schema check failed", "schema")]
    runs = await reference.run_reference(task, ctx)
    ref = reference.check(task, runs, ctx)
    stable = determinism.check(runs)
    if ref.outcome is Outcome.FAIL and ref.reason.startswith("the reference does not pass"):
        why = "skipped: the reference does not pass"
        later = [CheckResult(n, Outcome.SKIP, why) for n in ("trivial", "mutation", "coverage")]
        return [shape, ref, stable, *later, await description.check(task, ctx)]
    found = await asyncio.gather(
        trivial.check(task, ctx),
        mutation.check(task, ctx, runs),
        coverage.check(task, ctx),
        description.check(task, ctx),
    )
    return [shape, ref, stable, *found]


async def _guarded(task: Task, ctx: Context) -> list[CheckResult]:
    try:
        return await validate_task(task, ctx)
    except Exception as error:  # one bad task never sinks the batch
        return [CheckResult("schema", Outcome.FAIL, f"validation crashed on this task: {error!r}")]


async def validate_tasks(
    tasks: list[Task],
    ctx: Context,
    *,
    rejected: Mapping[str, str] | None = None,
    on_task: Callable[[str], object] | None = None,
) -> ValidationReport:
    """Run every check on every task, concurrently, and collect the report.

    Args:
        tasks: The tasks, in input order.
        ctx: The sandbox, limits and thresholds (:class:`~execgym.validation.Context`).
        rejected: ``{task_id: why}`` for task lines the loader refused; they are
            reported as schema failures.
        on_task: Called with each task's id when its checks finish (progress).

    Returns:
        The :class:`ValidationReport`, tasks in input order.
    """
    started = time.monotonic()

    # Tasks in flight are bounded, so a large set never holds every task's mutants (and
    # their programs) in memory at once; a few per worker keep the sandboxes busy.
    in_flight = asyncio.Semaphore(TASKS_PER_WORKER * ctx.workers)

    async def one(task: Task) -> list[CheckResult]:
        async with in_flight:
            found = await _guarded(task, ctx)
        if on_task is not None:
            on_task(task.task_id)
        return found

    per_task = await asyncio.gather(*(one(t) for t in tasks))
    return assemble(tasks, per_task, ctx.thresholds, ctx.limits, rejected, started, ctx.runs)


def assemble(
    tasks: list[Task],
    per_task: list[list[CheckResult]],
    thresholds: Thresholds,
    limits: Limits,
    rejected: Mapping[str, str] | None,
    started: float,
    runs: int,
) -> ValidationReport:
    """The report of ``tasks`` from each one's :func:`validate_task` results.

    Adds the duplicates check (across the whole set, never in a sandbox) and a schema
    failure per ``rejected`` line; shared by :func:`validate_tasks` and by validation
    through a broker (:mod:`execgym.broker.validation_jobs`), so both report alike.

    Args:
        tasks: The tasks, in input order; ``per_task`` holds their results, same order.
        per_task: Each task's per-task check results.
        thresholds: The thresholds used (duplicates' similarity; recorded in ``settings``).
        limits: The base limits used (recorded in ``settings``).
        rejected: ``{task_id: why}`` for task lines the loader refused.
        started: ``time.monotonic()`` when the validation started.
        runs: Sandbox runs made, wherever they ran.
    """
    dupes = duplicates.check_all(tasks, thresholds.near_duplicate_similarity)
    reports = []
    for task, found in zip(tasks, per_task, strict=True):
        ordered = sorted([*found, dupes[task.task_id]], key=lambda r: CHECKS.index(r.check))
        reports.append(TaskReport(task.task_id, tuple(ordered)))
    for task_id, why in (rejected or {}).items():
        reports.append(TaskReport(task_id, (schema.load_failure(why),)))
    settings = {"thresholds": _asdict(thresholds), "wall_time_s": limits.wall_time_s}
    return ValidationReport(tuple(reports), time.monotonic() - started, runs, settings)


def _asdict(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}

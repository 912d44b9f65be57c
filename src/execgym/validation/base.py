"""What every check shares: its result, the thresholds, and the run context.

A check looks at one task (or, for duplicates, the whole set) and returns a
:class:`CheckResult`. A ``fail`` drops the task from the clean output; a ``warn`` is
reported but keeps it; ``skip`` means the check could not apply (its reason says why).
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from execgym.errors import TaskError
from execgym.judges.assert_tests import AssertJudge
from execgym.judges.base import Judge, Judgement, Verdict
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox.base import RunRequest, RunResult, Sandbox
from execgym.tasks.models import Task


def entry_point(task: Task) -> str:
    """The function ``task``'s tests call: validation handles Python ``assert`` tasks.

    Raises:
        TaskError: if ``task`` has no ``entry_point`` (the loaders refuse such a Python
            ``assert`` task, so another kind of task reached a check).
    """
    if not task.entry_point:
        raise TaskError(f"{task.task_id}: no entry_point; validation checks Python assert tasks")
    return task.entry_point


def tests_of(task: Task) -> str:
    """``task``'s tests (Python code defining ``check``); see :func:`entry_point`.

    Raises:
        TaskError: if ``task`` has no ``tests``.
    """
    if task.tests is None:
        raise TaskError(f"{task.task_id}: no tests; validation checks Python assert tasks")
    return task.tests


class Outcome(enum.Enum):
    """How a task fared on one check."""

    PASS = "pass"  # noqa: S105 (an outcome, not a password)
    WARN = "warn"  # reported, task kept
    FAIL = "fail"  # task dropped from the clean output
    SKIP = "skip"  # the check did not apply (an earlier check failed, no reference...)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's finding on one task.

    Attributes:
        check: The check's name (``"mutation"``, ``"determinism"``...).
        outcome: Pass, warn, fail or skip.
        reason: Why, for humans; empty on a plain pass.
        details: Check-specific facts, JSON-serialisable (scores, differing runs...).
    """

    check: str
    outcome: Outcome
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object for the machine report."""
        return {
            "check": self.check,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "details": self.details,
        }


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a check fails a task; every field can be set from the command line.

    Attributes:
        runs: Repeated runs of the reference for the determinism check.
        max_reference_time_fraction: A reference using more than this fraction of the
            task's wall-time limit fails (0.5: half the limit).
        min_mutation_score: Fewer killed mutants than this fraction fails the task.
        max_mutants: Cap on mutants judged per task (chosen round-robin over operators).
        min_line_coverage: Fraction of the reference's lines the tests must run.
        min_branch_coverage: Fraction of the reference's branches the tests must take;
            below it is a warning only (short-circuit branches are often unreachable).
        near_duplicate_similarity: Jaccard similarity of normalized text (3-gram
            shingles) from which two tasks are near-duplicates.
        mutant_time_factor: A mutant's wall-time limit is this many times the
            reference's slowest run (at least ``min_mutant_wall_time_s``, at most the
            task's limit), so looping mutants are killed fast.
        min_mutant_wall_time_s: Floor of a mutant's wall-time limit, in seconds.
    """

    runs: int = 3
    max_reference_time_fraction: float = 0.5
    min_mutation_score: float = 0.75
    max_mutants: int = 40
    min_line_coverage: float = 1.0
    min_branch_coverage: float = 1.0
    near_duplicate_similarity: float = 0.9
    mutant_time_factor: float = 20.0
    min_mutant_wall_time_s: float = 2.0

    def __post_init__(self) -> None:
        for name in (
            "max_reference_time_fraction",
            "min_mutation_score",
            "min_line_coverage",
            "min_branch_coverage",
            "near_duplicate_similarity",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"threshold {name}={value!r}: give a fraction in [0, 1]")
        if self.runs < 2:
            raise ValueError(f"runs={self.runs}: determinism needs at least 2 runs")
        if self.max_mutants < 1:
            raise ValueError(f"max_mutants={self.max_mutants}: give at least 1")


DEFAULT_THRESHOLDS = Thresholds()

SANDBOX_ATTEMPTS = 2
"""A run ending in ``sandbox_error`` is retried once, as in scoring."""


class Context:
    """Where checks run code: one sandbox, one judge, a bound on concurrent runs.

    Args:
        sandbox: Where every program of every check runs.
        limits: Base limits, overridden per task by ``Task.limits``.
        thresholds: When checks fail.
        workers: Sandbox runs at once across all checks and tasks.
        coverage_site: The directory holding the ``coverage`` package, visible
            read-only inside ``sandbox`` (``None``: the coverage check is skipped).
        judge: What judges a completion (a :class:`~execgym.judges.base.Judge`); the
            assert judge by default. The
            reference, determinism, trivial and mutation checks only go through it, so
            they apply to any kind of task a judge handles; coverage and the example
            and equivalence probes call the Python entry point directly.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        limits: Limits = DEFAULT_LIMITS,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        workers: int = 2,
        coverage_site: str | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.thresholds = thresholds
        self.judge = judge or AssertJudge()
        self.coverage_site = coverage_site
        self.runs = 0
        self.workers = max(1, workers)
        self._slots = asyncio.Semaphore(self.workers)

    async def judge_completion(self, task: Task, completion: str, limits: Limits) -> Judgement:
        """Judge ``completion`` on ``task`` in the sandbox; a sandbox error is retried once."""
        judgement = None
        for _ in range(SANDBOX_ATTEMPTS):
            async with self._slots:
                self.runs += 1
                judgement = await self.judge.judge(task, completion, self.sandbox, limits)
            if judgement.verdict is not Verdict.SANDBOX_ERROR:
                break
        if judgement is None:  # the loop runs at least once
            raise RuntimeError("no attempt was made to judge the completion")
        return judgement

    async def run_python(self, source: bytes, stdin: bytes, limits: Limits) -> RunResult:
        """Run one of our own in-sandbox helpers (coverage, probes) with ``stdin``."""
        async with self._slots:
            self.runs += 1
            return await self.sandbox.run(
                RunRequest(python_source=source, stdin=stdin, limits=limits)
            )

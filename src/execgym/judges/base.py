"""The judge contract: a :class:`Judge`, its :class:`Judgement`, and :func:`judge_for`.

What a judge is given (:class:`Judge`), what it says (a :class:`Judgement` with its
:class:`Verdict`), and which judge a task goes to (:func:`judge_for`, :class:`JudgeSet`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from execgym.errors import ConfigError
from execgym.sandbox.base import RunResult, Status

if TYPE_CHECKING:
    from execgym.judges.compile import Builder
    from execgym.judges.diagnosis import Diagnostics
    from execgym.limits import Limits
    from execgym.sandbox.base import Sandbox
    from execgym.tasks.models import Task


class Verdict(enum.Enum):
    """The outcome of one rollout.

    ``SANDBOX_ERROR``, ``INVALID``, ``LANGUAGE_UNAVAILABLE`` and ``QUARANTINED`` (see
    :mod:`execgym.ops.breakers`) are not the model's fault: their reward is ``None``
    (masked), never 0. ``COMPILE_ERROR`` is: 0.
    """

    PASSED = "passed"  # every test passed
    FAILED = "failed"  # an assertion failed
    ERROR = "error"  # another exception (type, message and traceback are kept)
    TAMPERED = "tampered"  # a detected hack (a forged answer, an always-equal object)
    TIMEOUT = "timeout"  # wall-clock or CPU budget spent
    MEMORY_EXCEEDED = "memory_exceeded"  # past its memory limit
    OUTPUT_EXCEEDED = "output_exceeded"  # wrote more than max_output_bytes
    SANDBOX_ERROR = "sandbox_error"  # we failed to run it; retried once, then masked
    INVALID = "invalid"  # the input was unusable (unknown task, malformed line)
    COMPILE_ERROR = "compile_error"  # the source did not compile (compiler's message kept)
    LANGUAGE_UNAVAILABLE = "language_unavailable"  # no toolchain for it here; masked
    QUARANTINED = "quarantined"  # its task type's circuit breaker is open: not run; masked

    @property
    def is_masked(self) -> bool:
        """Whether this verdict carries no reward (not the rollout's fault).

        Decided by :func:`execgym.judges.masking.is_masked`, where the rule is written.
        """
        from execgym.judges.masking import is_masked

        return is_masked(self)


RUN_STATUS_VERDICT = {
    Status.TIME_LIMIT: Verdict.TIMEOUT,
    Status.MEMORY_LIMIT: Verdict.MEMORY_EXCEEDED,
    Status.OUTPUT_LIMIT: Verdict.OUTPUT_EXCEEDED,
    Status.SANDBOX_ERROR: Verdict.SANDBOX_ERROR,
}
"""The verdict a run's :class:`Status` decides by itself (limits, sandbox failures)."""


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """The exception a program raised: class name, message and traceback text."""

    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judge's verdict on one rollout, with the run that produced it.

    Attributes:
        verdict: The outcome.
        run: The sandbox run, or ``None`` when nothing ran (invalid input).
        error: The exception raised, for ``failed`` and ``error`` verdicts.
        message: A short explanation for humans.
        details: Judge-specific extra facts (JSON-serialisable).
        diagnostics: Leaks, hot spots and complexity
            (:class:`~execgym.diagnostics.Diagnostics`), when the task or the run asked
            for them; added after the judge by the scorer.
    """

    verdict: Verdict
    run: RunResult | None = None
    error: ErrorDetail | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    diagnostics: Diagnostics | None = None


def tail_text(data: bytes, limit: int = 2000) -> str:
    """The last ``limit`` bytes of ``data`` as text (undecodable bytes replaced)."""
    return data[-limit:].decode("utf-8", errors="replace")


START_MARKER = b"EXECGYM-START\n"
"""What every harness writes first on its report channel, before any untrusted code."""


def never_started(run: RunResult, what: str) -> Judgement | None:
    """A ``sandbox_error`` if ``run``'s report channel lacks the start marker, else ``None``.

    Such a run never reached our harness (bwrap, setpriv or the interpreter failed, or
    the host was too slow to start it within the limits); no solution can cause it, as
    the marker precedes its code, so it is marked as an infrastructure failure
    (:data:`execgym.judges.masking.INFRASTRUCTURE_MARK`).
    """
    if run.status is Status.SANDBOX_ERROR or run.report.startswith(START_MARKER):
        return None
    stderr = tail_text(run.stderr).strip()
    message = f"the sandbox never started the {what} ({run.message or run.status.value})"
    return Judgement(
        Verdict.SANDBOX_ERROR,
        run,
        message=message + (f": {stderr}" if stderr else ""),
        details={"infrastructure": "the harness never started"},
    )


def nonce_report(report: bytes, nonce: str) -> dict[str, Any] | None:
    """The JSON object a harness wrote after the last ``nonce`` line, else ``None``."""
    tag = nonce.encode("ascii") + b"\n"
    start = report.rfind(tag)
    if start < 0:
        return None
    line = report[start + len(tag) :].split(b"\n", 1)[0]
    try:
        payload = json.loads(line.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def harness_report(run: RunResult, nonce: str, what: str) -> Judgement | dict[str, Any]:
    """The report of a harness run, or the judgement the run earns without one.

    A run that never reached the harness is a ``sandbox_error``; one ended by a limit
    gets that limit's verdict; one without a nonce-tagged report (the program exited or
    crashed before the harness finished) is an ``error``, never a pass.
    """
    unstarted = never_started(run, what)
    if unstarted is not None:
        return unstarted
    if run.status in RUN_STATUS_VERDICT:
        return Judgement(RUN_STATUS_VERDICT[run.status], run, message=run.message)
    report = nonce_report(run.report, nonce)
    if report is None or run.status is not Status.OK:
        how = run.message or "exited with code 0"
        message = f"the program ended before the {what} finished ({how}); no report"
        return Judgement(
            Verdict.ERROR, run, ErrorDetail("NoReport", message, tail_text(run.stderr)), message
        )
    return report


@runtime_checkable
class Judge(Protocol):
    """What every judge is: one call that runs a rollout against a task's tests.

    Everything a kind of judge needs besides these arguments is either in the
    :class:`~execgym.tasks.models.Task` (its tests, cases, ``state``, checker) or given
    to the judge's constructor (the :class:`~execgym.judges.compile.Builder`, what the
    reward specification asks to be measured).

    Attributes:
        name: The judge's short name (``"assert"``, ``"stdio"``, ...).
    """

    name: str

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Judge one rollout.

        Args:
            task: The task whose tests are run.
            completion: The rollout's code (already reduced from markdown).
            sandbox: Where every program runs.
            limits: The run's limits (the task's overrides already applied).
            files: The rollout's further files, ``{name: contents}``; only ``pytest``
                tasks have a place for them, other judges ignore them.

        Returns:
            The verdict and its evidence; a failure of the sandbox is a
            ``sandbox_error`` judgement or an :class:`~execgym.errors.Error` raised.

        Raises:
            TaskError, ConfigError: when the task or the settings are unusable.
        """
        ...


class JudgeSet:
    """One judge per kind of task, each made on first use and kept.

    A judge builds its harness (and native ones compile theirs) when made, which a
    batch of one kind never needs, so none is made before a task of its kind comes.

    Args:
        builder: Compiles sources for the judges that need it (default:
            :class:`~execgym.judges.compile.Builder` on the default cache directory).
        cases: The Python assert judge counts passing cases (partial credit).
        measure_reference: The Python assert judge also measures the task's reference.
        python_assert: The judge of Python ``assert`` tasks in place of
            :class:`~execgym.judges.AssertJudge` (a coverage reward's
            :class:`~execgym.reward.coverage.CoverageJudge`, which judges the completion
            as tests). What a reward specification asks for is turned into these by
            :class:`execgym.scoring.core.Scoring`.
        swe: The judge of ``swe`` tasks (:class:`execgym.episodes.swe.SweJudge`; it
            scores with the episodes' grader, which judges/ does not import), or a
            function of no arguments that makes it when the first ``swe`` task comes.
    """

    def __init__(
        self,
        builder: Builder | None = None,
        *,
        cases: bool = False,
        measure_reference: bool = False,
        python_assert: Judge | None = None,
        swe: Judge | Callable[[], Judge] | None = None,
    ) -> None:
        self._builder = builder
        self._cases = cases
        self._measure_reference = measure_reference
        self._made: dict[str, Judge] = {} if python_assert is None else {"assert": python_assert}
        self._swe: Callable[[], Judge] | None = None
        if isinstance(swe, Judge) and not isinstance(swe, type):  # a judge, not a class
            self._made["swe"] = swe
        elif swe is not None:
            self._swe = swe

    @property
    def builder(self) -> Builder:
        """The builder shared by the compiling judges (made on first use)."""
        if self._builder is None:
            from execgym.judges.compile import Builder

            self._builder = Builder()
        return self._builder

    def judge_for(self, task: Task) -> Judge:
        """The judge of ``task``'s kind and language (the same object on every call).

        ``assert`` in Python: :class:`~execgym.judges.AssertJudge` (or the
        ``python_assert`` judge given); ``assert`` in other
        languages: :class:`~execgym.judges.NativeAssertJudge`; ``stdio``,
        ``function_call``, ``pytest``, ``unittest``, ``swe``: the judge of that name.
        """
        key = task.kind if task.kind != "assert" or task.language == "python" else "native"
        judge = self._made.get(key)
        if judge is None:
            judge = self._made[key] = self._make(key)
        return judge

    def _make(self, key: str) -> Judge:
        # Each kind's module is imported when its first task comes: a batch of one
        # kind loads one judge.
        if key == "stdio":
            from execgym.judges.stdio import StdioJudge

            return StdioJudge(self.builder)
        if key == "function_call":
            from execgym.judges.function_call import FunctionCallJudge

            return FunctionCallJudge()
        if key == "pytest":
            from execgym.judges.pytest_tests import PytestJudge

            return PytestJudge()
        if key == "unittest":
            from execgym.judges.unittest_tests import UnittestJudge

            return UnittestJudge()
        if key == "swe" and self._swe is not None:
            return self._swe()
        if key == "swe":
            raise ConfigError(
                "swe tasks need the SWE judge: JudgeSet(swe=execgym.episodes.swe.SweJudge()) "
                "(execgym score and the workers give it)"
            )
        if key == "native":
            from execgym.judges.assert_native import NativeAssertJudge

            return NativeAssertJudge(self.builder)
        from execgym.judges.assert_tests import AssertJudge

        return AssertJudge(cases=self._cases, measure_reference=self._measure_reference)


def judge_for(task: Task, *, builder: Builder | None = None) -> Judge:
    """The judge for ``task`` (see :meth:`JudgeSet.judge_for`), made afresh.

    To judge many rollouts, keep a :class:`JudgeSet`: it makes each judge once.
    """
    return JudgeSet(builder).judge_for(task)

"""Score one rollout: judge it in a sandbox, retry our failures, reward it.

:func:`score_rollout` is the one path every caller takes (the batch scorer, a broker's
worker, the HTTP service, the trainer integrations): the task's limits and calibration,
the judge of its kind (:class:`~execgym.judges.base.JudgeSet`), one retry of a
``sandbox_error``, the reward, and the operations hooks (circuit breakers, metrics, the
``scored`` log line). It keeps no state between calls; what is shared between them
(the sandbox, the judges, the hooks) is a :class:`Scoring`. Which failures are masked,
and which count toward a circuit breaker, is decided by :mod:`execgym.judges.masking`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from execgym.errors import ConfigError, Error, TaskError
from execgym.judges.base import Judge, Judgement, JudgeSet, Verdict
from execgym.judges.effective import effective_limits
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.ops.breakers import (
    BreakerGate,
    Breakers,
    Decided,
    SharedBreakers,
    TaskTypeKey,
    dataset_of,
    is_infrastructure_failure,
)
from execgym.reward import binary_reward
from execgym.scoring.results import ScoredRollout, invalid_result
from execgym.tasks.extract import extract_code
from execgym.tasks.loaders import LineProblem, RolloutLine
from execgym.tasks.models import Rollout, Task

if TYPE_CHECKING:  # the rest is imported where a batch uses it (a reward, diagnostics...)
    from execgym.calibration import Calibration, Calibrator, Measured
    from execgym.diagnostics import Diagnoser
    from execgym.environments.routing import EnvironmentSandboxes
    from execgym.judges.compile import Builder
    from execgym.ops.metrics import Metrics
    from execgym.reward import RewardSpec
    from execgym.sandbox.base import Sandbox

log = logging.getLogger("execgym.scoring")


def _swe_judge() -> Judge:
    """The judge of ``swe`` tasks, made when a batch has one (it loads the episodes)."""
    from execgym.episodes.swe import SweJudge

    return SweJudge()


SANDBOX_ATTEMPTS = 2
"""A ``sandbox_error`` is retried once; if it fails again, the reward is masked."""

DETERMINISTIC_REFUSALS = frozenset({"UnsupportedArgument"})
"""Harness refusals (``ErrorDetail.type``) a retry would repeat word for word: the task's
tests pass what the harness cannot carry across its plain-data boundary. They stay
``sandbox_error`` (our limit, masked) but are not retried, nor logged twice."""


class Scoring:
    """How rollouts are scored, shared by any number of :func:`score_rollout` calls.

    It holds no per-rollout or per-batch state: the judges it makes are kept (each
    builds its harness once), the rest is settings and hooks.

    Args:
        sandbox: Where programs run.
        limits: Limits for every run, overridden per task by ``Task.limits`` (a call
            may give others).
        reward: How to turn a judgement into a reward; ``None`` is the binary reward
            (1.0 for a pass) without a breakdown.
        builder: Compiles sources, with its cache (default: a
            :class:`~execgym.judges.compile.Builder` on the default cache directory).
        breakers: Circuit breakers per task type: a rollout of a quarantined type is
            ``quarantined`` at once, without a sandbox; each outcome is recorded.
        metrics: Where to count each finished rollout (by verdict and task type).
        calibrator: Calibrates each task's time limits from its reference solution
            (:mod:`execgym.calibration`); the results then carry ``calibration``.
        environments: Where tasks that name an ``environment`` run: one sandbox per
            environment, of ``sandbox``'s tier (default: made on the first such task,
            from the local environment cache, pulling from ``$EXECGYM_STORE`` when set
            and the cache lacks one). Call ``aclose()`` to stop their sandboxes.
        diagnose: The diagnostics every rollout that passes gets (``leaks``,
            ``hotspots``, ``complexity``: :mod:`execgym.diagnostics`), run after the
            judge in the same sandbox and limits; ``None`` takes each task's
            ``diagnose`` field (none without it), ``()`` none at all.

    Raises:
        ConfigError: if ``reward`` needs a tool (ruff, radon, bandit) that is missing.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        limits: Limits = DEFAULT_LIMITS,
        *,
        reward: RewardSpec | None = None,
        builder: Builder | None = None,
        breakers: Breakers | None = None,
        metrics: Metrics | None = None,
        calibrator: Calibrator | None = None,
        environments: EnvironmentSandboxes | None = None,
        diagnose: tuple[str, ...] | None = None,
    ) -> None:
        python_assert: Judge | None = None
        if reward is not None:
            from execgym.reward.evaluate import check_tools

            check_tools(reward)
            if reward.needs_coverage:  # the completion is tests, run on the reference
                from execgym.reward.coverage import CoverageJudge

                python_assert = CoverageJudge()
        self.sandbox = sandbox
        self.limits = limits
        self.reward = reward
        self.judges = JudgeSet(
            builder,
            cases=reward is not None and reward.needs_cases,
            measure_reference=reward is not None and reward.needs_reference,
            python_assert=python_assert,
            swe=_swe_judge,
        )
        self.breakers = breakers
        self.metrics = metrics
        self.calibrator = calibrator
        self.environments = environments
        self.diagnose_checks = diagnose
        self._diagnoser: Diagnoser | None = None

    @property
    def diagnoser(self) -> Diagnoser:
        """Runs the diagnostics (made on first use: most batches have none)."""
        if self._diagnoser is None:
            from execgym.diagnostics import Diagnoser

            self._diagnoser = Diagnoser(self.diagnose_checks, builder=lambda: self.judges.builder)
        return self._diagnoser

    def task_type(self, task: Task) -> str:
        """The type of ``task`` for breakers and metrics (the breakers' key, else data set)."""
        return self.breakers.type_of(task) if self.breakers is not None else dataset_of(task)

    async def judge(self, task: Task, rollout: Rollout, limits: Limits) -> Judgement:
        """Judge one rollout of ``task`` once, with the judge of the task's kind.

        A completion holding markdown fences is reduced to its code first by
        :func:`~execgym.tasks.extract.extract_code`.

        Raises:
            TaskError, ConfigError: the task or the settings are unusable.
            Error: the sandbox or the host could not do its job.
        """
        completion = extract_code(rollout.completion, task.language)
        judge = self.judges.judge_for(task)
        sandbox = await self.sandbox_for(task)
        return await judge.judge(task, completion, sandbox, limits, files=rollout.files)

    async def diagnose(
        self, task: Task, rollout: Rollout, limits: Limits, judgement: Judgement
    ) -> Judgement:
        """``judgement`` with the rollout's diagnostics, if the task or the run asks.

        They run in the task's sandbox under ``limits`` (:mod:`execgym.diagnostics`).
        """
        if self.diagnose_checks is None and task.diagnose is None:
            return judgement  # no checks (checks_for's answer), nor its module imported
        from execgym.judges.diagnosis import checks_for

        if not checks_for(task, self.diagnose_checks):
            return judgement
        completion = extract_code(rollout.completion, task.language)
        sandbox = await self.sandbox_for(task)
        found = await self.diagnoser.diagnose(task, completion, sandbox, limits, judgement)
        return dataclasses.replace(judgement, diagnostics=found)

    async def sandbox_for(self, task: Task) -> Sandbox:
        """The sandbox ``task`` runs in: ours, or one in the task's ``environment``.

        Raises:
            EnvironmentNotFound: The environment is not here (nor in the store).
            ConfigError: Our tier cannot run environments (``none``).
        """
        if task.environment is None or task.environment == "host":
            return self.sandbox
        if self.environments is None:
            from execgym.environments.routing import EnvironmentSandboxes, default_store

            self.environments = EnvironmentSandboxes(self.sandbox, store=default_store())
        sandbox: Sandbox = await self.environments.sandbox_for(task.environment)
        return sandbox

    async def aclose(self) -> None:
        """Stop the sandboxes made for tasks' environments (not ``sandbox``)."""
        if self.environments is not None:
            await self.environments.aclose()


async def score_rollout(
    scoring: Scoring,
    task: Task,
    rollout: Rollout,
    *,
    index: int = 0,
    limits: Limits | None = None,
    breakers: BreakerGate | None = None,
    calibrator: Calibrator | Measured | None = None,
) -> ScoredRollout:
    """Score one rollout of ``task``: the whole path, hooks included.

    A rollout of a task type whose breaker is open is ``quarantined`` without running;
    otherwise it is judged (a ``sandbox_error`` retried once, unless the harness's
    refusal is deterministic), rewarded, recorded by the breakers and counted by the
    metrics, and a ``scored`` line is logged.

    Args:
        scoring: The sandbox, judges, reward and hooks.
        task: The task.
        rollout: The rollout (its ``task_id`` is not checked against ``task``).
        index: The rollout's position in its input, for the result.
        limits: The run's limits before the task's overrides (default:
            ``scoring.limits``).
        breakers: The breakers of this one rollout instead of ``scoring.breakers``: a
            worker whose breakers are shared (:class:`execgym.ops.breakers.Decided`,
            the shared board's decision fetched before the rollout runs).
        calibrator: Calibrates this rollout's limits instead of ``scoring.calibrator``
            (a broker's job carrying its task's measurement:
            :class:`execgym.calibration.Measured`).

    Returns:
        The result; never raises for anything a rollout, a task or the sandbox does (an
        unusable task is ``invalid``, our failures ``sandbox_error``, both masked).
    """
    rollout_id = rollout.rollout_id or f"{rollout.task_id}#{index}"
    breakers = breakers if breakers is not None else scoring.breakers
    task_type = breakers.type_of(task) if breakers is not None else scoring.task_type(task)
    if breakers is None:
        result = await _judged(scoring, index, task, rollout, rollout_id, limits, calibrator)
        return finished(scoring.metrics, result, task_type)
    ticket = breakers.admit(task)
    if ticket is None:
        message = breakers.quarantine_message(task_type)
        judgement = Judgement(Verdict.QUARANTINED, message=message)
        result = ScoredRollout(
            index, task.task_id, rollout_id, Verdict.QUARANTINED, None, judgement,
            scoring.sandbox.name, attempts=0, message=message,
        )  # fmt: skip
        return finished(scoring.metrics, result, task_type)
    result = await _judged(scoring, index, task, rollout, rollout_id, limits, calibrator)
    failed = result.judgement is not None and is_infrastructure_failure(result.judgement)
    breakers.record(ticket, infrastructure_failure=failed)
    return finished(scoring.metrics, result, task_type)


async def score_shared(
    scoring: Scoring,
    board: SharedBreakers,
    type_of: TaskTypeKey,
    task: Task,
    rollout: Rollout,
    *,
    index: int = 0,
    limits: Limits | None = None,
    calibrator: Calibrator | Measured | None = None,
) -> ScoredRollout:
    """:func:`score_rollout` under breakers every worker shares, not ``scoring.breakers``.

    The board is asked before the rollout runs (quarantined: nothing runs) and told
    its outcome after, as :func:`score_rollout` decides it
    (:func:`~execgym.ops.breakers.is_infrastructure_failure`: never what the rollout
    controls).

    Args:
        scoring: The sandbox, judges, reward and hooks.
        board: The shared breakers (Redis's, a Ray actor's).
        type_of: The task-type key of the breakers.
        task: The task.
        rollout: The rollout.
        index: The rollout's position in its input.
        limits: The run's limits before the task's overrides.
        calibrator: As for :func:`score_rollout`.

    Raises:
        BrokerError: the board cannot be reached (nothing is recorded; the job may be
            run again).
    """
    ticket, message = await board.admit(type_of(task))
    decided = Decided(type_of, ticket, message)
    scored = await score_rollout(
        scoring, task, rollout, index=index, limits=limits, breakers=decided, calibrator=calibrator
    )
    if ticket is not None and decided.failed is not None:
        await board.record(ticket, decided.failed)
    return scored


def score_unusable(
    item: RolloutLine | LineProblem,
    *,
    skipped_tasks: Mapping[str, str] | None = None,
    isolation: str,
    metrics: Metrics | None = None,
) -> ScoredRollout:
    """The ``invalid`` result of an item that cannot be judged, counted and logged.

    Args:
        item: An unreadable line, or a rollout whose task is unknown.
        skipped_tasks: ``{task_id: why}`` for tasks left out because they are invalid,
            so their rollouts are told why rather than "unknown task".
        isolation: The sandbox backend's name, for the result.
        metrics: Where to count it (task type ``"unknown"``).
    """
    if isinstance(item, LineProblem):
        task_id = item.task_id or ""  # the line's, when it could be read
        result = invalid_result(
            item.index, task_id, f"line-{item.line_number}", str(item), isolation
        )
        return finished(metrics, result, "unknown")
    rollout = item.rollout
    skipped = (skipped_tasks or {}).get(rollout.task_id)
    message = (
        f"task {rollout.task_id!r} was skipped because it is invalid: {skipped}"
        if skipped
        else f"unknown task_id {rollout.task_id!r}: no such task in the tasks file; "
        "check the rollout's task_id"
    )
    rollout_id = rollout.rollout_id or f"{rollout.task_id}#{item.index}"
    result = invalid_result(item.index, rollout.task_id, rollout_id, message, isolation)
    return finished(metrics, result, "unknown")


def finished(metrics: Metrics | None, result: ScoredRollout, task_type: str) -> ScoredRollout:
    """Count ``result`` in ``metrics`` (if any), log its ``scored`` line, return it."""
    if metrics is not None:
        metrics.job_done(result.verdict.value, task_type, result.verdict.is_masked)
    log.info(
        "scored",
        extra={
            "task_id": result.task_id,
            "rollout_id": result.rollout_id,
            "task_type": task_type,
            "verdict": result.verdict.value,
        },
    )
    return result


async def _judged(
    scoring: Scoring,
    index: int,
    task: Task,
    rollout: Rollout,
    rollout_id: str,
    base: Limits | None,
    calibrator: Calibrator | Measured | None = None,
) -> ScoredRollout:
    """Judge (retrying our failures) and reward, without the hooks."""
    base = base or scoring.limits
    calibrator = calibrator or scoring.calibrator
    isolation = scoring.sandbox.name
    judged, calibration = task, None

    async def reference(task: Task, completion: str, limits: Limits) -> Judgement:
        solution = Rollout(task_id=task.task_id, completion=completion)
        return await _judge_reference(scoring, task, solution, limits)

    try:
        limits = user_limits = task.limits_over(base)
        first_try = getattr(calibrator, "first_try", None)
        tried = first_try(task, limits) if first_try is not None else None
        if tried is not None:  # under the floor: the reference is measured if it binds
            judged, limits, calibration = tried
        elif calibrator is not None:
            judged, limits, calibration = await calibrator.calibrate(task, limits, reference)
        judgement, attempt = await _attempts(scoring, judged, rollout, limits)
        if tried is not None and calibrator is not None and _hit_time_limit(judgement):
            floor_limits, floor_try = limits, judgement
            judged, limits, calibration = await calibrator.calibrate(task, user_limits, reference)
            again = _judge_again(
                floor_try, judged.run_limits(floor_limits), judged.run_limits(limits)
            )
            if again:
                judgement, attempt = await _attempts(scoring, judged, rollout, limits)
            calibration = calibration.after_floor_try(floor_try, again)
    except (TaskError, ConfigError) as error:  # the task's or the settings' fault
        return invalid_result(index, task.task_id, rollout_id, str(error), isolation)
    judgement = await scoring.diagnose(judged, rollout, limits, judgement)
    reward = binary_reward(judgement.verdict)
    breakdown = None
    if scoring.reward is not None:
        from execgym.reward import evaluate

        breakdown = await evaluate(scoring.reward, task, rollout.completion, judgement)
        reward = breakdown.total
    return ScoredRollout(
        index=index,
        task_id=task.task_id,
        rollout_id=rollout_id,
        verdict=judgement.verdict,
        reward=reward,
        judgement=judgement,
        isolation=judgement.run.isolation if judgement.run else isolation,
        attempts=attempt,
        message=judgement.message,
        reward_breakdown=breakdown,
        limits=_echoed_limits(task, base, calibration),
        calibration=calibration.to_json() if calibration is not None else None,
    )


async def _judge_reference(
    scoring: Scoring, task: Task, solution: Rollout, limits: Limits
) -> Judgement:
    """Judge a task's reference for its calibration; its verdict never the rollouts'.

    The measurement decides the limits of every rollout of the task and is kept on
    disk for later batches. A rollout beside it is the model's program and may take
    the CPU, so a reference stopped by a clock while runs of others overlapped it is
    judged again alone, where the sandbox can hold the batch's runs
    (:meth:`execgym.sandbox.PausableSandbox.alone`, as ``execgym score``'s can); only
    that judgement counts.
    """
    watch = getattr(scoring.sandbox, "watch", None)
    if watch is None:
        return await scoring.judge(task, solution, limits)
    with watch() as seen:
        judgement = await scoring.judge(task, solution, limits)
    if not (_hit_time_limit(judgement) and seen.overlapped):
        return judgement
    log.warning(
        "reference_judged_alone task_id=%s: it hit a time limit beside other runs (%s)",
        task.task_id,
        judgement.message,
    )
    async with scoring.sandbox.alone():  # type: ignore[attr-defined]
        return await scoring.judge(task, solution, limits)


def _hit_time_limit(judgement: Judgement) -> bool:
    from execgym.calibration import hit_time_limit

    return hit_time_limit(judgement)


def _judge_again(floor_try: Judgement, floor: Limits, calibrated: Limits) -> bool:
    from execgym.calibration import judge_again

    return judge_again(floor_try, floor, calibrated)


async def _attempts(
    scoring: Scoring, task: Task, rollout: Rollout, limits: Limits
) -> tuple[Judgement, int]:
    """Judge the rollout, again after a ``sandbox_error`` (ours); the judgement and tries.

    Raises:
        TaskError, ConfigError: the task's or the settings' fault (an ``invalid`` result).
    """
    judgement: Judgement | None = None
    attempt = 0
    for attempt in range(1, SANDBOX_ATTEMPTS + 1):
        try:
            judgement = await scoring.judge(task, rollout, limits)
        except (TaskError, ConfigError):
            raise
        except Error as error:  # the sandbox or the host could not do its job
            log.warning("sandbox_failed task_id=%s: %s", task.task_id, error)
            judgement = Judgement(Verdict.SANDBOX_ERROR, message=f"{type(error).__name__}: {error}")
        except Exception as error:  # our bug: masked, never counted by a breaker
            log.exception("judge_crashed task_id=%s", task.task_id)
            judgement = Judgement(Verdict.SANDBOX_ERROR, message=f"internal error: {error!r}")
        if judgement.verdict is not Verdict.SANDBOX_ERROR:
            break
        deterministic = judgement.error is not None and (
            judgement.error.type in DETERMINISTIC_REFUSALS
        )
        log.warning(
            "sandbox_error task_id=%s attempt=%d%s: %s",
            task.task_id,
            attempt,
            " (deterministic: not retried)" if deterministic else "",
            judgement.message,
        )
        if deterministic:
            break
    if judgement is None:  # the loop runs at least once
        raise RuntimeError("no attempt was made to judge the rollout")
    return judgement, attempt


def _echoed_limits(
    task: Task, limits: Limits, calibration: Calibration | None = None
) -> dict[str, Any] | None:
    """The effective limits of ``task``'s runs for the result (``None`` if unusable).

    With a calibration, its time limits replace the user's (they are never above them).
    """
    if calibration is not None:
        echoed = _echoed_limits(task, limits)
        if echoed is not None:
            echoed["wall_time_s"] = calibration.wall_time_s
            echoed["cpu_time_s"] = calibration.cpu_time_s
            if calibration.case_time_limit_s is not None:
                echoed["case_time_limit_s"] = calibration.case_time_limit_s
        return echoed
    try:
        return effective_limits(task, limits)
    except Error:  # the task's limits are invalid: it was not judged under any
        return None

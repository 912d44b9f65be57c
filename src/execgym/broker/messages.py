"""The messages on the queue: a job to judge and its result, as versioned JSON.

Never pickle: a worker decodes what a trainer (or anyone who can write to Redis)
sent, so a message is data validated by pydantic on receipt, and a message that does
not validate is dead-lettered with the reason instead of crashing a worker.

A job carries everything needed to judge it (the task, the rollout and the limits),
so a worker needs no task files; its ``job_id`` is the idempotency key: however many
times a job is delivered or submitted, one result is stored per ``job_id``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from execgym.calibration import Measured, Measurement
from execgym.errors import Error, MessageError
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.scoring.results import ScoredRollout
from execgym.tasks.models import Rollout, Task

MESSAGE_VERSION: Literal[1] = 1
"""The wire format's version; a message of another version is refused, not guessed at."""

_M = TypeVar("_M", bound="_Message")


class _Message(BaseModel):
    """What every message shares: compact JSON out, validated JSON in."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[str] = "message"

    def to_json(self) -> str:
        """The message as compact JSON."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls: type[_M], data: str | bytes) -> _M:
        """Decode and validate a message.

        Raises:
            MessageError: naming every invalid field, or the wrong version.
        """
        what = cls.kind
        try:
            return cls.model_validate_json(data)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or what}: {item['msg']}"
                for item in error.errors()
            )
            raise MessageError(
                f"not a valid {what} message (version {MESSAGE_VERSION}): {problems}"
            ) from None
        except Error as error:  # a field's own check (Limits) raises our errors
            raise MessageError(f"not a valid {what} message: {error}") from error


class CalibrationOrder(BaseModel):
    """A task's reference measurement, measured once for a batch, sent with its jobs.

    ``execgym score --broker ... --calibrate-limits`` judges each task's reference once
    through the broker (:func:`execgym.broker.calibrate.measure_references`); each job
    of the task carries the result, and the worker calibrates its limits with it
    (:class:`execgym.calibration.Measured`) instead of measuring again.

    Attributes:
        factor: Calibrated limit = ``factor`` x the reference's time (at least 1).
        floor_s: ... but never below ``floor_s`` seconds.
        wall_time_s: The reference's wall time (``None``: not measured, see why_not).
        cpu_time_s: Its CPU time.
        case_wall_time_s: Its slowest test case's wall time (judges timing each case).
        why_not: Why there is no measurement (no reference, it did not pass).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    factor: float = Field(ge=1)
    floor_s: float = Field(gt=0)
    wall_time_s: float | None = Field(default=None, ge=0)
    cpu_time_s: float | None = Field(default=None, ge=0)
    case_wall_time_s: float | None = Field(default=None, ge=0)
    why_not: str | None = None

    @classmethod
    def of(cls, measurement: Measurement, factor: float, floor_s: float) -> CalibrationOrder:
        """The order for ``measurement`` with ``factor`` and ``floor_s``."""
        return cls(factor=factor, floor_s=floor_s, **dataclasses.asdict(measurement))

    def calibrator(self) -> Measured:
        """What the worker calibrates with."""
        measurement = Measurement(
            wall_time_s=self.wall_time_s,
            cpu_time_s=self.cpu_time_s,
            case_wall_time_s=self.case_wall_time_s,
            why_not=self.why_not,
        )
        return Measured(measurement, self.factor, self.floor_s)


class ValidationOrder(BaseModel):
    """Validate the job's task (``execgym validate --broker``) instead of judging a rollout.

    The worker runs :func:`execgym.validation.engine.validate_task` on its own sandbox
    and stores ``{"checks": [CheckResult JSON...], "runs": N}`` as the job's result.

    Attributes:
        thresholds: The fields of :class:`execgym.validation.Thresholds` (validated on
            the worker; an unknown field makes the job unusable).
        workers: Sandbox runs at once for this task's checks (at least 1).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thresholds: dict[str, int | float] = Field(default_factory=dict)
    workers: int = Field(default=2, ge=1)


class JobMessage(_Message):
    """One rollout to judge, as it travels on the queue.

    Attributes:
        version: :data:`MESSAGE_VERSION`.
        job_id: Idempotency key, unique per rollout (e.g. ``"<batch_id>/<index>"``).
        batch_id: The batch whose caller waits for the result; results are announced
            on the batch's own stream.
        index: The rollout's position in its batch.
        task: The task, in full.
        rollout: The rollout.
        limits: Limits for the run (the task's own ``limits`` still override them).
        attempt: Attempts already counted before this delivery, plus one: 1 for a new
            job; a job handed back after a crash keeps counting.
        submitted_at: Unix seconds when it was submitted, for the queue-lag metric
            (``None``: not known).
        calibration: Calibrate the task's time limits with this measurement of its
            reference (``None``: the limits as given).
        validation: Validate the task instead of judging ``rollout`` (``None``: judge).
    """

    kind: ClassVar[str] = "job"

    version: Literal[1] = MESSAGE_VERSION
    job_id: str = Field(min_length=1, max_length=512)
    batch_id: str = Field(default="", max_length=512)
    index: int = Field(default=0, ge=0)
    task: Task
    rollout: Rollout
    limits: Limits = DEFAULT_LIMITS
    attempt: int = Field(default=1, ge=1)
    submitted_at: float | None = None
    calibration: CalibrationOrder | None = None
    validation: ValidationOrder | None = None


class ResultMessage(_Message):
    """The result of one job, stored under its ``job_id`` and announced to its batch.

    Attributes:
        version: :data:`MESSAGE_VERSION`.
        job_id: The job's idempotency key.
        batch_id: The job's batch.
        result: The result, as one line of the results JSONL
            (:meth:`execgym.ScoredRollout.to_json`).
        run_status: The sandbox's :class:`~execgym.sandbox.Status` of the last run,
            ``None`` when nothing ran.
        worker: The worker that produced it.
        delivery_attempt: Which delivery of the job produced it (1 unless a worker
            died or handed it back).
        dead_lettered: Whether the job was given up on (see ``result["message"]``).
    """

    kind: ClassVar[str] = "result"

    version: Literal[1] = MESSAGE_VERSION
    job_id: str = Field(min_length=1)
    batch_id: str = ""
    result: dict[str, Any]
    run_status: str | None = None
    worker: str = ""
    delivery_attempt: int = Field(default=1, ge=1)
    dead_lettered: bool = False

    @classmethod
    def of(
        cls,
        job: JobMessage,
        scored: ScoredRollout,
        *,
        worker: str = "",
        attempt: int = 1,
        dead: bool = False,
    ) -> ResultMessage:
        """The message for ``job`` scored as ``scored``."""
        run = scored.judgement.run if scored.judgement else None
        return cls(
            job_id=job.job_id,
            batch_id=job.batch_id,
            result=scored.to_json(),
            run_status=run.status.value if run else None,
            worker=worker,
            delivery_attempt=attempt,
            dead_lettered=dead,
        )

    def scored(self) -> ScoredRollout:
        """The result as a :class:`~execgym.ScoredRollout` (its output is the kept tail).

        Read by :meth:`~execgym.ScoredRollout.from_json`: ``details`` and
        ``reward_breakdown`` included.

        Raises:
            MessageError: if ``result`` lacks a field a result line always has.
        """
        try:
            return ScoredRollout.from_json(self.result, self.run_status)
        except ValueError as error:
            raise MessageError(f"result of job {self.job_id!r} is malformed: {error!r}") from error

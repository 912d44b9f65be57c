"""``--calibrate-limits`` through a broker: each task's reference judged once, for all.

On one machine the scorer measures a task's reference the first time one of its
rollouts runs (:mod:`execgym.calibration`). Through a broker, every worker would
measure it again (and each on its own host, under its own load). Instead the caller
sends each task's reference as one job first, through the same broker and workers,
turns its result into a measurement with the same rule
(:func:`execgym.calibration.measurement_of`), and sends it with every job of the task
(:class:`~execgym.broker.messages.CalibrationOrder`); the workers calibrate with it.
Every rollout of a task then runs under the same calibrated limits, on any worker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from execgym.broker.base import Broker
from execgym.broker.messages import CalibrationOrder, JobMessage
from execgym.calibration import Calibrator, Measurement, measurement_of
from execgym.tasks.models import Rollout

NO_REFERENCE = "the task has no reference solution"


async def measure_references(
    broker: Broker, jobs: Sequence[JobMessage], calibrator: Calibrator
) -> list[JobMessage]:
    """``jobs``, each carrying its task's reference measurement, judged once per task.

    The references of the jobs' tasks (one per task id, under the limits of the task's
    first job) go through ``broker`` as a batch of their own first
    (:func:`reference_orders`). The broker client does this per chunk of its window
    instead, so a batch is never made whole.

    Args:
        broker: Where the workers are (Redis, Ray).
        jobs: The batch's jobs.
        calibrator: The factor and floor (its cache and sandbox name are not used: the
            references are measured by the workers, for this batch).

    Returns:
        The jobs with ``calibration`` set, in the same order.

    Raises:
        BrokerError: as :func:`execgym.broker.client.score_jobs` raises.
    """
    first: dict[str, JobMessage] = {}
    for job in jobs:
        first.setdefault(job.task.task_id, job)
    orders = await reference_orders(broker, list(first.values()), calibrator)
    return [job.model_copy(update={"calibration": orders[job.task.task_id]}) for job in jobs]


async def reference_orders(
    broker: Broker, jobs: Sequence[JobMessage], calibrator: Calibrator
) -> dict[str, CalibrationOrder]:
    """Each task's calibration: its reference judged once through ``broker``.

    Args:
        broker: Where the workers are (Redis, Ray).
        jobs: One job per task (its task and limits are the reference's).
        calibrator: The factor and floor.

    Returns:
        ``{task_id: CalibrationOrder}`` for every task of ``jobs`` (one without a
        reference gets an order that says so: its rollouts keep the batch's limits).

    Raises:
        BrokerError: as :func:`execgym.broker.client.score_jobs` raises.
    """
    from execgym.broker.client import score_jobs

    measured = {
        job.task.task_id: Measurement(why_not=NO_REFERENCE)
        for job in jobs
        if not job.task.reference
    }
    batch = f"calibration-{uuid.uuid4().hex}"
    now = time.time()
    references = [
        JobMessage(
            job_id=f"{batch}/{number}",
            batch_id=batch,
            index=number,
            task=job.task,
            rollout=Rollout(
                task_id=job.task.task_id,
                completion=job.task.reference or "",
                rollout_id=f"{job.task.task_id}#reference",
            ),
            limits=job.limits,
            submitted_at=now,
        )
        for number, job in enumerate(j for j in jobs if j.task.task_id not in measured)
    ]
    async for result in score_jobs(broker, references):
        scored = result.scored()
        judgement = scored.judgement
        measured[scored.task_id] = (
            measurement_of(judgement)
            if judgement is not None
            else Measurement(why_not=f"the reference could not be judged: {scored.message}")
        )
    return {
        task_id: CalibrationOrder.of(measurement, calibrator.factor, calibrator.floor_s)
        for task_id, measurement in measured.items()
    }

"""``execgym validate --broker``: each task's checks run on a worker, the report here.

The client sends one job per task, carrying a :class:`~execgym.broker.messages.ValidationOrder`
(the thresholds); a worker (``execgym worker`` on Redis, a Ray sandbox actor) runs
:func:`execgym.validation.engine.validate_task` on its own sandbox and stores the
:class:`~execgym.validation.CheckResult` list as JSON; the client turns the results back
into check results and assembles the report with
:func:`execgym.validation.engine.assemble`, as the embedded validation does, so the
report is the same check by check wherever the checks ran.

Delivery, lost jobs and dead workers are handled by :func:`~execgym.broker.score_jobs`,
as for scoring.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from execgym.broker.client import score_jobs
from execgym.broker.messages import JobMessage, ResultMessage, ValidationOrder
from execgym.errors import ConfigError
from execgym.limits import Limits
from execgym.tasks.models import Rollout, Task

if TYPE_CHECKING:
    from execgym.sandbox.base import Sandbox
    from execgym.validation import CheckResult, Thresholds
    from execgym.validation.engine import ValidationReport

log = logging.getLogger(__name__)


def worker_read_only_paths() -> list[str] | None:
    """The read-only paths of a worker's sandbox: the interpreter and the coverage site.

    ``None`` (the sandbox's default) when the site cannot be bound, e.g. a cache under
    ``/tmp``: the worker still starts and scores, with a warning saying why; its
    validation jobs then report coverage as the sandbox lets them.
    """
    from execgym.validation import coverage_site, sandbox_paths

    try:
        return sandbox_paths(coverage_site())
    except ConfigError as error:
        log.warning("validation jobs will not see coverage.py: %s", error)
        return None


def validation_jobs(
    tasks: list[Task], thresholds: Thresholds, limits: Limits, workers: int, batch_id: str
) -> list[JobMessage]:
    """One validation job per task, ``job_id`` ``"<batch_id>/<index>"``.

    The job's rollout is an empty one naming the task (the wire format needs one; a
    validation job never judges it).
    """
    order = ValidationOrder(thresholds=dataclasses.asdict(thresholds), workers=workers)
    return [
        JobMessage(
            job_id=f"{batch_id}/{index}",
            batch_id=batch_id,
            index=index,
            task=task,
            rollout=Rollout(task_id=task.task_id, completion=""),
            limits=limits,
            submitted_at=time.time(),
            validation=order,
        )
        for index, task in enumerate(tasks)
    ]


async def validation_result(
    job: JobMessage, sandbox: Sandbox, *, worker: str = "", attempt: int = 1
) -> ResultMessage:
    """Run the per-task checks of ``job`` (which has a ``validation``) on ``sandbox``.

    Called by workers. The coverage check sees the coverage site
    (:func:`execgym.validation.coverage_site`) only if ``sandbox`` was opened with it
    read-only, as ``execgym worker`` and the Ray actors open theirs. A check that
    crashes, or thresholds the worker refuses, become a failed ``schema`` check naming
    the error, as in the embedded validation.

    Returns:
        The result message, ``result`` = ``{"checks": [CheckResult JSON...], "runs": N}``.
    """
    from execgym.validation import Context, Thresholds, coverage_site
    from execgym.validation.base import CheckResult, Outcome
    from execgym.validation.engine import validate_task

    order = job.validation or ValidationOrder()
    runs = 0
    try:
        thresholds = Thresholds(**order.thresholds)  # type: ignore[arg-type]
        ctx = Context(
            sandbox,
            limits=job.limits,
            thresholds=thresholds,
            workers=order.workers,
            coverage_site=coverage_site(),
        )
        found = await validate_task(job.task, ctx)
        runs = ctx.runs
    except Exception as error:  # one bad task never sinks the batch (engine._guarded)
        why = f"validation crashed on this task: {error!r}"
        found = [CheckResult("schema", Outcome.FAIL, why)]
    return ResultMessage(
        job_id=job.job_id,
        batch_id=job.batch_id,
        result={"checks": [r.to_json() for r in found], "runs": runs},
        worker=worker,
        delivery_attempt=attempt,
    )


def checks_of(result: ResultMessage) -> tuple[list[CheckResult], int]:
    """The check results and sandbox runs in a validation job's ``result``.

    A result without checks (the job was dead-lettered: it crashed or killed its
    workers every time) is a failed ``schema`` check carrying the broker's message.
    """
    from execgym.validation.base import CheckResult, Outcome

    checks = result.result.get("checks")
    if not isinstance(checks, list):
        message = result.result.get("message") or "no checks in the worker's result"
        why = f"validation crashed on this task on the workers: {message}"
        return [CheckResult("schema", Outcome.FAIL, why)], 0
    found = [
        CheckResult(c["check"], Outcome(c["outcome"]), c.get("reason", ""), c.get("details", {}))
        for c in checks
    ]
    return found, int(result.result.get("runs", 0))


async def validate_remote(
    broker: Any,
    tasks: list[Task],
    thresholds: Thresholds,
    limits: Limits,
    *,
    workers: int = 2,
    rejected: Mapping[str, str] | None = None,
    on_task: Callable[[str], object] | None = None,
) -> ValidationReport:
    """:func:`execgym.validation.validate_tasks`, each task's checks on a worker.

    Args:
        broker: A broker that workers consume (Redis), or a :class:`RayBroker`.
        tasks: The tasks, in input order.
        thresholds: When checks fail.
        limits: Base limits, overridden per task by ``Task.limits``.
        workers: Sandbox runs at once per task on its worker.
        rejected: ``{task_id: why}`` for task lines the loader refused.
        on_task: Called with each task's id when its result arrives (progress).

    Returns:
        The report, tasks in input order; ``runs`` sums the workers' sandbox runs.

    Raises:
        execgym.errors.BrokerError: as :func:`~execgym.broker.score_jobs` (no worker
            alive, jobs lost again and again, the broker unreachable).
    """
    from execgym.validation.engine import assemble

    started = time.monotonic()
    jobs = validation_jobs(tasks, thresholds, limits, workers, f"validate-{secrets.token_hex(6)}")
    per_task: list[list[CheckResult]] = []
    runs = 0
    async for result in score_jobs(broker, jobs, ordered=True):
        found, ran = checks_of(result)
        per_task.append(found)
        runs += ran
        if on_task is not None:
            on_task(tasks[len(per_task) - 1].task_id)
    return assemble(tasks, per_task, thresholds, limits, rejected, started, runs)

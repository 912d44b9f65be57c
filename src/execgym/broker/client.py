"""The trainer's side: submit a batch, get its results as they finish or in order.

>>> jobs, local = make_jobs(tasks, rollouts, Limits(wall_time_s=5))     # doctest: +SKIP
>>> async for result in score_jobs(broker, jobs):                       # doctest: +SKIP
...     print(result.job_id, result.result["reward"])

Submitting runs alongside reading, so a batch larger than the queue's bound flows
through it (back-pressure: the submitter waits for room), and a Redis restart in the
middle is ridden out on both sides (the submitter re-sends the chunk it was sending;
a job sent twice still has one result). Jobs the broker loses (a Redis without
persistence restarts empty) are found and queued again: a batch finishes, or raises
:class:`~execgym.errors.JobsLost`; it never waits forever.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from execgym.broker.base import Broker
from execgym.broker.calibrate import reference_orders
from execgym.broker.messages import CalibrationOrder, JobMessage, ResultMessage
from execgym.broker.window import DEFAULT_WINDOW, Local, Window, run_window
from execgym.calibration import Calibrator
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.scoring.core import score_unusable
from execgym.scoring.results import ScoredRollout
from execgym.tasks.loaders import LineProblem, RolloutLine
from execgym.tasks.models import Task

log = logging.getLogger(__name__)


def make_jobs(
    tasks: Mapping[str, Task],
    items: Iterable[RolloutLine | LineProblem],
    limits: Limits = DEFAULT_LIMITS,
    *,
    batch_id: str | None = None,
) -> tuple[list[JobMessage], list[RolloutLine | LineProblem]]:
    """Turn rollouts into jobs (``job_id`` = ``"<batch_id>/<index>"``).

    Returns:
        The jobs, and the items that cannot be sent (unusable lines, unknown tasks):
        score those locally with :func:`execgym.scoring.core.score_unusable`, which
        makes them ``invalid`` results without running anything.
    """
    batch = batch_id or uuid.uuid4().hex
    now = time.time()
    tasks = {task_id: _anchored(task) for task_id, task in tasks.items()}
    jobs: list[JobMessage] = []
    local: list[RolloutLine | LineProblem] = []
    for item in items:
        task = tasks.get(item.rollout.task_id) if isinstance(item, RolloutLine) else None
        if task is None or isinstance(item, LineProblem):
            local.append(item)
            continue
        jobs.append(
            JobMessage(
                job_id=f"{batch}/{item.index}",
                batch_id=batch,
                index=item.index,
                task=task,
                rollout=item.rollout,
                limits=limits,
                submitted_at=now,
            )
        )
    return jobs, local


def _anchored(task: Task) -> Task:
    """``task`` with a relative ``swe.snapshot`` made absolute against this process's cwd.

    A worker process or Ray actor has its own working directory: the path the client
    reads relative to its own must reach it whole (on one machine, or a shared path).
    """
    swe = task.swe
    if swe is None or "://" in swe.snapshot or Path(swe.snapshot).is_absolute():
        return task
    snapshot = str(Path(swe.snapshot).absolute())
    return task.model_copy(update={"swe": swe.model_copy(update={"snapshot": snapshot})})


def _check_batch(jobs: Sequence[JobMessage]) -> str:
    batches = {job.batch_id for job in jobs}
    if len(batches) > 1:
        raise ValueError(f"jobs of one call must share a batch_id, got {sorted(batches)[:3]}")
    if len({job.job_id for job in jobs}) != len(jobs):
        raise ValueError("two jobs of the batch have the same job_id; job ids must be unique")
    return batches.pop() if batches else ""


async def score_jobs(
    broker: Broker,
    jobs: Sequence[JobMessage],
    *,
    ordered: bool = False,
    submit_timeout_s: float | None = None,
    outage_timeout_s: float = 120.0,
    audit_interval_s: float = 5.0,
    max_resubmits: int = 3,
    no_worker_timeout_s: float | None = 600.0,
    window: int = DEFAULT_WINDOW,
) -> AsyncIterator[ResultMessage]:
    """Submit one batch and yield one result per job.

    At most ``window`` jobs are submitted and unanswered at once (see
    :mod:`execgym.broker.window`): the broker's queue and the results waiting to be
    read stay that small whatever the batch's size. The broker keeps each result for
    ``result_ttl_s`` (the jobs' ids are the caller's: submitting one again gives its
    stored result, not a second run); :func:`score_rollouts` has them dropped as read.

    A batch finishes or fails loudly whatever the broker does: every
    ``audit_interval_s`` the queued, unfinished jobs are checked with the broker
    (``audit``, where it has one); jobs it has lost (a Redis restarted without
    persistence comes back empty) are queued again, and a result whose announcement
    was lost is taken from the store. A job lost more than ``max_resubmits`` times
    raises :class:`~execgym.errors.JobsLost` naming how many were lost.

    Args:
        broker: Where to send the jobs; workers must be consuming it.
        jobs: One batch: the same ``batch_id``, distinct ``job_id`` values.
        ordered: Yield in the order of ``jobs`` instead of as they finish.
        submit_timeout_s: Longest wait for room in a full queue, per chunk.
        outage_timeout_s: How long submitting and reading ride out a broker that
            cannot be reached (a Redis restart) before giving up.
        audit_interval_s: Seconds between checks for lost jobs.
        max_resubmits: Times one job may be lost and queued again (0: fail at the
            first loss).
        no_worker_timeout_s: Give up when no worker has been alive (no heartbeat) for
            this long while jobs wait, checked at each audit; ``None`` waits forever.
        window: Jobs submitted and not yet answered (yielded, when ``ordered``), at
            most (at least 1).

    Raises:
        ValueError: if the jobs are not one batch with unique ids.
        QueueFull: if the queue stayed full past ``submit_timeout_s``.
        BrokerUnavailable: if the broker stayed unreachable past ``outage_timeout_s``.
        JobsLost: if jobs were lost more than ``max_resubmits`` times.
        BrokerError: if no worker was alive for ``no_worker_timeout_s``.
    """
    if not jobs:
        return
    batch_id = _check_batch(jobs)
    flow = Window(
        broker,
        batch_id,
        iter(jobs),
        window,
        ordered,
        submit_timeout_s,
        outage_timeout_s,
        max_resubmits,
        direct=getattr(broker, "score_jobs", None),  # Ray: runs the jobs it is fed
    )
    async for got in run_window(flow, audit_interval_s, no_worker_timeout_s):
        if isinstance(got, ResultMessage):  # jobs only: no Local result
            yield got


async def score_rollouts(
    broker: Broker,
    tasks: Mapping[str, Task],
    items: Iterable[RolloutLine | LineProblem],
    limits: Limits = DEFAULT_LIMITS,
    *,
    skipped_tasks: Mapping[str, str] | None = None,
    ordered: bool = False,
    calibrator: Calibrator | None = None,
    window: int = DEFAULT_WINDOW,
) -> AsyncIterator[ScoredRollout]:
    """Score rollouts through ``broker``: like :meth:`execgym.Scorer.score`, remotely.

    ``items`` are read as results come back: at most ``window`` rollouts are in
    flight (sent and unanswered, or unanswered and not yet yielded when ``ordered``),
    so a batch read from a file is never held whole (see :mod:`execgym.broker.window`),
    on a queue (Redis) or on a broker that runs jobs itself (Ray) alike. The broker
    drops each result once it is read (the batch id is this call's own: unlike
    :func:`score_jobs`' caller's job ids, no one can submit them again), so Redis
    holds the results in flight, not every result for ``result_ttl_s``.
    Unusable items become ``invalid`` results here, without being sent, in their
    place among the others; ``ordered`` yields a stream's results in its order, a
    list's by index. With a ``calibrator`` (its factor and floor), each task's
    reference is judged once through the broker, before the first of its rollouts is
    sent, and its jobs carry the measurement
    (:func:`execgym.broker.calibrate.reference_orders`): the references of the tasks
    a chunk of the window brings in (up to 500 rollouts) are judged together while the
    rollouts already sent run.
    """
    if ordered and isinstance(items, Sequence) and not _by_index(items):
        items = sorted(items, key=lambda item: item.index)  # the caller holds them all
    batch_id = uuid.uuid4().hex
    source = _jobs_of(tasks, items, limits, batch_id, skipped_tasks)
    flow = Window(
        broker,
        batch_id,
        source,
        window,
        ordered,
        None,
        120.0,
        3,
        prepare=None if calibrator is None else _Calibrating(broker, calibrator),
        direct=getattr(broker, "score_jobs", None),  # Ray: runs the jobs it is fed
        drop_read=True,  # the batch id is this call's own: no one asks for them again
    )
    async for result in run_window(flow, 5.0, 600.0):
        yield result.scored if isinstance(result, Local) else result.scored()


def _jobs_of(
    tasks: Mapping[str, Task],
    items: Iterable[RolloutLine | LineProblem],
    limits: Limits,
    batch_id: str,
    skipped_tasks: Mapping[str, str] | None,
) -> Iterator[JobMessage | Local]:
    """Each item's job (``job_id`` = ``"<batch_id>/<index>"``), or its invalid result."""
    anchored: dict[str, Task] = {}
    for item in items:
        known = tasks.get(item.rollout.task_id) if isinstance(item, RolloutLine) else None
        job_id = f"{batch_id}/{item.index}"
        if known is None or isinstance(item, LineProblem):
            scored = score_unusable(item, skipped_tasks=skipped_tasks, isolation="remote")
            yield Local(job_id, scored)
            continue
        task = anchored.get(known.task_id)
        if task is None:
            task = anchored[known.task_id] = _anchored(known)
        yield JobMessage(
            job_id=job_id,
            batch_id=batch_id,
            index=item.index,
            task=task,
            rollout=item.rollout,
            limits=limits,
            submitted_at=time.time(),
        )


def _by_index(items: Sequence[RolloutLine | LineProblem]) -> bool:
    """Whether ``items`` are in the order of their indexes already."""
    return all(items[i].index < items[i + 1].index for i in range(len(items) - 1))


class _Calibrating:
    """Gives each job its task's reference measurement, judged once per task.

    A window's chunk is completed before it is sent: the tasks it brings in that have
    no measurement yet have their references judged through the broker (one small
    batch per chunk); only the measurements (one per task) are kept.
    """

    def __init__(self, broker: Broker, calibrator: Calibrator) -> None:
        self.broker = broker
        self.calibrator = calibrator
        self.orders: dict[str, CalibrationOrder] = {}

    async def __call__(self, items: list[JobMessage | Local]) -> list[JobMessage | Local]:
        new: dict[str, JobMessage] = {}
        for item in items:
            if isinstance(item, JobMessage) and item.task.task_id not in self.orders:
                new.setdefault(item.task.task_id, item)
        if new:
            self.orders.update(
                await reference_orders(self.broker, list(new.values()), self.calibrator)
            )
        return [
            item.model_copy(update={"calibration": self.orders[item.task.task_id]})
            if isinstance(item, JobMessage)
            else item
            for item in items
        ]


@dataclass
class RemoteBatch:
    """A batch scored through a broker, as ``execgym score --broker`` runs it.

    Args:
        broker: The broker (closed when the batch ends).
        tasks: ``{task_id: Task}``.
        items: The rollouts (and unusable lines) in input order; read once, as the
            batch goes (a stream of a file's lines is never held whole).
        limits: Limits for every run.
        skipped_tasks: ``{task_id: why}`` for tasks left out as invalid.
        calibrator: Calibrate the tasks' time limits (``--calibrate-limits``): each
            reference is judged once through the broker (see :func:`score_rollouts`).
    """

    broker: Broker
    tasks: Mapping[str, Task]
    items: Iterable[RolloutLine | LineProblem]
    limits: Limits = DEFAULT_LIMITS
    skipped_tasks: Mapping[str, str] | None = None
    calibrator: Calibrator | None = None

    async def run(
        self,
        on_result: Callable[[ScoredRollout], None],
        *,
        ordered: bool = False,
        collect: bool = True,
    ) -> list[ScoredRollout]:
        """Score every item, calling ``on_result`` as each finishes.

        Args:
            on_result: Called with each result.
            ordered: Call ``on_result`` in input order (see :func:`score_rollouts`).
            collect: Keep every result and return them; ``False`` keeps none.

        Returns:
            All results, in input order (``[]`` when not ``collect``).

        Raises:
            BrokerUnavailable: if the broker cannot be reached (checked first).
        """
        try:
            await self._check()
            results = []
            async for scored in score_rollouts(
                self.broker,
                self.tasks,
                self.items,
                self.limits,
                skipped_tasks=self.skipped_tasks,
                ordered=ordered,
                calibrator=self.calibrator,
            ):
                on_result(scored)
                if collect:
                    results.append(scored)
            return sorted(results, key=lambda r: r.index)
        finally:
            await self.broker.aclose()

    async def _check(self) -> None:
        ping = getattr(self.broker, "ping", None)
        if ping is not None:
            await ping()
        live_workers = getattr(self.broker, "live_workers", None)
        if live_workers is not None and not await live_workers():
            log.warning(
                "no worker is consuming this broker yet; results come once one starts "
                "(execgym worker --broker URL)"
            )

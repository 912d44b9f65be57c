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

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execgym.broker._cancel import cancel_and_wait
from execgym.broker.base import Broker
from execgym.broker.calibrate import measure_references
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.calibration import Calibrator
from execgym.errors import BrokerError, BrokerUnavailable, JobsLost
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.scoring.core import score_unusable
from execgym.scoring.results import ScoredRollout
from execgym.tasks.loaders import LineProblem, RolloutLine
from execgym.tasks.models import Task

log = logging.getLogger(__name__)

SUBMIT_CHUNK = 500
"""Jobs per submit call; after a lost connection, only the current chunk is re-sent."""


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


async def _submit_all(
    broker: Broker,
    jobs: Sequence[JobMessage],
    timeout_s: float | None,
    outage_timeout_s: float,
    progress: list[int] | None = None,
) -> None:
    """Submit ``jobs`` chunk by chunk, riding out outages.

    ``progress[0]`` counts the jobs whose chunk the broker has accepted.
    """
    for start in range(0, len(jobs), SUBMIT_CHUNK):
        chunk = jobs[start : start + SUBMIT_CHUNK]
        delay_s = 0.05
        failing_since = None
        while True:
            try:
                await broker.submit(chunk, wait=True, timeout_s=timeout_s)
                break
            except BrokerUnavailable as error:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > outage_timeout_s:
                    raise
                log.warning("submit: %s; retrying in %.2f s", error, delay_s)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)
        if progress is not None:
            progress[0] = start + len(chunk)


@dataclass
class _Watch:
    """The caller's side of one batch: what is queued, what is done, what was lost."""

    broker: Broker
    jobs: Sequence[JobMessage]
    batch_id: str
    incoming: asyncio.Queue[ResultMessage]
    submit_timeout_s: float | None
    outage_timeout_s: float
    max_resubmits: int
    submitted: list[int] = field(default_factory=lambda: [0])
    done: set[str] = field(default_factory=set)
    losses: dict[str, int] = field(default_factory=dict)

    async def read(self) -> None:
        """Pass the broker's announced results on."""
        async for result in self.broker.results(self.batch_id, len(self.jobs)):
            await self.incoming.put(result)

    async def audit(self, interval_s: float, no_worker_timeout_s: float | None) -> None:
        """Find lost jobs every ``interval_s`` and queue them again.

        Asks the broker about the queued, unfinished jobs; raises :class:`JobsLost`
        for a job lost more than ``max_resubmits`` times, and :class:`BrokerError`
        when no worker has been alive for ``no_worker_timeout_s``.
        """
        audit = getattr(self.broker, "audit", None)
        if audit is None:
            return  # a broker that cannot lose jobs (in-process)
        by_id = {job.job_id: job for job in self.jobs}
        no_worker_since: float | None = None
        while True:
            await asyncio.sleep(interval_s)
            queued = self.jobs[: self.submitted[0]]
            waiting = [job.job_id for job in queued if job.job_id not in self.done]
            if not waiting:
                continue
            if no_worker_timeout_s is not None:
                no_worker_since = await self._check_workers(
                    no_worker_since, no_worker_timeout_s, len(waiting)
                )
            try:
                report = await audit(self.batch_id, waiting)
            except BrokerUnavailable:
                continue  # the results reader rides out (or reports) the outage
            for result in report.finished:
                await self.incoming.put(result)
            lost = [job_id for job_id in report.lost if job_id not in self.done]
            if lost:
                await self._resubmit([by_id[job_id] for job_id in lost])

    async def _check_workers(
        self, since: float | None, timeout_s: float, waiting: int
    ) -> float | None:
        """Since when no worker is alive (``None``: one is).

        Raises:
            BrokerError: once none has been alive for ``timeout_s``.
        """
        live_workers = getattr(self.broker, "live_workers", None)
        if live_workers is None:
            return None
        try:
            alive = bool(await live_workers())
        except BrokerUnavailable:
            return since  # an outage is the results reader's to report
        if alive:
            return None
        now = time.monotonic()
        if since is not None and now - since >= timeout_s:
            raise BrokerError(
                f"no worker has been consuming the broker for {now - since:.0f} s while "
                f"{waiting} of {len(self.jobs)} jobs of batch {self.batch_id} wait: start "
                "one (execgym worker --broker URL), or raise no_worker_timeout_s"
            )
        return since if since is not None else now

    async def _resubmit(self, lost: list[JobMessage]) -> None:
        total = len(self.jobs)
        again = [job for job in lost if self.losses.get(job.job_id, 0) < self.max_resubmits]
        what = (
            f"the broker ({getattr(self.broker, 'name', 'broker')}) lost {len(lost)} of "
            f"{total} jobs of batch {self.batch_id}: they are neither queued, running nor "
            "done (a Redis restarted without persistence, flushed, or failed over to an "
            "empty replica forgets its jobs)"
        )
        if len(again) < len(lost):
            raise JobsLost(
                f"{what}, and {len(lost) - len(again)} of them had been lost and queued "
                f"again {self.max_resubmits} time(s) already; giving up. Turn on Redis "
                "persistence (appendonly yes) or make the broker stable, then score again",
                batch_id=self.batch_id,
                lost=len(lost),
                total=total,
            )
        log.warning("%s; queueing them again", what)
        for job in again:
            self.losses[job.job_id] = self.losses.get(job.job_id, 0) + 1
        await _submit_all(self.broker, again, self.submit_timeout_s, self.outage_timeout_s)


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
) -> AsyncIterator[ResultMessage]:
    """Submit one batch and yield one result per job.

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
    direct = getattr(broker, "score_jobs", None)
    if direct is not None:  # a broker that runs jobs itself (Ray): no queue to watch
        async for result in _in_order(direct(jobs), jobs, ordered):
            yield result
        return
    order = {job.job_id: position for position, job in enumerate(jobs)}
    watch = _Watch(
        broker, jobs, batch_id, asyncio.Queue(), submit_timeout_s, outage_timeout_s, max_resubmits
    )
    helpers = [
        asyncio.create_task(
            _submit_all(broker, jobs, submit_timeout_s, outage_timeout_s, watch.submitted)
        ),
        asyncio.create_task(watch.read()),
        asyncio.create_task(watch.audit(audit_interval_s, no_worker_timeout_s)),
    ]
    pending: dict[int, ResultMessage] = {}
    position = 0
    getter: asyncio.Future[ResultMessage] | None = None
    try:
        while len(watch.done) < len(jobs):
            if getter is None or getter.done():
                getter = asyncio.ensure_future(watch.incoming.get())
            running = {task for task in helpers if not task.done()}
            waiting: set[asyncio.Future[Any]] = {getter, *running}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in helpers:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            if not getter.done():
                continue
            result = getter.result()
            if result.job_id in watch.done or result.job_id not in order:
                continue
            watch.done.add(result.job_id)
            if not ordered:
                yield result
                continue
            pending[order[result.job_id]] = result
            while position in pending:
                yield pending.pop(position)
                position += 1
    finally:
        await cancel_and_wait([*helpers, *([getter] if getter is not None else [])])


async def _in_order(
    results: AsyncIterator[ResultMessage], jobs: Sequence[JobMessage], ordered: bool
) -> AsyncIterator[ResultMessage]:
    """``results`` as they come, or in the order of ``jobs`` when ``ordered``."""
    order = {job.job_id: position for position, job in enumerate(jobs)}
    pending: dict[int, ResultMessage] = {}
    position = 0
    async for result in results:
        if not ordered:
            yield result
            continue
        pending[order[result.job_id]] = result
        while position in pending:
            yield pending.pop(position)
            position += 1


async def score_rollouts(
    broker: Broker,
    tasks: Mapping[str, Task],
    items: Iterable[RolloutLine | LineProblem],
    limits: Limits = DEFAULT_LIMITS,
    *,
    skipped_tasks: Mapping[str, str] | None = None,
    ordered: bool = False,
    calibrator: Calibrator | None = None,
) -> AsyncIterator[ScoredRollout]:
    """Score rollouts through ``broker``: like :meth:`execgym.Scorer.score`, remotely.

    Unusable items become ``invalid`` results here, without being sent, and come
    first (or in their place, when ``ordered``). With a ``calibrator`` (its factor and
    floor), each task's reference is judged once through the broker first and its
    jobs carry the measurement (:func:`execgym.broker.calibrate.measure_references`).
    """
    jobs, local = make_jobs(tasks, items, limits)
    if calibrator is not None:
        jobs = await measure_references(broker, jobs, calibrator)
    invalid = sorted(
        [score_unusable(item, skipped_tasks=skipped_tasks, isolation="remote") for item in local],
        key=lambda r: r.index,
    )
    if not ordered:
        for scored in invalid:
            yield scored
        async for result in score_jobs(broker, jobs):
            yield result.scored()
        return
    waiting = {scored.index: scored for scored in invalid}
    indexes = sorted([*waiting, *(job.index for job in jobs)])
    position = 0
    async for result in score_jobs(broker, jobs):
        scored = result.scored()
        waiting[scored.index] = scored
        while position < len(indexes) and indexes[position] in waiting:
            yield waiting.pop(indexes[position])
            position += 1
    for index in indexes[position:]:
        yield waiting.pop(index)


@dataclass
class RemoteBatch:
    """A batch scored through a broker, as ``execgym score --broker`` runs it.

    Args:
        broker: The broker (closed when the batch ends).
        tasks: ``{task_id: Task}``.
        items: The rollouts (and unusable lines) in input order.
        limits: Limits for every run.
        skipped_tasks: ``{task_id: why}`` for tasks left out as invalid.
        calibrator: Calibrate the tasks' time limits (``--calibrate-limits``): each
            reference is judged once through the broker (see :func:`score_rollouts`).
    """

    broker: Broker
    tasks: Mapping[str, Task]
    items: Sequence[RolloutLine | LineProblem]
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

"""The trainer's side: submit a batch, get its results as they finish or in order.

>>> jobs, local = make_jobs(tasks, rollouts, Limits(wall_time_s=5))     # doctest: +SKIP
>>> async for result in score_jobs(broker, jobs):                       # doctest: +SKIP
...     print(result.job_id, result.result["reward"])

Submitting runs alongside reading, so a batch larger than the queue's bound flows
through it (back-pressure: the submitter waits for room), and a Redis restart in the
middle is ridden out on both sides (the submitter re-sends the chunk it was sending;
a job sent twice still has one result).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from execgym.broker.base import Broker
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.errors import BrokerUnavailable
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.scoring import ScoredRollout, Scorer
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
        score those locally with :meth:`execgym.Scorer.score_one`, which makes them
        ``invalid`` results without running anything.
    """
    batch = batch_id or uuid.uuid4().hex
    now = time.time()
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


def _check_batch(jobs: Sequence[JobMessage]) -> str:
    batches = {job.batch_id for job in jobs}
    if len(batches) > 1:
        raise ValueError(f"jobs of one call must share a batch_id, got {sorted(batches)[:3]}")
    if len({job.job_id for job in jobs}) != len(jobs):
        raise ValueError("two jobs of the batch have the same job_id; job ids must be unique")
    return batches.pop() if batches else ""


async def _submit_all(
    broker: Broker, jobs: Sequence[JobMessage], timeout_s: float | None, outage_timeout_s: float
) -> None:
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


async def score_jobs(
    broker: Broker,
    jobs: Sequence[JobMessage],
    *,
    ordered: bool = False,
    submit_timeout_s: float | None = None,
    outage_timeout_s: float = 120.0,
) -> AsyncIterator[ResultMessage]:
    """Submit one batch and yield one result per job.

    Args:
        broker: Where to send the jobs; workers must be consuming it.
        jobs: One batch: the same ``batch_id``, distinct ``job_id`` values.
        ordered: Yield in the order of ``jobs`` instead of as they finish.
        submit_timeout_s: Longest wait for room in a full queue, per chunk.
        outage_timeout_s: How long submitting rides out a broker that cannot be
            reached (a Redis restart) before giving up.

    Raises:
        ValueError: if the jobs are not one batch with unique ids.
        QueueFull: if the queue stayed full past ``submit_timeout_s``.
        BrokerUnavailable: if the broker stayed unreachable past ``outage_timeout_s``.
    """
    if not jobs:
        return
    batch_id = _check_batch(jobs)
    order = {job.job_id: position for position, job in enumerate(jobs)}
    submitter = asyncio.create_task(_submit_all(broker, jobs, submit_timeout_s, outage_timeout_s))
    results = broker.results(batch_id, len(jobs))
    pending: dict[int, ResultMessage] = {}
    position = 0
    reader: asyncio.Future[ResultMessage] | None = None
    try:
        while True:
            reader = asyncio.ensure_future(anext(results))
            await asyncio.wait({reader, submitter}, return_when=asyncio.FIRST_COMPLETED)
            if submitter.done() and submitter.exception() is not None:
                reader.cancel()
                raise submitter.exception()  # type: ignore[misc]
            try:
                result = await reader
            except StopAsyncIteration:
                break
            if not ordered:
                yield result
                continue
            pending[order[result.job_id]] = result
            while position in pending:
                yield pending.pop(position)
                position += 1
    finally:
        for task in (submitter, reader):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(RuntimeError):  # already closed by a cancelled read
            await results.aclose()  # type: ignore[attr-defined]


class _NothingRuns:
    """The sandbox handed to the scorer for items that cannot be sent: never called."""

    name = "remote"

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an item scored locally must not run")

    run_python = run


async def score_rollouts(
    broker: Broker,
    tasks: Mapping[str, Task],
    items: Iterable[RolloutLine | LineProblem],
    limits: Limits = DEFAULT_LIMITS,
    *,
    skipped_tasks: Mapping[str, str] | None = None,
    ordered: bool = False,
) -> AsyncIterator[ScoredRollout]:
    """Score rollouts through ``broker``: like :meth:`execgym.Scorer.score`, remotely.

    Unusable items become ``invalid`` results here, without being sent, and come
    first (or in their place, when ``ordered``).
    """
    jobs, local = make_jobs(tasks, items, limits)
    scorer = Scorer(dict(tasks), _NothingRuns(), limits, skipped_tasks=skipped_tasks)  # type: ignore[arg-type]
    invalid = sorted([await scorer.score_one(item) for item in local], key=lambda r: r.index)
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
    """

    broker: Broker
    tasks: Mapping[str, Task]
    items: Sequence[RolloutLine | LineProblem]
    limits: Limits = DEFAULT_LIMITS
    skipped_tasks: Mapping[str, str] | None = None

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

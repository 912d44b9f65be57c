"""The caller's side of one batch on a queue: a bounded window of jobs in flight.

A batch's jobs are taken from their source (a list, or a generator reading a file)
only as results come back: at most ``window`` jobs are submitted and not yet
answered (in input order: submitted and not yet yielded), so the caller holds that
many jobs whatever the batch's size, and a million-rollout batch needs no more
memory than a thousand-rollout one. Each job is kept until its result arrives, so a
job the broker loses (a Redis restarted empty) is still queued again; results announced
twice are yielded once (a job's id leaves the window with its first result).

A broker that runs jobs itself (Ray: ``score_jobs(jobs)`` instead of a queue) is fed
the same way: the window hands it jobs through a queue it reads as its actors free up.
A ``prepare`` hook may complete each chunk of jobs before it is admitted (the broker
client's ``--calibrate-limits`` measures the chunk's new tasks' references there).

:func:`execgym.broker.client.score_jobs` and
:func:`~execgym.broker.client.score_rollouts` run their batches through
:func:`run_window`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from execgym.broker._cancel import cancel_and_wait
from execgym.broker.base import Broker
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.errors import BrokerError, BrokerUnavailable, JobsLost
from execgym.scoring.results import ScoredRollout

log = logging.getLogger("execgym.broker.client")  # its lines have always had this name

SUBMIT_CHUNK = 500
"""Jobs per submit call; after a lost connection, only the current chunk is re-sent."""

FORGET_CHUNK = 200
"""Results read before the broker is told to drop them, at most (one call per chunk; a
quarter of the window when that is smaller)."""

DEFAULT_WINDOW = 2000
"""Jobs of one batch submitted and not yet answered, at most (a few KiB each held)."""

Prepare = Callable[[list["JobMessage | Local"]], Awaitable[list["JobMessage | Local"]]]
"""A chunk of a window's source, completed before it is admitted (same length, order)."""

Direct = Callable[[AsyncIterator[JobMessage]], AsyncIterator[ResultMessage]]
"""A broker's own ``score_jobs``: scores the jobs it reads, yields a result per job."""


@dataclass(frozen=True, slots=True)
class Local:
    """A result made by the caller without the broker (an unusable rollout line).

    It takes its place in the batch's order like a job's result, never goes to the
    broker, and is yielded as it is.
    """

    job_id: str
    scored: ScoredRollout


@dataclass(slots=True)
class _Entry:
    position: int
    job: JobMessage | None  # None: a Local result
    sent: bool = False  # the broker accepted its chunk: the audit may ask about it


async def submit_all(
    broker: Broker,
    jobs: Sequence[JobMessage],
    timeout_s: float | None,
    outage_timeout_s: float,
) -> None:
    """Submit ``jobs`` chunk by chunk, riding out outages up to ``outage_timeout_s``.

    Raises:
        QueueFull: if the queue stayed full past ``timeout_s``.
        BrokerUnavailable: if the broker stayed unreachable past ``outage_timeout_s``.
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


@dataclass
class Window:
    """One batch in flight: what is submitted and unanswered, what was lost.

    Args:
        broker: A queue broker (Redis, in-memory): one with ``submit`` and ``results``.
        batch_id: Every job's ``batch_id``.
        source: The jobs (and :class:`Local` results) in input order, read lazily.
        window: Most jobs submitted and not yet answered (yielded, when ``ordered``).
        ordered: Yield in the order of ``source``.
        submit_timeout_s, outage_timeout_s, max_resubmits: As for ``score_jobs``.
        prepare: Completes each chunk taken from ``source`` before it is admitted.
        direct: The broker's own ``score_jobs`` (Ray), fed through a queue instead of
            ``submit``; its results are read instead of ``results``.
        drop_read: Have the broker drop each result once it is read
            (``forget_results``): nobody will ask for it again (the job ids are this
            window's own), so it need not wait out ``result_ttl_s``.
    """

    broker: Broker
    batch_id: str
    source: Iterator[JobMessage | Local]
    window: int
    ordered: bool
    submit_timeout_s: float | None
    outage_timeout_s: float
    max_resubmits: int
    incoming: asyncio.Queue[ResultMessage | Local] = field(default_factory=asyncio.Queue)
    outstanding: dict[str, _Entry] = field(default_factory=dict)
    losses: dict[str, int] = field(default_factory=dict)
    exhausted: bool = False
    submitted: int = 0
    next_position: int = 0
    room: asyncio.Event = field(default_factory=asyncio.Event)
    held: dict[int, ResultMessage | Local] = field(default_factory=dict)
    prepare: Prepare | None = None
    direct: Direct | None = None
    drop_read: bool = False
    handed: asyncio.Queue[JobMessage | None] = field(default_factory=asyncio.Queue)

    def _free(self) -> int:
        """Places left in the window (in order: submitted minus yielded)."""
        held = self.submitted - self.next_position if self.ordered else len(self.outstanding)
        return self.window - held

    async def feed(self) -> None:
        """Take jobs from the source as the window frees, and submit them.

        The window is refilled a quarter (at most :data:`SUBMIT_CHUNK` jobs) at a time,
        so a batch costs one submit call per few hundred results, not one per result.

        Raises:
            ValueError: a job of another batch, or a job id already in flight.
        """
        refill = max(1, min(SUBMIT_CHUNK, self.window // 4))  # jobs per submit, not 1
        while True:
            while self._free() < refill:
                self.room.clear()
                await self.room.wait()
            items = list(islice(self.source, min(self._free(), SUBMIT_CHUNK)))
            if not items:
                self.exhausted = True
                self.handed.put_nowait(None)
                return
            if self.prepare is not None:
                items = await self.prepare(items)
            chunk: list[JobMessage] = []
            for item in items:
                self._admit(item, chunk)
            del items
            if chunk and self.direct is not None:
                for job in chunk:
                    self.handed.put_nowait(job)
            elif chunk:
                await submit_all(self.broker, chunk, self.submit_timeout_s, self.outage_timeout_s)
                for job in chunk:
                    entry = self.outstanding.get(job.job_id)
                    if entry is not None:
                        entry.sent = True

    def _admit(self, item: JobMessage | Local, chunk: list[JobMessage]) -> None:
        if item.job_id in self.outstanding:
            raise ValueError(
                f"two jobs of the batch have the same job_id {item.job_id!r}; "
                "job ids must be unique"
            )
        position = self.submitted
        self.submitted += 1
        if isinstance(item, Local):
            self.outstanding[item.job_id] = _Entry(position, None)
            self.incoming.put_nowait(item)
            return
        if item.batch_id != self.batch_id:
            raise ValueError(
                f"jobs of one call must share a batch_id, got {self.batch_id!r} and "
                f"{item.batch_id!r}"
            )
        self.outstanding[item.job_id] = _Entry(position, item)
        chunk.append(item)

    async def read(self) -> None:
        """Pass the broker's announced results on (duplicates included)."""
        results = (
            self.direct(self._handed())
            if self.direct is not None
            else self.broker.results(self.batch_id, None)
        )
        async for result in results:
            await self.incoming.put(result)

    async def _handed(self) -> AsyncIterator[JobMessage]:
        """The jobs :meth:`feed` admitted, for a broker that runs them itself."""
        while (job := await self.handed.get()) is not None:
            yield job

    async def audit(self, interval_s: float, no_worker_timeout_s: float | None) -> None:
        """Find lost jobs every ``interval_s`` and queue them again.

        Raises:
            JobsLost: a job was lost more than ``max_resubmits`` times.
            BrokerError: no worker has been alive for ``no_worker_timeout_s``.
        """
        audit = getattr(self.broker, "audit", None)
        if audit is None:
            return  # a broker that cannot lose jobs (in-process)
        no_worker_since: float | None = None
        while True:
            await asyncio.sleep(interval_s)
            waiting = [job_id for job_id, entry in self.outstanding.items() if entry.sent]
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
            lost = [
                entry.job
                for job_id in report.lost
                if (entry := self.outstanding.get(job_id)) is not None and entry.job is not None
            ]
            if lost:
                await self._resubmit(lost)

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
                f"{waiting} of {self.submitted} jobs of batch {self.batch_id} (submitted so "
                "far) wait: start one "
                "(execgym worker --broker URL), or raise no_worker_timeout_s"
            )
        return since if since is not None else now

    async def _resubmit(self, lost: list[JobMessage]) -> None:
        again = [job for job in lost if self.losses.get(job.job_id, 0) < self.max_resubmits]
        what = (
            f"the broker ({getattr(self.broker, 'name', 'broker')}) lost {len(lost)} of "
            f"{self.submitted} jobs of batch {self.batch_id} (submitted so far): they are "
            "neither queued, running nor done (a Redis restarted without persistence, "
            "flushed, or failed over to an empty replica forgets its jobs)"
        )
        if len(again) < len(lost):
            raise JobsLost(
                f"{what}, and {len(lost) - len(again)} of them had been lost and queued "
                f"again {self.max_resubmits} time(s) already; giving up. Turn on Redis "
                "persistence (appendonly yes) or make the broker stable, then score again",
                batch_id=self.batch_id,
                lost=len(lost),
                total=self.submitted,
            )
        log.warning("%s; queueing them again", what)
        for job in again:
            self.losses[job.job_id] = self.losses.get(job.job_id, 0) + 1
        await submit_all(self.broker, again, self.submit_timeout_s, self.outage_timeout_s)

    def settle(self, got: ResultMessage | Local) -> list[ResultMessage | Local]:
        """What to yield now that ``got`` arrived (nothing for a duplicate)."""
        entry = self.outstanding.pop(got.job_id, None)
        if entry is None:
            return []  # announced twice, or not this batch's
        self.losses.pop(got.job_id, None)
        self.room.set()
        if not self.ordered:
            return [got]
        self.held[entry.position] = got
        ready = []
        while self.next_position in self.held:
            ready.append(self.held.pop(self.next_position))
            self.next_position += 1
        return ready

    @property
    def finished(self) -> bool:
        """Every job of the source submitted and answered."""
        return self.exhausted and not self.outstanding


async def run_window(
    window: Window, audit_interval_s: float, no_worker_timeout_s: float | None
) -> AsyncIterator[ResultMessage | Local]:
    """Run ``window``'s batch to its end: yield each job's first result (or Local).

    On success, the broker forgets the batch's announcements (``forget_batch``). With
    ``drop_read``, as results are taken, the broker drops them (``forget_results``,
    where it has it),
    a few at a time (:data:`FORGET_CHUNK`): they were kept for ``result_ttl_s`` only
    for this reader, so it holds at most the window's and a chunk's.

    Raises:
        What submitting, reading or auditing raised (see :class:`Window`).
    """
    helpers = [
        asyncio.create_task(window.feed()),
        asyncio.create_task(window.read()),
        asyncio.create_task(window.audit(audit_interval_s, no_worker_timeout_s)),
    ]
    getter: asyncio.Future[ResultMessage | Local] | None = None
    drop = getattr(window.broker, "forget_results", None) if window.drop_read else None
    read: list[str] = []  # results taken, for the broker to drop
    chunk = max(1, min(FORGET_CHUNK, window.window // 4))
    try:
        while not window.finished:
            if getter is None or getter.done():
                getter = asyncio.ensure_future(window.incoming.get())
            running = {task for task in helpers if not task.done()}
            waiting: set[asyncio.Future[Any]] = {getter, *running}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in helpers:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            if getter.done():
                got = getter.result()
                first = got.job_id in window.outstanding
                if drop is not None and isinstance(got, ResultMessage) and first:
                    read.append(got.job_id)  # its first result: the caller has it now
                for result in window.settle(got):
                    yield result
                full = len(read) >= chunk or window.incoming.empty()
                if drop is not None and read and full:  # after the yields: no read-ahead
                    await drop(window.batch_id, read)
                    read = []
        if drop is not None and read:
            await drop(window.batch_id, read)
    finally:
        await cancel_and_wait([*helpers, *([getter] if getter is not None else [])])
    forget = getattr(window.broker, "forget_batch", None)
    if forget is not None:
        with contextlib.suppress(BrokerError):
            await forget(window.batch_id)

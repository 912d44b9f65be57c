"""Scoring jobs behind ``POST /v1/score`` and ``GET /v1/jobs/{id}``.

:class:`JobRunner` is the whole contract the HTTP layer uses. :class:`EmbeddedJobRunner`
scores in this process's event loop with the shared sandbox (the code itself still
runs only in sandboxes); :class:`BrokerJobRunner` (``execgym serve --broker``) sends the
rollouts through Redis or Ray to the workers and keeps only the jobs' state here.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from execgym.errors import Error
from execgym.limits import Limits
from execgym.ops.breakers import Breakers, dataset_of
from execgym.ops.logs import log_context
from execgym.ops.metrics import Metrics, timed
from execgym.sandbox.base import Sandbox
from execgym.scoring.batch import score_batch
from execgym.scoring.core import Scoring
from execgym.scoring.results import TAIL_BYTES, ScoredRollout
from execgym.server.capacity import Capacity
from execgym.tasks.loaders import LineProblem, RolloutLine
from execgym.tasks.models import Task

log = logging.getLogger(__name__)

JobState = Literal["queued", "running", "done", "failed"]

MAX_FINISHED_JOBS = 1000
"""Finished jobs kept at most (the oldest go first, even before their TTL)."""

MAX_RETAINED_RESULTS = 100_000
"""Results of finished jobs kept at most, over all jobs (a few KiB each)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch to score: what ``POST /v1/score`` accepted.

    Attributes:
        tasks: ``{task_id: Task}``.
        items: Rollouts in order, with unusable ones as :class:`LineProblem` (scored
            ``invalid``, never dropped).
        limits: Limits for every run (tasks may override).
        skipped_tasks: ``{task_id: why}`` for tasks of the request that were invalid.
    """

    tasks: Mapping[str, Task]
    items: Sequence[RolloutLine | LineProblem]
    limits: Limits
    skipped_tasks: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeldResult:
    """A finished rollout's result as its job keeps it: the results line, encoded once.

    A typical line is about 1.2 KB where the :class:`ScoredRollout` it was made from
    holds about 3.3 KB of objects (issue 23: a job's results are kept until its TTL);
    ``GET /v1/jobs/{id}`` splices the lines into its answer without decoding them.

    Attributes:
        index: The rollout's index in its batch.
        verdict: Its verdict's value (``passed``...).
        line: :meth:`ScoredRollout.to_json`, every string UTF-8-safe, as compact JSON
            in UTF-8.
    """

    index: int
    verdict: str
    line: bytes

    @classmethod
    def of(cls, result: ScoredRollout) -> HeldResult:
        """``result``'s line.

        Raises:
            ValueError: if a number in it is not finite (a result never has one).
        """
        from execgym.server.responses import utf8_safe  # responses imports this module

        data = utf8_safe(result.to_json())
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return cls(result.index, result.verdict.value, text.encode("utf-8"))

    def to_json(self) -> dict[str, Any]:
        """The results line as a JSON object."""
        data: dict[str, Any] = json.loads(self.line)
        return data


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as callers see it.

    Attributes:
        job_id: The id ``submit`` (or ``stream``) returned.
        state: ``queued``, ``running``, ``done`` or ``failed`` (our failure, not the
            code's: ``message`` says why).
        total: Rollouts in the batch.
        results: Results finished so far, in input order once ``done`` (none for a
            streamed job: they went to its stream).
        message: Why a job failed.
        counts: Results so far per verdict, when not counted from ``results`` (a
            streamed job's).
        streamed: The job's results go to the stream of the request that made it
            (``"stream": true``) and are not kept.
    """

    job_id: str
    state: JobState
    total: int
    results: Sequence[HeldResult]
    message: str = ""
    counts: Mapping[str, int] | None = None
    streamed: bool = False


class JobRunner(Protocol):
    """Accepts batches and reports on them.

    This is what a broker must provide to replace :class:`EmbeddedJobRunner`.
    """

    capacity: Capacity
    """In-flight items: the runner reserves a batch's rollouts on ``submit`` and
    releases each as its result is stored; ``/run_code`` and ``/v1/run`` share it."""

    async def submit(self, batch: Batch) -> str:
        """Accept ``batch`` and return its job id at once.

        Raises:
            CapacityExceeded: if the batch does not fit in the in-flight capacity.
        """
        ...

    async def get(self, job_id: str) -> JobView | None:
        """The job's state and results so far, or ``None`` if unknown or expired."""
        ...

    async def wait(self, job_id: str) -> JobView | None:
        """Wait until the job is ``done`` or ``failed`` and return it."""
        ...

    async def stream(self, batch: Batch, *, ordered: bool = True) -> ResultStream:
        """Accept ``batch`` and return a :class:`ResultStream` of its results.

        Raises:
            CapacityExceeded: if the batch does not fit in the in-flight capacity.
        """
        ...

    async def aclose(self) -> None:
        """Stop: cancel running jobs (their sandboxes are reclaimed)."""
        ...


@dataclass
class _Job:
    view: JobView
    finished_at: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    results: list[HeldResult] = field(default_factory=list)
    # A streamed job hands each result to its stream instead (None: the job ended).
    queue: asyncio.Queue[HeldResult | None] | None = None
    counts: Counter[str] = field(default_factory=Counter)


class ResultStream:
    """A streamed job (``POST /v1/score`` with ``stream: true``): its results as they finish.

    Iterate it for each result once (:class:`HeldResult`), in input order or, with
    ``ordered=False``, in completion order; then :meth:`summary`. The job keeps no
    result: one is held here only until it is taken, or, in input order, until every
    earlier one was. Closing the stream before the end (the client left) cancels the
    job: its remaining rollouts are not scored and its sandboxes are reclaimed.

    Attributes:
        job_id: The job's id: ``GET /v1/jobs/{id}`` gives its state and counts (its
            results are only in the stream).
    """

    def __init__(
        self,
        job: _Job,
        queue: asyncio.Queue[HeldResult | None],
        task: asyncio.Task[None],
        *,
        ordered: bool,
    ) -> None:
        self.job_id = job.view.job_id
        self._job = job
        self._queue = queue
        self._task = task
        self._ordered = ordered

    async def __aiter__(self) -> AsyncIterator[HeldResult]:
        """Each result once, as soon as it may be sent."""
        waiting: dict[int, HeldResult] = {}  # input order: results before their turn
        turn = 0
        while (held := await self._queue.get()) is not None:
            if not self._ordered:
                yield held
                continue
            waiting[held.index] = held
            del held
            while turn in waiting:
                yield waiting.pop(turn)
                turn += 1
        for index in sorted(waiting):  # indices with gaps (never from Service.batch)
            yield waiting.pop(index)

    def summary(self) -> dict[str, Any]:
        """The job at its end: job_id, state, total, finished, counts, message."""
        view = self._job.view
        return {
            "job_id": view.job_id,
            "state": view.state,
            "total": view.total,
            "finished": sum(self._job.counts.values()),
            "counts": dict(self._job.counts),
            "message": view.message,
        }

    async def aclose(self) -> None:
        """Cancel the job if it is still running and wait until it has stopped.

        Results not taken (the client left) are dropped: the job itself is kept, for
        ``GET /v1/jobs/{id}``, with its counts only.
        """
        if not self._task.done():
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        while not self._queue.empty():
            self._queue.get_nowait()


def _drained(items: Sequence[RolloutLine | LineProblem]) -> Iterator[RolloutLine | LineProblem]:
    """``items`` in order, each dropped from a list once taken.

    A streamed batch's rollouts are then not all held until its job ends.
    """
    if not isinstance(items, list):
        yield from items
        return
    for index in range(len(items)):
        item = items[index]
        items[index] = None
        yield item
        del item


class _Jobs(abc.ABC):
    """What every job runner shares: jobs by id, their capacity, results, expiry.

    A subclass scores a batch in :meth:`_run`, calling ``on_result`` for each result.
    """

    def __init__(
        self,
        capacity: Capacity,
        *,
        ttl_s: float,
        on_result: Callable[[ScoredRollout], None] | None,
        clock: Callable[[], float],
        metrics: Metrics | None,
        type_of: Callable[[Task], str],
    ) -> None:
        self._on_result = on_result
        self._metrics = metrics
        self._type_of = type_of
        self.capacity = capacity
        self._ttl_s = ttl_s
        self._clock = clock
        self._jobs: dict[str, _Job] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, batch: Batch) -> str:
        """Accept ``batch``; see :meth:`JobRunner.submit`."""
        job, _ = self._start(batch, None)
        self._jobs[job.view.job_id] = job
        return job.view.job_id

    async def stream(self, batch: Batch, *, ordered: bool = True) -> ResultStream:
        """Accept ``batch`` and stream its results; see :class:`ResultStream`.

        The batch's ``items`` list is emptied as its rollouts are taken.

        Raises:
            CapacityExceeded: if the batch does not fit in the in-flight capacity.
        """
        queue: asyncio.Queue[HeldResult | None] = asyncio.Queue()
        job, task = self._start(batch, queue)
        self._jobs[job.view.job_id] = job  # its state and counts, not its results
        return ResultStream(job, queue, task, ordered=ordered)

    def _start(
        self, batch: Batch, queue: asyncio.Queue[HeldResult | None] | None
    ) -> tuple[_Job, asyncio.Task[None]]:
        self._expire()
        self.capacity.reserve(len(batch.items))
        job_id = uuid.uuid4().hex
        job = _Job(JobView(job_id, "queued", len(batch.items), ()), queue=queue)
        self._count_submitted(batch)
        log.info("job_submitted", extra={"job_id": job_id, "rollouts": len(batch.items)})
        task = asyncio.create_task(self._score(job, batch), name=f"execgym-job-{job_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job, task

    def _count_submitted(self, batch: Batch) -> None:
        if self._metrics is None:
            return
        for item in batch.items:
            task = batch.tasks.get(item.rollout.task_id) if isinstance(item, RolloutLine) else None
            self._metrics.jobs_submitted.labels(self._type_of(task) if task else "unknown").inc()

    @abc.abstractmethod
    async def _run(
        self,
        batch: Batch,
        items: Iterable[RolloutLine | LineProblem],
        on_result: Callable[[ScoredRollout], None],
    ) -> None:
        raise NotImplementedError

    async def _score(self, job: _Job, batch: Batch) -> None:
        items: Iterable[RolloutLine | LineProblem] = batch.items
        if job.queue is not None:
            items = _drained(batch.items)
        if self._metrics is not None:
            items = timed(items, self._clock(), self._metrics, self._clock)
        job.view = JobView(job.view.job_id, "running", job.view.total, ())
        pending = len(batch.items)

        def on_result(result: ScoredRollout) -> None:
            nonlocal pending
            pending -= 1
            run = result.judgement.run if result.judgement else None
            self.capacity.release(1, item_s=run.wall_time_s if run else None)
            held = HeldResult.of(result)  # the result itself is dropped
            job.counts[held.verdict] += 1
            if job.queue is not None:
                job.queue.put_nowait(held)  # the stream's, not the job's
            else:
                job.results.append(held)
            if self._on_result is not None:
                self._on_result(result)

        state: JobState = "done"
        message = ""
        try:
            with log_context(job_id=job.view.job_id):  # inherited by the scoring tasks
                await self._run(batch, items, on_result)
        except asyncio.CancelledError:
            state, message = "failed", "the service stopped before the job finished"
            raise
        except Error as error:  # ours (a broker out of reach): the job fails, it says why
            log.error("job_failed job_id=%s: %s", job.view.job_id, error)
            state, message = "failed", str(error)
        except Exception as error:  # our bug: the job fails, the service keeps going
            log.exception("job_failed job_id=%s", job.view.job_id)
            state, message = "failed", f"internal error ({type(error).__name__}); see the log"
        finally:
            log.info("job_finished", extra={"job_id": job.view.job_id, "state": state})
            self.capacity.release(pending)
            job.view = JobView(job.view.job_id, state, job.view.total, (), message)
            job.finished_at = self._clock()
            job.done.set()
            if job.queue is not None:
                job.queue.put_nowait(None)

    async def get(self, job_id: str) -> JobView | None:
        """The job, or ``None``; see :meth:`JobRunner.get`."""
        return self._view(job_id)

    def _view(self, job_id: str) -> JobView | None:
        self._expire()
        job = self._jobs.get(job_id)
        if job is None:
            return None
        view = job.view
        if job.queue is not None:  # streamed: the results are the stream's
            counts = dict(job.counts)
            return JobView(view.job_id, view.state, view.total, (), view.message, counts, True)
        results = sorted(job.results, key=lambda r: r.index)
        return JobView(view.job_id, view.state, view.total, results, view.message)

    async def wait(self, job_id: str) -> JobView | None:
        """Wait for the job to end; see :meth:`JobRunner.wait`."""
        job = self._jobs.get(job_id)
        if job is None:
            return None
        await job.done.wait()
        return self._view(job_id)

    def _expire(self) -> None:
        now = self._clock()
        finished = sorted(
            (job.finished_at, job_id)
            for job_id, job in self._jobs.items()
            if job.finished_at is not None
        )
        retained = sum(len(self._jobs[job_id].results) for _, job_id in finished)
        for count, (finished_at, job_id) in enumerate(finished):
            too_many = len(finished) - count > MAX_FINISHED_JOBS
            if too_many or retained > MAX_RETAINED_RESULTS or now - finished_at > self._ttl_s:
                retained -= len(self._jobs[job_id].results)
                del self._jobs[job_id]

    async def aclose(self) -> None:
        """Cancel every running job and wait for it to stop."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class EmbeddedJobRunner(_Jobs):
    """Scores each batch in this process's event loop with a shared sandbox.

    Args:
        sandbox: Where programs run (already bounded to its worker count).
        capacity: In-flight rollouts; a batch that does not fit is refused.
        workers: Rollouts of one job scored at once.
        ttl_s: Seconds a finished job stays retrievable.
        on_result: Called with every result as it is ready (metrics).
        clock: Monotonic seconds; injectable for tests.
        breakers: Circuit breakers per task type, shared by every job.
        metrics: Where to count submitted and finished rollouts and their queue lag.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        capacity: Capacity,
        *,
        workers: int,
        ttl_s: float,
        on_result: Callable[[ScoredRollout], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        breakers: Breakers | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        type_of = breakers.type_of if breakers is not None else dataset_of
        super().__init__(
            capacity,
            ttl_s=ttl_s,
            on_result=on_result,
            clock=clock,
            metrics=metrics,
            type_of=type_of,
        )
        self._breakers = breakers
        self.sandbox = sandbox
        self._workers = workers
        # One for every job (its judges are made once); each job gives its own limits.
        self._scoring = Scoring(sandbox, breakers=breakers, metrics=metrics)

    async def _run(
        self,
        batch: Batch,
        items: Iterable[RolloutLine | LineProblem],
        on_result: Callable[[ScoredRollout], None],
    ) -> None:
        # Kept for the job's lifetime: only what the response shows of each result's
        # output (its tail), not up to the output limit per stream.
        await score_batch(
            self._scoring,
            batch.tasks,
            items,
            limits=batch.limits,
            skipped_tasks=batch.skipped_tasks,
            workers=self._workers,
            on_result=on_result,
            collect=False,
            output_tail=TAIL_BYTES,
        )


class BrokerJobRunner(_Jobs):
    """Sends each batch's rollouts through a broker to its workers (``serve --broker``).

    The service keeps the job (its state and results, for ``GET /v1/jobs/{id}``) and
    the capacity; the rollouts are judged by ``execgym worker`` processes (Redis) or
    sandbox actors (Ray), with their breakers, reward and sandboxes.

    Args:
        broker: A Redis broker (:func:`execgym.broker.open_broker`) or a
            :class:`~execgym.broker.ray_broker.RayBroker`; closed by :meth:`aclose`.
        capacity: In-flight rollouts; a batch that does not fit is refused.
        ttl_s: Seconds a finished job stays retrievable.
        on_result: Called with every result as it is ready (metrics).
        clock: Monotonic seconds; injectable for tests.
        metrics: Where to count submitted rollouts.
    """

    def __init__(
        self,
        broker: Any,
        capacity: Capacity,
        *,
        ttl_s: float,
        on_result: Callable[[ScoredRollout], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(
            capacity,
            ttl_s=ttl_s,
            on_result=on_result,
            clock=clock,
            metrics=metrics,
            type_of=dataset_of,
        )
        self.broker = broker

    async def _run(
        self,
        batch: Batch,
        items: Iterable[RolloutLine | LineProblem],
        on_result: Callable[[ScoredRollout], None],
    ) -> None:
        from execgym.broker.client import score_rollouts

        async for result in score_rollouts(
            self.broker, batch.tasks, items, batch.limits, skipped_tasks=batch.skipped_tasks
        ):
            on_result(result)

    async def breaker_views(self) -> list[dict[str, object]] | None:
        """The breakers every worker shares, as one view (``None``: none shared)."""
        board_of = getattr(self.broker, "breaker_board", None)
        if board_of is not None:  # Redis
            return [view.to_json() for view in (await board_of().views()).values()]
        views_of = getattr(self.broker, "breaker_views", None)  # Ray's board actor
        if views_of is not None:
            views: list[dict[str, object]] = await views_of()
            return views
        return None

    async def reset_breaker(self, task_type: str) -> bool:
        """Close ``task_type``'s shared breaker for every worker; ``False`` if none."""
        board_of = getattr(self.broker, "breaker_board", None)
        if board_of is not None:
            done: bool = await board_of().reset(task_type)
            return done
        board = getattr(self.broker, "board", None)
        if board is not None:
            reset: bool = await board.reset.remote(task_type)
            return reset
        return False

    async def aclose(self) -> None:
        """Cancel every running job, then close the broker."""
        await super().aclose()
        await self.broker.aclose()

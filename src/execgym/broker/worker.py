"""A sandbox worker node: take jobs from a broker, judge them, store the results.

Each job goes through small named steps::

    receive → load_task → judge → reward → store → ack

and a worker runs ``concurrency`` of them at once, each in its own sandbox. It sends
heartbeats (so the broker does not hand its jobs to others), gives a job up to the
dead-letter stream after ``max_attempts`` deliveries that ended without a result (the
job killed its worker, or kept timing out), and on SIGTERM drains: it takes no new
job, finishes the running ones for up to ``drain_timeout_s``, then hands the rest
back. A worker that is killed outright loses nothing: its jobs are reclaimed by the
others after the broker's visibility timeout.

Used by ``execgym worker --broker redis://HOST:PORT/DB --concurrency N``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from execgym.broker._cancel import cancel_and_wait
from execgym.broker.base import Broker, Delivery
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.broker.validation_jobs import validation_result
from execgym.errors import BrokerError, ConfigError
from execgym.judges.base import ErrorDetail, Judgement, Verdict
from execgym.ops.breakers import Breakers, BreakerView, SharedBreakers, dataset_of
from execgym.ops.logs import log_context
from execgym.ops.metrics import MeteredSandbox, Metrics
from execgym.reward import RewardSpec
from execgym.sandbox.base import Sandbox
from execgym.scoring.core import Scoring, score_rollout, score_shared, score_unusable
from execgym.scoring.results import ScoredRollout
from execgym.scoring.selftest import self_test
from execgym.tasks.loaders import RolloutLine

log = logging.getLogger("execgym.worker")  # the name its log lines have always carried


def default_name() -> str:
    """A consumer name unique to this process: ``<host>-<pid>-<random>``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker runs.

    Args:
        concurrency: Jobs (sandboxes) at once.
        max_attempts: Deliveries of one job that may end without a result (its worker
            died, it timed out, its sandbox failed) before it is dead-lettered.
        drain_timeout_s: On stop, how long running jobs may take to finish before
            they are handed back.
        heartbeat_s: Seconds between heartbeats; default a third of the broker's
            visibility timeout.
        prefetch: Jobs taken ahead of free slots, so a slot that frees starts its next
            job at once (they are heartbeated, and handed back on stop).
        block_s: Longest wait for a job in one read.
        name: Consumer name, unique per process (default :func:`default_name`).

    Raises:
        ConfigError: if a number is out of range.
    """

    concurrency: int = field(default_factory=lambda: os.cpu_count() or 1)
    max_attempts: int = 3
    drain_timeout_s: float = 30.0
    heartbeat_s: float | None = None
    prefetch: int | None = None
    block_s: float = 1.0
    name: str = field(default_factory=default_name)

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_attempts < 1:
            raise ConfigError("concurrency and max_attempts must be at least 1")
        if self.prefetch is None:
            object.__setattr__(self, "prefetch", self.concurrency)
        if self.drain_timeout_s < 0 or self.block_s <= 0 or (self.prefetch or 0) < 0:
            raise ConfigError("drain_timeout_s must be >= 0 and block_s > 0")


@dataclass
class WorkerStats:
    """Counts since the worker started."""

    done: int = 0
    duplicates: int = 0
    retried: int = 0
    dead_lettered: int = 0
    handed_back: int = 0


class Worker:
    """Consumes a broker's jobs and judges them in a sandbox.

    Args:
        broker: Where jobs come from and results go.
        sandbox: Where programs run (shared by the concurrent jobs).
        settings: Concurrency, attempts, drain.
        breakers: Circuit breakers per task type: a job of a quarantined type gets the
            ``quarantined`` verdict at once; sandbox errors and dead-lettered jobs
            (which crashed or killed their worker) count as infrastructure failures.
            On a broker that shares breakers (Redis: ``breaker_board``), their policy
            and key apply to the breakers every worker shares there (one count, one
            state); otherwise they are this worker's own.
        metrics: Where to record jobs, sandbox runs, queue depth and heartbeats (the
            sandbox is then wrapped in a :class:`~execgym.ops.metrics.MeteredSandbox`).
        reward: How this worker turns judgements into rewards (every result then has
            a ``reward_breakdown``); ``None``: the binary reward.
        environments: Where tasks naming an ``environment`` run (default: ``sandbox``'s).

    Raises:
        ConfigError: if ``reward`` needs a tool (ruff, radon, bandit) that is missing.
    """

    def __init__(
        self,
        broker: Broker,
        sandbox: Sandbox,
        settings: WorkerSettings | None = None,
        *,
        breakers: Breakers | None = None,
        metrics: Metrics | None = None,
        reward: RewardSpec | None = None,
        environments: Any = None,
    ) -> None:
        self.broker = broker
        self.breakers = breakers
        self.metrics = metrics
        board_of = getattr(broker, "breaker_board", None)
        self.board: SharedBoard | None = None
        if breakers is not None and board_of is not None:
            self.board = board_of(breakers.policy)
        self._seen = _SeenViews()  # the shared breakers at the last heartbeat (metrics)
        if metrics is not None:
            sandbox = MeteredSandbox(sandbox, metrics)
            if self.board is not None:
                metrics.watch(self._seen)
            elif breakers is not None:
                metrics.watch(breakers)
        self.sandbox = sandbox
        self.settings = settings or WorkerSettings()
        self.name = self.settings.name
        self.stats = WorkerStats()
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._buffer: deque[Delivery] = deque()
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._scoring = Scoring(sandbox, reward=reward, breakers=breakers)  # metrics: on store
        self._scoring.environments = environments  # None: made from ``sandbox`` on first use

    def stop(self, *, drain: bool = True) -> None:
        """Stop: take no new job; running ones finish or are handed back.

        Running jobs get ``drain_timeout_s`` to finish, or none when ``drain`` is false.
        """
        self._stopping.set()
        if not drain:
            self._hurry.set()

    @property
    def running(self) -> int:
        """Jobs being processed now."""
        return len(self._running)

    async def run(self) -> None:
        """Work until :meth:`stop`, then drain. Returns when every job is settled."""
        log.info("worker_started name=%s concurrency=%d", self.name, self.settings.concurrency)
        heartbeat = asyncio.create_task(self._heartbeat_loop())
        try:
            await self._receive_loop()
        finally:
            await self._drain()
            await cancel_and_wait([heartbeat])  # it never ends by itself
            if not heartbeat.cancelled() and heartbeat.exception() is not None:
                raise heartbeat.exception()  # type: ignore[misc]
            forget = getattr(self.broker, "forget_worker", None)
            if forget is not None:
                with contextlib.suppress(BrokerError):
                    await forget(self.name)
        log.info("worker_stopped name=%s stats=%s", self.name, self.stats)

    async def _receive_loop(self) -> None:
        """Keep ``concurrency`` jobs running and up to ``prefetch`` more at hand."""
        delay_s = 0.05
        capacity = self.settings.concurrency + (self.settings.prefetch or 0)
        while not self._stopping.is_set():
            self._slot_freed.clear()
            await self._start_buffered()
            room = capacity - len(self._running) - len(self._buffer)
            if room > 0 and not self._stopping.is_set():
                idle = not self._buffer
                try:
                    got = await self.receive(room, self.settings.block_s if idle else 0.0)
                except BrokerError as error:
                    log.warning("receive failed: %s; retrying in %.2f s", error, delay_s)
                    await _first(asyncio.sleep(delay_s), self._stopping.wait())
                    delay_s = min(delay_s * 2, 2.0)
                    continue
                delay_s = 0.05
                self._buffer.extend(got)
                if got or idle:
                    continue
            await _first(self._slot_freed.wait(), self._stopping.wait())

    async def _start_buffered(self) -> None:
        """Start buffered jobs while there are free slots.

        A job delivered before (its earlier deliveries ended without a result) may be
        one that kills its worker: it waits until nothing else runs, and runs alone,
        so it takes no other job down with it and only its own attempts count towards
        the dead-letter stream.
        """
        while self._buffer and len(self._running) < self.settings.concurrency:
            if self._stopping.is_set():
                return
            if self._buffer[0].attempt > 1:
                if self._running:
                    return  # a slot freeing wakes the loop again
                task = self._start(self._buffer.popleft())
                await _first(asyncio.shield(task), self._stopping.wait())
                continue
            self._start(self._buffer.popleft())

    def _start(self, delivery: Delivery) -> asyncio.Task[None]:
        task = asyncio.create_task(self._settle(delivery))
        self._running[task] = delivery
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._slot_freed.set()

    async def receive(self, count: int, block_s: float) -> list[Delivery]:
        """Step 1: take up to ``count`` jobs from the broker, waiting up to ``block_s``."""
        return await self.broker.consume(self.name, count, block_s)

    async def _settle(self, delivery: Delivery) -> None:
        """Process one delivery; on a broker outage keep trying until it is settled."""
        delay_s = 0.05
        while True:
            try:
                await self.process(delivery)
                return
            except BrokerError as error:
                log.warning("job %s: %s; retrying in %.2f s", delivery.entry_id, error, delay_s)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)

    async def process(self, delivery: Delivery) -> None:
        """Take one delivery through every step, to a stored result and an ack."""
        job = await self.load_task(delivery)
        if job is None:
            return
        with log_context(job_id=job.job_id, batch_id=job.batch_id, worker=self.name):
            await self._process(delivery, job)

    def _task_type(self, job: JobMessage) -> str:
        return self.breakers.type_of(job.task) if self.breakers else dataset_of(job.task)

    def _count(self, job: JobMessage, scored: ScoredRollout) -> None:
        log.info(
            "job_done",
            extra={
                "task_id": scored.task_id,
                "rollout_id": scored.rollout_id,
                "verdict": scored.verdict.value,
            },
        )
        if self.metrics is not None:
            masked = scored.verdict.is_masked
            self.metrics.job_done(scored.verdict.value, self._task_type(job), masked)

    async def _process(self, delivery: Delivery, job: JobMessage) -> None:
        if self.metrics is not None and delivery.attempt == 1 and not delivery.already_done:
            self.metrics.jobs_submitted.labels(self._task_type(job)).inc()
            if job.submitted_at is not None:
                self.metrics.queue_lag.observe(max(0.0, time.time() - job.submitted_at))
        if delivery.already_done:  # a duplicate delivery or submission
            await self._announce_stored(job)
            await self.ack(delivery)
            self.stats.duplicates += 1
            return
        if delivery.attempt > self.settings.max_attempts:
            await self._give_up(delivery, job)
            return
        if job.validation is not None:  # execgym validate --broker: the task's checks
            result = await validation_result(
                job, self.sandbox, worker=self.name, attempt=delivery.attempt
            )
            await self.store_and_ack(delivery, result)
            self.stats.done += 1
            return
        scored = await self.judge(job)
        if (
            scored.verdict is Verdict.SANDBOX_ERROR
            and delivery.attempt < self.settings.max_attempts
        ):
            await self.broker.retry(delivery, count_attempt=True)  # perhaps another node's works
            self.stats.retried += 1
            return
        await self.store_and_ack(delivery, self.reward(job, scored, delivery))
        self._count(job, scored)
        self.stats.done += 1

    async def load_task(self, delivery: Delivery) -> JobMessage | None:
        """Step 2: the job and its task, or ``None`` if the message was unusable.

        An unusable message is dead-lettered, and an ``invalid`` result is stored for
        it when its ids are readable, so its batch still completes.
        """
        if delivery.job is not None:
            return delivery.job
        ids = _readable_ids(delivery.raw)
        if ids is not None:
            job_id, batch_id, index = ids
            scored = _masked(index, Verdict.INVALID, f"unusable job message: {delivery.problem}")
            await self.store(ResultMessage(job_id=job_id, batch_id=batch_id, result=scored))
        await self.broker.dead_letter(delivery, f"unusable job message: {delivery.problem}")
        self.stats.dead_lettered += 1
        return None

    async def judge(self, job: JobMessage) -> ScoredRollout:
        """Step 3: run the rollout's program and tests in a sandbox, and reward it.

        A rollout naming another task than the job's is ``invalid``, as in a batch.
        """
        if job.rollout.task_id != job.task.task_id:
            item = RolloutLine(job.index, job.rollout)
            return score_unusable(item, isolation=self.sandbox.name)
        calibrator = job.calibration.calibrator() if job.calibration else None
        if self.board is not None and self.breakers is not None:
            return await score_shared(
                self._scoring,
                self.board,
                self.breakers.type_of,
                job.task,
                job.rollout,
                index=job.index,
                limits=job.limits,
                calibrator=calibrator,
            )
        return await score_rollout(
            self._scoring,
            job.task,
            job.rollout,
            index=job.index,
            limits=job.limits,
            calibrator=calibrator,
        )

    def reward(self, job: JobMessage, scored: ScoredRollout, delivery: Delivery) -> ResultMessage:
        """Step 4: the result message, with the reward the scorer computed."""
        return ResultMessage.of(job, scored, worker=self.name, attempt=delivery.attempt)

    async def store_and_ack(self, delivery: Delivery, result: ResultMessage) -> None:
        """Steps 5 and 6: store the result (the first stored for a job wins), then ack.

        One round trip to the broker; the ack never comes before the result is stored.
        """
        await self.broker.complete(delivery, result)

    async def store(self, result: ResultMessage) -> None:
        """Store a result without acknowledging anything."""
        await self.broker.store_result(result)

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge a job; only ever after its result is stored."""
        await self.broker.ack(delivery)

    async def _announce_stored(self, job: JobMessage) -> None:
        stored = await self.broker.get_result(job.job_id)
        if stored is not None:
            await self.store(stored.model_copy(update={"batch_id": job.batch_id}))

    async def _give_up(self, delivery: Delivery, job: JobMessage) -> None:
        tries = delivery.attempt - 1
        reason = (
            f"dead-lettered after {tries} attempt(s): each delivery ended without a result "
            "(the worker died or was killed while running it, or it ran past the visibility "
            "timeout); the reward is masked, and the job is kept in the dead-letter stream"
        )
        log.error("dead_letter job_id=%s attempts=%d", job.job_id, tries)
        if self.board is not None and self.breakers is not None:
            await self.board.record_failure(self.breakers.type_of(job.task))
        elif self.breakers is not None:
            self.breakers.record_failure(job.task)
        scored = ScoredRollout(
            index=job.index,
            task_id=job.task.task_id,
            rollout_id=job.rollout.rollout_id or f"{job.task.task_id}#{job.index}",
            verdict=Verdict.SANDBOX_ERROR,
            reward=None,
            judgement=Judgement(
                Verdict.SANDBOX_ERROR, message=reason, error=ErrorDetail("DeadLettered", reason)
            ),
            isolation=self.sandbox.name,
            attempts=tries,
            message=reason,
        )
        result = ResultMessage.of(
            job, scored, worker=self.name, attempt=delivery.attempt, dead=True
        )
        await self.store(result)
        await self.broker.dead_letter(delivery, reason)
        self._count(job, scored)
        self.stats.dead_lettered += 1

    async def _heartbeat_loop(self) -> None:
        interval_s = self.settings.heartbeat_s or self.broker.settings.visibility_timeout_s / 3
        while True:
            try:
                held = [*self._running.values(), *self._buffer]
                await self.broker.heartbeat(self.name, held)
                if self.metrics is not None:
                    await self._observe_broker()
            except BrokerError as error:
                log.warning("heartbeat failed: %s", error)
            await asyncio.sleep(interval_s)

    async def _observe_broker(self) -> None:
        """Heartbeat gauges (this worker's, and every live one's), queue depth."""
        if self.metrics is None:  # the heartbeat calls it only with metrics
            return
        self.metrics.worker_heartbeat.labels(self.name).set(time.time())
        self.metrics.queue_depth.set(await self.broker.queued())
        if self.board is not None:
            self._seen.seen = await self.board.views()
        live_workers = getattr(self.broker, "live_workers", None)
        if live_workers is not None:
            for name, info in (await live_workers()).items():
                if isinstance(info.get("at"), int | float):
                    self.metrics.worker_heartbeat.labels(name).set(info["at"])

    async def _drain(self) -> None:
        """Hand buffered jobs back; running ones get ``drain_timeout_s``, then go back."""
        await self._hand_back(list(self._buffer))
        self._buffer.clear()
        if not self._running:
            return
        log.info("draining %d job(s)", len(self._running))
        running = set(self._running)
        finished = asyncio.ensure_future(
            asyncio.wait(running, timeout=self.settings.drain_timeout_s)
        )
        await _first(finished, self._hurry.wait())
        late = {task for task in running if not task.done()}
        if not late:
            return
        deliveries = [self._running[task] for task in late]
        await cancel_and_wait(late)
        await self._hand_back(deliveries)

    async def _hand_back(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            try:
                await self.broker.retry(delivery, count_attempt=False)
                self.stats.handed_back += 1
            except BrokerError as error:  # it stays pending: reclaimed after the timeout
                log.warning("could not hand back %s: %s", delivery.entry_id, error)


class SharedBoard(SharedBreakers, Protocol):
    """Breakers a broker shares between its workers (Redis's ``breaker_board``)."""

    async def record_failure(self, task_type: str) -> None:
        """An infrastructure failure outside a scored job (a dead-lettered job)."""
        ...

    async def views(self) -> dict[str, BreakerView]:
        """Every task type's breaker, as one view."""
        ...


@dataclass
class _SeenViews:
    """The shared breakers as this worker last read them (its ``/metrics`` gauge)."""

    seen: dict[str, BreakerView] = field(default_factory=dict)

    def views(self) -> dict[str, BreakerView]:
        return self.seen


def _masked(index: int, verdict: Verdict, message: str) -> dict[str, object]:
    judgement = Judgement(verdict, message=message, error=ErrorDetail("InvalidJob", message))
    scored = ScoredRollout(index, "", "", verdict, None, judgement, "none", 0, message)
    return scored.to_json()


def _readable_ids(raw: str) -> tuple[str, str, int] | None:
    """``(job_id, batch_id, index)`` from a message that failed validation, if present."""
    try:
        data = json.loads(raw)
        job_id, batch_id, index = data["job_id"], data.get("batch_id", ""), data.get("index", 0)
    except (ValueError, TypeError, KeyError):
        return None
    if isinstance(job_id, str) and job_id and isinstance(batch_id, str):
        return job_id, batch_id, index if isinstance(index, int) else 0
    return None


async def _first(*waits: object) -> None:
    """Wait until the first of ``waits`` (coroutines) finishes; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[call-overload]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def serve(worker: Worker) -> None:
    """Run ``worker`` until SIGTERM or SIGINT; a second signal stops the drain early."""
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.warning("stop requested: draining (signal again to hand jobs back now)")
            worker.stop()
        else:
            worker.stop(drain=False)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal)
    try:
        await worker.run()
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(number)


async def run_node(worker: Worker) -> None:
    """What ``execgym worker`` runs: self-test the sandbox, serve, then close everything.

    Raises:
        SandboxSetupFailed: if the sandbox fails its self-test (nothing is consumed).
        BrokerUnavailable: if the broker cannot be reached at start-up.
    """
    try:
        await self_test(worker.sandbox)
        ping = getattr(worker.broker, "ping", None)
        if ping is not None:
            await ping()
        await serve(worker)
    finally:
        await worker._scoring.aclose()  # the sandboxes of tasks' environments
        await worker.sandbox.aclose()
        await worker.broker.aclose()


async def describe_broker(broker: Broker) -> str:
    """A few lines on a broker's state, for ``execgym worker --check`` and ``status``.

    The queue, the live workers (each with the jobs it holds and its last heartbeat)
    and the dead letters; the broker is closed afterwards.

    Raises:
        BrokerUnavailable: if it cannot be reached.
    """
    try:
        ping = getattr(broker, "ping", None)
        if ping is not None:
            await ping()
        lines = [
            f"broker: {broker.name}: reachable",
            f"jobs waiting or running: {await broker.queued()}",
        ]
        live_workers = getattr(broker, "live_workers", None)
        if live_workers is not None:
            live = await live_workers()
            running = sum(int(info.get("running", 0)) for info in live.values())
            lines.append(f"live workers: {len(live)} ({running} jobs running)")
            now = time.time()
            for name, info in sorted(live.items()):
                age_s = now - float(info.get("at", now))
                held = info.get("running", 0)
                lines.append(f"  {name}: {held} job(s) held, last heartbeat {age_s:.1f} s ago")
        lines.append(f"dead letters (latest): {len(await broker.dead_letters())}")
        return "\n".join(lines)
    finally:
        await broker.aclose()

"""The :class:`Broker` protocol: how jobs reach workers and results reach callers.

Delivery is at least once. A job is handed to a worker by :meth:`Broker.consume`,
and stays the worker's until it is acknowledged (:meth:`Broker.ack`, only after its
result is stored), handed back (:meth:`Broker.retry`) or, if the worker dies, reclaimed
by another worker after :attr:`BrokerSettings.visibility_timeout_s` without a
heartbeat. Results are stored once per ``job_id`` (the first one wins), so a job run
twice still has exactly one result.

Implementations: :class:`~execgym.broker.memory.MemoryBroker` (in-process, the
default) and :class:`~execgym.broker.redis_streams.RedisStreamsBroker`. A broker whose
service can lose data (Redis) also has ``audit(batch_id, job_ids) -> Audit``, which
:func:`~execgym.broker.client.score_jobs` calls to find lost jobs and queue them again.
A broker may also have ``forget_results(batch_id, job_ids)``: the batch's caller has
read those jobs' results, so the broker drops them (and their ids) at once instead of
keeping them for ``result_ttl_s``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from execgym.broker.messages import JobMessage, ResultMessage
from execgym.errors import ConfigError, QueueFull


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """How a broker behaves; the same fields for every implementation.

    Args:
        max_queue_length: Jobs waiting or running at once; past it, ``submit`` waits
            or raises :class:`~execgym.errors.QueueFull` (back-pressure).
        visibility_timeout_s: A delivered job without a heartbeat for this long is
            presumed lost with its worker and is delivered again.
        result_ttl_s: How long results are kept.
        retry_after_s: The ``QueueFull.retry_after_s`` hint, and how long a waiting
            ``submit`` sleeps between tries.
        dead_letter_max: Entries kept in the dead-letter stream (oldest dropped).

    Raises:
        ConfigError: if a number is not positive.
    """

    max_queue_length: int = 10_000
    visibility_timeout_s: float = 60.0
    result_ttl_s: float = 24 * 3600.0
    retry_after_s: float = 1.0
    dead_letter_max: int = 100_000

    def __post_init__(self) -> None:
        for name in (
            "max_queue_length",
            "visibility_timeout_s",
            "result_ttl_s",
            "retry_after_s",
            "dead_letter_max",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"BrokerSettings.{name} must be positive, got {value!r}")


@dataclass(frozen=True, slots=True)
class Delivery:
    """One job handed to one worker.

    Attributes:
        entry_id: The broker's handle on this delivery (a stream entry id in Redis).
        job: The decoded job, or ``None`` when the message could not be decoded.
        attempt: This delivery's attempt number, counting earlier deliveries that
            ended in a crash or timeout (1 on first delivery).
        problem: Why the message could not be decoded (when ``job`` is ``None``).
        raw: The message as received, kept for the dead-letter stream.
        already_done: A result for this ``job_id`` was stored when it was delivered (a
            job submitted or delivered twice): announce that result, do not run it.
    """

    entry_id: str
    job: JobMessage | None
    attempt: int
    problem: str = ""
    raw: str = ""
    already_done: bool = False


@dataclass(frozen=True, slots=True)
class Audit:
    """What a broker knows of a batch's unfinished jobs (see ``audit`` on a broker).

    Attributes:
        lost: Ids of jobs the broker no longer has: not queued, not running, no result.
        finished: Stored results of the jobs asked about.
    """

    lost: list[str]
    finished: list[ResultMessage]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job given up on, as kept in the dead-letter stream.

    Attributes:
        job_id: The job's id (``""`` if its message was unreadable).
        deliveries: Deliveries made, counting the one that gave up.
        reason: Why it was given up on.
        raw: The job message as it was queued.
    """

    job_id: str
    deliveries: int
    reason: str
    raw: str


class Broker(Protocol):
    """A job queue with at-least-once delivery and one stored result per job."""

    settings: BrokerSettings
    name: str

    async def submit(
        self, jobs: Sequence[JobMessage], *, wait: bool = True, timeout_s: float | None = None
    ) -> None:
        """Queue ``jobs``.

        Args:
            jobs: The jobs; every one is queued or none (per chunk when waiting).
            wait: Wait for room when the queue is full; ``False`` refuses at once.
            timeout_s: Most seconds to wait for room (``None``: no limit).

        Raises:
            QueueFull: with a ``retry_after_s`` hint, when there is no room in time.
            BrokerUnavailable: if the service cannot be reached.
        """
        ...

    async def consume(self, consumer: str, count: int, block_s: float) -> list[Delivery]:
        """Take up to ``count`` jobs for ``consumer``, waiting up to ``block_s`` for one.

        ``block_s`` 0 does not wait. A job reclaimed from a dead worker comes first,
        alone (one per call), then new ones.
        """
        ...

    async def heartbeat(self, consumer: str, deliveries: Sequence[Delivery]) -> None:
        """Tell the broker ``consumer`` is alive and still working on ``deliveries``."""
        ...

    async def is_done(self, job_id: str) -> bool:
        """Whether a result for ``job_id`` is already stored."""
        ...

    async def store_result(self, result: ResultMessage) -> bool:
        """Store a result unless one is stored already, and announce it to its batch.

        Returns:
            ``True`` if this call stored it, ``False`` if a result was there already.
        """
        ...

    async def ack(self, delivery: Delivery) -> None:
        """The job is finished (its result stored): remove it from the queue."""
        ...

    async def complete(self, delivery: Delivery, result: ResultMessage) -> bool:
        """:meth:`store_result`, then :meth:`ack`, in one round trip where possible.

        Returns:
            ``True`` if this call stored the result.
        """
        ...

    async def retry(self, delivery: Delivery, *, count_attempt: bool) -> None:
        """Hand a job back to the queue for another worker.

        Args:
            delivery: The job.
            count_attempt: Whether this delivery counts as an attempt (a sandbox
                failure does; a graceful shutdown that interrupted it does not).
        """
        ...

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move a job to the dead-letter stream with ``reason`` and remove it."""
        ...

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The most recent dead letters, newest last."""
        ...

    async def get_result(self, job_id: str) -> ResultMessage | None:
        """The stored result of ``job_id``, or ``None`` (not finished, or expired)."""
        ...

    def results(self, batch_id: str, count: int | None) -> AsyncIterator[ResultMessage]:
        """Yield the results of ``batch_id`` as they are stored.

        Stops when ``count`` distinct jobs have one; a result announced twice is
        yielded once. With ``count=None`` (the batch's one reader, which counts and
        deduplicates itself): every announcement, duplicates included, each dropped
        by the broker once read, until the reader stops; then it calls
        ``forget_batch(batch_id)``.
        """
        ...

    async def forget_batch(self, batch_id: str) -> None:
        """Drop what the broker keeps for the finished batch's reader (its announcements)."""
        ...

    async def queued(self) -> int:
        """Jobs waiting or running."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def queue_full(wanted: int, queued: int, settings: BrokerSettings) -> QueueFull:
    """The :class:`~execgym.errors.QueueFull` for a batch of ``wanted`` jobs refused."""
    bound = settings.max_queue_length
    if wanted > bound:
        hint = f"the batch of {wanted} is larger than the queue's bound; submit it in parts"
    else:
        hint = f"retry in {settings.retry_after_s:g} s"
    return QueueFull(
        f"the job queue is full ({queued} of {bound} jobs waiting or running, "
        f"{wanted} more asked for): {hint}, or raise max_queue_length",
        retry_after_s=settings.retry_after_s,
        queued=queued,
        max_queue_length=bound,
    )

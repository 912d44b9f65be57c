"""The embedded broker: an in-process queue with the same semantics as Redis, no service.

It is the default, for one machine: the trainer and its workers run in one process.
Jobs are kept as the same JSON as on Redis (so what works here works there), delivered
at least once, reclaimed after the visibility timeout, and results are stored once per
``job_id``. Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from execgym.broker.base import BrokerSettings, DeadLetter, Delivery, queue_full
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.errors import MessageError

_PRUNE_EVERY = 1024
"""Expired results are dropped every this many stores."""


@dataclass
class _Entry:
    raw: str
    base_attempt: int
    deliveries: int = 0
    consumer: str = ""
    seen_at: float = 0.0


@dataclass
class MemoryBroker:
    """An in-process :class:`~execgym.broker.base.Broker`.

    Args:
        settings: Queue bound, visibility timeout, result TTL.
        clock: Seconds, monotonic; injectable for tests.
    """

    settings: BrokerSettings = field(default_factory=BrokerSettings)
    clock: Callable[[], float] = time.monotonic
    name: str = "embedded"
    _waiting: deque[str] = field(default_factory=deque)
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _delivered: dict[str, None] = field(default_factory=dict)  # entries out with a worker
    _results: dict[str, tuple[ResultMessage, float]] = field(default_factory=dict)
    _done: dict[str, list[ResultMessage]] = field(default_factory=dict)
    _dead: deque[DeadLetter] = field(default_factory=deque)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _stores: int = 0
    _changed: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        async with self._condition():
            self._condition().notify_all()

    async def queued(self) -> int:
        """Jobs waiting or running."""
        return len(self._entries)

    async def submit(
        self, jobs: Sequence[JobMessage], *, wait: bool = True, timeout_s: float | None = None
    ) -> None:
        """Queue ``jobs``; see :meth:`execgym.broker.base.Broker.submit`."""
        bound = self.settings.max_queue_length
        chunk = max(1, min(len(jobs), bound)) if wait else max(1, len(jobs))
        deadline = None if timeout_s is None else self.clock() + timeout_s
        for start in range(0, len(jobs), chunk):
            part = jobs[start : start + chunk]
            while len(self._entries) + len(part) > bound:
                expired = deadline is not None and self.clock() >= deadline
                if not wait or expired or len(part) > bound:
                    raise queue_full(len(part), len(self._entries), self.settings)
                async with self._condition():
                    await self._wait(self.settings.retry_after_s)
            for job in part:
                stored = await self.get_result(job.job_id)
                if stored is not None:  # idempotent by job_id: announce, do not run again
                    self._done.setdefault(job.batch_id, []).append(stored)
                    continue
                entry_id = str(next(self._ids))
                self._entries[entry_id] = _Entry(job.to_json(), job.attempt)
                self._waiting.append(entry_id)
            await self._notify()

    async def _wait(self, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._condition().wait()
        except TimeoutError:
            pass

    async def consume(self, consumer: str, count: int, block_s: float) -> list[Delivery]:
        """Take up to ``count`` jobs: reclaimed ones first, then new ones."""
        deadline = self.clock() + block_s
        while True:
            taken = self._reclaim(consumer)
            reclaimed = bool(taken)
            while self._waiting and len(taken) < count and not reclaimed:
                entry_id = self._waiting.popleft()
                if entry_id in self._entries:
                    taken.append(self._deliver(entry_id, consumer))
            if taken or self.clock() >= deadline:
                return taken
            async with self._condition():
                await self._wait(min(deadline - self.clock(), self.settings.visibility_timeout_s))

    def _reclaim(self, consumer: str) -> list[Delivery]:
        """One stalled job at most, as the Redis broker does."""
        stale = self.clock() - self.settings.visibility_timeout_s
        for entry_id in self._delivered:
            if self._entries[entry_id].seen_at <= stale:
                return [self._deliver(entry_id, consumer)]
        return []

    def _deliver(self, entry_id: str, consumer: str) -> Delivery:
        entry = self._entries[entry_id]
        self._delivered[entry_id] = None
        entry.deliveries += 1
        entry.consumer = consumer
        entry.seen_at = self.clock()
        attempt = entry.base_attempt + entry.deliveries - 1
        try:
            job = JobMessage.from_json(entry.raw)
        except MessageError as error:
            return Delivery(entry_id, None, attempt, problem=str(error), raw=entry.raw)
        stored = self._results.get(job.job_id)
        done = stored is not None and stored[1] > self.clock()
        return Delivery(entry_id, job, attempt, raw=entry.raw, already_done=done)

    async def heartbeat(self, consumer: str, deliveries: Sequence[Delivery]) -> None:
        """Keep ``consumer``'s jobs from being reclaimed."""
        now = self.clock()
        for delivery in deliveries:
            entry = self._entries.get(delivery.entry_id)
            if entry is not None and entry.consumer == consumer:
                entry.seen_at = now

    async def is_done(self, job_id: str) -> bool:
        """Whether a live result for ``job_id`` is stored."""
        return await self.get_result(job_id) is not None

    async def get_result(self, job_id: str) -> ResultMessage | None:
        """The stored result of ``job_id``, if it has not expired."""
        stored = self._results.get(job_id)
        if stored is None or stored[1] <= self.clock():
            return None
        return stored[0]

    async def store_result(self, result: ResultMessage) -> bool:
        """Store ``result`` unless its job has one; announce it to its batch."""
        self._stores += 1
        if self._stores % _PRUNE_EVERY == 0:
            now = self.clock()
            self._results = {k: v for k, v in self._results.items() if v[1] > now}
        first = not await self.is_done(result.job_id)
        if first:
            self._results[result.job_id] = (result, self.clock() + self.settings.result_ttl_s)
        self._done.setdefault(result.batch_id, []).append(result)
        await self._notify()
        return first

    async def ack(self, delivery: Delivery) -> None:
        """Remove a finished job."""
        self._entries.pop(delivery.entry_id, None)
        self._delivered.pop(delivery.entry_id, None)
        await self._notify()

    async def complete(self, delivery: Delivery, result: ResultMessage) -> bool:
        """Store ``result``, then acknowledge ``delivery``."""
        first = await self.store_result(result)
        await self.ack(delivery)
        return first

    async def retry(self, delivery: Delivery, *, count_attempt: bool) -> None:
        """Queue the job again as a new entry, keeping its attempt count."""
        entry = self._entries.pop(delivery.entry_id, None)
        self._delivered.pop(delivery.entry_id, None)
        if entry is None:
            return
        entry_id = str(next(self._ids))
        base = delivery.attempt + 1 if count_attempt else delivery.attempt
        self._entries[entry_id] = _Entry(entry.raw, base)
        self._waiting.append(entry_id)
        await self._notify()

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Keep the job in the dead letters and remove it from the queue."""
        job_id = delivery.job.job_id if delivery.job else ""
        self._dead.append(DeadLetter(job_id, delivery.attempt, reason, delivery.raw))
        while len(self._dead) > self.settings.dead_letter_max:
            self._dead.popleft()
        await self.ack(delivery)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The most recent dead letters, newest last."""
        return list(self._dead)[-limit:]

    async def results(self, batch_id: str, count: int | None) -> AsyncIterator[ResultMessage]:
        """Yield the batch's results as they are stored, each job once.

        ``count=None``: every announcement until the reader stops, each dropped once
        read (see :meth:`execgym.broker.base.Broker.results`).
        """
        seen: set[str] = set()
        position = 0
        while count is None or len(seen) < count:
            announced = self._done.get(batch_id, [])
            if count is None and position:  # read: dropped (one reader)
                del announced[:position]
                position = 0
            if position >= len(announced):
                async with self._condition():
                    await self._wait(self.settings.visibility_timeout_s)
                continue
            result = announced[position]
            position += 1
            if count is None:
                yield result
            elif result.job_id not in seen:
                seen.add(result.job_id)
                yield result
        self._done.pop(batch_id, None)

    async def forget_batch(self, batch_id: str) -> None:
        """Drop the batch's announcements."""
        self._done.pop(batch_id, None)

    async def forget_results(self, batch_id: str, job_ids: Sequence[str]) -> None:
        """Drop the stored results of ``job_ids``, which the batch's caller has read."""
        for job_id in job_ids:
            self._results.pop(job_id, None)

    async def aclose(self) -> None:
        """Nothing to release."""

"""The Redis broker: a Redis Stream of jobs read by a consumer group of workers.

Semantics (at least once, exactly one result per job):

- **submit**: a Lua script skips jobs whose result is stored already (announcing it
  to the batch instead: the ``job_id`` is an idempotency key), and adds the others (and
  their ids to the batch's set, which :meth:`RedisStreamsBroker.audit` reads) only
  if the stream stays within
  ``max_queue_length`` (``XLEN`` counts waiting and running jobs, since finished ones are
  deleted); otherwise the caller waits or gets :class:`~execgym.errors.QueueFull` with a
  ``retry_after_s`` hint. ``MAXLEN`` trimming is never used on the jobs stream: it would
  drop jobs.
- **consume**: ``XAUTOCLAIM`` first takes jobs idle past ``visibility_timeout_s`` from
  dead workers (their delivery count, from ``XPENDING``, is the attempt number), then
  ``XREADGROUP`` takes new ones.
- **heartbeat**: ``XCLAIM ... JUSTID`` of the worker's own pending jobs resets their idle
  time without counting a delivery; a ``worker:<name>`` key with a TTL says it is alive.
- **store_result**: a Lua script ``SET ... NX EX`` the result under its ``job_id`` and
  announces the stored (first) result on the batch's ``done`` stream, atomically.
- **ack** (only after the result is stored): ``XACK`` + ``XDEL`` in one transaction;
  **complete** is the store script then ``XACK`` + ``XDEL`` in one script (one trip).
- **retry** / **dead_letter**: ``XADD`` to the jobs (or dead-letter) stream + ``XACK`` +
  ``XDEL``, in one transaction.

With ``appendonly yes`` and ``appendfsync always`` nothing acknowledged to a caller is
lost when Redis restarts; with the default ``everysec``, up to a second of writes can be,
and without persistence everything is. Lost jobs are found by their caller
(:meth:`RedisStreamsBroker.audit`, called by :func:`execgym.broker.score_jobs`) and
queued again, so a batch still finishes, or fails with :class:`~execgym.errors.JobsLost`.
Every key name is in :mod:`execgym.broker.keys`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT, FieldT, StreamIdT

from execgym.broker.base import Audit, BrokerSettings, DeadLetter, Delivery, queue_full
from execgym.broker.keys import GROUP, Keys
from execgym.broker.messages import JobMessage, ResultMessage
from execgym.broker.redis_breakers import RedisBreakers
from execgym.errors import BrokerError, BrokerUnavailable, MessageError
from execgym.ops.breakers import BreakerPolicy

log = logging.getLogger(__name__)

SUBMIT_CHUNK = 500

# A stream read's reply with ``decode_responses=True``: per stream, its entries, each an
# id and its fields. redis-py types replies as the union of every command's.
StreamEntries = list[tuple[str, dict[str, str]]]
StreamReply = list[tuple[str, StreamEntries]]
"""Jobs added per script call when a waiting submit splits a batch."""

_SUBMIT = """
local result_prefix, done_prefix, ttl, batch_prefix = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local fresh, n = {}, 0
local batches = {}
for i = 6, #ARGV, 3 do
  local stored = redis.call('GET', result_prefix .. ARGV[i])
  if stored then
    local done = done_prefix .. ARGV[i + 1]
    redis.call('XADD', done, '*', 'job_id', ARGV[i], 'result', stored)
    redis.call('EXPIRE', done, ttl)
  else
    n = n + 1
    fresh[n] = i
  end
end
local queued = redis.call('XLEN', KEYS[1])
if queued + n > tonumber(ARGV[1]) then return -1 - queued end
for k = 1, n do
  local i = fresh[k]
  redis.call('XADD', KEYS[1], '*', 'job', ARGV[i + 2])
  local batch = batch_prefix .. ARGV[i + 1]
  redis.call('SADD', batch, ARGV[i])
  batches[batch] = true
end
for batch in pairs(batches) do redis.call('EXPIRE', batch, ttl) end
return queued + n
"""
"""Queue a chunk of jobs (ARGV[6:]: job_id, batch_id, JSON) all or none, within the bound
(ARGV[1]), and add each queued job's id to its batch's set (what its caller checks for
lost jobs); a job whose result is stored already is not queued: its result is announced
to its batch. Returns the new length, or -1 - length if full."""

_STORE = """
local first = 1
local payload = ARGV[1]
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  first = 0
  payload = redis.call('GET', KEYS[1]) or ARGV[1]
end
redis.call('XADD', KEYS[2], '*', 'job_id', ARGV[3], 'result', payload)
redis.call('EXPIRE', KEYS[2], ARGV[2])
return first
"""
"""Store the result unless one is stored; announce the stored one to the batch."""

_COMPLETE = (
    _STORE.replace("return first", "")
    + """
redis.call('XACK', KEYS[3], ARGV[4], ARGV[5])
redis.call('XDEL', KEYS[3], ARGV[5])
return first
"""
)
""":data:`_STORE`, then ``XACK`` + ``XDEL`` of the job's entry: one atomic step (a
script, not ``MULTI``: if Redis lost its script cache, nothing runs, never the ack alone)."""


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


class RedisStreamsBroker:
    """A :class:`~execgym.broker.base.Broker` on Redis Streams (Redis 6.2 or later).

    Args:
        url: ``redis://[:password@]host:port/db`` (or ``rediss://`` for TLS).
        settings: Queue bound, visibility timeout, result TTL.
        prefix: Start of every key (:class:`~execgym.broker.keys.Keys`).
        block_s: Longest a blocking read waits; the socket timeout is above it.
        outage_timeout_s: How long :meth:`results` rides out a lost Redis before it
            raises :class:`~execgym.errors.BrokerUnavailable`.

    Every method raises :class:`~execgym.errors.BrokerUnavailable` when Redis cannot
    be reached (after redis-py's own short retries), so callers can back off.
    """

    name = "redis"

    def __init__(
        self,
        url: str,
        settings: BrokerSettings | None = None,
        *,
        prefix: str = "execgym",
        block_s: float = 1.0,
        outage_timeout_s: float = 120.0,
    ) -> None:
        self.url = url
        self.outage_timeout_s = outage_timeout_s
        self.settings = settings or BrokerSettings()
        self.keys = Keys(prefix)
        self.block_s = block_s
        try:
            self.redis = aioredis.Redis.from_url(
                url,
                decode_responses=True,
                socket_connect_timeout=5,
                socket_timeout=block_s + 10,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
            )
        except ValueError as error:
            raise BrokerUnavailable(
                f"cannot use broker URL {redact(url)!r}: {error}; "
                "write redis://HOST:PORT/DB, e.g. redis://localhost:6379/0"
            ) from error
        self._submit = self.redis.register_script(_SUBMIT)
        self._store = self.redis.register_script(_STORE)
        self._complete = self.redis.register_script(_COMPLETE)
        self._group_ready = False
        self._claim_cursor = "0-0"
        self._next_claim = 0.0

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            self._group_ready = False
            raise BrokerUnavailable(
                f"cannot reach Redis at {redact(self.url)} to {doing}: "
                f"{str(error).rstrip('.')}; check that "
                "redis-server runs there (redis-cli -u URL ping)"
            ) from error
        except RedisError as error:
            if "NOGROUP" in str(error):
                self._group_ready = False
            raise BrokerError(f"Redis refused to {doing}: {error}") from error

    async def ensure_group(self) -> None:
        """Create the jobs stream and its consumer group if missing (idempotent)."""
        if self._group_ready:
            return
        with self._errors("create the consumer group"):
            try:
                await self.redis.xgroup_create(self.keys.jobs, GROUP, id="0", mkstream=True)
            except ResponseError as error:
                if "BUSYGROUP" not in str(error):
                    raise
        self._group_ready = True

    async def ping(self) -> None:
        """Check that Redis answers.

        Raises:
            BrokerUnavailable: if it does not.
        """
        with self._errors("ping it"):
            await self.redis.ping()

    def breaker_board(
        self, policy: BreakerPolicy | None = None, *, clock: Callable[[], float] | None = None
    ) -> RedisBreakers:
        """The circuit breakers every worker of this queue shares, held in Redis.

        Args:
            policy: This worker's thresholds (every worker should give the same).
            clock: Unix seconds, for tests (default: Redis's own clock).
        """
        return RedisBreakers(self.redis, self.keys, policy, errors=self._errors, clock=clock)

    async def queued(self) -> int:
        """Jobs waiting or running (the jobs stream's length)."""
        with self._errors("read the queue length"):
            return int(await self.redis.xlen(self.keys.jobs))

    async def submit(
        self, jobs: Sequence[JobMessage], *, wait: bool = True, timeout_s: float | None = None
    ) -> None:
        """Queue ``jobs``; see :meth:`execgym.broker.base.Broker.submit`."""
        await self.ensure_group()
        bound = self.settings.max_queue_length
        chunk = max(1, min(SUBMIT_CHUNK, bound)) if wait else max(1, len(jobs))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ttl_s = max(1, math.ceil(self.settings.result_ttl_s))
        head: list[str | int] = [
            bound,
            self.keys.result(""),
            self.keys.done(""),
            ttl_s,
            self.keys.batch(""),
        ]
        for start in range(0, len(jobs), chunk):
            part = jobs[start : start + chunk]
            payload = [f for job in part for f in (job.job_id, job.batch_id, job.to_json())]
            while True:
                with self._errors("queue jobs"):
                    length = int(await self._submit(keys=[self.keys.jobs], args=[*head, *payload]))
                if length >= 0:
                    break
                expired = deadline is not None and time.monotonic() >= deadline
                if not wait or expired or len(part) > bound:
                    raise queue_full(len(part), -1 - length, self.settings)
                await asyncio.sleep(self.settings.retry_after_s)

    async def consume(self, consumer: str, count: int, block_s: float) -> list[Delivery]:
        """Take up to ``count`` jobs: reclaimed ones first, then new ones."""
        await self.ensure_group()
        if time.monotonic() >= self._next_claim:
            reclaimed = await self._reclaim(consumer)
            if reclaimed:
                return reclaimed
            self._next_claim = time.monotonic() + self.settings.visibility_timeout_s / 4
        block_ms = max(1, int(min(block_s, self.block_s) * 1000)) if block_s > 0 else None
        with self._errors("read jobs"):
            reply = cast(
                StreamReply | None,
                await self.redis.xreadgroup(
                    GROUP, consumer, {self.keys.jobs: ">"}, count=count, block=block_ms
                ),
            )
        return [
            _delivery(entry_id, fields, 1)
            for _stream, entries in reply or []
            for entry_id, fields in entries
        ]

    async def _mark_done(self, taken: list[Delivery]) -> list[Delivery]:
        """Set ``already_done`` on deliveries whose job has a stored result (one trip).

        Only reclaimed jobs need it: a job whose result is stored is never queued again
        (see the submit script), and storing and acking are one transaction.
        """
        jobs = [d for d in taken if d.job is not None]
        if not jobs:
            return taken
        with self._errors("look up results"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for delivery in jobs:
                    pipe.exists(self.keys.result(delivery.job.job_id))  # type: ignore[union-attr]
                done = await pipe.execute()
        marked = {d.entry_id for d, hit in zip(jobs, done, strict=True) if hit}
        return [replace(d, already_done=True) if d.entry_id in marked else d for d in taken]

    async def _reclaim(self, consumer: str) -> list[Delivery]:
        """One stalled job at most.

        The jobs a dead worker held are spread out, so a job that kills workers does
        not take the same neighbours down each time.
        """
        idle_ms = int(self.settings.visibility_timeout_s * 1000)
        with self._errors("reclaim stalled jobs"):
            cursor, entries, *_ = await self.redis.xautoclaim(
                self.keys.jobs, GROUP, consumer, idle_ms, start_id=self._claim_cursor, count=1
            )
            self._claim_cursor = cursor
            if not entries:
                return []
            async with self.redis.pipeline(transaction=False) as pipe:
                for entry_id, _fields in entries:
                    pipe.xpending_range(self.keys.jobs, GROUP, entry_id, entry_id, 1)
                pending = await pipe.execute()
        taken = []
        for (entry_id, fields), info in zip(entries, pending, strict=True):
            deliveries = int(info[0]["times_delivered"]) if info else 1
            log.warning("reclaimed job entry=%s deliveries=%d", entry_id, deliveries)
            taken.append(_delivery(entry_id, fields, deliveries))
        return await self._mark_done(taken)

    async def heartbeat(self, consumer: str, deliveries: Sequence[Delivery]) -> None:
        """Reset the idle time of ``consumer``'s own jobs and refresh its liveness key."""
        ttl_s = max(1, math.ceil(self.settings.visibility_timeout_s))
        ids = [d.entry_id for d in deliveries]
        with self._errors("send a heartbeat"):
            if ids:
                owned = await self.redis.xpending_range(
                    self.keys.jobs, GROUP, "-", "+", max(len(ids), 1) * 2, consumername=consumer
                )
                held = set(ids) & {p["message_id"] for p in owned}
                mine: list[StreamIdT] = [*sorted(held)]
                if mine:
                    await self.redis.xclaim(self.keys.jobs, GROUP, consumer, 0, mine, justid=True)
            info = json.dumps({"running": len(ids), "at": time.time()})
            await self.redis.set(self.keys.worker(consumer), info, ex=ttl_s)

    async def forget_worker(self, consumer: str) -> None:
        """Remove a stopped worker's liveness key, and its consumer if it holds no job."""
        with self._errors("deregister the worker"):
            await self.redis.delete(self.keys.worker(consumer))
            owned = await self.redis.xpending_range(
                self.keys.jobs, GROUP, "-", "+", 1, consumername=consumer
            )
            if not owned:
                await self.redis.xgroup_delconsumer(self.keys.jobs, GROUP, consumer)

    async def live_workers(self) -> dict[str, dict[str, Any]]:
        """``{name: heartbeat}`` of the workers whose heartbeat has not expired."""
        with self._errors("list the workers"):
            keys = [k async for k in self.redis.scan_iter(match=self.keys.workers_pattern)]
            values = await self.redis.mget(keys) if keys else []
        start = len(self.keys.worker(""))
        return {k[start:]: json.loads(v) for k, v in zip(keys, values, strict=True) if v}

    async def is_done(self, job_id: str) -> bool:
        """Whether a result for ``job_id`` is stored."""
        with self._errors("look up a result"):
            return bool(await self.redis.exists(self.keys.result(job_id)))

    async def get_result(self, job_id: str) -> ResultMessage | None:
        """The stored result of ``job_id``, or ``None``."""
        with self._errors("read a result"):
            raw = await self.redis.get(self.keys.result(job_id))
        return None if raw is None else ResultMessage.from_json(raw)

    async def audit(self, batch_id: str, job_ids: Sequence[str]) -> Audit:
        """Which of ``job_ids`` (queued by this batch's caller) the broker has lost.

        A job is known while its id is in the batch's set (added atomically with its
        queue entry, see the submit script) or its result is stored; a job that is
        neither was lost with Redis's data (a restart without persistence, a flush, a
        failover to an empty replica, the last second of an ``everysec`` AOF). Stored
        results are returned too, in case their announcement was what was lost.

        Raises:
            BrokerUnavailable: if Redis cannot be reached.
        """
        lost: list[str] = []
        finished: list[ResultMessage] = []
        with self._errors("check the batch's jobs"):
            for start in range(0, len(job_ids), 1000):
                chunk = list(job_ids[start : start + 1000])
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.smismember(self.keys.batch(batch_id), chunk)
                    pipe.mget([self.keys.result(job_id) for job_id in chunk])
                    known, stored = await pipe.execute()
                for job_id, queued, raw in zip(chunk, known, stored, strict=True):
                    if raw is not None:
                        finished.append(ResultMessage.from_json(raw))
                    elif not queued:
                        lost.append(job_id)
        return Audit(lost, finished)

    def _store_args(self, result: ResultMessage) -> dict[str, Any]:
        keys = [self.keys.result(result.job_id), self.keys.done(result.batch_id)]
        ttl_s = max(1, math.ceil(self.settings.result_ttl_s))
        return {"keys": keys, "args": [result.to_json(), ttl_s, result.job_id]}

    async def store_result(self, result: ResultMessage) -> bool:
        """Store ``result`` unless its job has one; announce the stored one."""
        with self._errors("store a result"):
            first = await self._store(**self._store_args(result))
        return bool(first)

    async def complete(self, delivery: Delivery, result: ResultMessage) -> bool:
        """Store ``result`` then ``XACK`` + ``XDEL`` the job: one script, one round trip."""
        store = self._store_args(result)
        keys = [*store["keys"], self.keys.jobs]
        args = [*store["args"], GROUP, delivery.entry_id]
        with self._errors("store a result and acknowledge its job"):
            return bool(await self._complete(keys=keys, args=args))

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge and delete a finished job (call after its result is stored)."""
        with self._errors("acknowledge a job"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(self.keys.jobs, GROUP, delivery.entry_id)
                pipe.xdel(self.keys.jobs, delivery.entry_id)
                await pipe.execute()

    async def retry(self, delivery: Delivery, *, count_attempt: bool) -> None:
        """Queue the job again as a new entry that keeps its attempt count."""
        if delivery.job is None:
            raise MessageError(f"cannot retry an unreadable job: {delivery.problem}")
        attempt = delivery.attempt + 1 if count_attempt else delivery.attempt
        again = delivery.job.model_copy(update={"attempt": attempt})
        with self._errors("hand a job back"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(self.keys.jobs, {"job": again.to_json()})
                pipe.xack(self.keys.jobs, GROUP, delivery.entry_id)
                pipe.xdel(self.keys.jobs, delivery.entry_id)
                await pipe.execute()

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move the job to the dead-letter stream with ``reason``."""
        fields: dict[FieldT, EncodableT] = {
            "job_id": delivery.job.job_id if delivery.job else "",
            "deliveries": delivery.attempt,
            "reason": reason,
            "job": delivery.raw,
        }
        with self._errors("dead-letter a job"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(self.keys.dead, fields, maxlen=self.settings.dead_letter_max)
                pipe.xack(self.keys.jobs, GROUP, delivery.entry_id)
                pipe.xdel(self.keys.jobs, delivery.entry_id)
                await pipe.execute()

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The most recent dead letters, newest last."""
        with self._errors("read the dead letters"):
            entries = cast(StreamEntries, await self.redis.xrevrange(self.keys.dead, count=limit))
        return [
            DeadLetter(f["job_id"], int(f["deliveries"]), f["reason"], f["job"])
            for _id, f in reversed(entries)
        ]

    async def results(self, batch_id: str, count: int | None) -> AsyncIterator[ResultMessage]:
        """Yield the batch's results as they are stored, each job once.

        Survives Redis restarts: on a lost connection it backs off and reads on from the
        last entry it saw. With ``count=None`` (the batch's one reader, see
        :meth:`execgym.broker.base.Broker.results`) it yields every announcement until
        it is stopped, and trims what it has read from the batch's stream (``XTRIM
        MINID``, before each read), so the stream holds the unread results only.
        """
        stream = self.keys.done(batch_id)
        last = "0-0"
        seen: set[str] = set()
        delay_s = 0.05
        failing_since = None
        while count is None or len(seen) < count:
            try:
                with self._errors("read results"):
                    if count is None and last != "0-0":  # drop every entry read
                        await self.redis.xtrim(stream, minid=_after(last), approximate=False)
                    reply = cast(
                        StreamReply | None,
                        await self.redis.xread(
                            {stream: last}, count=1000, block=int(self.block_s * 1000)
                        ),
                    )
            except BrokerUnavailable as error:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.outage_timeout_s:
                    raise
                log.warning("results: %s; retrying in %.2f s", error, delay_s)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)
                continue
            delay_s, failing_since = 0.05, None
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    last = entry_id
                    if count is None:
                        yield ResultMessage.from_json(fields["result"])
                    elif fields["job_id"] not in seen:
                        seen.add(fields["job_id"])
                        yield ResultMessage.from_json(fields["result"])
        await self.forget_batch(batch_id)

    async def forget_batch(self, batch_id: str) -> None:
        """Delete the finished batch's stream of results and its set of job ids."""
        with contextlib.suppress(BrokerError), self._errors("delete a finished batch's keys"):
            await self.redis.delete(self.keys.done(batch_id), self.keys.batch(batch_id))

    async def forget_results(self, batch_id: str, job_ids: Sequence[str]) -> None:
        """Delete the results of ``job_ids``, read by the batch's caller, and their ids.

        Each result key (``UNLINK``) and the id in the batch's set (``SREM``), which
        were otherwise kept for ``result_ttl_s``: 24 h of every result of every batch,
        about 2 KB a result. Best effort: a failure leaves them to their TTL.
        """
        if not job_ids:
            return
        with contextlib.suppress(BrokerError), self._errors("delete results already read"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.unlink(*(self.keys.result(job_id) for job_id in job_ids))
                pipe.srem(self.keys.batch(batch_id), *job_ids)
                await pipe.execute()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()


def _after(entry_id: str) -> str:
    """The stream entry id right after ``entry_id`` (``"<ms>-<seq>"``)."""
    millis, sequence = entry_id.split("-")
    return f"{millis}-{int(sequence) + 1}"


def _delivery(entry_id: str, fields: dict[str, Any], deliveries: int) -> Delivery:
    raw = fields.get("job", "")
    try:
        job = JobMessage.from_json(raw)
    except MessageError as error:
        return Delivery(entry_id, None, deliveries, problem=str(error), raw=raw)
    return Delivery(entry_id, job, job.attempt + deliveries - 1, raw=raw)

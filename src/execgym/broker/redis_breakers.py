"""Circuit breakers shared by every worker of a Redis queue: one count, one state.

Each ``execgym worker`` kept its breakers in its own process, so with N workers a task
type that crashes environments had to fail N times over before it was stopped, and
``execgym status`` saw one process's view (issue 21). Here a type's breaker lives in
Redis (key names in :mod:`execgym.broker.keys`), and each step of
:class:`~execgym.ops.breakers.Breakers`' state machine is one Lua script, so workers on
any number of hosts count into one window and see one state:

- **admit** (before a job runs): closed lets it run; open past its cool-down turns
  half-open and lets one probe through (another only if the probe's result has not
  come within a cool-down); otherwise the job is quarantined (counted).
- **record** (after it ran): a probe's outcome closes or reopens the breaker; other
  outcomes are added to the window of a closed breaker (sorted sets scored by time,
  pruned to ``window_s``), and a failure past ``failures`` or ``failure_rate`` opens it.

What counts as a failure is decided by the worker with
:func:`execgym.ops.breakers.is_infrastructure_failure`, the one masking rule: nothing a
rollout controls is ever recorded as a failure here.

Time is Redis's own clock (``TIME``), one clock for workers on every host; tests give
a ``clock``. The thresholds are each worker's own :class:`BreakerPolicy` (give every
worker the same ``--breakers``); the window and cool-down a breaker opened with are
stored with it, so ``execgym status`` shows them without knowing the policy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections.abc import Callable

import redis.asyncio as aioredis

from execgym.broker.keys import Keys
from execgym.ops.breakers import (
    BreakerPolicy,
    BreakerState,
    BreakerView,
    Ticket,
    quarantine_message,
)

log = logging.getLogger(__name__)

_NOW = """
local function now_of(given)
  local now = tonumber(given)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function fmt(x) return string.format('%.6f', x) end
"""

_ADMIT = (
    _NOW
    + """
local now = now_of(ARGV[1])
local cooldown = tonumber(ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'state', 'opened_at', 'probe_at', 'retry_at', 'reason')
local state = tonumber(s[1]) or 0
if state == 0 then return {1, '', ''} end
local probe_at = tonumber(s[3])
if state == 2 and now - tonumber(s[2]) >= cooldown then
  state = 1
  probe_at = nil
  redis.call('HSET', KEYS[1], 'state', 1, 'probe_at', '')
end
if state == 1 and (probe_at == nil or now - probe_at >= cooldown) then
  redis.call('HSET', KEYS[1], 'probe_at', fmt(now))
  return {2, '', ''}
end
redis.call('HINCRBY', KEYS[1], 'quarantined', 1)
local retry = ''
if state == 2 then retry = fmt(math.max(0, tonumber(s[4]) - now)) end
return {0, s[5] or '', retry}
"""
)
"""KEYS: the type's hash, the types set. ARGV: now ('' for Redis's), cooldown_s, type.
Returns {1} run, {2} run as the probe, {0, reason, seconds to the probe or ''}."""

_RECORD = (
    _NOW
    + """
local now = now_of(ARGV[1])
local failed = ARGV[3] == '1'
local window, cooldown = tonumber(ARGV[8]), tonumber(ARGV[9])
redis.call('SADD', KEYS[4], ARGV[12])
local state = tonumber(redis.call('HGET', KEYS[1], 'state')) or 0
local function open(reason)
  redis.call('HSET', KEYS[1], 'state', 2, 'opened_at', fmt(now), 'retry_at',
    fmt(now + cooldown), 'probe_at', '', 'quarantined', 0, 'reason', reason,
    'window_s', ARGV[8])
  redis.call('PERSIST', KEYS[1])
  return {2, reason}
end
if ARGV[2] == '1' and state == 1 then
  if failed then return open('the probe job failed again') end
  redis.call('HSET', KEYS[1], 'state', 0, 'probe_at', '', 'reason', '')
  redis.call('EXPIRE', KEYS[1], ARGV[13])
  redis.call('DEL', KEYS[2], KEYS[3])
  return {0, 'closed'}
end
if state ~= 0 then return {state, ''} end
redis.call('HSET', KEYS[1], 'state', 0, 'window_s', ARGV[8])
redis.call('EXPIRE', KEYS[1], ARGV[13])
redis.call('ZADD', KEYS[2], now, ARGV[4])
if failed then redis.call('ZADD', KEYS[3], now, ARGV[4]) end
local below = '(' .. fmt(now - window)
local ttl = math.ceil(window) + 1
for k = 2, 3 do
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', below)
  redis.call('EXPIRE', KEYS[k], ttl)
end
if not failed then return {0, ''} end
local fails, jobs = redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[2])
if ARGV[5] ~= '' and fails >= tonumber(ARGV[5]) then
  return open(string.format('%d infrastructure failures in %s s', fails, ARGV[10]))
end
if ARGV[6] ~= '' and jobs >= tonumber(ARGV[7]) and fails / jobs >= tonumber(ARGV[6]) then
  return open(string.format(
    '%d of %d jobs in %s s were infrastructure failures (threshold %s)',
    fails, jobs, ARGV[10], ARGV[11]))
end
return {0, ''}
"""
)
"""KEYS: the type's hash, jobs and failures sets, the types set. ARGV: now, probe,
failed, a unique member, failures, failure_rate, min_jobs, window_s, cooldown_s, the
window and the rate as the reason shows them, type, TTL of a closed breaker. Returns
{state, reason} where
reason is the opening reason, 'closed' when a probe closed it, else ''."""

_VIEWS = (
    _NOW
    + """
local now = now_of(ARGV[1])
local out = {fmt(now)}
for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local h = redis.call('HMGET', ARGV[2] .. t, 'state', 'retry_at', 'quarantined', 'reason',
    'window_s')
  if h[1] then
    local from = fmt(now - (tonumber(h[5]) or 0))
    local jobs = redis.call('ZCOUNT', ARGV[3] .. t, from, '+inf')
    local fails = redis.call('ZCOUNT', ARGV[4] .. t, from, '+inf')
    for _, v in ipairs({t, h[1], h[2] or '', h[3] or '0', h[4] or '', fails, jobs}) do
      out[#out + 1] = v
    end
  elseif redis.call('EXISTS', ARGV[3] .. t) == 0 then
    redis.call('SREM', KEYS[1], t)  -- closed and idle past CLOSED_TTL_S: forgotten
  end
end
return out
"""
)
"""KEYS: the types set. ARGV: now, the breaker, jobs and failures key prefixes. Returns
now, then 7 fields per type: type, state, retry_at, quarantined, reason, failures, jobs.
A type whose breaker expired (closed, idle) and has no jobs left is dropped."""

_RESET = """
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'state', 0, 'probe_at', '', 'reason', '')
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
return 1
"""
"""Close a type's breaker and forget its window; 0 if no breaker of that type exists.
ARGV: type, TTL of a closed breaker."""

CLOSED_TTL_S = 86_400
"""A closed breaker with no job for this long is forgotten (its key expires, and the
next view drops its type): with ``key=task``, one per task would pile up otherwise. An
open one is kept until it closes."""

Errors = Callable[[str], contextlib.AbstractContextManager[None]]
"""Translates Redis's exceptions into :class:`~execgym.errors.BrokerError` for a step."""


class RedisBreakers:
    """The circuit breakers of every worker of one Redis queue (one view, one count).

    Made by :meth:`execgym.broker.redis_streams.RedisStreamsBroker.breaker_board`,
    which shares its connection, key prefix and error translation.

    Args:
        redis: The connection (``decode_responses=True``).
        keys: The queue's key names.
        policy: Thresholds, window and cool-down of this worker's ``--breakers``.
        errors: Turns Redis's exceptions into ``BrokerError``/``BrokerUnavailable``.
        clock: Unix seconds for tests; ``None`` uses Redis's ``TIME`` (one clock for
            workers on every host).

    Every method raises :class:`~execgym.errors.BrokerUnavailable` when Redis cannot
    be reached.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        policy: BreakerPolicy | None = None,
        *,
        errors: Errors,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.policy = policy or BreakerPolicy()
        self.keys = keys
        self._errors = errors
        self._clock = clock
        self._admit = redis.register_script(_ADMIT)
        self._record = redis.register_script(_RECORD)
        self._views = redis.register_script(_VIEWS)
        self._reset = redis.register_script(_RESET)

    def _now(self) -> str:
        return "" if self._clock is None else repr(float(self._clock()))

    def _type_keys(self, task_type: str) -> list[str]:
        keys = self.keys
        return [
            keys.breaker(task_type),
            keys.breaker_jobs(task_type),
            keys.breaker_failures(task_type),
            keys.breaker_types,
        ]

    async def admit(self, task_type: str) -> tuple[Ticket | None, str]:
        """Whether a job of ``task_type`` may run now.

        Returns:
            ``(ticket, "")`` to run it (pass the ticket to :meth:`record`), or
            ``(None, why)``: give it the ``quarantined`` verdict with that message.
        """
        keys = [self.keys.breaker(task_type), self.keys.breaker_types]
        args: list[str | float] = [self._now(), self.policy.cooldown_s, task_type]
        with self._errors("ask the shared circuit breakers"):
            code, reason, retry = await self._admit(keys=keys, args=args)
        if int(code) == 1:
            return Ticket(task_type), ""
        if int(code) == 2:
            log.warning("breaker_half_open task_type=%s: a probe job goes out", task_type)
            return Ticket(task_type, probe=True), ""
        retry_in_s = float(retry) if retry else None
        return None, quarantine_message(task_type, str(reason), retry_in_s)

    async def record(self, ticket: Ticket, infrastructure_failure: bool) -> None:
        """The outcome of a job admitted with ``ticket`` (see :meth:`Breakers.record`)."""
        policy = self.policy
        rate = policy.failure_rate
        args: list[str | int | float] = [
            self._now(),
            int(ticket.probe),
            int(infrastructure_failure),
            uuid.uuid4().hex,
            "" if policy.failures is None else policy.failures,
            "" if rate is None else repr(rate),
            policy.min_jobs,
            repr(policy.window_s),
            repr(policy.cooldown_s),
            f"{policy.window_s:g}",
            "" if rate is None else f"{rate:.0%}",
            ticket.task_type,
            max(CLOSED_TTL_S, math.ceil(policy.window_s) + 1),
        ]
        with self._errors("record an outcome in the shared circuit breakers"):
            _state, reason = await self._record(keys=self._type_keys(ticket.task_type), args=args)
        if reason == "closed":
            log.warning("breaker_closed task_type=%s: the probe job succeeded", ticket.task_type)
        elif reason:
            log.warning(
                "breaker_opened task_type=%s reason=%s cooldown_s=%g (shared by every worker)",
                ticket.task_type,
                reason,
                policy.cooldown_s,
            )

    async def record_failure(self, task_type: str) -> None:
        """An infrastructure failure outside a scored job (a dead-lettered job)."""
        await self.record(Ticket(task_type), infrastructure_failure=True)

    async def views(self) -> dict[str, BreakerView]:
        """Every task type's breaker as one view (open past its cool-down: half-open)."""
        keys = self.keys
        prefixes = [keys.breaker(""), keys.breaker_jobs(""), keys.breaker_failures("")]
        with self._errors("read the shared circuit breakers"):
            out = await self._views(keys=[keys.breaker_types], args=[self._now(), *prefixes])
        now = float(out[0])
        views = {}
        for at in range(1, len(out), 7):
            task_type, state_text, retry_at, quarantined, reason, failures, jobs = out[at : at + 7]
            state = BreakerState(int(state_text))
            retry_in_s = None
            if state is BreakerState.OPEN:
                retry_in_s = max(0.0, float(retry_at) - now)
                if math.isclose(retry_in_s, 0.0, abs_tol=1e-9):
                    state, retry_in_s = BreakerState.HALF_OPEN, 0.0
            views[str(task_type)] = BreakerView(
                str(task_type),
                state,
                int(failures),
                int(jobs),
                int(quarantined),
                retry_in_s,
                str(reason) if state is not BreakerState.CLOSED else "",
            )
        return dict(sorted(views.items()))

    async def reset(self, task_type: str) -> bool:
        """Close ``task_type``'s breaker for every worker (an operator's reset).

        Returns:
            ``False`` if no breaker of that type exists (nothing of it ran).
        """
        with self._errors("reset a shared circuit breaker"):
            done = await self._reset(
                keys=self._type_keys(task_type), args=[task_type, CLOSED_TTL_S]
            )
        if done:
            log.warning("breaker_closed task_type=%s: reset by an operator", task_type)
        return bool(done)

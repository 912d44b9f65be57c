"""What the episode workers and the service's replicas share in Redis: records and requests.

An agent episode routed to a worker (:mod:`execgym.broker.episode_host`) has a record,
the hash ``<prefix>:episode:<id>`` (:meth:`~execgym.broker.keys.Keys.episode`)::

    worker      the worker holding its session (its heartbeat key says it is alive)
    task_id     the task it plays
    state       "running" or "finished"
    steps       steps taken
    reward      the last step's reward as JSON ("null": none yet, or masked)
    terminated  "1" or "0";  truncated  "1" or "0"
    reason      why it ended when its worker did (then reward is "null": masked)
    opened_at   Unix seconds;  used_at  Unix seconds of its last step

The worker writes it (:data:`UPDATE`, never over an episode already marked lost); any
replica marks it lost (:data:`MARK_LOST`) when the worker's heartbeat key is gone, in
one script, so the decision rests on nothing but the heartbeat the worker's own host
process writes. Nothing a rollout does in its sandbox reaches Redis (the session has
no network), so no action of the agent's can mask its episode.

Requests (``open``, ``step``, ``close``) are JSON pushed on the worker's list; the
answer is pushed on ``<prefix>:episode-out:<request id>``: ``{"ok": true, ...}`` or
``{"ok": false, "kind": ..., "message": ...}`` (:func:`raise_reply`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from execgym.broker.redis_streams import redact
from execgym.episodes.registry import EpisodeView, StepOutcome
from execgym.errors import (
    BrokerError,
    BrokerUnavailable,
    CapacityExceeded,
    EpisodeNotFound,
    EpisodeOver,
    SandboxError,
    TaskError,
)

UPDATE = """
if redis.call('HGET', KEYS[1], 'reason') then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""
"""Write the record's fields (``ARGV[2:]``, name value...) and its TTL (``ARGV[1]``)
unless it was marked lost; 1 if written."""

MARK_LOST = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'state') == 'finished' then return 0 end
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
redis.call('HSET', KEYS[1], 'state', 'finished', 'truncated', '1', 'terminated', '0',
           'reward', 'null', 'reason', ARGV[1], 'used_at', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
"""End the episode masked with ``ARGV[1]`` as its reason if its worker's heartbeat
(``KEYS[2]``) is gone, or always when ``ARGV[4]`` is ``1`` (the worker itself stops).
Returns -1: no record; 0: already finished; 2: the worker is alive; 1: marked."""

LOST_TTL_S = 3600
"""Seconds the record of an episode whose worker died stays readable."""


def lost_reason(worker: str, why: str) -> str:
    """The ``reason`` of an episode whose worker is gone, for the agent's trainer."""
    return (
        f"the episode worker {worker} holding this episode's session {why}; the episode "
        "ends with reward null (masked: our failure, not the agent's)"
    )


HEARTBEAT_GONE = "stopped answering (its heartbeat expired: it died, was killed, or lost Redis)"
"""Why, in :func:`lost_reason`, when a replica finds the worker's heartbeat gone."""


def opened_record(worker: str, task_id: str, now: float) -> dict[str, Any]:
    """The fields of a just-opened episode's record (for :func:`record_fields`).

    One definition for every transport (Redis-routed episode workers, Ray episode
    actors), so a replica reads the same record whichever opened the episode.
    ``now``: Unix seconds.
    """
    return {
        "worker": worker,
        "task_id": task_id,
        "state": "running",
        "steps": 0,
        "reward": None,
        "terminated": False,
        "truncated": False,
        "opened_at": now,
        "used_at": now,
    }


def record_fields(**values: Any) -> list[str]:
    """``name, value, ...`` for ``HSET``: booleans as ``1``/``0``, rewards as JSON."""
    flat: list[str] = []
    for name, value in values.items():
        if name == "reward":
            text = json.dumps(value)
        elif isinstance(value, bool):
            text = "1" if value else "0"
        else:
            text = str(value)
        flat += [name, text]
    return flat


def view_of(episode_id: str, record: Mapping[str, str], now: float | None = None) -> EpisodeView:
    """The :class:`EpisodeView` of a record as read with ``HGETALL``."""
    now = time.time() if now is None else now
    reward = json.loads(record.get("reward", "null"))
    return EpisodeView(
        episode_id=episode_id,
        task_id=record.get("task_id", ""),
        state=record.get("state", "running"),
        steps=int(record.get("steps", 0)),
        reward=None if reward is None else float(reward),
        terminated=record.get("terminated") == "1",
        truncated=record.get("truncated") == "1",
        idle_s=max(0.0, now - float(record.get("used_at", now))),
        age_s=max(0.0, now - float(record.get("opened_at", now))),
        worker=record.get("worker"),
        reason=record.get("reason"),
    )


def masked_end(view: EpisodeView, tool: str) -> StepOutcome:
    """The step answer that ends an episode lost with its worker: reward ``None``.

    Shaped as an episode that ends on our side (:mod:`execgym.episodes.env`): the
    observation's ``episode_end`` and ``info["reason"]`` say why, ``info["masked"]``
    is true, ``truncated`` is true (the task did not end it).
    """
    reason = view.reason or lost_reason(view.worker or "?", HEARTBEAT_GONE)
    observation = {"tool": tool, "ok": False, "output": reason, "episode_end": reason}
    info = {
        "masked": True,
        "verdict": "sandbox_error",
        "reason": reason,
        "worker": view.worker,
        "task_id": view.task_id,
        "step": view.steps,
    }
    return StepOutcome(observation, None, False, True, info)


def outcome_json(outcome: StepOutcome) -> dict[str, Any]:
    """A step's outcome as the reply's JSON."""
    return {
        "observation": outcome.observation,
        "reward": outcome.reward,
        "terminated": outcome.terminated,
        "truncated": outcome.truncated,
        "info": outcome.info,
    }


def outcome_of(reply: Mapping[str, Any]) -> StepOutcome:
    """The :class:`StepOutcome` of a reply made by :func:`outcome_json`."""
    reward = reply.get("reward")
    return StepOutcome(
        dict(reply["observation"]),
        None if reward is None else float(reward),
        bool(reply["terminated"]),
        bool(reply["truncated"]),
        dict(reply["info"]),
    )


def error_reply(error: BaseException) -> dict[str, Any]:
    """The reply telling a replica that a request failed, by kind (see :func:`raise_reply`)."""
    kind = "error"
    if isinstance(error, CapacityExceeded):
        kind = "capacity"
    elif isinstance(error, EpisodeNotFound):
        kind = "not_found"
    elif isinstance(error, EpisodeOver):
        kind = "over"
    elif isinstance(error, TaskError):
        kind = "task"
    elif isinstance(error, SandboxError):
        kind = "sandbox"
    reply: dict[str, Any] = {"ok": False, "kind": kind, "message": str(error)}
    if isinstance(error, CapacityExceeded):
        reply["retry_after_s"] = error.retry_after_s
    return reply


def raise_reply(reply: Mapping[str, Any], worker: str) -> None:
    """Raise what a failed reply says; nothing for ``{"ok": true}``.

    Raises:
        CapacityExceeded: the worker is full.
        EpisodeNotFound: it holds no such episode (reclaimed idle).
        EpisodeOver: the episode has ended.
        TaskError: the task could not be played.
        SandboxError: the worker's sandbox failed (503).
        BrokerError: anything else failed on the worker (503).
    """
    if reply.get("ok"):
        return
    message = str(reply.get("message", ""))
    kind = reply.get("kind")
    if kind == "capacity":
        raise CapacityExceeded(message, int(reply.get("retry_after_s", 1)))
    if kind == "not_found":
        raise EpisodeNotFound(message)
    if kind == "over":
        raise EpisodeOver(message)
    if kind == "task":
        raise TaskError(message)
    if kind == "sandbox":
        raise SandboxError(f"episode worker {worker}: {message}")
    raise BrokerError(f"episode worker {worker} failed: {message}")


def connect(url: str, *, timeout_s: float) -> aioredis.Redis:
    """A client of ``url`` whose socket waits ``timeout_s`` plus a margin (for ``BLPOP``).

    Raises:
        BrokerUnavailable: for a URL redis-py cannot read (the message shows the form).
    """
    try:
        return aioredis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=timeout_s + 10,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )
    except ValueError as error:
        raise BrokerUnavailable(
            f"cannot use episode broker URL {redact(url)!r}: {error}; "
            "write redis://HOST:PORT/DB, e.g. redis://localhost:6379/0"
        ) from error


@contextlib.contextmanager
def redis_errors(url: str, doing: str) -> Iterator[None]:
    """Turn redis-py's errors into :class:`BrokerUnavailable` / :class:`BrokerError`."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError) as error:
        raise BrokerUnavailable(
            f"cannot reach Redis at {redact(url)} to {doing}: {str(error).rstrip('.')}; "
            "check that redis-server runs there (redis-cli -u URL ping)"
        ) from error
    except RedisError as error:
        raise BrokerError(f"Redis refused to {doing}: {error}") from error

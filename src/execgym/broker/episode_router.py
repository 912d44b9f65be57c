"""Episodes held by episode workers, reached through Redis from any replica of the service.

``execgym serve`` with ``EXECGYM_SERVER_EPISODE_BROKER=redis://HOST:PORT/DB`` keeps no
episode in its own memory: :class:`RoutedEpisodes` opens each one on a live episode
worker (:mod:`execgym.broker.episode_host`, the one with the most room), and every
later call (step, state, close) reads the episode's record in Redis to find that
worker and forwards the call to it. Any number of replicas can run behind a load
balancer; a replica that dies loses nothing (the next call reaches another one, which
reads the same record).

A worker that dies is found by its heartbeat key having expired: the replica that
finds it (while a step waits for its answer, or before) marks the episode ended with
reward ``None`` (masked) and the reason (:data:`~execgym.broker.episode_records.MARK_LOST`,
one script); that step is answered ``truncated`` with ``info["masked"]`` true and the
reason, a ``GET`` shows it, and a later step gets 409 with it.

    >>> episodes = RoutedEpisodes("redis://localhost:6379/0")        # doctest: +SKIP
    >>> episode_id, first = await episodes.open(task)                # doctest: +SKIP
    >>> outcome = await episodes.step(episode_id, {"tool": "submit"})  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from execgym.broker.episode_records import (
    HEARTBEAT_GONE,
    LOST_TTL_S,
    MARK_LOST,
    connect,
    lost_reason,
    redis_errors,
    view_of,
)
from execgym.broker.episode_routing import EpisodeRouter, WorkerGone
from execgym.broker.keys import DEFAULT_PREFIX, Keys
from execgym.broker.redis_streams import redact
from execgym.episodes.registry import EpisodeView
from execgym.errors import (
    BrokerError,
    BrokerUnavailable,
    EpisodeNotFound,
)

log = logging.getLogger(__name__)

QUEUE_TTL_S = 86_400
"""Seconds a worker's request list lives after the last request (a dead worker's goes)."""


class RoutedEpisodes(EpisodeRouter):
    """Episodes on episode workers, by id, through Redis.

    An :class:`~execgym.episodes.registry.Episodes`, as the in-process registry is (the
    service's routes take either).

    Args:
        url: ``redis://HOST:PORT/DB``, the Redis the episode workers use.
        prefix: Start of every key, the workers' (``--prefix``).
        poll_s: How often a waiting call checks that its worker is alive, in seconds.
        open_attempts: Workers tried in turn for one open, when the first dies or is
            full.

    Counters (``opened``, ``steps_taken``, ``finished``, ``final_reward_sum``,
    ``final_rewards``) count what went through this replica; ``live`` is the sum of the
    workers' live episodes as their last heartbeats said, read at the latest open.

    Raises:
        BrokerUnavailable: for a URL that is not a Redis URL.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        poll_s: float = 0.5,
        open_attempts: int = 2,
    ) -> None:
        if poll_s <= 0:
            raise ValueError("poll_s must be positive")
        super().__init__(open_attempts=open_attempts)
        self.url = url
        self.keys = Keys(prefix)
        self.poll_s = poll_s
        self.redis = connect(url, timeout_s=poll_s)
        self._mark_lost = self.redis.register_script(MARK_LOST)

    async def workers(self) -> dict[str, dict[str, Any]]:
        """The live episode workers: name -> their last heartbeat (``live``, ``max_episodes``).

        Names whose heartbeat has expired are dropped from the set.

        Raises:
            BrokerUnavailable: if Redis cannot be reached.
        """
        with redis_errors(self.url, "list the episode workers"):
            names = sorted(map(str, await self.redis.smembers(self.keys.episode_hosts)))
            if not names:
                return {}
            beats = await self.redis.mget([self.keys.episode_host(name) for name in names])
            gone = [name for name, beat in zip(names, beats, strict=True) if beat is None]
            if gone:
                await self.redis.srem(self.keys.episode_hosts, *gone)
        return {name: json.loads(beat) for name, beat in zip(names, beats, strict=True) if beat}

    def no_worker(self) -> BrokerError:
        """No ``execgym episode-worker`` has a heartbeat on this Redis and prefix."""
        return BrokerUnavailable(
            f"no episode worker is alive on {redact(self.url)} (prefix "
            f"{self.keys.prefix!r}): start one with 'execgym episode-worker --broker "
            f"{redact(self.url)}'"
        )

    async def aclose(self) -> None:
        """Close the Redis connections (the episodes stay on their workers)."""
        await self.redis.aclose()

    async def forget(self, episode_id: str) -> None:
        """Delete the episode's record."""
        with redis_errors(self.url, "forget an episode"):
            await self.redis.delete(self.keys.episode(episode_id))

    async def record(self, episode_id: str) -> dict[str, str]:
        """The episode's hash (``HGETALL``); :class:`EpisodeNotFound` if there is none."""
        with redis_errors(self.url, "read an episode's record"):
            record = await self.redis.hgetall(self.keys.episode(episode_id))
        if not record:
            raise EpisodeNotFound(
                f"no episode {episode_id!r}: never opened, deleted, or reclaimed after its "
                "worker's idle timeout; open a new one"
            )
        return {str(name): str(value) for name, value in record.items()}

    async def alive(self, worker: str) -> bool:
        """Whether ``worker``'s heartbeat key exists."""
        with redis_errors(self.url, "read an episode worker's heartbeat"):
            return bool(await self.redis.exists(self.keys.episode_host(worker)))

    async def lose(self, episode_id: str, worker: str) -> EpisodeView:
        """Mark the episode ended masked if ``worker``'s heartbeat is gone; its view."""
        reason = lost_reason(worker, HEARTBEAT_GONE)
        with redis_errors(self.url, "end an episode whose worker is gone"):
            marked = await self._mark_lost(
                keys=[self.keys.episode(episode_id), self.keys.episode_host(worker)],
                args=[reason, time.time(), LOST_TTL_S, "0"],
            )
        if marked == 1:
            log.warning("episode_lost episode_id=%s worker=%s", episode_id, worker)
        return view_of(episode_id, await self.record(episode_id))

    async def ask(self, worker: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``request`` to ``worker`` and wait for its answer while it is alive.

        Raises:
            WorkerGone: its heartbeat is gone (before the request, or while waiting).
        """
        if not await self.alive(worker):
            raise WorkerGone(worker)
        request_id = uuid.uuid4().hex
        queue, reply_to = self.keys.episode_requests(worker), self.keys.episode_reply(request_id)
        with redis_errors(self.url, "send an episode request"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.rpush(queue, json.dumps({**request, "id": request_id}))
                pipe.expire(queue, QUEUE_TTL_S)
                await pipe.execute()
        while True:
            with redis_errors(self.url, "wait for an episode worker's answer"):
                item = await self.redis.blpop([reply_to], timeout=self.poll_s)
            if item is not None:
                return dict(json.loads(item[1]))
            if not await self.alive(worker):
                raise WorkerGone(worker)

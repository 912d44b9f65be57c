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

import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from execgym.broker.episode_records import (
    HEARTBEAT_GONE,
    LOST_TTL_S,
    MARK_LOST,
    connect,
    lost_reason,
    masked_end,
    outcome_of,
    raise_reply,
    redis_errors,
    view_of,
)
from execgym.broker.keys import DEFAULT_PREFIX, Keys
from execgym.broker.redis_streams import redact
from execgym.episodes.registry import EpisodeView, StepOutcome
from execgym.errors import (
    BrokerError,
    BrokerUnavailable,
    CapacityExceeded,
    EpisodeNotFound,
    EpisodeOver,
    TaskError,
)

log = logging.getLogger(__name__)

QUEUE_TTL_S = 86_400
"""Seconds a worker's request list lives after the last request (a dead worker's goes)."""


class _WorkerGone(Exception):
    """The worker a request went to has no heartbeat any more."""


class RoutedEpisodes:
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
        if poll_s <= 0 or open_attempts < 1:
            raise ValueError("poll_s must be positive and open_attempts at least 1")
        self.url = url
        self.keys = Keys(prefix)
        self.poll_s = poll_s
        self.open_attempts = open_attempts
        self.redis = connect(url, timeout_s=poll_s)
        self._mark_lost = self.redis.register_script(MARK_LOST)
        self.opened = 0
        self.steps_taken = 0
        self.finished = Counter[str]()
        self.reclaimed = 0  # the workers reclaim idle episodes; their records expire
        self.final_reward_sum = 0.0
        self.final_rewards = 0
        self._live = 0

    @property
    def live(self) -> int:
        """Live episodes on every worker, as of the latest open (see the class doc)."""
        return self._live

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

    async def open(self, task: Any, *, episode_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """Open an episode on the live worker with the most room; see ``EpisodeRegistry.open``.

        Args:
            task: A resolved :class:`~execgym.episodes.task.RepoTask` (sent as JSON:
                its ``repo`` must be readable at the same path on the workers).
            episode_id: The id to give it (an episode that has it is closed first).

        Raises:
            BrokerUnavailable: no episode worker is alive, or Redis cannot be reached.
            CapacityExceeded: every live worker is full.
            BrokerError: the workers tried died while opening it (retry).
            TaskError: the task cannot be played.
        """
        if episode_id is not None:
            with contextlib.suppress(EpisodeNotFound):
                await self.close(episode_id)
        workers = await self.workers()
        self._live = sum(int(info.get("live", 0)) for info in workers.values())
        if not workers:
            raise BrokerUnavailable(
                f"no episode worker is alive on {redact(self.url)} (prefix "
                f"{self.keys.prefix!r}): start one with 'execgym episode-worker --broker "
                f"{redact(self.url)}'"
            )
        room = sorted(
            workers,
            key=lambda name: (
                int(workers[name].get("live", 0)) - int(workers[name].get("max_episodes", 1))
            ),
        )
        chosen = [name for name in room if _free(workers[name]) > 0][: self.open_attempts]
        if not chosen:
            raise CapacityExceeded(
                f"every episode worker is full ({self._live} live episodes on "
                f"{len(workers)} workers): finish or DELETE one, or add workers",
                1,
            )
        episode_id = episode_id or uuid.uuid4().hex
        request = {"op": "open", "episode_id": episode_id, "task": _task_json(task)}
        failures: list[str] = []
        last_full: CapacityExceeded | None = None
        for worker in chosen:
            try:
                reply = await self._ask(worker, request)
                raise_reply(reply, worker)
            except _WorkerGone:
                failures.append(f"{worker} died while opening it")
                continue
            except CapacityExceeded as error:
                failures.append(f"{worker} was full")
                last_full = error
                continue
            self.opened += 1
            self._live += 1
            return episode_id, dict(reply["observation"])
        if last_full is not None and all(f.endswith("was full") for f in failures):
            raise last_full
        raise BrokerError(
            f"the episode could not be opened: {'; '.join(failures)}; retry (nothing was kept)"
        )

    async def step(self, episode_id: str, action: Mapping[str, Any]) -> StepOutcome:
        """Forward one action to the episode's worker; see ``EpisodeRegistry.step``.

        If the worker is gone (before or while the step runs), the episode ends here
        with reward ``None`` and the reason (:func:`~execgym.broker.episode_records.
        masked_end`).

        Raises:
            EpisodeNotFound: no such episode (never opened, deleted, reclaimed idle).
            EpisodeOver: it has ended (the message gives its reward, and the reason
                when its worker died).
            BrokerUnavailable: Redis cannot be reached.
        """
        view = view_of(episode_id, await self._record(episode_id))
        if view.state == "finished":
            why = f": {view.reason}" if view.reason else ""
            raise EpisodeOver(
                f"episode {episode_id} has ended (reward {view.reward}){why}; open a new one"
            )
        worker = view.worker or ""
        try:
            reply = await self._ask(
                worker, {"op": "step", "episode_id": episode_id, "action": dict(action)}
            )
        except _WorkerGone:
            lost = await self._lose(episode_id, worker)
            self.finished["truncated"] += 1
            return masked_end(lost, str(action.get("tool") or action.get("name") or ""))
        raise_reply(reply, worker)
        outcome = outcome_of(reply)
        self.steps_taken += 1
        if outcome.terminated or outcome.truncated:
            self.finished["terminated" if outcome.terminated else "truncated"] += 1
            if outcome.reward is not None:
                self.final_reward_sum += outcome.reward
                self.final_rewards += 1
        return outcome

    async def get_view(self, episode_id: str) -> EpisodeView:
        """The episode's state from its record (a running one whose worker is gone ends).

        The episode whose worker's heartbeat is gone is ended masked first.

        Raises:
            EpisodeNotFound: no such episode.
            BrokerUnavailable: Redis cannot be reached.
        """
        view = view_of(episode_id, await self._record(episode_id))
        if view.state == "running" and not await self._alive(view.worker or ""):
            return await self._lose(episode_id, view.worker or "")
        return view

    async def close(self, episode_id: str) -> EpisodeView:
        """Close the episode on its worker (if alive) and forget its record; its last state.

        Raises:
            EpisodeNotFound: no such episode.
            BrokerUnavailable: Redis cannot be reached.
        """
        view = await self.get_view(episode_id)
        if view.state == "running" and view.worker:
            with contextlib.suppress(_WorkerGone):
                reply = await self._ask(view.worker, {"op": "close", "episode_id": episode_id})
                raise_reply(reply, view.worker)
        with redis_errors(self.url, "forget an episode"):
            await self.redis.delete(self.keys.episode(episode_id))
        return view

    async def aclose(self) -> None:
        """Close the Redis connections (the episodes stay on their workers)."""
        await self.redis.aclose()

    async def _record(self, episode_id: str) -> dict[str, str]:
        with redis_errors(self.url, "read an episode's record"):
            record = await self.redis.hgetall(self.keys.episode(episode_id))
        if not record:
            raise EpisodeNotFound(
                f"no episode {episode_id!r}: never opened, deleted, or reclaimed after its "
                "worker's idle timeout; open a new one"
            )
        return {str(name): str(value) for name, value in record.items()}

    async def _alive(self, worker: str) -> bool:
        with redis_errors(self.url, "read an episode worker's heartbeat"):
            return bool(await self.redis.exists(self.keys.episode_host(worker)))

    async def _lose(self, episode_id: str, worker: str) -> EpisodeView:
        """Mark the episode ended masked if ``worker``'s heartbeat is gone; its view."""
        reason = lost_reason(worker, HEARTBEAT_GONE)
        with redis_errors(self.url, "end an episode whose worker is gone"):
            marked = await self._mark_lost(
                keys=[self.keys.episode(episode_id), self.keys.episode_host(worker)],
                args=[reason, time.time(), LOST_TTL_S, "0"],
            )
        if marked == 1:
            log.warning("episode_lost episode_id=%s worker=%s", episode_id, worker)
        return view_of(episode_id, await self._record(episode_id))

    async def _ask(self, worker: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``request`` to ``worker`` and wait for its answer while it is alive.

        Raises:
            _WorkerGone: its heartbeat is gone (before the request, or while waiting).
        """
        if not await self._alive(worker):
            raise _WorkerGone(worker)
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
            if not await self._alive(worker):
                raise _WorkerGone(worker)


def _free(info: Mapping[str, Any]) -> int:
    return int(info.get("max_episodes", 1)) - int(info.get("live", 0))


def _task_json(task: Any) -> dict[str, Any]:
    """A task as JSON for the worker: a pydantic model's dump, or a dataclass's fields."""
    dump = getattr(task, "model_dump", None)
    if dump is not None:
        return dict(dump(mode="json"))
    if dataclasses.is_dataclass(task) and not isinstance(task, type):
        return dataclasses.asdict(task)
    raise TaskError(f"an episode worker plays RepoTasks, not {type(task).__name__}")

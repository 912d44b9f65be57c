"""An episode worker: holds agent episodes' sandbox sessions for the service's replicas.

``execgym episode-worker --broker redis://HOST:PORT/DB`` runs one. It keeps up to
``max_episodes`` episodes in an :class:`~execgym.episodes.registry.EpisodeRegistry`
of its own, takes the requests (``open``, ``step``, ``close``) that any replica of
``execgym serve`` pushes on its list (``<prefix>:episode-in:<name>``), and answers each
on the request's own list. It writes every episode's record
(:mod:`execgym.broker.episode_records`) after each step, so any replica can answer
``GET`` and route the next step here, and a heartbeat key with a TTL
(``heartbeat_ttl_s``) whose absence tells the replicas it is gone.

- Killed outright, its heartbeat expires and the first replica that touches one of
  its episodes ends it with reward ``None`` (masked) and the reason.
- Stopped (SIGTERM), it finishes the requests in progress for up to
  ``drain_timeout_s``, then ends every episode it still holds the same way, with the
  reason "shut down", and closes their sandboxes.

The episodes' sessions are this host's sandboxes (bwrap); the agent's commands cannot
reach Redis (no network in a session), so nothing they do can write a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from execgym.broker.episode_records import (
    LOST_TTL_S,
    MARK_LOST,
    UPDATE,
    connect,
    error_reply,
    lost_reason,
    opened_record,
    outcome_json,
    record_fields,
    redis_errors,
)
from execgym.broker.keys import DEFAULT_PREFIX, Keys
from execgym.broker.worker import default_name
from execgym.episodes.protocol import EnvFactory
from execgym.episodes.registry import EpisodeRegistry, StepOutcome, task_id_of
from execgym.errors import ConfigError, EpisodeOver, Error

log = logging.getLogger("execgym.episode_worker")

REPLY_TTL_S = 300
"""Seconds an answer waits on its list for the replica that asked (then it is dropped)."""


@dataclass(frozen=True, slots=True)
class EpisodeHostSettings:
    """How an episode worker runs.

    Args:
        max_episodes: Most live episodes (sandbox sessions) at once; past it an open
            gets 429 with ``Retry-After`` (another worker is chosen first when one has
            room).
        idle_timeout_s: Seconds without a step after which an episode is closed and its
            record forgotten.
        heartbeat_ttl_s: Life of the heartbeat key, refreshed every third of it: how
            long after this worker dies its episodes are found lost. Default 10 s.
        block_s: Longest wait for a request in one read.
        drain_timeout_s: On stop, how long requests in progress may take.
        name: Unique per process (default ``<host>-<pid>-<random>``).

    Raises:
        ConfigError: if a number is not positive.
    """

    max_episodes: int = 8
    idle_timeout_s: float = 300.0
    heartbeat_ttl_s: float = 10.0
    block_s: float = 1.0
    drain_timeout_s: float = 30.0
    name: str = field(default_factory=default_name)

    def __post_init__(self) -> None:
        numbers = (self.max_episodes, self.idle_timeout_s, self.heartbeat_ttl_s, self.block_s)
        if min(numbers) <= 0 or self.drain_timeout_s < 0:
            raise ConfigError(
                "max_episodes, idle_timeout_s, heartbeat_ttl_s and block_s must be "
                "positive, drain_timeout_s not negative"
            )


def _repo_task(record: Any) -> Any:
    from execgym.episodes.task import parse_repo_task

    return parse_repo_task(record, source="task")


class EpisodeHost:
    """Serves episode requests from Redis until stopped; see the module docstring.

    Args:
        url: ``redis://HOST:PORT/DB``: the Redis the service's replicas use.
        env_factory: Builds an episode for a task (:func:`~execgym.episodes.protocol.
            local_env_factory` in ``execgym episode-worker``; tests pass fakes).
        settings: Capacity, idle timeout, heartbeat.
        prefix: Start of every key (:class:`~execgym.broker.keys.Keys`).
        task_of: Reads the task of an ``open`` request (its JSON); a
            :class:`~execgym.episodes.task.RepoTask` by default.

    Raises:
        BrokerUnavailable: for a URL that is not a Redis URL.
    """

    def __init__(
        self,
        url: str,
        env_factory: EnvFactory,
        settings: EpisodeHostSettings | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        task_of: Callable[[Any], Any] | None = None,
    ) -> None:
        self.url = url
        self.task_of = task_of or _repo_task
        self.settings = settings or EpisodeHostSettings()
        self.name = self.settings.name
        self.keys = Keys(prefix)
        self.registry = EpisodeRegistry(
            env_factory,
            max_episodes=self.settings.max_episodes,
            idle_timeout_s=self.settings.idle_timeout_s,
            clock=time.monotonic,
        )
        self.redis = connect(url, timeout_s=self.settings.block_s)
        self._update = self.redis.register_script(UPDATE)
        self._mark_lost = self.redis.register_script(MARK_LOST)
        self._handlers: set[asyncio.Task[None]] = set()

    async def beat(self) -> None:
        """Write the heartbeat (``{name, host, pid, live, max_episodes, at}``) once."""
        value = json.dumps(
            {
                "name": self.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "live": self.registry.live,
                "max_episodes": self.settings.max_episodes,
                "at": time.time(),
            }
        )
        ttl_ms = max(1, round(self.settings.heartbeat_ttl_s * 1000))
        with redis_errors(self.url, "write the episode worker's heartbeat"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.set(self.keys.episode_host(self.name), value, px=ttl_ms)
                pipe.sadd(self.keys.episode_hosts, self.name)
                await pipe.execute()

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_ttl_s / 3)
            try:
                await self.beat()
            except Exception:  # Redis away a moment: the next beat may reach it
                log.exception("episode_heartbeat_failed worker=%s", self.name)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve requests until ``stop`` is set, then drain and end what is left.

        Raises:
            BrokerUnavailable: if Redis cannot be reached at start-up.
        """
        await self.beat()
        log.info("episode_worker_started worker=%s", self.name)
        beating = asyncio.create_task(self._beat_forever(), name="execgym-episode-heartbeat")
        queue = self.keys.episode_requests(self.name)
        try:
            while not stop.is_set():
                try:
                    with redis_errors(self.url, "read episode requests"):
                        item = await self.redis.blpop([queue], timeout=self.settings.block_s)
                except Exception:
                    log.exception("episode_read_failed worker=%s", self.name)
                    await asyncio.sleep(self.settings.block_s)
                    continue
                if item is not None:
                    self._spawn(str(item[1]))
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            await self.shutdown("shut down (it was stopped)")

    def _spawn(self, raw: str) -> None:
        handler = asyncio.create_task(self._handle(raw))
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)

    async def _handle(self, raw: str) -> None:
        try:
            request = json.loads(raw)
            reply_to = self.keys.episode_reply(str(request["id"]))
        except (ValueError, KeyError, TypeError):
            log.error("episode_request_malformed worker=%s request=%.200r", self.name, raw)
            return
        live = self.registry.live
        try:
            reply = await self.serve(request)
            if self.registry.live != live:  # the replicas choose by it: tell them now
                with contextlib.suppress(Error):  # the next beat will
                    await self.beat()
        except Exception as error:  # every failure is answered; the replica decides
            op = request.get("op")
            log.info("episode_request_failed worker=%s op=%s: %s", self.name, op, error)
            reply = error_reply(error)
        try:
            with redis_errors(self.url, "answer an episode request"):
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.rpush(reply_to, json.dumps(reply))
                    pipe.expire(reply_to, REPLY_TTL_S)
                    await pipe.execute()
        except Exception:
            log.exception("episode_reply_failed worker=%s", self.name)

    async def serve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Carry out one request; the ``{"ok": true, ...}`` answer.

        Raises:
            Error: what the registry raises (full, no such episode, ended, bad task).
            KeyError: a request without the fields its ``op`` needs.
        """
        op, episode_id = request["op"], str(request["episode_id"])
        if op == "open":
            task = self.task_of(request["task"])
            _, observation = await self.registry.open(task, episode_id=episode_id)
            record = opened_record(self.name, task_id_of(task), time.time())
            await self._write(episode_id, fresh=True, **record)
            return {"ok": True, "observation": observation}
        if op == "step":
            outcome = await self.registry.step(
                episode_id, request["action"], request_id=request.get("request_id")
            )
            return await self._stepped(episode_id, outcome)
        if op == "close":
            with contextlib.suppress(Exception):  # gone already: reclaimed idle
                await self.registry.close(episode_id)
            with redis_errors(self.url, "forget an episode"):
                await self.redis.delete(self.keys.episode(episode_id))
            return {"ok": True}
        raise KeyError(f"unknown op {op!r}")

    async def _stepped(self, episode_id: str, outcome: StepOutcome) -> dict[str, Any]:
        view = self.registry.get(episode_id)
        written = await self._write(
            episode_id,
            state=view.state,
            steps=view.steps,
            reward=view.reward,
            terminated=view.terminated,
            truncated=view.truncated,
            used_at=time.time(),
        )
        if not written:  # a replica found this worker gone meanwhile: it stays ended
            with contextlib.suppress(Exception):
                await self.registry.close(episode_id)
            raise EpisodeOver(
                f"episode {episode_id} was ended by the service while this step ran "
                f"(its worker {self.name} had missed its heartbeat); its reward is null"
            )
        return {"ok": True, **outcome_json(outcome)}

    async def _write(self, episode_id: str, *, fresh: bool = False, **values: Any) -> bool:
        key = self.keys.episode(episode_id)
        ttl_s = str(max(1, round(self.settings.idle_timeout_s)))
        with redis_errors(self.url, "write an episode's record"):
            if fresh:
                await self.redis.delete(key)
            return bool(await self._update(keys=[key], args=[ttl_s, *record_fields(**values)]))

    async def shutdown(self, why: str) -> None:
        """Drain requests in progress, end every episode still held (masked), close all."""
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self.settings.drain_timeout_s)
        for handler in list(self._handlers):
            handler.cancel()
        reason = lost_reason(self.name, why)
        with contextlib.suppress(Exception):  # Redis gone too: the heartbeat expires
            await self.redis.delete(self.keys.episode_host(self.name))
            await self.redis.srem(self.keys.episode_hosts, self.name)
        for episode_id in self.registry.ids():
            with contextlib.suppress(Exception):
                await self._mark_lost(
                    keys=[self.keys.episode(episode_id), self.keys.episode_host(self.name)],
                    args=[reason, time.time(), LOST_TTL_S, "1"],
                )
        await self.registry.aclose()
        with contextlib.suppress(Exception):
            await self.redis.delete(self.keys.episode_requests(self.name))
        await self.redis.aclose()
        log.info("episode_worker_stopped worker=%s", self.name)


async def serve_episodes(host: EpisodeHost) -> None:
    """Run ``host`` until SIGTERM or SIGINT (what ``execgym episode-worker`` runs).

    The first signal stops taking requests and drains (see :meth:`EpisodeHost.shutdown`).

    Raises:
        BrokerUnavailable: if Redis cannot be reached at start-up.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    try:
        await host.run(stop)
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(number)

"""Agent episodes on a Ray cluster: sessions on episode actors, routing in a named actor.

``execgym serve`` with ``EXECGYM_SERVER_EPISODE_BROKER=ray`` (or ``ray://HOST:PORT``)
attaches to the cluster, as a trainer's driver does, and keeps no episode itself:
:class:`RayEpisodes` opens each on an :class:`~execgym.broker.ray_episode_actors.
EpisodeActor` (one per alive node by default, placed with SPREAD, started by the first
front end that needs them) and finds it again for every later call through the
:class:`~execgym.broker.ray_episode_actors.EpisodeDirectory`, a named actor holding
each episode's record. Both are detached: a replica (or driver) that dies loses
nothing, the next call through any other one reaches the same session. No Redis.

An episode actor that dies (killed, its node lost) is found by Ray: a call to it fails
with ``ActorDiedError``, or its name no longer resolves; the front end that finds it
ends the episode with reward ``None`` (masked) and the reason, as with Redis
(:mod:`execgym.broker.episode_routing`).

    >>> episodes = RayEpisodes("ray")                                   # doctest: +SKIP
    >>> episode_id, first = await episodes.open(task)                   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from execgym.broker.episode_records import lost_reason, view_of
from execgym.broker.episode_routing import EpisodeRouter, WorkerGone
from execgym.broker.ray_broker import NAMESPACE, connect
from execgym.broker.ray_episode_actors import EpisodeActor, EpisodeDirectory
from execgym.episodes.registry import EpisodeView
from execgym.errors import BrokerError, BrokerUnavailable, EpisodeNotFound

log = logging.getLogger(__name__)

DIRECTORY_NAME = "execgym-episode-directory"
"""The episode directory's actor name, in the :data:`~execgym.broker.ray_broker.NAMESPACE`."""

ACTOR_GONE = "is gone (Ray reports the actor dead: it was killed, or its node was lost)"
"""Why, in :func:`~execgym.broker.episode_records.lost_reason`, when an actor died."""


class RayEpisodes(EpisodeRouter):
    """Episodes on Ray actors; an :class:`~execgym.episodes.registry.Episodes`.

    Args:
        url: ``ray`` (attach to the running cluster) or ``ray://HOST:PORT``.
        actors: Episode actors to keep (default: one per alive node); missing ones are
            started at the next open.
        max_episodes: Live episodes per actor.
        cpus_per_actor: CPUs each actor reserves in Ray's accounting.
        idle_timeout_s: Seconds without a step before an episode is closed.
        open_attempts: Actors tried in turn for one open.
        start_timeout_s: How long new actors may take to be placed and start; then
            the open fails (503) naming the likely cause (no free CPUs).

    Raises:
        ConfigError: Ray is not installed, or the URL is not a Ray URL.
        BrokerUnavailable: no cluster answers (on first use).
    """

    def __init__(
        self,
        url: str = "ray",
        *,
        actors: int | None = None,
        max_episodes: int = 8,
        cpus_per_actor: float = 1.0,
        idle_timeout_s: float = 300.0,
        open_attempts: int = 2,
        start_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(open_attempts=open_attempts)
        self.start_timeout_s = start_timeout_s
        self.url = url
        self.actors = actors
        self.max_episodes = max_episodes
        self.cpus_per_actor = cpus_per_actor
        self.idle_timeout_s = idle_timeout_s
        self._directory: Any = None
        self._handles: dict[str, Any] = {}  # actor name -> handle

    def _ray(self) -> Any:
        return connect(self.url)

    def directory(self) -> Any:
        """The directory actor's handle (started, detached, if no front end has yet)."""
        if self._directory is None:
            ray = self._ray()
            self._directory = (
                ray.remote(EpisodeDirectory)
                .options(
                    name=DIRECTORY_NAME,
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    lifetime="detached",
                    num_cpus=0,
                )
                .remote(self.idle_timeout_s)
            )
        return self._directory

    async def _lookup(self, worker: str) -> Any | None:
        """The live actor of that name, asked of Ray (off the event loop: it blocks)."""
        ray = self._ray()

        def lookup() -> Any | None:
            try:
                return ray.get_actor(worker, namespace=NAMESPACE)
            except ValueError:  # no live actor has that name
                return None

        handle = await asyncio.to_thread(lookup)
        if handle is None:
            self._handles.pop(worker, None)
        else:
            self._handles[worker] = handle
        return handle

    async def _handle(self, worker: str) -> Any | None:
        """A known handle (a call through a dead one fails), else a lookup."""
        return self._handles.get(worker) or await self._lookup(worker)

    async def workers(self) -> dict[str, dict[str, Any]]:
        """The live episode actors and their load; starts the missing ones first."""
        directory = self.directory()
        loads: dict[str, dict[str, Any]] = {}
        for name in await directory.host_names.remote():
            load = await self._load(name)
            if load is None:
                await directory.forget_host.remote(name)
            else:
                loads[name] = load
        nodes = await asyncio.to_thread(self._ray().nodes)
        wanted = self.actors or max(1, sum(1 for node in nodes if node.get("Alive")))
        started = [f"execgym-episodes-{uuid.uuid4().hex[:8]}" for _ in range(wanted - len(loads))]
        for name in started:
            self._start(name)
        if started:
            await self._wait_placed(started, nodes)
        for name in started:
            await directory.register.remote(name)
            loads[name] = {"live": 0, "max_episodes": self.max_episodes}
        return loads

    async def _wait_placed(self, names: list[str], nodes: list[dict[str, Any]]) -> None:
        """Wait until the new actors answer; kill them and raise if they never do."""
        handles = [self._handles[name] for name in names]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(handle.load.remote() for handle in handles)),
                self.start_timeout_s,
            )
        except TimeoutError as error:
            ray = self._ray()
            for name, handle in zip(names, handles, strict=True):
                ray.kill(handle)
                self._handles.pop(name, None)
            cpus = sum(float(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive"))
            raise BrokerUnavailable(
                f"{len(names)} episode actor(s) of {self.cpus_per_actor:g} CPU(s) each were "
                f"not placed within {self.start_timeout_s:g} s: the cluster ({cpus:g} CPUs) "
                "may have none free; give fewer actors or a smaller cpus_per_actor"
            ) from error

    async def _load(self, name: str) -> dict[str, Any] | None:
        handle = await self._handle(name)
        if handle is None:
            return None
        import ray.exceptions

        try:
            return dict(await handle.load.remote())
        except ray.exceptions.RayActorError:
            self._handles.pop(name, None)
            return None

    def _start(self, name: str) -> None:
        ray = self._ray()
        self._handles[name] = (
            ray.remote(EpisodeActor)
            .options(
                name=name,
                namespace=NAMESPACE,
                lifetime="detached",  # outlives the front end that started it
                num_cpus=self.cpus_per_actor,
                scheduling_strategy="SPREAD",
                max_restarts=0,  # a restarted actor would hold none of its sessions
            )
            .remote(name, self.directory(), self.max_episodes, self.idle_timeout_s)
        )
        log.info("episode_actor_started name=%s", name)

    def no_worker(self) -> BrokerError:
        """Never raised in practice: missing actors are started at each open."""
        return BrokerUnavailable("no episode actor could be started on the Ray cluster")

    async def record(self, episode_id: str) -> dict[str, str]:
        """The episode's record from the directory; :class:`EpisodeNotFound` if none."""
        record = await self.directory().get.remote(episode_id)
        if record is None:
            raise EpisodeNotFound(
                f"no episode {episode_id!r}: never opened, deleted, or reclaimed after its "
                "actor's idle timeout; open a new one"
            )
        return dict(record)

    async def alive(self, worker: str) -> bool:
        """Whether an actor of that name is alive (Ray resolves the name)."""
        return await self._lookup(worker) is not None

    async def lose(self, episode_id: str, worker: str) -> EpisodeView:
        """End the episode masked (its actor is gone); its view."""
        record = await self.directory().lose.remote(episode_id, lost_reason(worker, ACTOR_GONE))
        if record is None:
            raise EpisodeNotFound(f"no episode {episode_id!r}")
        log.warning("episode_lost episode_id=%s actor=%s", episode_id, worker)
        return view_of(episode_id, record)

    async def ask(self, worker: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """Call the actor's method for ``request["op"]``; its reply.

        Raises:
            WorkerGone: the actor is dead (or its name resolves no more).
            BrokerError: the actor cannot be reached for now, though alive (retry).
        """
        handle = await self._handle(worker)
        if handle is None:
            raise WorkerGone(worker)
        op, episode_id = request["op"], request["episode_id"]
        if op == "open":
            call = handle.open.remote(episode_id, request["task"])
        elif op == "step":
            call = handle.step.remote(episode_id, request["action"], request.get("request_id"))
        else:
            call = handle.close.remote(episode_id)
        import ray.exceptions as exceptions

        try:
            return dict(await call)
        except exceptions.ActorDiedError as error:
            self._handles.pop(worker, None)
            raise WorkerGone(worker) from error
        except exceptions.RayActorError as error:  # unavailable a moment, or dead
            if not await self.alive(worker):
                raise WorkerGone(worker) from error
            raise BrokerError(f"episode actor {worker} cannot be reached now: {error}") from error

    async def forget(self, episode_id: str) -> None:
        """Delete the episode's record."""
        await self.directory().delete.remote(episode_id)

    async def terminate(self) -> None:
        """Close every episode actor's sessions and kill the actors and the directory.

        For tearing a deployment down (and tests): the episodes are gone afterwards.
        """
        import ray.exceptions

        ray, directory = self._ray(), self.directory()
        for name in await directory.host_names.remote():
            handle = await self._lookup(name)
            if handle is not None:
                try:
                    await asyncio.wait_for(handle.shutdown.remote(), 30)
                except (TimeoutError, ray.exceptions.RayActorError):
                    log.warning("episode_actor_shutdown_failed name=%s", name)
                ray.kill(handle)
        ray.kill(directory)
        self._directory = None

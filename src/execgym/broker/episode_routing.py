"""Episodes held by workers elsewhere, by id: what every transport of them shares.

:class:`EpisodeRouter` is an :class:`~execgym.episodes.registry.Episodes` (what the
service's routes drive) that keeps no session itself: it opens each episode on the live
worker with the most room, then reads the episode's record (:mod:`execgym.broker.
episode_records`) to find that worker for every later call. A transport says how to
read records, reach workers and tell whether one is alive:

- :class:`execgym.broker.episode_router.RoutedEpisodes`: records and requests in Redis,
  workers are ``execgym episode-worker`` processes, alive while their heartbeat key is;
- :class:`execgym.broker.ray_episodes.RayEpisodes`: records in a named Ray actor,
  workers are Ray actors, alive while Ray says so.

A worker found gone ends its running episodes with reward ``None`` (masked) and the
reason: the step that finds it is answered ``truncated`` with ``info["masked"]`` true
(:func:`~execgym.broker.episode_records.masked_end`), ``GET`` shows it, a later step
gets :class:`~execgym.errors.EpisodeOver` with it.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from execgym.broker.episode_records import masked_end, outcome_of, raise_reply, view_of
from execgym.episodes.registry import EpisodeView, StepOutcome
from execgym.errors import BrokerError, CapacityExceeded, EpisodeNotFound, EpisodeOver, TaskError


class WorkerGone(Exception):
    """The worker a request went to is gone; the router ends the episode masked."""


class EpisodeRouter(abc.ABC):
    """Opens, steps, reads and closes episodes held by workers; see the module doc.

    Args:
        open_attempts: Workers tried in turn for one open, when the first dies or is
            full.

    Counters (``opened``, ``steps_taken``, ``finished``, ``final_reward_sum``,
    ``final_rewards``) count what went through this front end; ``live`` is the sum of
    the workers' live episodes as of the latest open.

    Raises:
        ValueError: if ``open_attempts`` is below 1.
    """

    def __init__(self, *, open_attempts: int = 2) -> None:
        if open_attempts < 1:
            raise ValueError("open_attempts must be at least 1")
        self.open_attempts = open_attempts
        self.opened = 0
        self.steps_taken = 0
        self.finished = Counter[str]()
        self.reclaimed = 0  # the workers reclaim idle episodes; their records go
        self.final_reward_sum = 0.0
        self.final_rewards = 0
        self._live = 0

    @property
    def live(self) -> int:
        """Live episodes on every worker, as of the latest open (see the class doc)."""
        return self._live

    # -- what a transport provides

    @abc.abstractmethod
    async def workers(self) -> dict[str, dict[str, Any]]:
        """The live workers: name -> ``{"live": episodes, "max_episodes": ...}``."""
        raise NotImplementedError

    @abc.abstractmethod
    def no_worker(self) -> BrokerError:
        """The error when no worker is alive (it says how to start one)."""
        raise NotImplementedError

    @abc.abstractmethod
    async def record(self, episode_id: str) -> dict[str, str]:
        """The episode's record.

        Raises:
            EpisodeNotFound: there is none.
        """
        raise NotImplementedError

    @abc.abstractmethod
    async def alive(self, worker: str) -> bool:
        """Whether ``worker`` is alive."""
        raise NotImplementedError

    @abc.abstractmethod
    async def lose(self, episode_id: str, worker: str) -> EpisodeView:
        """End the episode masked if ``worker`` is gone (atomically); its view."""
        raise NotImplementedError

    @abc.abstractmethod
    async def ask(self, worker: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``request`` to ``worker``; its reply.

        Raises:
            WorkerGone: the worker is gone (before the request, or while it ran).
        """
        raise NotImplementedError

    @abc.abstractmethod
    async def forget(self, episode_id: str) -> None:
        """Delete the episode's record."""
        raise NotImplementedError

    async def aclose(self) -> None:  # noqa: B027 - a default: not every transport holds any
        """Release this front end's connections (the episodes stay on their workers)."""

    # -- the Episodes interface

    async def open(self, task: Any, *, episode_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """Open an episode on the live worker with the most room; see ``EpisodeRegistry.open``.

        Args:
            task: A resolved :class:`~execgym.episodes.task.RepoTask` (sent as JSON:
                its ``repo`` must be readable at the same path on the workers).
            episode_id: The id to give it (an episode that has it is closed first).

        Raises:
            BrokerUnavailable: no episode worker is alive, or the transport is down.
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
            raise self.no_worker()
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
                reply = await self.ask(worker, request)
                raise_reply(reply, worker)
            except WorkerGone:
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

    async def step(
        self, episode_id: str, action: Mapping[str, Any], *, request_id: str | None = None
    ) -> StepOutcome:
        """Forward one action to the episode's worker; see ``EpisodeRegistry.step``.

        ``request_id`` makes a retry safe: the worker answers a step sent again with
        the id of the episode's latest step with that step's outcome, without running
        it twice (:meth:`EpisodeRegistry.step <execgym.episodes.registry.EpisodeRegistry.step>`).
        If the worker is gone (before or while the step runs), the episode ends here
        with reward ``None`` and the reason (:func:`~execgym.broker.episode_records.
        masked_end`).

        Raises:
            EpisodeNotFound: no such episode (never opened, deleted, reclaimed idle).
            EpisodeOver: it has ended (the message gives its reward, and the reason
                when its worker died).
            BrokerUnavailable: the transport (Redis, Ray) cannot be reached.
        """
        view = view_of(episode_id, await self.record(episode_id))
        if view.state == "finished":
            why = f": {view.reason}" if view.reason else ""
            raise EpisodeOver(
                f"episode {episode_id} has ended (reward {view.reward}){why}; open a new one"
            )
        worker = view.worker or ""
        try:
            request = {"op": "step", "episode_id": episode_id, "action": dict(action)}
            reply = await self.ask(worker, {**request, "request_id": request_id})
        except WorkerGone:
            lost = await self.lose(episode_id, worker)
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
            BrokerUnavailable: the transport (Redis, Ray) cannot be reached.
        """
        view = view_of(episode_id, await self.record(episode_id))
        if view.state == "running" and not await self.alive(view.worker or ""):
            return await self.lose(episode_id, view.worker or "")
        return view

    async def close(self, episode_id: str) -> EpisodeView:
        """Close the episode on its worker (if alive) and forget its record; its last state.

        Raises:
            EpisodeNotFound: no such episode.
            BrokerUnavailable: the transport (Redis, Ray) cannot be reached.
        """
        view = await self.get_view(episode_id)
        if view.state == "running" and view.worker:
            with contextlib.suppress(WorkerGone):
                reply = await self.ask(view.worker, {"op": "close", "episode_id": episode_id})
                raise_reply(reply, view.worker)
        await self.forget(episode_id)
        return view


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

"""Live agent episodes by id: opened, stepped, reclaimed when idle, closed on shutdown.

:class:`EpisodeRegistry` is what ``/v1/episodes``, the OpenEnv-style ``/reset`` and
``/step`` and the verl tool share. It holds at most ``max_episodes`` live episodes
(each one a sandbox session); opening one more raises
:class:`~execgym.errors.CapacityExceeded` with a retry delay (HTTP 429 +
``Retry-After``). An episode without a step for ``idle_timeout_s`` is closed by the
reaper and forgotten. An episode that ends (terminated or truncated) frees its sandbox
at once and keeps only its outcome, readable until it is deleted or idle for
``idle_timeout_s`` as well.

It imports nothing of FastAPI, so adapters can use it without the HTTP service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from execgym.episodes.protocol import EnvFactory, EpisodeEnv
from execgym.errors import CapacityExceeded, EpisodeNotFound, EpisodeOver

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 60
"""The longest ``Retry-After`` advised when the registry is full."""


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """An episode as callers see it.

    Attributes:
        episode_id: Its id.
        task_id: The task it plays.
        state: ``running`` or ``finished`` (terminated or truncated).
        steps: Steps taken.
        reward: Reward of the last step (the final one once finished); ``None`` before
            any step, and when the final reward is masked (our failure, not the agent's).
        terminated: The task is over (submitted, or failed for good).
        truncated: Stopped by a budget (steps or time).
        idle_s: Seconds since the last call.
        age_s: Seconds since it was opened.
        worker: The worker holding its session, when episodes are routed to workers
            (:mod:`execgym.broker.episode_router`); ``None`` in one process.
        reason: Why it ended when not by the agent or its budgets (its worker died: the
            reward is ``None``, masked); ``None`` otherwise.
    """

    episode_id: str
    task_id: str
    state: str
    steps: int
    reward: float | None
    terminated: bool
    truncated: bool
    idle_s: float
    age_s: float
    worker: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step returned: Gymnasium's five values."""

    observation: dict[str, Any]
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Episodes(Protocol):
    """What the service's routes and status need of live episodes, wherever they run.

    :class:`EpisodeRegistry` keeps them in this process;
    :class:`execgym.broker.episode_router.RoutedEpisodes` forwards each call to the
    worker holding the episode's session (any replica of the service can), with the
    same errors. The counters are what this process saw (``/v1/status``, ``/metrics``).
    """

    opened: int
    steps_taken: int
    finished: Counter[str]
    reclaimed: int
    final_reward_sum: float
    final_rewards: int

    @property
    def live(self) -> int:
        """Episodes holding a sandbox."""
        ...

    async def open(self, task: Any, *, episode_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """Open an episode; see :meth:`EpisodeRegistry.open`."""
        ...

    async def step(
        self, episode_id: str, action: Mapping[str, Any], *, request_id: str | None = None
    ) -> StepOutcome:
        """Run one action; see :meth:`EpisodeRegistry.step`."""
        ...

    async def get_view(self, episode_id: str) -> EpisodeView:
        """The episode's state; see :meth:`EpisodeRegistry.get`."""
        ...

    async def close(self, episode_id: str) -> EpisodeView:
        """Close and forget the episode; see :meth:`EpisodeRegistry.close`."""
        ...

    async def aclose(self) -> None:
        """Release what this process holds (shutdown)."""
        ...


@dataclass
class _Episode:
    episode_id: str
    task_id: str
    env: EpisodeEnv | None
    opened_at: float
    used_at: float
    steps: int = 0
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    busy: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    request_id: str | None = None  # of the latest step that named one
    answer: asyncio.Future[StepOutcome] | None = None  # that step's outcome

    @property
    def finished(self) -> bool:
        return self.terminated or self.truncated


def task_id_of(task: Any) -> str:
    """The id of a task object or record (``task_id``, else ``id``, else ``"inline"``)."""
    if isinstance(task, Mapping):
        return str(task.get("task_id") or task.get("id") or "inline")
    return str(getattr(task, "task_id", None) or getattr(task, "id", None) or "inline")


class EpisodeRegistry:
    """Live episodes by id, bounded in number and reclaimed when idle.

    Args:
        env_factory: Builds an episode for a resolved task.
        max_episodes: Most live (unfinished) episodes at once.
        idle_timeout_s: Seconds without a call after which an episode is closed and
            forgotten; finished episodes are forgotten after it too.
        clock: Monotonic seconds; injectable for tests.

    Counters since start (read by ``/v1/status`` and ``/metrics``): ``opened``,
    ``steps_taken``, ``finished`` (``{"terminated" | "truncated": episodes}``),
    ``reclaimed`` (closed idle), and ``final_reward_sum`` over ``final_rewards``
    finished episodes whose final reward is not masked.

    Raises:
        ValueError: if a number is not positive.
    """

    def __init__(
        self,
        env_factory: EnvFactory,
        *,
        max_episodes: int,
        idle_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_episodes < 1 or not (idle_timeout_s > 0 and math.isfinite(idle_timeout_s)):
            raise ValueError("max_episodes and idle_timeout_s must be positive")
        self._factory = env_factory
        self.max_episodes = max_episodes
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._episodes: dict[str, _Episode] = {}
        self._opening = 0
        self._reaper: asyncio.Task[None] | None = None
        self.reclaimed = 0
        self.opened = 0
        self.steps_taken = 0
        self.finished = Counter[str]()  # "terminated" or "truncated" -> episodes
        self.final_reward_sum = 0.0
        self.final_rewards = 0  # finished episodes whose final reward is not masked

    @property
    def live(self) -> int:
        """Episodes holding a sandbox (opened, not finished), plus those being opened."""
        return self._opening + sum(1 for e in self._episodes.values() if e.env is not None)

    def _retry_after_s(self) -> int:
        now = self._clock()
        waits = [
            e.used_at + self.idle_timeout_s - now
            for e in self._episodes.values()
            if e.env is not None and not e.busy
        ]
        return min(MAX_RETRY_AFTER_S, max(1, math.ceil(min(waits, default=MAX_RETRY_AFTER_S))))

    async def open(self, task: Any, *, episode_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """Open an episode on ``task`` and reset it.

        Args:
            task: A resolved task, for the env factory.
            episode_id: The id to give it (OpenEnv's ``/reset`` lets clients choose);
                an episode that has it already is closed first. A new id by default.

        Returns:
            ``(episode_id, first observation)``.

        Raises:
            CapacityExceeded: if ``max_episodes`` are live (retry after its delay).
            Error: if the episode could not be started (nothing is kept).
        """
        await self.reap()
        if episode_id is not None and episode_id in self._episodes:
            await self.close(episode_id)
        if self.live >= self.max_episodes:
            retry = self._retry_after_s()
            raise CapacityExceeded(
                f"{self.live} of {self.max_episodes} episodes are live; finish or DELETE one, "
                f"or retry in {retry} s (idle ones are reclaimed after {self.idle_timeout_s} s)",
                retry,
            )
        self._opening += 1
        env: EpisodeEnv | None = None
        try:
            env = self._factory(task)
            observation = await env.reset()
        except BaseException:
            if env is not None:
                with contextlib.suppress(Exception):
                    await env.aclose()
            raise
        finally:
            self._opening -= 1
        now = self._clock()
        episode_id = episode_id or uuid.uuid4().hex
        previous = self._episodes.pop(episode_id, None)  # a concurrent reset of the same id
        if previous is not None:
            await self._close_env(previous)
        self._episodes[episode_id] = _Episode(episode_id, task_id_of(task), env, now, now)
        self.opened += 1
        self._ensure_reaper()
        return episode_id, observation

    def _find(self, episode_id: str) -> _Episode:
        episode = self._episodes.get(episode_id)
        if episode is None:
            raise EpisodeNotFound(
                f"no episode {episode_id!r}: never opened, deleted, or reclaimed after "
                f"{self.idle_timeout_s} s idle; open a new one"
            )
        return episode

    async def step(
        self, episode_id: str, action: Mapping[str, Any], *, request_id: str | None = None
    ) -> StepOutcome:
        """Run one action; steps of one episode run one at a time, in arrival order.

        An episode that ends here frees its sandbox at once.

        Args:
            episode_id: The episode.
            action: The tool call.
            request_id: The caller's id for this step (OpenEnv's ``request_id``): a
                step sent again with the id of the episode's latest step is not run
                again but answered that step's outcome (awaited if it is still
                running), so a client that lost the answer (its connection, or the
                replica it went through, died) can retry without acting twice.

        Raises:
            EpisodeNotFound: if there is no such episode.
            EpisodeOver: if it has already ended.
        """
        episode = self._find(episode_id)
        if request_id is not None and request_id == episode.request_id and episode.answer:
            return await asyncio.shield(episode.answer)
        answer: asyncio.Future[StepOutcome] | None = None
        if request_id is not None:
            answer = asyncio.get_running_loop().create_future()
            episode.request_id, episode.answer = request_id, answer
        try:
            outcome = await self._step(episode, action)
        except BaseException as error:
            if answer is not None:
                if episode.answer is answer:  # a later retry runs it afresh
                    episode.request_id, episode.answer = None, None
                if isinstance(error, Exception):  # a retry waiting now gets the same error
                    answer.set_exception(error)
                    answer.exception()  # retrieved: no "never retrieved" warning
                else:
                    answer.cancel()
            raise
        if answer is not None:
            answer.set_result(outcome)
        return outcome

    async def _step(self, episode: _Episode, action: Mapping[str, Any]) -> StepOutcome:
        episode.busy += 1
        try:
            async with episode.lock:
                if episode.env is None:
                    raise EpisodeOver(
                        f"episode {episode.episode_id} has ended (reward {episode.reward}); "
                        "open a new one"
                    )
                observation, reward, terminated, truncated, info = await episode.env.step(action)
                episode.steps += 1
                self.steps_taken += 1
                episode.reward = None if reward is None else float(reward)
                episode.terminated, episode.truncated = bool(terminated), bool(truncated)
                if episode.finished:
                    self._count_end(episode)
                    env, episode.env = episode.env, None
                    await env.aclose()
        finally:
            episode.busy -= 1
            episode.used_at = self._clock()
        return StepOutcome(observation, episode.reward, bool(terminated), bool(truncated), info)

    def _count_end(self, episode: _Episode) -> None:
        self.finished["terminated" if episode.terminated else "truncated"] += 1
        if episode.reward is not None:
            self.final_reward_sum += episode.reward
            self.final_rewards += 1

    def get(self, episode_id: str) -> EpisodeView:
        """The episode's state.

        Raises:
            EpisodeNotFound: if there is no such episode.
        """
        episode = self._find(episode_id)
        now = self._clock()
        return EpisodeView(
            episode.episode_id,
            episode.task_id,
            "finished" if episode.finished else "running",
            episode.steps,
            episode.reward,
            episode.terminated,
            episode.truncated,
            now - episode.used_at,
            now - episode.opened_at,
        )

    async def get_view(self, episode_id: str) -> EpisodeView:
        """:meth:`get`, awaitable as :class:`Episodes` asks (a routed registry reads Redis)."""
        return self.get(episode_id)

    async def close(self, episode_id: str) -> EpisodeView:
        """Close the episode (its sandbox is reclaimed) and forget it.

        Returns:
            Its last state.

        Raises:
            EpisodeNotFound: if there is no such episode.
        """
        view = self.get(episode_id)
        episode = self._episodes.pop(episode_id)
        await self._close_env(episode)
        return view

    async def _close_env(self, episode: _Episode) -> None:
        env, episode.env = episode.env, None
        if env is not None:
            try:
                await env.aclose()
            except Exception:  # one failed close never keeps the others open
                log.exception("episode_close_failed episode_id=%s", episode.episode_id)

    async def reap(self) -> list[str]:
        """Close and forget every episode idle for ``idle_timeout_s``; their ids."""
        now = self._clock()
        idle = [
            e
            for e in self._episodes.values()
            if not e.busy and now - e.used_at >= self.idle_timeout_s
        ]
        for episode in idle:
            self._episodes.pop(episode.episode_id, None)
            await self._close_env(episode)
        if idle:
            self.reclaimed += len(idle)
            log.info("episodes_reclaimed count=%d", len(idle))
        return [e.episode_id for e in idle]

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap_forever(), name="execgym-episode-reaper")

    async def _reap_forever(self) -> None:
        interval_s = min(5.0, self.idle_timeout_s / 4)
        while self._episodes:
            await asyncio.sleep(interval_s)
            try:
                await self.reap()
            except Exception:  # the reaper must outlive any one bad close
                log.exception("episode_reap_failed")

    def __len__(self) -> int:
        return len(self._episodes)

    def ids(self) -> list[str]:
        """The ids of every episode held (running, or finished and not yet forgotten)."""
        return list(self._episodes)

    async def aclose(self) -> None:
        """Close every episode and stop the reaper (server shutdown)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        episodes, self._episodes = list(self._episodes.values()), {}
        await asyncio.gather(*(self._close_env(e) for e in episodes))

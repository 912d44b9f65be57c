"""What holds agent episodes on a Ray cluster: episode actors and the episode directory.

Plain classes, made Ray actors by :mod:`execgym.broker.ray_episodes` (so this module
imports without Ray, and every node imports it from its own installation).

- :class:`EpisodeActor`: holds up to ``max_episodes`` episodes' sandbox sessions (bwrap,
  on its node) in an :class:`~execgym.episodes.registry.EpisodeRegistry`, and writes
  each episode's record to the directory after every step.
- :class:`EpisodeDirectory`: one named actor per cluster holding every episode's record
  (the fields of :mod:`execgym.broker.episode_records`: the actor holding it, state,
  steps, reward, the reason it ended) and the names of the episode actors, so any
  front end finds the actor of an episode, and ends it masked when that actor is gone.

Both are detached actors: they outlive the front end (a replica of ``execgym serve``, a
trainer's driver) that started them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from execgym.broker.episode_records import (
    error_reply,
    opened_record,
    outcome_json,
    record_fields,
)
from execgym.episodes.registry import EpisodeRegistry, task_id_of


def _fields(**values: Any) -> dict[str, str]:
    flat = record_fields(**values)
    return dict(zip(flat[::2], flat[1::2], strict=True))


class EpisodeDirectory:
    """Every episode's record, and the episode actors' names (one named actor per cluster).

    Args:
        ttl_s: Seconds a record lives after its last write (then it is forgotten, as an
            idle episode's is).
    """

    def __init__(self, ttl_s: float = 3600.0) -> None:
        self.ttl_s = ttl_s
        self.records: dict[str, dict[str, str]] = {}
        self.hosts: set[str] = set()

    def register(self, name: str) -> None:
        """Add an episode actor's name."""
        self.hosts.add(name)

    def forget_host(self, name: str) -> None:
        """Drop an episode actor that is gone."""
        self.hosts.discard(name)

    def host_names(self) -> list[str]:
        """The episode actors' names, sorted."""
        return sorted(self.hosts)

    def put(self, episode_id: str, record: Mapping[str, str]) -> None:
        """Write a new episode's record (over any old one of that id)."""
        self._sweep()
        self.records[episode_id] = {**record, "written_at": str(time.time())}

    def update(self, episode_id: str, fields: Mapping[str, str]) -> bool:
        """Update a record unless it ended masked (its ``reason`` is set); ``True`` if done."""
        record = self.records.get(episode_id)
        if record is None or "reason" in record:
            return False
        record.update(fields, written_at=str(time.time()))
        return True

    def get(self, episode_id: str) -> dict[str, str] | None:
        """The record, or ``None``."""
        record = self.records.get(episode_id)
        return None if record is None else dict(record)

    def lose(self, episode_id: str, reason: str) -> dict[str, str] | None:
        """End a running episode masked with ``reason``; its record (``None`` if none)."""
        record = self.records.get(episode_id)
        if record is None:
            return None
        if record.get("state") != "finished":
            now = time.time()
            record.update(
                _fields(state="finished", truncated=True, terminated=False, reward=None),
                reason=reason,
                used_at=str(now),
                written_at=str(now),
            )
        return dict(record)

    def delete(self, episode_id: str) -> None:
        """Forget a record."""
        self.records.pop(episode_id, None)

    def _sweep(self) -> None:
        cutoff = time.time() - self.ttl_s
        old = [k for k, r in self.records.items() if float(r.get("written_at", 0)) < cutoff]
        for episode_id in old:
            del self.records[episode_id]


class EpisodeActor:
    """Holds episodes' sessions on its node; every method answers a reply dict.

    The replies are those of an ``execgym episode-worker`` (``{"ok": true, ...}`` or
    :func:`~execgym.broker.episode_records.error_reply`), read with
    :func:`~execgym.broker.episode_records.raise_reply`.

    Args:
        name: Its actor name (in the records' ``worker``).
        directory: The :class:`EpisodeDirectory` actor's handle.
        max_episodes: Most live episodes at once.
        idle_timeout_s: Seconds without a step before an episode is closed.
        env_options: Passed to :func:`execgym.episodes.make_async` for every episode.
    """

    def __init__(
        self,
        name: str,
        directory: Any,
        max_episodes: int = 8,
        idle_timeout_s: float = 300.0,
        env_options: Mapping[str, Any] | None = None,
    ) -> None:
        from execgym.episodes.protocol import local_env_factory

        self.name = name
        self.directory = directory
        self.registry = EpisodeRegistry(
            local_env_factory(**dict(env_options or {})),
            max_episodes=max_episodes,
            idle_timeout_s=idle_timeout_s,
        )
        self.max_episodes = max_episodes

    def load(self) -> dict[str, int]:
        """``{"live": episodes holding a session, "max_episodes": ...}``."""
        return {"live": self.registry.live, "max_episodes": self.max_episodes}

    async def open(self, episode_id: str, task: Mapping[str, Any]) -> dict[str, Any]:
        """Open (reset) an episode on the task given as JSON; its first observation."""
        from execgym.episodes.task import parse_repo_task

        try:
            parsed = parse_repo_task(dict(task), source="task")
            _, observation = await self.registry.open(parsed, episode_id=episode_id)
        except Exception as error:  # answered, as an episode worker does
            return error_reply(error)
        record = _fields(**opened_record(self.name, task_id_of(parsed), time.time()))
        await self.directory.put.remote(episode_id, record)
        return {"ok": True, "observation": observation}

    async def step(
        self, episode_id: str, action: Mapping[str, Any], request_id: str | None = None
    ) -> dict[str, Any]:
        """Run one action (once per ``request_id``); the outcome, after the record is written."""
        try:
            outcome = await self.registry.step(episode_id, dict(action), request_id=request_id)
            view = self.registry.get(episode_id)
        except Exception as error:
            return error_reply(error)
        fields = _fields(
            state=view.state,
            steps=view.steps,
            reward=view.reward,
            terminated=view.terminated,
            truncated=view.truncated,
            used_at=time.time(),
        )
        if not await self.directory.update.remote(episode_id, fields):
            await self.registry.close(episode_id)
            return {
                "ok": False,
                "kind": "over",
                "message": f"episode {episode_id} was ended (masked) while this step ran",
            }
        return {"ok": True, **outcome_json(outcome)}

    async def close(self, episode_id: str) -> dict[str, Any]:
        """Close an episode and forget its record."""
        try:
            await self.registry.close(episode_id)
        except Exception as error:
            return error_reply(error)
        finally:
            await self.directory.delete.remote(episode_id)
        return {"ok": True}

    async def shutdown(self) -> None:
        """Close every session (before the actor is killed)."""
        await self.registry.aclose()

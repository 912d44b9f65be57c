"""What the agent-framework adapters and the HTTP service need of an episode.

An episode is anything with the asynchronous Gymnasium-style interface of
:class:`execgym.episodes.AsyncEnv`: ``await reset() -> observation``,
``await step(action) -> (observation, reward, terminated, truncated, info)`` and
``await aclose()``. The adapters drive either a local one (built by
:func:`local_env_factory`) or one behind the HTTP service
(:class:`~execgym.integrations.episode_client.RemoteEpisodeEnv`), through the same
:class:`EpisodeEnv` protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from execgym.errors import ConfigError, TaskNotFound

StepTuple = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]
"""``(observation, reward, terminated, truncated, info)``, as Gymnasium's ``step``."""


class EpisodeEnv(Protocol):
    """One live episode: a stateful sandbox, a task, and the tools that act on it."""

    async def reset(self) -> dict[str, Any]:
        """Start the episode; the first observation (the problem statement...)."""
        ...

    async def step(self, action: Mapping[str, Any]) -> StepTuple:
        """Run one tool call: ``{"tool": name, "arguments": {...}}`` or OpenAI's shape."""
        ...

    async def aclose(self) -> None:
        """Reclaim the episode's sandbox; idempotent."""
        ...


EnvFactory = Callable[[Any], EpisodeEnv]
"""Builds a (not yet reset) episode for a resolved task."""


class TaskCatalog(Protocol):
    """Resolves the tasks an episode may be opened on."""

    def get(self, task_id: str) -> Any:
        """The known task ``task_id``.

        Raises:
            TaskNotFound: if there is none (the message lists the known ids).
        """
        ...

    def parse(self, record: Mapping[str, Any]) -> Any:
        """An inline task (a ``RepoTask`` as JSON).

        Raises:
            TaskError: if the record is not a valid task (the message says which field).
        """
        ...


def _episodes() -> Any:
    try:
        import execgym.episodes as episodes
    except ImportError as error:  # pragma: no cover - until the episode core is installed
        raise ConfigError(
            f"agent episodes need the execgym.episodes package ({error}); "
            "install an execgym that ships it"
        ) from error
    return episodes


def local_env_factory(**options: Any) -> EnvFactory:
    """Episodes run in this process's sandboxes (:mod:`execgym.episodes`).

    Args:
        options: Passed to :func:`execgym.episodes.make_async` for every episode.

    Raises:
        ConfigError: if :mod:`execgym.episodes` is not installed.
    """
    episodes = _episodes()

    def build(task: Any) -> EpisodeEnv:
        return episodes.make_async(task, **options)  # type: ignore[no-any-return]

    return build


def tool_schemas() -> list[dict[str, Any]]:
    """The episode tools in OpenAI's function-calling format (the local package's).

    Raises:
        ConfigError: if :mod:`execgym.episodes` is not installed.
    """
    return list(_episodes().tool_schemas())


class ShippedTasks:
    """The example tasks shipped with execgym, plus those of ``paths`` (``load_repo_tasks``).

    Args:
        paths: Task files or directories; loaded on first use.
    """

    def __init__(self, *paths: str) -> None:
        self._paths = paths
        self._tasks: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._tasks is None:
            episodes = _episodes()
            tasks = {task.task_id: task for task in episodes.example_tasks()}
            for path in self._paths:
                tasks.update({task.task_id: task for task in episodes.load_repo_tasks(path)})
            self._tasks = tasks
        return self._tasks

    def get(self, task_id: str) -> Any:
        """The task ``task_id``; see :meth:`TaskCatalog.get`."""
        tasks = self._load()
        if task_id not in tasks:
            raise TaskNotFound(
                f"unknown task_id {task_id!r}; known: {sorted(tasks)[:20]} "
                "(or send the task itself as 'task')"
            )
        return tasks[task_id]

    def parse(self, record: Mapping[str, Any]) -> Any:
        """An inline ``RepoTask``; see :meth:`TaskCatalog.parse`."""
        from pydantic import ValidationError

        from execgym.errors import TaskError

        try:
            return _episodes().RepoTask.model_validate(record)
        except ValidationError as error:
            problems = "; ".join(
                f"task.{'.'.join(str(p) for p in item['loc'])}: {item['msg']}"
                for item in error.errors()
            )
            raise TaskError(f"the inline task is not a valid RepoTask: {problems}") from error


MAX_TEXT_CHARS = 16_000
"""Longest observation text handed to a model by the adapters (the rest is cut, marked)."""


def observation_text(observation: Mapping[str, Any] | str | None) -> str:
    """An observation as the text a model reads in a tool message.

    A string field named ``text`` or ``output`` is used as is (the episode has already
    truncated it, with its marker); any other observation is compact JSON. Longer than
    :data:`MAX_TEXT_CHARS`, the text is cut with a marker naming how much was left out.
    """
    if observation is None:
        return ""
    if isinstance(observation, str):
        text = observation
    else:
        text = next(
            (
                observation[key]
                for key in ("text", "output")
                if isinstance(observation.get(key), str)
            ),
            None,
        ) or json.dumps(dict(observation), ensure_ascii=False, default=str)
    if len(text) > MAX_TEXT_CHARS:
        cut = len(text) - MAX_TEXT_CHARS
        text = text[:MAX_TEXT_CHARS] + f"\n[... {cut} more characters truncated]"
    return text

"""What the agent-framework adapters and the HTTP service need of an episode.

An episode is anything with the asynchronous Gymnasium-style interface of
:class:`execgym.episodes.AsyncEnv`: ``await reset() -> observation``,
``await step(action) -> (observation, reward, terminated, truncated, info)`` and
``await aclose()``. The adapters (:mod:`execgym.integrations.trl_env`,
:mod:`execgym.integrations.verl_tool`) and the service's routes
(:mod:`execgym.server.episode_routes`, :mod:`execgym.server.openenv`) drive either a
local one (built by :func:`local_env_factory`) or one behind the HTTP service
(:class:`~execgym.integrations.episode_client.RemoteEpisodeEnv`), through the same
:class:`EpisodeEnv` protocol; :class:`~execgym.episodes.registry.EpisodeRegistry` keeps
the live ones by id. The episode modules are imported when first used, so the service
starts without them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from execgym.errors import TaskError, TaskNotFound

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
    import execgym.episodes as episodes  # on first use: the service starts without it

    return episodes


def local_env_factory(**options: Any) -> EnvFactory:
    """Episodes run in this process's sandboxes (:mod:`execgym.episodes`).

    Args:
        options: Passed to :func:`execgym.episodes.make_async` for every episode.
    """
    episodes = _episodes()

    def build(task: Any) -> EpisodeEnv:
        return episodes.make_async(task, **options)  # type: ignore[no-any-return]

    return build


def tool_schemas() -> list[dict[str, Any]]:
    """The episode tools in OpenAI's function-calling format."""
    return list(_episodes().tool_schemas())


class ShippedTasks:
    """The example tasks shipped with execgym, plus those of ``paths`` (``load_repo_tasks``).

    An inline task (sent over HTTP) may only take its repository snapshot from where the
    known tasks keep theirs: the shipped examples' directory and the directories of
    ``paths``. A ``repo`` anywhere else on the server (``/etc``, ``~/.ssh``) is refused,
    or a client could copy server files into its sandbox and read them.

    Args:
        paths: Task files or directories; loaded on first use.
    """

    def __init__(self, *paths: str) -> None:
        self._paths = paths
        self._tasks: dict[str, Any] | None = None

    def _roots(self) -> list[Path]:
        from execgym.episodes.task import examples_dir

        roots = [Path(examples_dir())]
        for path in map(Path, self._paths):
            roots.append(path if path.is_dir() else path.parent)
        return [root.resolve() for root in roots]

    def _allowed_repo(self, repo: str) -> str:
        parsed = urlparse(repo)
        if parsed.scheme not in ("", "file"):
            raise TaskError(f"task.repo {repo!r}: give a snapshot path under a task directory")
        path = Path(unquote(parsed.path) if parsed.scheme else repo)
        for root in self._roots():
            candidate = (path if path.is_absolute() else root / path).resolve()
            if candidate.is_relative_to(root) and candidate.exists():
                return str(candidate)
        raise TaskError(
            f"task.repo {repo!r} is not a snapshot under this server's task directories "
            "(the shipped examples' and EXECGYM_SERVER_EPISODE_TASKS'); give a path relative "
            "to one of them"
        )

    def _load(self) -> dict[str, Any]:
        if self._tasks is None:
            episodes = _episodes()
            tasks = {task.id: task for task in episodes.example_tasks()}
            for path in self._paths:
                tasks.update({task.id: task for task in episodes.load_repo_tasks(path)})
            self._tasks = tasks
        return self._tasks

    def ids(self) -> list[str]:
        """The ids of the known tasks (what ``task_id`` may name)."""
        return sorted(self._load())

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
        record = dict(record)
        if isinstance(record.get("repo"), str):
            record["repo"] = self._allowed_repo(record["repo"])
        return _episodes().parse_repo_task(record, source="task")


MAX_TEXT_CHARS = 16_000
"""Longest observation text handed to a model by the adapters (the rest is cut, marked)."""


def observation_text(observation: Mapping[str, Any] | str | None) -> str:
    """An observation as the text a model reads in a tool message.

    A string field named ``text`` or ``output`` is used as is (the episode has already
    truncated it, with its marker), followed by the exit code of a command that failed;
    any other observation is compact JSON. The first observation (a problem statement)
    reads as the statement, the repository's files and its visible tests. Longer than
    :data:`MAX_TEXT_CHARS`, the text is cut with a marker naming how much was left out.
    """
    if observation is None:
        return ""
    if isinstance(observation, Mapping) and isinstance(observation.get("problem_statement"), str):
        return _first_text(observation)
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
        exit_code = observation.get("exit_code")
        if isinstance(exit_code, int) and exit_code != 0:
            text += f"\n[exit code {exit_code}]"
    return _bounded(text)


def _first_text(observation: Mapping[str, Any]) -> str:
    parts = [observation["problem_statement"].strip()]
    files = observation.get("files")
    if isinstance(files, list) and files:
        more = " (more not listed)" if observation.get("files_truncated") else ""
        parts.append("Files in the repository" + more + ":\n" + "\n".join(map(str, files)))
    tests = observation.get("visible_tests")
    if isinstance(tests, list) and tests:
        parts.append("Visible tests (run_tests runs them): " + ", ".join(map(str, tests)))
    return _bounded("\n\n".join(parts))


def _bounded(text: str) -> str:
    if len(text) > MAX_TEXT_CHARS:
        cut = len(text) - MAX_TEXT_CHARS
        text = text[:MAX_TEXT_CHARS] + f"\n[... {cut} more characters truncated]"
    return text

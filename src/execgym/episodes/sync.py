"""The blocking :class:`Env` (Gymnasium-style) and :func:`make`.

:class:`Env` wraps an :class:`~execgym.episodes.env.AsyncEnv` and runs it on an event
loop of its own, in a daemon thread (a :class:`~execgym.sync_bridge.BackgroundLoop`),
so plain synchronous code (a training loop, a notebook) can drive an episode::

    with execgym.make("example/pagination-page-count") as env:
        observation = env.reset()
        observation, reward, terminated, truncated, info = env.step(
            {"tool": "submit", "arguments": {}}
        )

In async code use :class:`AsyncEnv` directly (``make_async``).
"""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from execgym.episodes.env import AsyncEnv, StepResult
from execgym.episodes.task import RepoTask, example_tasks, find_task, parse_repo_task
from execgym.errors import TaskError
from execgym.sync_bridge import BackgroundLoop

T = TypeVar("T")


def as_task(task: RepoTask | dict[str, Any] | str) -> RepoTask:
    """A :class:`RepoTask` from itself, its JSON, or the id of an example task.

    The JSON may be a dict or a string holding a JSON object.

    Raises:
        TaskError: for invalid JSON or fields; TaskNotFound: for an unknown id.
    """
    if isinstance(task, RepoTask):
        return task
    if isinstance(task, str) and task.lstrip().startswith("{"):
        try:
            task = json.loads(task)
        except json.JSONDecodeError as error:
            raise TaskError(f"the task is not valid JSON: {error}") from error
    if isinstance(task, str):
        return find_task(task, example_tasks())
    return parse_repo_task(task)


class Env:
    """A blocking episode environment; see the module docstring and :class:`AsyncEnv`.

    Attributes:
        unwrapped: The :class:`AsyncEnv` it drives.
    """

    def __init__(self, env: AsyncEnv) -> None:
        self.unwrapped = env
        self._loop = BackgroundLoop(f"execgym-env-{env.task.id}")

    def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the environment's loop and return its result.

        For code written against :class:`AsyncEnv`, such as :meth:`ScriptedAgent.arun`.
        """
        return self._call(coroutine)

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop.closed:
            coroutine.close()
            raise RuntimeError("the environment is closed")
        return self._loop.run(coroutine)

    @property
    def task(self) -> RepoTask:
        """The episode's task."""
        return self.unwrapped.task

    def reset(self) -> dict[str, Any]:
        """Start a new episode; see :meth:`AsyncEnv.reset`."""
        return self._call(self.unwrapped.reset())

    def step(self, action: Any) -> StepResult:
        """One tool call; see :meth:`AsyncEnv.step`."""
        return self._call(self.unwrapped.step(action))

    def close(self) -> None:
        """Reclaim the session and stop the loop thread; idempotent."""
        if self._loop.closed:
            return
        try:
            self._call(self.unwrapped.aclose())
        finally:
            self._loop.close()

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def make_async(task: RepoTask | dict[str, Any] | str, **options: Any) -> AsyncEnv:
    """An :class:`AsyncEnv` for ``task`` (a task, its JSON, or an example's id).

    ``options`` are :class:`AsyncEnv`'s: ``reward``, ``limits``, ``idle_timeout_s``,
    ``max_observation_bytes``, ``grader``.
    """
    return AsyncEnv(as_task(task), **options)


def make(task: RepoTask | dict[str, Any] | str, **options: Any) -> Env:
    """A blocking :class:`Env` for ``task``; ``options`` as for :func:`make_async`.

    Raises:
        TaskError: if ``task`` is not a valid task; TaskNotFound for an unknown id.
    """
    return Env(make_async(task, **options))

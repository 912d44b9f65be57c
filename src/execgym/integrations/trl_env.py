"""Agent episodes as a TRL ``environment_factory`` class.

TRL's ``GRPOTrainer(environment_factory=...)`` (``trl/trainer/grpo_trainer.py``; the
contract in TRL's ``docs/source/openenv.md``) builds one environment per rollout slot
by calling the factory with no arguments, calls ``reset(**row)`` with the dataset row's
columns at the start of each episode (its string return is the first observation), and
exposes every public method but ``reset`` (``inspect.getmembers(env,
inspect.ismethod)``, names not starting with ``_``) as a tool, its schema built by
``transformers.utils.get_json_schema`` from the type hints and the Google-style
docstring. A tool that raises has its message fed back to the model. Reward functions
get the instances as ``environments``::

    from execgym.integrations.trl_env import episode_environment, episode_reward

    trainer = GRPOTrainer(
        model=..., train_dataset=dataset,             # rows: prompt, task_id
        reward_funcs=[episode_reward],
        environment_factory=episode_environment(base_url="http://execgym:8080"),
    )

The tool methods are exactly the episode tools (``run_command``, ``read_file``,
``write_file``, ``list_dir``, ``apply_patch``, ``run_tests``, ``submit``), with the
episode's argument names. The reward is :meth:`EpisodeEnvironment.get_reward` (and the
:attr:`EpisodeEnvironment.reward` attribute): 0.0 until ``submit`` (or the step budget)
ends the episode, then the hidden tests' reward; ``None`` when masked (TRL turns it into
NaN and leaves it out). TRL 1.8 and later (``GRPOTrainer.__init__`` in
``trl/trainer/grpo_trainer.py``) never expose ``reset`` or ``get_reward`` to the model:
an environment class with ``get_reward`` is a reward source of its own, so pass no
``reward_funcs`` for it (``episode_reward`` as well would count the reward twice)::

    trainer = GRPOTrainer(model=..., train_dataset=dataset,
                          environment_factory=episode_environment(base_url=...))

Older TRL releases do not know ``get_reward`` and would offer it to the model as a tool;
with them, give ``reward_funcs=[episode_reward]`` and an environment class without it:
``episode_environment(..., get_reward=False)``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, ClassVar

from execgym.episodes.protocol import EpisodeEnv, local_env_factory, observation_text
from execgym.sync_bridge import BackgroundLoop

_loop: BackgroundLoop | None = None
_lock = threading.Lock()
_clients: dict[tuple[str, str | None], Any] = {}


def _background() -> BackgroundLoop:
    global _loop
    with _lock:
        if _loop is None:
            _loop = BackgroundLoop("execgym-trl-env")
        return _loop


def _client(base_url: str, token: str | None) -> Any:
    """One connection pool per service, shared by every rollout slot (on the loop)."""
    from execgym.integrations.episode_client import EpisodeClient

    with _lock:
        if (base_url, token) not in _clients:
            _clients[base_url, token] = EpisodeClient(base_url, token=token)
        return _clients[base_url, token]


class EpisodeEnvironment:
    """One rollout slot of TRL: an episode per ``reset``, its tools as methods.

    Configure a subclass with :func:`episode_environment` (TRL calls the factory with
    no arguments). Class attributes:

    Attributes:
        base_url: An ``execgym serve`` to play the episodes on; ``None`` plays them in
            this process's sandboxes.
        token_env: The environment variable holding that service's token.
        task_id: The task when a row has no ``task_id`` (or ``task``) column.
        env_options: Options of :func:`execgym.episodes.make_async` (local episodes).
        reward: The episode's reward (0.0 until it ends; ``None`` if masked).
        done: Whether the episode has ended.
    """

    base_url: ClassVar[str | None] = None
    token_env: ClassVar[str] = "EXECGYM_SERVER_TOKEN"  # noqa: S105 (a variable's name, not a token)
    task_id: ClassVar[str | None] = None
    env_options: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self._env: EpisodeEnv | None = None
        self.reward: float | None = 0.0
        self.done = False
        self.steps = 0

    def _run(self, coroutine: Any) -> Any:
        return _background().run(coroutine)

    def _new_env(self, task: Any) -> EpisodeEnv:
        if self.base_url is None:
            return local_env_factory(**self.env_options)(task)
        client = _client(self.base_url, os.environ.get(self.token_env))
        if isinstance(task, dict):
            return client.env(task=task)  # type: ignore[no-any-return]
        return client.env(str(task))  # type: ignore[no-any-return]

    def reset(self, **kwargs: Any) -> str | None:
        """Start an episode on the row's task (``task_id`` or ``task`` column).

        Args:
            kwargs: The dataset row's columns, as TRL passes them.

        Returns:
            The problem statement, the repository's files and its visible tests.

        Raises:
            ValueError: if neither the row nor the class names a task.
        """
        task = kwargs.get("task") or kwargs.get("task_id") or self.task_id
        if not task:
            raise ValueError(
                "no task for the episode: give the dataset a task_id (or task) column, "
                "or episode_environment(task_id=...)"
            )
        self._close()
        self.reward, self.done, self.steps = 0.0, False, 0
        self._env = self._new_env(task)
        observation = self._run(self._env.reset())
        return observation_text(observation)

    def _act(self, tool: str, **arguments: Any) -> str:
        if self._env is None or self.done:
            raise ValueError("The episode is over: stop calling tools.")
        action = {"tool": tool, "arguments": arguments}
        observation, reward, terminated, truncated, _ = self._run(self._env.step(action))
        self.steps += 1
        self.reward = reward
        if terminated or truncated:
            self.done = True
            self._close()
        return observation_text(observation)

    def _get_reward(self) -> float | None:
        """The episode's reward: 0.0 until it ends; ``None`` when masked (our failure)."""
        return self.reward

    def _close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            self._run(env.aclose())

    def run_command(self, command: str, timeout_s: float = 30.0) -> str:
        """Run a shell command (bash) in the repository's root directory.

        Args:
            command: The shell command, run with bash -c.
            timeout_s: Seconds before the command is killed.

        Returns:
            The command's output and exit code.
        """
        return self._act("run_command", command=command, timeout_s=timeout_s)

    def read_file(self, path: str) -> str:
        """Read a text file of the repository.

        Args:
            path: Path relative to the repository root.

        Returns:
            The file's content.
        """
        return self._act("read_file", path=path)

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file of the repository with the given content.

        Args:
            path: Path relative to the repository root.
            content: The file's whole new content.

        Returns:
            What was written.
        """
        return self._act("write_file", path=path, content=content)

    def list_dir(self, path: str = ".") -> str:
        """List the entries of a directory of the repository.

        Args:
            path: Directory relative to the repository root.

        Returns:
            The entries, one a line.
        """
        return self._act("list_dir", path=path)

    def apply_patch(self, patch: str) -> str:
        """Apply a unified diff (as made by git diff or diff -u) to the repository.

        Args:
            patch: The unified diff.

        Returns:
            Whether it applied, and how.
        """
        return self._act("apply_patch", patch=patch)

    def run_tests(self) -> str:
        """Run the repository's visible tests with pytest.

        Returns:
            The test run's output.
        """
        return self._act("run_tests")

    def submit(self) -> str:
        """Submit the repository as it is now; the episode ends and is scored.

        Returns:
            The outcome of the hidden tests.
        """
        return self._act("submit")

    def __del__(self) -> None:
        # TRL drops environments without closing them; free the sandbox then.
        if self._env is not None and _loop is not None:
            with contextlib.suppress(Exception):  # never raise from a finalizer
                self._close()


def episode_environment(
    *,
    base_url: str | None = None,
    token_env: str = "EXECGYM_SERVER_TOKEN",  # noqa: S107 (a variable's name, not a token)
    task_id: str | None = None,
    get_reward: bool = True,
    **env_options: Any,
) -> type[EpisodeEnvironment]:
    """An :class:`EpisodeEnvironment` class to pass as TRL's ``environment_factory``.

    Args:
        base_url: An ``execgym serve`` playing the episodes; local sandboxes if ``None``.
        token_env: The variable holding its token (never put the token in code).
        task_id: The task of rows without a ``task_id`` column.
        get_reward: Give the class TRL's ``get_reward()`` method (TRL 1.8 and later read
            it as a reward source); ``False`` for older TRL, which would show it to the
            model as a tool (use ``reward_funcs=[episode_reward]`` then).
        env_options: For local episodes, options of :func:`execgym.episodes.make_async`.
    """
    attributes: dict[str, Any] = {
        "base_url": base_url,
        "token_env": token_env,
        "task_id": task_id,
        "env_options": dict(env_options),
    }
    if get_reward:
        attributes["get_reward"] = EpisodeEnvironment._get_reward
    return type("ConfiguredEpisodeEnvironment", (EpisodeEnvironment,), attributes)


def episode_reward(environments: list[EpisodeEnvironment], **kwargs: Any) -> list[float | None]:
    """TRL reward function: each rollout's episode reward (``None`` when masked)."""
    return [environment.reward for environment in environments]

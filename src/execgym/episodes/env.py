"""The episode environment's async core: one persistent sandbox session per episode.

:class:`AsyncEnv` follows Gymnasium's ``reset`` / ``step`` for text agents::

    async with AsyncEnv(task) as env:
        observation = await env.reset()
        observation, reward, terminated, truncated, info = await env.step(
            {"tool": "run_command", "arguments": {"command": "ls"}}
        )

``reset`` opens a fresh session (:func:`execgym.sandbox.open_session`), copies the
repo snapshot into its ``/work`` and runs the task's setup command. Each ``step`` is
one tool call (:mod:`execgym.episodes.tools`). The reward is 0.0 until the episode
ends: on ``submit`` (``terminated``), or when the step or time budget runs out
(``truncated``); either way the final tree is scored by the hidden tests
(:mod:`execgym.episodes.grading`) and the session is reclaimed at once. ``info`` then
holds the grade: ``fraction``, each test's outcome, the verdict. A grading that failed
on our side gives reward ``None`` and ``info["masked"]`` true: leave it out, never
count it as 0.

Inside the session ``python`` and ``python3`` are execgym's interpreter with pytest
importable, and ``pytest`` runs it; the network is off. A task that names an
``environment`` (:mod:`execgym.environments`) gets a session in that root file system
instead, with the environment's Python (and the packages its spec installed), and its
final tree is scored in a fresh sandbox of the same environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

from execgym.environments.model import Environment
from execgym.environments.mounts import interpreter
from execgym.environments.routing import resolve, with_environment
from execgym.episodes import observations
from execgym.episodes.actions import carry_out
from execgym.episodes.grading import Grade, Grader
from execgym.episodes.task import SKIPPED_NAMES, RepoTask, repo_files, tree_from_tar
from execgym.episodes.tools import TOOLS, ActionError, ToolCall, parse_action
from execgym.errors import SandboxError, TaskError
from execgym.judges.base import Verdict
from execgym.limits import Limits
from execgym.reward import RewardSpec
from execgym.sandbox import BASE_ENV
from execgym.sandbox.session import Session, SessionClosed, open_session
from execgym.toolchains import PYTHON_LIBRARIES_DIR

StepResult = tuple[dict[str, Any], "float | None", bool, bool, dict[str, Any]]
"""``(observation, reward, terminated, truncated, info)``."""

_BIN = "/tmp/.execgym/bin"
_SETUP_TIMEOUT_S = 300.0
_LISTED_FILES = 200


def _session_env() -> dict[str, str]:
    return {
        **BASE_ENV,
        "PATH": f"{_BIN}:{BASE_ENV['PATH']}",
        "PYTHONPATH": PYTHON_LIBRARIES_DIR,
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }


def _bin_script(python: str | None = None) -> str:
    python = python or os.path.realpath(sys.executable)
    return (
        f"mkdir -p {_BIN} && ln -sf {python} {_BIN}/python && ln -sf {python} {_BIN}/python3"
        f" && printf '#!/bin/sh\\nexec {python} -m pytest \"$@\"\\n' > {_BIN}/pytest"
        f" && chmod +x {_BIN}/pytest"
    )


def _tool_name(action: Any) -> str:
    """The tool an action names, for its observation (``"?"`` if it names none)."""
    if isinstance(action, dict):
        function = action.get("function")
        inner = function if isinstance(function, dict) else action
        name = inner.get("tool", inner.get("name"))
        if isinstance(name, str):
            return name[:100]
    return "?"


class AsyncEnv:
    """An agent episode on one :class:`RepoTask`; see the module docstring.

    Args:
        task: The task.
        reward: The reward specification (default: ``binary``).
        limits: Limits of the session (memory, processes, disk for the whole episode;
            per-command output and file size) and of the scoring run; the task's own
            limits apply over them.
        idle_timeout_s: The session closes itself after this long without a call.
        max_observation_bytes: Text an observation carries at most.
        grader: Scores final trees (share one between episodes to bound scoring).
    """

    def __init__(
        self,
        task: RepoTask,
        *,
        reward: RewardSpec | None = None,
        limits: Limits | None = None,
        idle_timeout_s: float = 300.0,
        max_observation_bytes: int = observations.DEFAULT_MAX_OBSERVATION_BYTES,
        grader: Grader | None = None,
    ) -> None:
        self.task = task
        self.reward_spec = reward
        self.limits = task.limits_over(limits or Limits(wall_time_s=60.0, cpu_time_s=60.0))
        self.idle_timeout_s = idle_timeout_s
        self.max_observation_bytes = max_observation_bytes
        self.grader = grader or Grader()
        self.steps = 0
        self.done = False
        self.grade: Grade | None = None
        self._original: dict[str, bytes] | None = None
        self._session: Session | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._started = 0.0
        self._session_peak_bytes: int | None = None
        self._environment: Environment | None = None

    async def __aenter__(self) -> AsyncEnv:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def elapsed_s(self) -> float:
        """Seconds since the last ``reset``."""
        return time.monotonic() - self._started if self._started else 0.0

    async def aclose(self) -> None:
        """Reclaim the session (every process, the cgroup, the files); idempotent."""
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def reset(self) -> dict[str, Any]:
        """Start a new episode in a fresh session; returns the first observation.

        Returns:
            ``{"task_id", "problem_statement", "tools", "files", "files_truncated",
            "visible_tests", "max_steps", "time_budget_s"}``.

        Raises:
            TaskError: if the snapshot cannot be read or its setup command fails.
            SandboxError: if the session does not start.
        """
        await self.aclose()
        if self._original is None:
            self._original = repo_files(self.task)
        if self._environment is None:
            self._environment = await asyncio.to_thread(resolve, self.task.environment)
        self.steps, self.done, self.grade = 0, False, None
        self._stack = contextlib.AsyncExitStack()
        lifetime = self.task.time_budget_s + 60.0
        self._session = await self._stack.enter_async_context(
            open_session(
                self.limits,
                idle_timeout_s=self.idle_timeout_s,
                max_lifetime_s=lifetime,
                environment=self._environment,
            )
        )
        try:
            await self._prepare(self._session)
        except BaseException:
            await self.aclose()
            raise
        self._started = time.monotonic()
        names = sorted(self._original)
        return {
            "task_id": self.task.id,
            "problem_statement": self.task.problem_statement,
            "tools": list(TOOLS),
            "files": names[:_LISTED_FILES],
            "files_truncated": len(names) > _LISTED_FILES,
            "visible_tests": list(self.task.visible_tests),
            "max_steps": self.task.max_steps,
            "time_budget_s": self.task.time_budget_s,
        }

    async def _prepare(self, session: Session) -> None:
        await session.write_files(self._snapshot())
        environment = self._environment
        python = None if environment is None or environment.is_host else interpreter(environment)
        commands = [_bin_script(python)] + ([self.task.setup] if self.task.setup else [])
        for command in commands:
            run = await session.run(
                ["/bin/bash", "-c", command],
                env=_session_env(),
                limits=self.limits.merged(
                    wall_time_s=_SETUP_TIMEOUT_S, cpu_time_s=_SETUP_TIMEOUT_S
                ),
            )
            if run.exit_code != 0:
                text, _ = observations.truncate(run.stdout + run.stderr, 4000)
                raise TaskError(
                    f"task {self.task.id}: setup command {command!r} failed "
                    f"({run.status.value}, exit code {run.exit_code}): {text}"
                )

    async def step(self, action: Any) -> StepResult:
        """Carry out one tool call; see the module docstring.

        Never raises for a bad action: the observation says what is wrong (``ok``
        false). Raises :class:`~execgym.errors.Error` only when no episode was started.
        """
        if self._started == 0.0 or (self._session is None and not self.done):
            raise TaskError("call reset() before step()")
        step_started = time.monotonic()
        if self.done:
            message = "the episode is over: call reset() to start a new one"
            return (
                observations.failure(_tool_name(action), message),
                0.0,
                True,
                False,
                self._info(step_started),
            )
        self.steps += 1
        name = _tool_name(action)
        submitted = False
        try:
            call = parse_action(action)
            name = call.tool
            if self.elapsed_s >= self.task.time_budget_s:
                observation = observations.failure(name, "the time budget is spent; not run")
            elif name == "submit":
                observation, submitted = {"tool": name, "ok": True, "output": "submitted"}, True
            else:
                observation = await self._carry_out(call)
        except ActionError as error:
            observation = observations.failure(name, str(error))
        except SessionClosed as error:
            observation = observations.failure(name, f"the sandbox session closed: {error}")
        out_of_time = self.elapsed_s >= self.task.time_budget_s
        out_of_steps = self.steps >= self.task.max_steps
        lost = self._session is not None and self._session.closed_because is not None
        if not (submitted or out_of_time or out_of_steps or lost):
            return observation, 0.0, False, False, self._info(step_started)
        self.grade = await self._finish()
        observation["episode_end"] = "submitted" if submitted else self._why_truncated(lost)
        return observation, self.grade.reward, submitted, not submitted, self._info(step_started)

    def _why_truncated(self, lost: bool) -> str:
        if lost:
            return "the sandbox session closed"
        if self.elapsed_s >= self.task.time_budget_s:
            return f"the time budget ({self.task.time_budget_s} s) is spent"
        return f"the step budget ({self.task.max_steps} steps) is spent"

    def _info(self, step_started: float) -> dict[str, Any]:
        info: dict[str, Any] = {
            "task_id": self.task.id,
            "step": self.steps,
            "step_time_s": round(time.monotonic() - step_started, 4),
            "elapsed_s": round(self.elapsed_s, 4),
            "steps_left": max(0, self.task.max_steps - self.steps),
            "time_left_s": round(max(0.0, self.task.time_budget_s - self.elapsed_s), 3),
        }
        if self.grade is not None:
            info.update(self.grade.as_info())
            info["session_peak_memory_bytes"] = self._session_peak_bytes
        return info

    async def _finish(self) -> Grade:
        """Copy the final tree out, reclaim the session, and score the tree."""
        self.done = True
        session = self._live_session()
        original = self._snapshot()
        why = session.closed_because
        self._session_peak_bytes = session.peak_memory_bytes()
        try:
            archive = await session.export_tree(skip=sorted(SKIPPED_NAMES))
        except SandboxError as error:
            why = why or session.closed_because
            await self.aclose()
            if why is None or "agent died" in why:  # its commands' doing: not our failure
                message = f"the agent's final tree could not be copied out: {why or error}"
                return Grade(0.0, 0.0, Verdict.ERROR, message=message)
            return Grade(None, 0.0, Verdict.SANDBOX_ERROR, message=f"no final tree: {error}")
        try:  # the tree is the agent's: one that cannot be scored is its failure
            final = tree_from_tar(
                archive,
                what="the final tree",
                max_bytes=2 * self.limits.disk_bytes,
                skip_unsafe=True,
            )
        except TaskError as error:
            await self.aclose()
            return Grade(0.0, 0.0, Verdict.ERROR, message=str(error))
        await self.aclose()
        sandbox = None
        if self._environment is not None and not self._environment.is_host:
            sandbox = with_environment(self.grader.sandbox, self._environment)
        return await self.grader.grade(
            self.task, original, final, limits=self.limits, reward=self.reward_spec, sandbox=sandbox
        )

    def _live_session(self) -> Session:
        """The episode's session; only asked for between reset and the end."""
        if self._session is None:
            raise RuntimeError("the episode has no session: reset() was not awaited")
        return self._session

    def _snapshot(self) -> dict[str, bytes]:
        """The repository's files as reset wrote them; only asked for after reset."""
        if self._original is None:
            raise RuntimeError("the episode has no snapshot: reset() was not awaited")
        return self._original

    async def _carry_out(self, call: ToolCall) -> dict[str, Any]:
        remaining_s = self.task.time_budget_s - self.elapsed_s
        return await carry_out(
            self._live_session(),
            call,
            limits=self.limits,
            env=_session_env(),
            visible_tests=self.task.visible_tests,
            max_bytes=self.max_observation_bytes,
            remaining_s=remaining_s,
        )

"""Agent episodes: multi-turn repository tasks scored by hidden tests.

A text agent edits a repository and runs commands through tool calls in a persistent
sandbox session; when it submits (or its step or time budget runs out) the hidden
tests run on a clean copy of its final tree and give the reward::

    import execgym

    with execgym.make("example/pager-last-page") as env:
        observation = env.reset()
        observation, reward, terminated, truncated, info = env.step(
            {"tool": "read_file", "arguments": {"path": "pager/core.py"}}
        )

Modules: :mod:`~execgym.episodes.task` (``RepoTask``, loading), :mod:`~.tools` (tool
schemas, actions), :mod:`~.actions` (what each tool does), :mod:`~.observations`,
:mod:`~.grading` (hidden tests, reward), :mod:`~.env` (``AsyncEnv``), :mod:`~.sync`
(``Env``, ``make``), :mod:`~.agent` (``ScriptedAgent``), :mod:`~.batch` (many episodes),
:mod:`~.protocol` (the ``EpisodeEnv`` protocol the adapters and the service drive, the
task catalogue), :mod:`~.registry` (live episodes by id, for the service and the verl
tool). The HTTP routes (:mod:`execgym.server.episode_routes`, :mod:`execgym.server.openenv`)
and the trainers' adapters (:mod:`execgym.integrations.trl_env`,
:mod:`execgym.integrations.verl_tool`) are thin callers of these.
"""

from __future__ import annotations

from execgym.episodes.agent import SUBMIT, EpisodeResult, ScriptedAgent
from execgym.episodes.batch import (
    EpisodeLine,
    parse_episode_line,
    play_episodes,
    read_episode_lines,
    summarize_episodes,
)
from execgym.episodes.env import AsyncEnv, StepResult
from execgym.episodes.grading import Grade, Grader
from execgym.episodes.observations import truncate
from execgym.episodes.sync import Env, as_task, make, make_async
from execgym.episodes.task import (
    RepoTask,
    example_tasks,
    find_task,
    load_repo_tasks,
    parse_repo_task,
    repo_files,
)
from execgym.episodes.tools import TOOLS, ActionError, ToolCall, parse_action, tool_schemas

__all__ = [
    "SUBMIT",
    "TOOLS",
    "ActionError",
    "AsyncEnv",
    "Env",
    "EpisodeLine",
    "EpisodeResult",
    "Grade",
    "Grader",
    "RepoTask",
    "ScriptedAgent",
    "StepResult",
    "ToolCall",
    "as_task",
    "example_tasks",
    "find_task",
    "load_repo_tasks",
    "make",
    "make_async",
    "parse_action",
    "parse_episode_line",
    "parse_repo_task",
    "play_episodes",
    "read_episode_lines",
    "repo_files",
    "summarize_episodes",
    "tool_schemas",
    "truncate",
]

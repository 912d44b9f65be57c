"""Helpers for the episode tests: play scripted episodes and check nothing is left."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from execgym.episodes import AsyncEnv, EpisodeResult, RepoTask, ScriptedAgent, example_tasks

TASK_IDS = [task.id for task in example_tasks()]


def example(task_id: str) -> RepoTask:
    """The shipped example task ``task_id``."""
    return next(task for task in example_tasks() if task.id == task_id)


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    """An action in the ``{"tool", "arguments"}`` shape."""
    return {"tool": tool, "arguments": arguments}


async def play(task: RepoTask | str, actions: list[Any], **options: Any) -> EpisodeResult:
    """Play ``actions`` (then submit) in a fresh episode and close it."""
    task = example(task) if isinstance(task, str) else task
    async with AsyncEnv(task, **options) as env:
        return await ScriptedAgent(actions).arun(env)


async def play_all(episodes: list[tuple[str, list[Any]]], **options: Any) -> list[EpisodeResult]:
    """Play several episodes at once (the tests' time budget is small)."""
    return list(await asyncio.gather(*(play(t, a, **options) for t, a in episodes)))


def solution(task_id: str, *, run_tests: bool = True) -> list[Any]:
    """The shipped solution's actions, without its final submit (nor run_tests if asked)."""
    left_out = {"submit"} if run_tests else {"submit", "run_tests"}
    return [a for a in ScriptedAgent.for_example(task_id).actions if a["tool"] not in left_out]


@pytest.fixture(autouse=True)
def _needs_bwrap(bwrap_sandbox: object) -> None:
    """Every episode runs in a bwrap session."""

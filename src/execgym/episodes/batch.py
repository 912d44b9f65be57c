"""Play many scripted or recorded episodes concurrently, from a JSONL of actions.

Each line of the input is ``{"task": <task id or inline task>, "actions": [...]}``:
the id of an example task or of one from a tasks file, or a whole
:class:`~execgym.episodes.RepoTask` as JSON; the actions are replayed by a
:class:`~execgym.episodes.ScriptedAgent` (which submits when they run out). A line
that cannot be played (not JSON, no such task, an invalid task, an episode that does
not start) gives a result with ``error`` and a null reward; the batch goes on.

>>> async for record in play_episodes(read_episode_lines(path, tasks)):  # doctest: +SKIP
...     print(record["task_id"], record["reward"])
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execgym.episodes.agent import ScriptedAgent
from execgym.episodes.env import AsyncEnv
from execgym.episodes.grading import Grader
from execgym.episodes.task import RepoTask, find_task, parse_repo_task
from execgym.errors import TaskError


@dataclass(frozen=True, slots=True)
class EpisodeLine:
    """One line of an actions file: a task and its actions, or why it cannot be played.

    Attributes:
        line_number: 1-based line number in its file.
        task: The task, or ``None`` when the line is bad.
        actions: The actions to replay.
        problem: What is wrong with the line (``""`` when it can be played).
    """

    line_number: int
    task: RepoTask | None
    actions: list[Any] = field(default_factory=list)
    problem: str = ""


def parse_episode_line(
    text: str, line_number: int, tasks: list[RepoTask], base_dir: Path | None = None
) -> EpisodeLine:
    """One line of an actions file; never raises (a bad line carries its ``problem``)."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        return EpisodeLine(line_number, None, problem=f"not JSON ({error.msg})")
    if not isinstance(record, dict):
        return EpisodeLine(line_number, None, problem="a line must be a JSON object")
    actions = record.get("actions", [])
    if not isinstance(actions, list):
        return EpisodeLine(line_number, None, problem="'actions' must be a list of tool calls")
    task_field = record.get("task")
    try:
        if isinstance(task_field, str):
            task = find_task(task_field, tasks)
        elif isinstance(task_field, dict):
            task = parse_repo_task(task_field, base_dir=base_dir, source="inline task")
        else:
            raise TaskError("'task' must be a task id or an inline task object")
    except TaskError as error:
        return EpisodeLine(line_number, None, actions, problem=str(error))
    return EpisodeLine(line_number, task, actions)


def read_episode_lines(path: str | Path, tasks: list[RepoTask]) -> list[EpisodeLine]:
    """Every non-blank line of an actions file (bad ones carry their problem).

    Raises:
        TaskError: if the file cannot be read at all.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TaskError(f"cannot read episodes from {path}: {error.strerror}") from error
    return [
        parse_episode_line(line, number, tasks, base_dir=path.parent)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


async def play_episode(line: EpisodeLine, *, grader: Grader, **env_options: Any) -> dict[str, Any]:
    """Play one line's episode; returns its result record (see :func:`play_episodes`)."""
    started = time.monotonic()
    record: dict[str, Any] = {
        "line": line.line_number,
        "task_id": line.task.id if line.task else None,
        "reward": None,
        "error": line.problem or None,
    }
    if line.task is None:
        return record
    try:
        async with AsyncEnv(line.task, grader=grader, **env_options) as env:
            result = await ScriptedAgent(line.actions).arun(env)
    except Exception as error:  # one episode's failure, ours or the task's, is its own
        record["error"] = f"{type(error).__name__}: {error}"
        record["wall_time_s"] = round(time.monotonic() - started, 4)
        return record
    step_times = [seconds for _, seconds in result.step_times_s]
    return {
        **record,
        **result.to_json(),
        "step_time_p50_s": round(statistics.median(step_times), 4) if step_times else None,
        "step_time_max_s": round(max(step_times), 4) if step_times else None,
    }


async def play_episodes(
    lines: Iterable[EpisodeLine],
    *,
    concurrency: int = 8,
    grader: Grader | None = None,
    **env_options: Any,
) -> AsyncIterator[dict[str, Any]]:
    """Play every line's episode, ``concurrency`` at once; yield each result when done.

    A result holds ``line``, ``task_id``, ``reward``, ``fraction``, ``verdict``,
    ``steps``, ``wall_time_s``, ``terminated``, ``truncated``, ``tests``, ``message``,
    ``step_time_p50_s``, ``step_time_max_s`` and ``error`` (``None`` unless the line
    could not be played). ``env_options`` go to :class:`AsyncEnv` (``limits``, ``reward``).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    grader = grader or Grader(max_concurrent=min(concurrency, 8))
    slots = asyncio.Semaphore(concurrency)

    async def bounded(line: EpisodeLine) -> dict[str, Any]:
        async with slots:
            return await play_episode(line, grader=grader, **env_options)

    pending = [asyncio.ensure_future(bounded(line)) for line in lines]
    try:
        for finished in asyncio.as_completed(pending):
            yield await finished
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def summarize_episodes(records: list[dict[str, Any]], wall_time_s: float) -> dict[str, Any]:
    """Counts, mean reward, solved episodes and throughput of a batch's results."""
    played = [r for r in records if r.get("error") is None]
    rewards = [r["reward"] for r in played if r.get("reward") is not None]
    times = [r["wall_time_s"] for r in played if "wall_time_s" in r]
    return {
        "episodes": len(records),
        "played": len(played),
        "errors": len(records) - len(played),
        "masked": len(played) - len(rewards),
        "solved": sum(1 for reward in rewards if reward == 1.0),
        "mean_reward": round(statistics.fmean(rewards), 4) if rewards else None,
        "mean_steps": round(statistics.fmean(r.get("steps", 0) for r in played), 2)
        if played
        else None,
        "episode_time_p50_s": round(statistics.median(times), 3) if times else None,
        "wall_time_s": round(wall_time_s, 3),
        "episodes_per_s": round(len(played) / wall_time_s, 3) if wall_time_s > 0 else None,
    }

"""``execgym episodes``: play agent episodes from the command line.

``execgym episodes run ACTIONS.jsonl`` replays scripted or recorded action sequences
(:mod:`execgym.episodes.batch`), many at once, writes one result line per episode as
it finishes, and prints a summary. Exit codes: 0 when the batch was played (whatever
the rewards; lines that could not be played are counted as errors), 1 when it could
not run (unreadable file), 2 for bad usage.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import IO, Any

import click

from execgym.errors import Error
from execgym.limits import MIN_MEMORY_BYTES, Limits, parse_size


@click.group()
def episodes() -> None:
    """Agent episodes: multi-turn repository tasks scored by hidden tests."""


@episodes.command("run")
@click.argument("actions_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--tasks",
    "tasks_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSONL of repo tasks the lines name by id (default: the shipped examples).",
)
@click.option("--concurrency", "-j", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="results.jsonl"
)
@click.option("--reward", "reward_name", help="Reward preset or TOML spec (default: binary).")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(0.1, 3600),
    default=60.0,
    show_default=True,
    help="Default seconds per command (each run_command may ask for its own).",
)
@click.option(
    "--memory",
    "memory",
    default="512MiB",
    show_default=True,
    help="Memory of each episode's session (all its processes and files), e.g. 256MiB.",
)
def run_command(
    actions_path: Path,
    tasks_path: Path | None,
    concurrency: int,
    output: Path | None,
    reward_name: str | None,
    timeout_s: float,
    memory: str,
) -> None:
    """Replay the episodes of ACTIONS_PATH ({"task": ..., "actions": [...]} per line).

    \b
    Example:
      execgym episodes run src/execgym/data/episodes/solutions.jsonl -j 4 -o results.jsonl
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    from execgym.episodes import example_tasks, load_repo_tasks
    from execgym.episodes.batch import read_episode_lines
    from execgym.reward import load_spec

    try:
        tasks = load_repo_tasks(tasks_path) if tasks_path else example_tasks()
        lines = read_episode_lines(actions_path, tasks)
        reward = load_spec(reward_name) if reward_name else None
    except Error as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    if output is not None and output.resolve() == actions_path.resolve():
        raise click.BadParameter("the output may not be the actions file", param_hint="-o")
    try:
        memory_bytes = parse_size(memory)
        limits = Limits(wall_time_s=timeout_s, cpu_time_s=timeout_s, memory_bytes=memory_bytes)
    except Error as error:
        raise click.BadParameter(str(error), param_hint="--memory") from error
    if memory_bytes < MIN_MEMORY_BYTES:
        raise click.BadParameter(f"{memory!r}: give at least 16MiB", param_hint="--memory")
    handle = output.open("w", encoding="utf-8") if output else None
    try:
        summary = asyncio.run(_play(lines, concurrency, reward, limits, handle))
    finally:
        if handle is not None:
            handle.close()
    for key, value in summary.items():
        click.echo(f"{key}: {value}")


async def _play(
    lines: list[Any], concurrency: int, reward: Any, limits: Limits, handle: IO[str] | None
) -> dict[str, Any]:
    from execgym.episodes.batch import play_episodes, summarize_episodes

    started = time.monotonic()
    records = []
    async for record in play_episodes(lines, concurrency=concurrency, reward=reward, limits=limits):
        records.append(record)
        if handle is not None:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
        if record.get("error"):
            click.echo(f"line {record['line']}: {record['error']}", err=True)
    return summarize_episodes(records, time.monotonic() - started)

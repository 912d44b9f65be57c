"""The ``execgym`` command line: a thin layer over the library API.

Exit codes: 0 success; 1 execgym could not do the job (missing sandbox, unreadable
file: the message says how to fix it); 2 bad usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import IO

import click

from execgym._version import __version__
from execgym.errors import Error
from execgym.limits import DEFAULT_LIMITS, Limits, parse_size
from execgym.sandbox import ISOLATIONS, create_sandbox
from execgym.scoring import ScoredRollout, Scorer
from execgym.summary import summarize
from execgym.tasks import (
    DATASETS,
    LineProblem,
    RolloutLine,
    Task,
    canonical_rollouts,
    load_dataset,
    load_rollouts,
    load_tasks,
)


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        raise click.BadParameter(f"{text!r}: give positive integers separated by commas, e.g. 1,10")
    return ks


def _load_inputs(
    tasks_path: str | None, rollouts_path: str | None, dataset: str | None, solutions: str | None
) -> tuple[dict[str, Task], list[RolloutLine | LineProblem]]:
    if dataset and tasks_path:
        raise click.UsageError("give either --dataset or a TASKS file, not both")
    if not dataset and not tasks_path:
        raise click.UsageError(
            "nothing to score: give TASKS.jsonl ROLLOUTS.jsonl, or --dataset humaneval "
            "--solutions canonical"
        )
    if dataset:
        tasks = load_dataset(dataset)
    else:
        tasks, problems = load_tasks(tasks_path or "")
        for problem in problems:
            click.echo(f"warning: skipped task: {problem}", err=True)
    if solutions == "canonical":
        if rollouts_path:
            raise click.UsageError("give either ROLLOUTS or --solutions canonical, not both")
        return tasks, list(canonical_rollouts(tasks))
    if not rollouts_path:
        raise click.UsageError("give a ROLLOUTS.jsonl file, or --solutions canonical")
    items = list(load_rollouts(rollouts_path))
    for item in items:
        if isinstance(item, LineProblem):
            click.echo(f"warning: bad rollout line (scored as invalid): {item}", err=True)
    return tasks, items


@click.group()
@click.version_option(__version__, prog_name="execgym")
def main() -> None:
    """execgym: score model-written code in isolated sandboxes and return rewards."""
    logging.basicConfig(level=logging.WARNING, format="execgym: %(levelname)s: %(message)s")


@main.command()
@click.argument(
    "tasks_path", metavar="[TASKS]", required=False, type=click.Path(exists=True, dir_okay=False)
)
@click.argument(
    "rollouts_path",
    metavar="[ROLLOUTS]",
    required=False,
    type=click.Path(exists=True, dir_okay=False),
)
@click.option(
    "--dataset", type=click.Choice(DATASETS), help="A built-in data set instead of TASKS."
)
@click.option(
    "--solutions",
    type=click.Choice(["canonical"]),
    help="Score the tasks' reference solutions instead of ROLLOUTS.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default="results.jsonl",
    show_default=True,
    help="Results JSONL, one line per rollout, written as they finish.",
)
@click.option(
    "--isolation",
    type=click.Choice(ISOLATIONS),
    default="bwrap",
    show_default=True,
    help="Sandbox backend; 'none' runs code UNISOLATED (development only).",
)
@click.option(
    "--timeout",
    "wall_time_s",
    type=float,
    default=DEFAULT_LIMITS.wall_time_s,
    show_default=True,
    help="Wall-clock seconds per rollout (tasks may override).",
)
@click.option(
    "--cpu-time",
    "cpu_time_s",
    type=float,
    default=None,
    help="CPU seconds per rollout [default: same as --timeout].",
)
@click.option(
    "--memory",
    "memory",
    default="512MiB",
    show_default=True,
    help="Memory per rollout, e.g. 256MiB or 1GiB (tasks may override).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Sandboxes at once [default: CPU count].",
)
@click.option(
    "--k",
    "ks",
    default="1,10,100",
    show_default=True,
    help="pass@k values to report (each shown when every task has k rollouts).",
)
def score(
    tasks_path: str | None,
    rollouts_path: str | None,
    dataset: str | None,
    solutions: str | None,
    output: str,
    isolation: str,
    wall_time_s: float,
    cpu_time_s: float | None,
    memory: str,
    workers: int | None,
    ks: str,
) -> None:
    r"""Score ROLLOUTS against TASKS (or a built-in data set) and write results JSONL.

    \b
    Examples:
      execgym score --dataset humaneval --solutions canonical -o results.jsonl
      execgym score tasks.jsonl rollouts.jsonl -o results.jsonl --timeout 5 --memory 256MiB
    """
    k_values = _parse_ks(ks)
    try:
        limits = Limits(
            wall_time_s=wall_time_s,
            cpu_time_s=cpu_time_s or wall_time_s,
            memory_bytes=parse_size(memory),
        )
        tasks, items = _load_inputs(tasks_path, rollouts_path, dataset, solutions)
        sandbox = create_sandbox(isolation)
    except Error as error:
        raise click.ClickException(str(error)) from error
    scorer = Scorer(tasks, sandbox, limits)
    started = time.monotonic()
    written: list[ScoredRollout] = []
    try:
        asyncio.run(scorer.self_test())
    except Error as error:
        raise click.ClickException(str(error)) from error
    # Lone surrogates (from a program's exception message, say) become JSON escapes.
    with Path(output).open("w", encoding="utf-8", errors="backslashreplace") as sink:
        try:
            results = asyncio.run(_score_with_progress(scorer, items, workers, sink, written))
        except (KeyboardInterrupt, asyncio.CancelledError):
            click.echo(
                f"interrupted: {len(written)} of {len(items)} results were written to {output}",
                err=True,
            )
            sys.exit(130)
    summary = summarize(results, time.monotonic() - started, k_values)
    click.echo(summary.render())
    click.echo(f"isolation: {isolation}; results: {output}")


async def _score_with_progress(
    scorer: Scorer,
    items: list[RolloutLine | LineProblem],
    workers: int | None,
    sink: IO[str],
    written: list[ScoredRollout],
) -> list[ScoredRollout]:
    from tqdm import tqdm

    # SIGTERM stops the batch like Ctrl-C: running sandboxes are killed and reclaimed,
    # and every finished result is already on disk.
    current = asyncio.current_task()
    if current is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, current.cancel)

    tqdm.monitor_interval = 0  # no monitor thread: we fork children with preexec_fn
    with tqdm(total=len(items), unit="rollout", file=sys.stderr, disable=None) as bar:

        def write(result: ScoredRollout) -> None:
            sink.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
            sink.flush()
            written.append(result)
            bar.update(1)

        return await scorer.score(items, workers=workers, on_result=write)


if __name__ == "__main__":
    main()

"""The ``execgym`` command line: a thin layer over the library API.

Exit codes: 0 success; 1 execgym could not do the job (missing sandbox, unreadable
file: the message says how to fix it); 2 bad usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO

import click

from execgym._version import __version__
from execgym.errors import Error, TaskError
from execgym.limits import DEFAULT_LIMITS, Limits, MiB, parse_size
from execgym.sandbox import ISOLATIONS, WarmPoolSandbox, create_sandbox
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
) -> tuple[dict[str, Task], list[RolloutLine | LineProblem], dict[str, str]]:
    if dataset and tasks_path:
        raise click.UsageError("give either --dataset or a TASKS file, not both")
    if not dataset and not tasks_path:
        raise click.UsageError(
            "nothing to score: give TASKS.jsonl ROLLOUTS.jsonl, or --dataset humaneval "
            "--solutions canonical"
        )
    skipped: dict[str, str] = {}
    if dataset:
        tasks = load_dataset(dataset)
    else:
        tasks, problems = load_tasks(tasks_path or "")
        for problem in problems:
            click.echo(f"warning: skipped task: {problem}", err=True)
            if problem.task_id is not None:
                skipped.setdefault(problem.task_id, str(problem))
        if not tasks:
            raise TaskError(
                f"no valid tasks in {tasks_path} ({len(problems)} line(s) skipped, see the "
                "warnings above); each line needs task_id, prompt, tests and entry_point "
                "(did you swap TASKS and ROLLOUTS?)"
            )
    if solutions == "canonical":
        if rollouts_path:
            raise click.UsageError("give either ROLLOUTS or --solutions canonical, not both")
        return tasks, list(canonical_rollouts(tasks)), skipped
    if not rollouts_path:
        raise click.UsageError("give a ROLLOUTS.jsonl file, or --solutions canonical")
    items = list(load_rollouts(rollouts_path))
    for item in items:
        if isinstance(item, LineProblem):
            click.echo(f"warning: bad rollout line (scored as invalid): {item}", err=True)
    return tasks, items, skipped


@click.group()
@click.version_option(__version__, prog_name="execgym")
def main() -> None:
    """execgym: score model-written code in isolated sandboxes and return rewards."""
    logging.basicConfig(level=logging.WARNING, format="execgym: %(levelname)s: %(message)s")


def _positive_seconds(
    ctx: click.Context, param: click.Parameter, value: float | None
) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value!r}: give a positive, finite number of seconds")
    return value


MIN_MEMORY_BYTES = 16 * MiB
"""Below this the Python interpreter cannot even start; refused as a likely unit slip."""


def _memory(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        size = parse_size(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error
    if size < MIN_MEMORY_BYTES:
        raise click.BadParameter(
            f"{value!r} is {size} bytes, too little to start a program (at least 16MiB); "
            "a number without a unit is bytes: did you mean "
            f"{value}MiB?"
        )
    return size


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
    callback=_positive_seconds,
    help="Wall-clock seconds per rollout (tasks may override).",
)
@click.option(
    "--cpu-time",
    "cpu_time_s",
    type=float,
    default=None,
    callback=_positive_seconds,
    help="CPU seconds per rollout [default: same as --timeout].",
)
@click.option(
    "--memory",
    "memory_bytes",
    default="512MiB",
    show_default=True,
    callback=_memory,
    help="Memory per rollout, e.g. 256MiB or 1GiB; a bare number is bytes (tasks may override).",
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
@click.option(
    "--warm-pool/--no-warm-pool",
    default=True,
    show_default=True,
    help="With bwrap, fork each Python rollout from a warm, pre-started interpreter "
    "(same isolation as a fresh sandbox, several times faster).",
)
@click.option(
    "--allow-root",
    is_flag=True,
    help="Let --isolation none run untrusted code as root (refused otherwise).",
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
    memory_bytes: int,
    workers: int | None,
    ks: str,
    warm_pool: bool,
    allow_root: bool,
) -> None:
    """Score ROLLOUTS against TASKS (or a built-in data set) and write results JSONL.

    \b
    Examples:
      execgym score --dataset humaneval --solutions canonical -o results.jsonl
      execgym score tasks.jsonl rollouts.jsonl -o results.jsonl --timeout 5 --memory 256MiB
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    k_values = _parse_ks(ks)
    try:
        limits = Limits(
            wall_time_s=wall_time_s,
            cpu_time_s=cpu_time_s if cpu_time_s is not None else wall_time_s,
            memory_bytes=memory_bytes,
        )
        tasks, items, skipped = _load_inputs(tasks_path, rollouts_path, dataset, solutions)
        sandbox = (
            WarmPoolSandbox()
            if isolation == "bwrap" and warm_pool
            else create_sandbox(isolation, allow_root=allow_root)
        )
    except Error as error:
        raise click.ClickException(str(error)) from error
    cpus = os.cpu_count() or 1
    if workers and workers > cpus:
        click.echo(
            f"warning: {workers} sandboxes at once on {cpus} CPUs: wall-clock limits may fire "
            "for programs that are only waiting for a CPU",
            err=True,
        )
    _warn_unknown_tasks(tasks, skipped, items)
    scorer = Scorer(tasks, sandbox, limits, skipped_tasks=skipped)
    started = time.monotonic()
    results = _score_to_file(scorer, items, workers, output)
    summary = summarize(results, time.monotonic() - started, k_values)
    click.echo(summary.render())
    click.echo(f"isolation: {isolation}; results: {output}")


def _warn_unknown_tasks(
    tasks: dict[str, Task], skipped: dict[str, str], items: list[RolloutLine | LineProblem]
) -> None:
    unknown: dict[str, int] = {}
    for item in items:
        if isinstance(item, RolloutLine) and item.rollout.task_id not in tasks:
            unknown[item.rollout.task_id] = unknown.get(item.rollout.task_id, 0) + 1
    for task_id, count in unknown.items():
        why = "its task was skipped as invalid" if task_id in skipped else "no such task"
        click.echo(
            f"warning: {count} rollout(s) for task_id {task_id!r} scored as invalid: {why}",
            err=True,
        )


def _score_to_file(
    scorer: Scorer, items: list[RolloutLine | LineProblem], workers: int | None, output: str
) -> list[ScoredRollout]:
    written: list[ScoredRollout] = []
    stopped_by: list[int] = []
    try:
        asyncio.run(scorer.self_test())
    except Error as error:
        raise click.ClickException(str(error)) from error
    finally:
        _close(scorer.sandbox)
    try:
        # Lone surrogates (from a program's exception message, say) become JSON escapes.
        sink = Path(output).open("w", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    except OSError as error:
        raise click.ClickException(
            f"cannot write the results to {output}: {error.strerror or error}"
        ) from error
    with sink:
        try:
            return asyncio.run(
                _score_with_progress(scorer, items, workers, sink, written, stopped_by)
            )
        except (KeyboardInterrupt, asyncio.CancelledError):
            click.echo(
                f"interrupted: {len(written)} of {len(items)} results were written to {output}",
                err=True,
            )
            sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))


def _close(sandbox: object) -> None:
    """Stop a sandbox that keeps processes between runs (the warm pool), if it does."""
    aclose = getattr(sandbox, "aclose", None)
    if aclose is not None:
        asyncio.run(aclose())


async def _score_with_progress(
    scorer: Scorer,
    items: list[RolloutLine | LineProblem],
    workers: int | None,
    sink: IO[str],
    written: list[ScoredRollout],
    stopped_by: list[int],
) -> list[ScoredRollout]:
    from tqdm import tqdm

    # SIGTERM stops the batch like Ctrl-C: running sandboxes are killed and reclaimed,
    # and every finished result is already on disk.
    current = asyncio.current_task()
    if current is not None:

        def stop() -> None:
            stopped_by.append(signal.SIGTERM)
            current.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)

    tqdm.monitor_interval = 0  # no monitor thread: we fork children with preexec_fn
    with tqdm(total=len(items), unit="rollout", file=sys.stderr, disable=None) as bar:

        def write(result: ScoredRollout) -> None:
            sink.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
            sink.flush()
            written.append(result)
            bar.update(1)

        try:
            return await scorer.score(items, workers=workers, on_result=write)
        finally:
            aclose = getattr(scorer.sandbox, "aclose", None)
            if aclose is not None:
                await aclose()


@main.command()
@click.argument(
    "tasks_path", metavar="[TASKS]", required=False, type=click.Path(exists=True, dir_okay=False)
)
@click.option(
    "--dataset", type=click.Choice(DATASETS), help="A built-in data set instead of TASKS."
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write the tasks that pass as JSONL."
)
@click.option("--report", "html", type=click.Path(dir_okay=False), help="Write the HTML report.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the JSON report.")
@click.option(
    "--isolation",
    type=click.Choice(ISOLATIONS),
    default="bwrap",
    show_default=True,
    help="Sandbox backend ('none' runs task code UNISOLATED: development only).",
)
@click.option(
    "--timeout",
    "wall_time_s",
    type=float,
    default=DEFAULT_LIMITS.wall_time_s,
    show_default=True,
    callback=_positive_seconds,
    help="Wall-clock seconds per run.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Sandbox runs at once [default: CPU count].",
)
@click.option(
    "--runs",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Runs of the reference for the determinism check.",
)
@click.option(
    "--min-mutation-score",
    type=click.FloatRange(0, 1),
    default=0.75,
    show_default=True,
    help="Drop tasks whose tests kill fewer mutants.",
)
@click.option(
    "--max-mutants",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Mutants judged per task at most.",
)
@click.option(
    "--min-line-coverage",
    type=click.FloatRange(0, 1),
    default=1.0,
    show_default=True,
    help="Drop tasks whose tests run less of the reference.",
)
@click.option(
    "--max-reference-time",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Drop tasks whose reference needs more of the limit.",
)
@click.option(
    "--warm-pool/--no-warm-pool",
    default=True,
    show_default=True,
    help="Fork runs from the warm pool; --no-warm-pool gives each run a fresh sandbox "
    "(slower; its own hash seed, so set-order flakiness shows too).",
)
@click.option(
    "--near-duplicate",
    type=click.FloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Similarity from which two tasks are near-duplicates.",
)
def validate(
    tasks_path: str | None,
    dataset: str | None,
    output: str | None,
    html: str | None,
    json_path: str | None,
    isolation: str,
    wall_time_s: float,
    workers: int | None,
    runs: int,
    min_mutation_score: float,
    max_mutants: int,
    min_line_coverage: float,
    max_reference_time: float,
    warm_pool: bool,
    near_duplicate: float,
) -> None:
    """Find broken and weak tasks in TASKS (or a built-in data set) before training.

    \b
    Examples:
      execgym validate --dataset humaneval --report report.html --json report.json
      execgym validate tasks.jsonl -o clean.jsonl --min-mutation-score 0.8
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    from execgym._validate_cli import run
    from execgym.validation import Thresholds

    thresholds = Thresholds(
        runs=runs,
        min_mutation_score=min_mutation_score,
        max_mutants=max_mutants,
        min_line_coverage=min_line_coverage,
        max_reference_time_fraction=max_reference_time,
        near_duplicate_similarity=near_duplicate,
    )
    limits = Limits(wall_time_s=wall_time_s, cpu_time_s=wall_time_s)
    run(
        tasks_path,
        dataset,
        output=output,
        html=html,
        json_path=json_path,
        isolation=isolation,
        limits=limits,
        thresholds=thresholds,
        workers=workers or os.cpu_count() or 1,
        warm_pool=warm_pool,
    )


if __name__ == "__main__":
    main()

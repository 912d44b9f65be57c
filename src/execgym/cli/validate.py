"""``execgym validate``: find broken and weak tasks before training.

The checks are :func:`execgym.validation.validate_tasks`; this module loads the tasks,
picks the sandbox, shows progress and writes the reports. The validation engine is
imported when the command runs, so listing the commands stays fast.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from execgym.cli.options import (
    EMBEDDED,
    count_option,
    dataset_option,
    fraction_option,
    isolation_option,
    timeout_option,
    warm_pool_option,
    workers_option,
)
from execgym.errors import Error, TaskError
from execgym.limits import Limits

if TYPE_CHECKING:
    from execgym.sandbox import Sandbox
    from execgym.tasks import Task
    from execgym.validation import Context
    from execgym.validation.engine import ValidationReport


def load(tasks_path: str | None, dataset: str | None) -> tuple[list[Task], dict[str, str]]:
    """The tasks to validate, and ``{task_id: why}`` for lines the loader refused.

    Raises:
        click.UsageError: for both or neither of a TASKS file and ``--dataset``.
        execgym.errors.TaskError: the file holds no task line.
    """
    from execgym.tasks import load_dataset, load_tasks

    if bool(tasks_path) == bool(dataset):
        raise click.UsageError("give either a TASKS file or --dataset, not both and not neither")
    if dataset:
        return list(load_dataset(dataset).values()), {}
    tasks, problems = load_tasks(tasks_path or "")
    rejected: dict[str, str] = {}
    for problem in problems:
        click.echo(f"warning: task line refused: {problem}", err=True)
        rejected.setdefault(problem.task_id or f"line-{problem.line_number}", str(problem))
    if not tasks and not rejected:
        raise TaskError(f"no tasks in {tasks_path}")
    return list(tasks.values()), rejected


def _sandbox(isolation: str, warm_pool: bool, site: Any) -> Sandbox:
    """The sandbox of the runs: bwrap's see the coverage tool (``site``) read-only."""
    from execgym.sandbox import open_sandbox
    from execgym.validation import sandbox_paths

    return open_sandbox(isolation, warm_pool=warm_pool, read_only_paths=sandbox_paths(site))


async def _validate(tasks: list[Task], rejected: dict[str, str], ctx: Context) -> ValidationReport:
    """Validate ``tasks`` with a progress bar; ``ctx``'s sandbox is closed after."""
    from tqdm import tqdm

    from execgym.validation import validate_tasks

    tqdm.monitor_interval = 0  # no monitor thread: the sandbox forks children
    try:
        with tqdm(total=len(tasks), unit="task", file=sys.stderr, disable=None) as bar:
            return await validate_tasks(
                tasks, ctx, rejected=rejected, on_task=lambda _: bar.update(1)
            )
    finally:
        await ctx.sandbox.aclose()


def _open_broker(url: str, isolation: str, warm_pool: bool, workers: int | None) -> Any:
    """The broker of ``--broker``: Redis (``execgym worker`` nodes) or Ray actors started here.

    Raises:
        execgym.errors.ConfigError: an unknown broker URL, or Ray/redis-py missing.
    """
    if url == "ray" or url.startswith("ray://"):
        from execgym.broker.ray_actors import ActorConfig
        from execgym.broker.ray_broker import RayBroker

        return RayBroker(
            url, ActorConfig(isolation=isolation, warm_pool=warm_pool), concurrency=workers
        )
    from execgym.broker import open_broker

    return open_broker(url)


async def _validate_remote(
    broker: Any, tasks: list[Task], rejected: dict[str, str], ctx_args: dict[str, Any]
) -> ValidationReport:
    """Validate ``tasks`` on the broker's workers with a progress bar; the broker closed after."""
    from tqdm import tqdm

    from execgym.broker.validation_jobs import validate_remote

    try:
        with tqdm(total=len(tasks), unit="task", file=sys.stderr, disable=None) as bar:
            return await validate_remote(
                broker, tasks, rejected=rejected, on_task=lambda _: bar.update(1), **ctx_args
            )
    finally:
        await broker.aclose()


def _write_reports(
    report: ValidationReport,
    tasks: list[Task],
    output: str | None,
    html: str | None,
    json_path: str | None,
) -> None:
    """Write the outputs asked for: the clean tasks, the HTML and the JSON report.

    Raises:
        OSError: a file cannot be written.
    """
    from execgym.validation import report as reports

    if output:
        kept = reports.write_clean(report, tasks, output)
        click.echo(f"clean tasks: {kept} written to {output}")
    if html:
        reports.write_html(report, html)
        click.echo(f"HTML report: {html}")
    if json_path:
        reports.write_json(report, json_path)
        click.echo(f"JSON report: {json_path}")


def _print_summary(report: ValidationReport) -> None:
    """The one-line summary, then a line per dropped task with its reasons."""
    from execgym.validation import report as reports

    summary = reports.summary(report)
    click.echo(
        f"{summary['tasks']} tasks: {summary['kept']} kept, {summary['dropped']} dropped; "
        f"{summary['mutation']['mutants_judged']} mutants judged, mean mutation score "
        f"{summary['mutation']['mean_score']}; {summary['sandbox_runs']} sandbox runs in "
        f"{summary['wall_time_s']} s"
    )
    for task in report.tasks:
        if not task.kept:
            click.echo(f"dropped {task.task_id}: {'; '.join(task.reasons)}")


@click.command()
@click.argument(
    "tasks_path", metavar="[TASKS]", required=False, type=click.Path(exists=True, dir_okay=False)
)
@dataset_option
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write the tasks that pass as JSONL."
)
@click.option("--report", "html", type=click.Path(dir_okay=False), help="Write the HTML report.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the JSON report.")
@isolation_option("Sandbox backend ('none' runs task code UNISOLATED: development only).")
@timeout_option("Wall-clock seconds per run.")
@workers_option("Sandbox runs at once [default: CPU count].")
@count_option("--runs", 3, "Runs of the reference for the determinism check.", minimum=2)
@fraction_option("--min-mutation-score", 0.75, "Drop tasks whose tests kill fewer mutants.")
@count_option("--max-mutants", 40, "Mutants judged per task at most.")
@fraction_option("--min-line-coverage", 1.0, "Drop tasks whose tests run less of the reference.")
@fraction_option("--max-reference-time", 0.5, "Drop tasks whose reference needs more of the limit.")
@warm_pool_option(
    "Fork runs from the warm pool; --no-warm-pool gives each run a fresh sandbox "
    "(slower; its own hash seed, so set-order flakiness shows too)."
)
@fraction_option("--near-duplicate", 0.9, "Similarity from which two tasks are near-duplicates.")
@click.option(
    "--broker",
    "broker_url",
    default="embedded",
    show_default=True,
    help="Where the checks run: 'embedded' (here); redis://HOST:PORT/DB, each task's "
    "checks on an `execgym worker` node (in its sandbox); 'ray' or ray://HOST:PORT: on "
    "sandbox actors started on the cluster with --isolation and --warm-pool. --workers "
    "is then the sandbox runs at once per task.",
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
    broker_url: str,
) -> None:
    """Find broken and weak tasks in TASKS (or a built-in data set) before training.

    \b
    Examples:
      execgym validate --dataset humaneval --report report.html --json report.json
      execgym validate tasks.jsonl -o clean.jsonl --min-mutation-score 0.8
      execgym validate tasks.jsonl --json report.json --broker redis://localhost:6379/0
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    from execgym.validation import Context, Thresholds, coverage_site

    thresholds = Thresholds(
        runs=runs,
        min_mutation_score=min_mutation_score,
        max_mutants=max_mutants,
        min_line_coverage=min_line_coverage,
        max_reference_time_fraction=max_reference_time,
        near_duplicate_similarity=near_duplicate,
    )
    limits = Limits(wall_time_s=wall_time_s, cpu_time_s=wall_time_s)
    try:
        tasks, rejected = load(tasks_path, dataset)
        if broker_url not in EMBEDDED:
            broker = _open_broker(broker_url, isolation, warm_pool, workers)
            ctx_args = {"thresholds": thresholds, "limits": limits, "workers": workers or 2}
            report = asyncio.run(_validate_remote(broker, tasks, rejected, ctx_args))
            _write_reports(report, tasks, output, html, json_path)
            _print_summary(report)
            return
        site = coverage_site()
        ctx = Context(
            _sandbox(isolation, warm_pool, site),
            limits=limits,
            thresholds=thresholds,
            workers=workers or os.cpu_count() or 1,
            coverage_site=site,
        )
        report = asyncio.run(_validate(tasks, rejected, ctx))
        _write_reports(report, tasks, output, html, json_path)
    except Error as error:
        raise click.ClickException(str(error)) from error
    except OSError as error:
        raise click.ClickException(f"cannot write {error.filename}: {error.strerror}") from error
    _print_summary(report)

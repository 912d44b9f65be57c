"""``execgym validate``: the command's body, kept out of :mod:`execgym.cli` (thin layer)."""

from __future__ import annotations

import asyncio
import sys

import click

from execgym.errors import Error, TaskError
from execgym.limits import Limits
from execgym.sandbox import BubblewrapSandbox, Sandbox, WarmPoolSandbox, create_sandbox
from execgym.tasks import Task, load_dataset, load_tasks
from execgym.validation import Context, Thresholds, coverage_site, sandbox_paths, validate_tasks
from execgym.validation import report as reports
from execgym.validation.engine import ValidationReport


def load(tasks_path: str | None, dataset: str | None) -> tuple[list[Task], dict[str, str]]:
    """The tasks to validate, and ``{task_id: why}`` for lines the loader refused."""
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


async def _validate(
    tasks: list[Task],
    rejected: dict[str, str],
    *,
    isolation: str,
    limits: Limits,
    thresholds: Thresholds,
    workers: int,
    warm_pool: bool,
) -> ValidationReport:
    from tqdm import tqdm

    site = coverage_site()
    sandbox: Sandbox
    if isolation == "bwrap" and warm_pool:
        sandbox = WarmPoolSandbox(read_only_paths=sandbox_paths(site))
    elif isolation == "bwrap":
        sandbox = BubblewrapSandbox(read_only_paths=sandbox_paths(site))
    else:
        sandbox = create_sandbox(isolation)
    ctx = Context(
        sandbox, limits=limits, thresholds=thresholds, workers=workers, coverage_site=site
    )
    tqdm.monitor_interval = 0  # no monitor thread: the sandbox forks children
    try:
        with tqdm(total=len(tasks), unit="task", file=sys.stderr, disable=None) as bar:
            return await validate_tasks(
                tasks, ctx, rejected=rejected, on_task=lambda _: bar.update(1)
            )
    finally:
        aclose = getattr(sandbox, "aclose", None)
        if aclose is not None:
            await aclose()


def run(
    tasks_path: str | None,
    dataset: str | None,
    *,
    output: str | None,
    html: str | None,
    json_path: str | None,
    isolation: str,
    limits: Limits,
    thresholds: Thresholds,
    workers: int,
    warm_pool: bool = True,
) -> None:
    """Validate, write the outputs asked for, print the summary and the dropped tasks."""
    try:
        tasks, rejected = load(tasks_path, dataset)
        report = asyncio.run(
            _validate(
                tasks,
                rejected,
                isolation=isolation,
                limits=limits,
                thresholds=thresholds,
                workers=workers,
                warm_pool=warm_pool,
            )
        )
        if output:
            kept = reports.write_clean(report, tasks, output)
            click.echo(f"clean tasks: {kept} written to {output}")
        if html:
            reports.write_html(report, html)
            click.echo(f"HTML report: {html}")
        if json_path:
            reports.write_json(report, json_path)
            click.echo(f"JSON report: {json_path}")
    except Error as error:
        raise click.ClickException(str(error)) from error
    except OSError as error:
        raise click.ClickException(f"cannot write {error.filename}: {error.strerror}") from error
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

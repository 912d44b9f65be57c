"""The ``execgym`` command line: a thin layer over the library API.

Exit codes: 0 success; 1 execgym could not do the job (missing sandbox, unreadable
file, a failed write: the message says how to fix it); 2 bad usage; 128 + the signal
when stopped by SIGINT (130), SIGHUP (129) or SIGTERM (143).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import math
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

import click

from execgym import logs
from execgym._status_cli import status
from execgym._storage_cli import COMMANDS as STORAGE_COMMANDS
from execgym._storage_cli import check_store, upload_results
from execgym._version import __version__
from execgym.breakers import DEFAULT_SPEC, Breakers, from_spec
from execgym.broker import EMBEDDED, BrokerSettings, RemoteBatch, open_broker
from execgym.errors import DamagedInput, Error, TaskError
from execgym.judges.compile import Builder
from execgym.limits import (
    DEFAULT_LIMITS,
    MAX_BYTES,
    MAX_SECONDS,
    MIN_MEMORY_BYTES,
    Limits,
    parse_size,
)
from execgym.metrics import Metrics
from execgym.reward import load_spec
from execgym.sandbox import ISOLATIONS, Sandbox, WarmPoolSandbox, create_sandbox
from execgym.scoring import ScoredRollout, Scorer
from execgym.summary import summarize
from execgym.tasks import (
    DATASETS,
    LineProblem,
    Rollout,
    RolloutLine,
    Task,
    canonical_rollouts,
    load_rollouts,
    load_tasks,
)
from execgym.tasks.datasets import load_builtin
from execgym.worker import Worker, WorkerSettings, describe_broker, run_node


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        raise click.BadParameter(
            f"{text!r}: give positive integers separated by commas, e.g. 1,10",
            param_hint="'--k'",
        )
    return ks


def _load_inputs(
    tasks_path: str | None, rollouts_path: str | None, dataset: str | None, solutions: str | None
) -> tuple[dict[str, Task], list[RolloutLine | LineProblem], dict[str, str], DamagedInput | None]:
    """Tasks, rollouts (and unusable lines), skipped tasks, and a damaged rollouts file.

    The damage of a truncated ``.gz`` rollouts file is returned, not raised: its
    complete lines are scored first (see :func:`_exit_if_damaged`).
    """
    if dataset and tasks_path and rollouts_path:
        raise click.UsageError("give either --dataset or a TASKS file, not both")
    if dataset and tasks_path:  # with --dataset, the one file given is ROLLOUTS
        tasks_path, rollouts_path = None, tasks_path
    if not dataset and not tasks_path:
        raise click.UsageError(
            "nothing to score: give TASKS.jsonl ROLLOUTS.jsonl, or --dataset humaneval "
            "--solutions canonical"
        )
    # Checked here, not by click: with --dataset the first file is ROLLOUTS, and the
    # message names it as what it is.
    for role, path in (("TASKS", tasks_path), ("ROLLOUTS", rollouts_path)):
        if path is not None and not os.path.isfile(path):
            why = "is a directory" if os.path.isdir(path) else "does not exist"
            raise click.BadParameter(f"file {path!r} {why}", param_hint=f"'{role}'")
    skipped: dict[str, str] = {}
    if dataset:
        loaded = load_builtin(dataset)
        tasks = loaded.tasks
        skipped.update(loaded.skipped)  # cannot be judged here: masked, with the reason
    else:
        tasks, problems = load_tasks(tasks_path or "")
        for problem in problems:
            click.echo(f"warning: skipped task: {problem}", err=True)
            if problem.task_id is not None:
                skipped.setdefault(problem.task_id, str(problem))
        if not tasks:
            why = (
                f"{len(problems)} line(s) skipped, see the warnings above"
                if problems
                else "the file has no task lines"
            )
            raise TaskError(
                f"no valid tasks in {tasks_path} ({why}); each line needs task_id and what "
                "its kind needs (assert: prompt, tests and entry_point; see "
                "schemas/task.schema.json) "
                "(did you swap TASKS and ROLLOUTS?)"
            )
    if solutions == "canonical":
        if rollouts_path:
            raise click.UsageError("give either ROLLOUTS or --solutions canonical, not both")
        items: list[RolloutLine | LineProblem] = list(canonical_rollouts(tasks))
        for task_id, reference in (loaded.references if dataset else {}).items():
            rollout = Rollout(
                task_id=task_id, completion=reference, rollout_id=f"{task_id}#canonical"
            )
            items.append(RolloutLine(len(items), rollout))
        return tasks, items, skipped, None
    if not rollouts_path:
        raise click.UsageError("give a ROLLOUTS.jsonl file, or --solutions canonical")
    items = []
    damaged = None
    try:
        items.extend(load_rollouts(rollouts_path, warn=_warn_repaired))
    except DamagedInput as error:  # every complete line before the damage is in items
        damaged = error
        click.echo(f"warning: {error}; scoring the {len(items)} rollout(s) read", err=True)
    for item in items:
        if isinstance(item, LineProblem):
            click.echo(f"warning: bad rollout line (scored as invalid): {item}", err=True)
    _warn_duplicate_ids(items)
    return tasks, items, skipped, damaged


def _warn_repaired(problem: LineProblem) -> None:
    click.echo(f"warning: {problem}", err=True)


DAMAGED_INPUT_EXIT = 3
"""``execgym score``'s exit code when the rollouts file was damaged (a truncated
``.gz``): every complete line was scored and written, but rollouts are missing."""


def _exit_if_damaged(damaged: DamagedInput | None) -> None:
    """After the summary: name the damage again and exit 3 (the results are written)."""
    if damaged is not None:
        click.echo(
            f"error: the input was damaged: {damaged}; the {damaged.lines_read} line(s) "
            f"before it were scored (exit {DAMAGED_INPUT_EXIT})",
            err=True,
        )
        sys.exit(DAMAGED_INPUT_EXIT)


def _warn_duplicate_ids(items: list[RolloutLine | LineProblem]) -> None:
    """Warn when rollout ids repeat: both are scored, told apart only by ``index``."""
    seen: set[str] = set()
    repeated: dict[str, None] = {}
    for item in items:
        if isinstance(item, RolloutLine):
            rollout_id = item.rollout.rollout_id or f"{item.rollout.task_id}#{item.index}"
            if rollout_id in seen:
                repeated[rollout_id] = None
            seen.add(rollout_id)
    if repeated:
        first = ", ".join(repr(rollout_id) for rollout_id in list(repeated)[:5])
        click.echo(
            f"warning: {len(repeated)} rollout_id(s) appear more than once, e.g. {first}: "
            "every line is scored; tell the results apart by their index",
            err=True,
        )


class _Group(click.Group):
    """Ctrl-C, SIGTERM or SIGHUP at any stage (loading, self-test) exits 128 + signal.

    Quietly, after the sandboxes started so far are stopped: click's own handling prints
    "Aborted!" and exits 1, and SIGTERM or SIGHUP would kill us at once. A scoring batch
    that is running handles the signals itself (it reports the results written so far).
    """

    def invoke(self, ctx: click.Context) -> object:
        stopped_by: list[int] = []

        def stop(signum: int, frame: object) -> None:
            stopped_by.append(signum)
            raise KeyboardInterrupt  # unwinds like Ctrl-C: the sandboxes' cleanup runs

        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="execgym")
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS, case_sensitive=False),
    default=None,
    help="Log level on stderr [env: EXECGYM_LOG_LEVEL; default: warning].",
)
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default=None,
    help="text, or json (one object per line) [env: EXECGYM_LOG_FORMAT; default: text].",
)
def main(log_level: str | None, log_format: str | None) -> None:
    """execgym: score model-written code in isolated sandboxes and return rewards."""
    try:
        level, fmt = logs.settings_from(log_level, log_format)
    except Error as error:
        raise click.UsageError(str(error)) from error
    explicit = bool(log_level or log_format or os.environ.get("EXECGYM_LOG_LEVEL"))
    logs.configure(level, fmt, force=explicit or fmt == "json")


def _breakers(ctx: click.Context, param: click.Parameter, value: str) -> Breakers | None:
    try:
        return from_spec(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error


_breakers_option = click.option(
    "--breakers",
    default=DEFAULT_SPEC,
    show_default=True,
    callback=_breakers,
    help="Circuit breakers per task type: 'off', or NAME=VALUE pairs (failures, "
    "failure_rate, min_jobs, window_s, cooldown_s, key=dataset|family|task).",
)


def _positive_seconds(
    ctx: click.Context, param: click.Parameter, value: float | None
) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value!r}: give a positive, finite number of seconds")
    if value is not None and value > MAX_SECONDS:
        raise click.BadParameter(f"{value!r}: give at most {MAX_SECONDS:g} seconds (one day)")
    return value


def _memory(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        size = parse_size(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error
    if size < MIN_MEMORY_BYTES:
        hint = (
            f"; a number without a unit is bytes: did you mean {value.strip()}MiB?"
            if value.strip().isdigit()
            else ""
        )
        raise click.BadParameter(
            f"{value!r} is {size} bytes, too little to start a program (at least 16MiB){hint}"
        )
    if size > MAX_BYTES:
        raise click.BadParameter(f"{value!r} is more than the most allowed, 2**62 bytes")
    return size


_isolation_option = click.option(
    "--isolation",
    type=click.Choice(ISOLATIONS),
    default="bwrap",
    show_default=True,
    help="Sandbox backend; 'none' runs code UNISOLATED (development only).",
)


def _sandbox(isolation: str, warm_pool: bool, allow_root: bool) -> Sandbox:
    """The sandbox for ``--isolation``: the warm pool for bwrap unless turned off."""
    if isolation == "bwrap" and warm_pool:
        return WarmPoolSandbox()
    return create_sandbox(isolation, allow_root=allow_root)


@main.command()
@click.argument("tasks_path", metavar="[TASKS]", required=False, type=click.Path())
@click.argument("rollouts_path", metavar="[ROLLOUTS]", required=False, type=click.Path())
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
    type=click.Path(dir_okay=False),  # checked by _check_output, same for every user
    default="results.jsonl",
    show_default=True,
    help="Results JSONL, one line per rollout, written as they finish.",
)
@_isolation_option
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
@click.option(
    "--reward",
    "reward_name",
    default=None,
    metavar="PRESET|FILE.toml",
    help="Reward spec: binary, fraction, quality, or a TOML file; results then carry "
    "reward_breakdown [default: the binary reward, no breakdown].",
)
@click.option(
    "--broker",
    "broker_url",
    default="embedded",
    show_default=True,
    help="Where rollouts are judged: 'embedded' (here) or redis://HOST:PORT/DB, consumed "
    "by `execgym worker` nodes (then --isolation, --workers and --warm-pool are theirs).",
)
@click.option(
    "--compile-cache",
    "compile_cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of compiled programs, by source hash [default: ~/.cache/execgym/compiled].",
)
@click.option(
    "--no-compile-cache",
    is_flag=True,
    help="Compile every rollout's source again (no cache read or written).",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Also store the results JSONL as a batch log in this object store (a directory "
    "or s3://bucket/prefix; see `execgym storage`) [default: not stored].",
)
@click.option(
    "--batch-id",
    default=None,
    help="The batch log's id with --store [default: score-<UTC time>].",
)
@_breakers_option
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
    reward_name: str | None,
    broker_url: str,
    compile_cache: Path | None,
    no_compile_cache: bool,
    store_url: str | None,
    batch_id: str | None,
    breakers: Breakers | None,
) -> None:
    """Score ROLLOUTS against TASKS (or a built-in data set) and write results JSONL.

    With --dataset, the one file given is ROLLOUTS.

    \b
    Examples:
      execgym score --dataset humaneval --solutions canonical -o results.jsonl
      execgym score --dataset humaneval my_rollouts.jsonl -o results.jsonl
      execgym score tasks.jsonl rollouts.jsonl -o results.jsonl --timeout 5 --memory 256MiB
      execgym score --dataset humaneval --solutions canonical --reward quality
      execgym score tasks.jsonl rollouts.jsonl --broker redis://localhost:6379/0
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    k_values = _parse_ks(ks)
    try:
        limits = Limits(
            wall_time_s=wall_time_s,
            cpu_time_s=cpu_time_s if cpu_time_s is not None else wall_time_s,
            memory_bytes=memory_bytes,
        )
        reward = load_spec(reward_name) if reward_name is not None else None
        tasks, items, skipped, damaged = _load_inputs(tasks_path, rollouts_path, dataset, solutions)
        if broker_url not in EMBEDDED:
            if reward is not None:
                raise click.UsageError(
                    "--reward is computed where rollouts are judged and workers use the "
                    "binary reward for now: drop --reward, or score with --broker embedded"
                )
            broker = open_broker(broker_url)
    except Error as error:
        raise click.ClickException(str(error)) from error
    # After the usage errors (they say more), before any rollout is scored.
    _check_output(output, tasks_path, rollouts_path)
    if store_url is not None:
        check_store(store_url, batch_id)
    if broker_url not in EMBEDDED:
        _warn_unknown_tasks(tasks, skipped, items)
        started = time.monotonic()
        remote = RemoteBatch(broker, tasks, items, limits, skipped)
        results = _write_results(remote.run, len(items), output)
        click.echo(summarize(results, time.monotonic() - started, k_values).render())
        click.echo(f"isolation: the workers' (see each result); broker: {broker_url}")
        if store_url is not None:
            click.echo(upload_results(store_url, batch_id, Path(output)))
        _exit_if_damaged(damaged)
        return
    try:
        sandbox = _sandbox(isolation, warm_pool, allow_root)
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
    builder = Builder(compile_cache, use_cache=not no_compile_cache)
    try:
        scorer = Scorer(
            tasks,
            sandbox,
            limits,
            skipped_tasks=skipped,
            builder=builder,
            reward=reward,
            breakers=breakers,
        )
    except Error as error:
        raise click.ClickException(str(error)) from error
    started = time.monotonic()
    results = _score_to_file(scorer, items, workers, output)
    summary = summarize(results, time.monotonic() - started, k_values)
    click.echo(summary.render())
    click.echo(f"isolation: {isolation}; results: {output}")
    if line := _enforcement_line(results):
        click.echo(line)
    if store_url is not None:
        click.echo(upload_results(store_url, batch_id, Path(output)))
    _exit_if_damaged(damaged)


_SHOWN_LIMITS = ("memory_bytes", "cpu_time_s", "max_processes")
"""The limits whose enforcement depends on the host (cgroups or rlimits), in the summary."""


def _enforcement_line(results: list[ScoredRollout]) -> str:
    """How the host-dependent limits were enforced, as most runs of the batch say."""
    seen: dict[str, Counter[str]] = {name: Counter() for name in _SHOWN_LIMITS}
    for result in results:
        run = result.judgement.run if result.judgement else None
        for name in _SHOWN_LIMITS:
            if run is not None and name in run.enforcement:
                seen[name][run.enforcement[name]] += 1
    parts = [f"{name}: {count.most_common(1)[0][0]}" for name, count in seen.items() if count]
    return "limits enforced by " + "; ".join(parts) if parts else ""


def _check_output(output: str, *inputs: str | None) -> None:
    """Refuse an output path that is an input file, or that cannot be written.

    Raises:
        click.UsageError: if ``output`` is one of ``inputs`` (it would be overwritten).
        click.ClickException: if ``output`` cannot be opened for writing.
    """
    target = Path(output)

    def unwritable(error: OSError) -> click.ClickException:
        return click.ClickException(
            f"cannot write the results to {output}: {error.strerror or error}; "
            "choose a writable path with -o"
        )

    try:
        exists = target.exists()  # PermissionError under a directory we cannot search
    except OSError as error:
        raise unwritable(error) from error
    for name in inputs:
        if name is None:
            continue
        same = (
            os.path.samefile(name, target) if exists else Path(name).resolve() == target.resolve()
        )
        if same:
            raise click.UsageError(
                f"-o {output} is the input file {name}: writing results there would destroy "
                "it; choose another output path"
            )
    try:
        if exists:
            target.open("a").close()  # opens for writing without truncating or creating
        elif not target.parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, f"no directory {target.parent}")
        elif not os.access(target.parent, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as error:
        raise unwritable(error) from error


def _warn_unknown_tasks(
    tasks: dict[str, Task], skipped: dict[str, str], items: list[RolloutLine | LineProblem]
) -> None:
    unknown: dict[str, int] = {}
    for item in items:
        if isinstance(item, RolloutLine) and item.rollout.task_id not in tasks:
            unknown[item.rollout.task_id] = unknown.get(item.rollout.task_id, 0) + 1
    by_reason: dict[str, list[str]] = {}
    for task_id, count in unknown.items():
        if task_id in skipped:
            by_reason.setdefault(skipped[task_id], []).append(task_id)
            continue
        click.echo(
            f"warning: {count} rollout(s) for task_id {task_id!r} scored as invalid: no such task",
            err=True,
        )
    for reason, task_ids in by_reason.items():  # one line per reason, not per task
        rollouts = sum(unknown[task_id] for task_id in task_ids)
        shown = ", ".join(task_ids[:3]) + (", ..." if len(task_ids) > 3 else "")
        click.echo(
            f"warning: {len(task_ids)} task(s) skipped as invalid ({shown}; {rollouts} "
            f"rollout(s) masked): {reason}",
            err=True,
        )


def _score_to_file(
    scorer: Scorer, items: list[RolloutLine | LineProblem], workers: int | None, output: str
) -> list[ScoredRollout]:
    try:
        asyncio.run(scorer.self_test())
    except Error as error:
        raise click.ClickException(str(error)) from error
    finally:
        _close(scorer.sandbox)

    async def run(write: Callable[[ScoredRollout], None]) -> list[ScoredRollout]:
        try:
            return await scorer.score(items, workers=workers, on_result=write)
        finally:
            aclose = getattr(scorer.sandbox, "aclose", None)
            if aclose is not None:
                await aclose()

    return _write_results(run, len(items), output)


def _write_results(
    run: Callable[[Callable[[ScoredRollout], None]], Awaitable[list[ScoredRollout]]],
    total: int,
    output: str,
) -> list[ScoredRollout]:
    """Run a batch with ``run(write)``, writing each result to ``output`` as it comes."""
    written: list[ScoredRollout] = []
    stopped_by: list[int] = []
    write_failed: list[OSError] = []
    try:
        # Lone surrogates (from a program's exception message, say) become JSON escapes.
        sink = Path(output).open("w", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    except OSError as error:
        raise click.ClickException(
            f"cannot write the results to {output}: {error.strerror or error}"
        ) from error
    try:
        try:
            return asyncio.run(_with_progress(run, total, sink, written, stopped_by, write_failed))
        except (KeyboardInterrupt, asyncio.CancelledError):
            if write_failed:
                error = write_failed[0]
                raise click.ClickException(
                    f"cannot write the results to {output}: {error.strerror or error} "
                    f"(the first {len(written)} of {total} results were written); free space "
                    "on that file system or choose another path with -o, then score again"
                ) from error
            click.echo(
                f"interrupted: {len(written)} of {total} results were written to {output}",
                err=True,
            )
            sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))
        except Error as error:
            raise click.ClickException(
                f"{error} ({len(written)} of {total} results were written to {output})"
            ) from error
    finally:
        with contextlib.suppress(OSError):  # a failed write's data stays in the buffer
            sink.close()
        if write_failed:
            _drop_partial_line(output, written)


_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"})
"""Characters ``json.dumps`` writes raw that ``str.splitlines()`` splits at: escaped, so a
reader that splits the results file that way still gets one result per line."""


def _result_line(result: ScoredRollout) -> str:
    return json.dumps(result.to_json(), ensure_ascii=False).translate(_LINE_BREAKS) + "\n"


def _drop_partial_line(output: str, written: list[ScoredRollout]) -> None:
    """Cut a results file back to its complete lines after a failed write."""
    size = sum(len(_result_line(r).encode("utf-8", "backslashreplace")) for r in written)
    with contextlib.suppress(OSError):
        if Path(output).is_file() and Path(output).stat().st_size > size:
            os.truncate(output, size)


def _close(sandbox: object) -> None:
    """Stop a sandbox that keeps processes between runs (the warm pool), if it does."""
    aclose = getattr(sandbox, "aclose", None)
    if aclose is not None:
        asyncio.run(aclose())


async def _with_progress(
    run: Callable[[Callable[[ScoredRollout], None]], Awaitable[list[ScoredRollout]]],
    total: int,
    sink: IO[str],
    written: list[ScoredRollout],
    stopped_by: list[int],
    write_failed: list[OSError],
) -> list[ScoredRollout]:
    from tqdm import tqdm

    # SIGTERM and SIGHUP (terminal or ssh closed) stop the batch like Ctrl-C: running
    # sandboxes are killed and reclaimed, and every finished result is already on disk.
    # A failed write (a full disk) stops it the same way.
    current = asyncio.current_task()

    def stop(signum: int) -> None:
        stopped_by.append(signum)
        if current is not None:
            current.cancel()

    for signum in (signal.SIGTERM, signal.SIGHUP):
        asyncio.get_running_loop().add_signal_handler(signum, stop, signum)

    tqdm.monitor_interval = 0  # no monitor thread: we fork children with preexec_fn
    with tqdm(total=total, unit="rollout", file=sys.stderr, disable=None) as bar:

        def write(result: ScoredRollout) -> None:
            if write_failed:
                return
            try:
                sink.write(_result_line(result))
                sink.flush()
            except OSError as error:
                write_failed.append(error)
                if current is not None:
                    current.cancel()
                return
            written.append(result)
            bar.update(1)

        return await run(write)


@main.command()
@click.option(
    "--broker",
    "broker_url",
    required=True,
    help="The queue to consume: redis://HOST:PORT/DB (or 'embedded', for trying it out).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Sandboxes at once [default: CPU count].",
)
@_isolation_option
@click.option("--warm-pool/--no-warm-pool", default=True, show_default=True, help="As for score.")
@click.option("--allow-root", is_flag=True, help="Let --isolation none run as root.")
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Deliveries that may end without a result before a job is dead-lettered.",
)
@click.option(
    "--visibility-timeout",
    "visibility_timeout_s",
    type=float,
    default=60.0,
    show_default=True,
    callback=_positive_seconds,
    help="Seconds without a heartbeat after which a worker's jobs go to others "
    "(the same for every worker of a queue).",
)
@click.option(
    "--drain-timeout",
    "drain_timeout_s",
    type=float,
    default=30.0,
    show_default=True,
    callback=_positive_seconds,
    help="On SIGTERM, seconds running jobs may take before they are handed back.",
)
@click.option("--prefix", default="execgym", show_default=True, help="Key prefix in Redis.")
@click.option("--check", is_flag=True, help="Check the broker and print its state, then exit.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port) [default: none].",
)
@click.option(
    "--metrics-host", default="0.0.0.0", show_default=True, help="Address of --metrics-port."
)
@_breakers_option
def worker(
    broker_url: str,
    concurrency: int | None,
    isolation: str,
    warm_pool: bool,
    allow_root: bool,
    max_attempts: int,
    visibility_timeout_s: float,
    drain_timeout_s: float,
    prefix: str,
    check: bool,
    metrics_port: int | None,
    metrics_host: str,
    breakers: Breakers | None,
) -> None:
    """Judge jobs from a broker in sandboxes until SIGTERM (then drain and exit 0).

    \b
    Examples:
      execgym worker --broker redis://localhost:6379/0 --concurrency 8
      execgym worker --broker redis://localhost:6379/0 --check
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    settings = BrokerSettings(visibility_timeout_s=visibility_timeout_s)
    try:
        broker = open_broker(broker_url, settings, prefix=prefix)
        if check:
            click.echo(asyncio.run(describe_broker(broker)))
            return
        sandbox = _sandbox(isolation, warm_pool, allow_root)
        metrics = _serve_metrics(metrics_host, metrics_port) if metrics_port is not None else None
        node = Worker(
            broker,
            sandbox,
            WorkerSettings(
                concurrency=concurrency or os.cpu_count() or 1,
                max_attempts=max_attempts,
                drain_timeout_s=drain_timeout_s,
            ),
            breakers=breakers,
            metrics=metrics,
        )
        asyncio.run(run_node(node))
    except Error as error:
        raise click.ClickException(str(error)) from error


def _serve_metrics(host: str, port: int) -> Metrics:
    """Start prometheus-client's HTTP server (a daemon thread) for a worker's metrics."""
    from prometheus_client import start_http_server

    metrics = Metrics()
    try:
        server, _ = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as error:
        raise click.ClickException(
            f"cannot serve metrics on {host}:{port}: {error.strerror or error}; "
            "choose another --metrics-port"
        ) from error
    click.echo(f"metrics: http://{host}:{server.server_port}/metrics", err=True)
    return metrics


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option(
    "--token",
    envvar="EXECGYM_SERVER_TOKEN",
    default=None,
    help="Require 'Authorization: Bearer TOKEN' [env: EXECGYM_SERVER_TOKEN; default: no auth].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Sandboxes running at once, over all requests [default: CPU count].",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    default=None,
    help="Rollouts and programs accepted but unfinished; past it requests get 429.",
)
@click.option("--isolation", type=click.Choice(ISOLATIONS), default=None, help="[default: bwrap]")
@click.option("--warm-pool/--no-warm-pool", default=None, help="[default: on]")
@click.option("--allow-root", is_flag=True, default=None, help="Let --isolation none run as root.")
@click.option(
    "--breakers",
    "breakers_spec",
    default=None,
    help=f"Circuit breakers for /v1/score, as for score [default: {DEFAULT_SPEC}].",
)
def serve(
    host: str,
    port: int,
    token: str | None,
    workers: int | None,
    max_in_flight: int | None,
    isolation: str | None,
    warm_pool: bool | None,
    allow_root: bool | None,
    breakers_spec: str | None,
) -> None:
    """Serve the HTTP API: /v1/score, /v1/run, SandboxFusion's /run_code (docs at /docs).

    Other settings come from EXECGYM_SERVER_* variables (see the README).
    """
    try:
        import uvicorn

        from execgym.server import ServerSettings, create_app
    except ImportError as error:
        raise click.ClickException(
            f"{error}; the HTTP service needs the 'server' extra: pip install 'execgym[server]'"
        ) from error
    try:
        settings = ServerSettings.from_env(
            token=token,
            workers=workers,
            max_in_flight=max_in_flight,
            isolation=isolation,
            warm_pool=warm_pool,
            allow_root=allow_root or None,
            breakers=breakers_spec,
        )
        app = create_app(settings)
    except Error as error:
        raise click.ClickException(str(error)) from error
    if logs.json_configured():  # uvicorn's records go to our JSON handler, not its own
        uvicorn.run(app, host=host, port=port, log_level="info", log_config=None)
    else:
        uvicorn.run(app, host=host, port=port, log_level="info")


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


# Object storage (execgym.storage): `execgym data`, `execgym storage`, `execgym checkpoints`.
for _command in STORAGE_COMMANDS:
    main.add_command(_command)

main.add_command(status)


def _add_episodes() -> None:
    from execgym._episodes_cli import episodes

    main.add_command(episodes)


_add_episodes()


if __name__ == "__main__":
    main()

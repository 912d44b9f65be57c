"""The ``execgym`` command line: a thin layer over the library API.

Exit codes: 0 success; 1 execgym could not do the job (missing sandbox, unreadable
file, a failed write: the message says how to fix it); 2 bad usage; 128 + the signal
when stopped by SIGINT (130), SIGHUP (129) or SIGTERM (143).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import ipaddress
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from execgym import logs
from execgym._score_cli import (
    OUTPUT_TAIL,
    Outcome,
    RolloutStream,
    Write,
    close_sandbox,
    run_batch,
    start_sandbox,
)
from execgym._version import __version__
from execgym.breakers import DEFAULT_SPEC, Breakers, from_spec
from execgym.errors import DamagedInput, Error, TaskError
from execgym.limits import (
    DEFAULT_LIMITS,
    MAX_BYTES,
    MAX_SECONDS,
    MIN_MEMORY_BYTES,
    Limits,
    parse_size,
)
from execgym.sandbox import ISOLATIONS, Sandbox, WarmPoolSandbox, create_sandbox

if TYPE_CHECKING:
    from execgym.metrics import Metrics
    from execgym.scoring import Scorer
    from execgym.tasks import Task
    from execgym.tasks.loaders import LineProblem, RolloutLine

DATASETS = (
    "humaneval",
    "humanevalplus",
    "mbpp",
    "mbppplus",
    "humaneval-x-python",
    "humaneval-x-cpp",
    "humaneval-x-java",
    "humaneval-x-js",
    "humaneval-x-go",
    "humaneval-x-rust",
    "leetcodedataset",
    "bigcodebench-hard",
    "bigcodebench-hard-instruct",
)
"""The built-in data sets (:data:`execgym.tasks.datasets.DATASETS`; a test keeps them
equal), named here so that ``execgym --help`` and ``score`` start without loading them."""

EMBEDDED = ("embedded", "memory")
"""Broker URLs that mean the in-process broker (as :data:`execgym.broker.EMBEDDED`)."""

_LAZY_COMMANDS = {
    "data": ("execgym._storage_cli", "data"),
    "storage": ("execgym._storage_cli", "storage"),
    "checkpoints": ("execgym._storage_cli", "checkpoints"),
    "status": ("execgym._status_cli", "status"),
    "episodes": ("execgym._episodes_cli", "episodes"),
}
"""Subcommands imported only when run (or listed), so ``execgym score`` starts fast."""


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


def _check_inputs(
    tasks_path: str | None, rollouts_path: str | None, dataset: str | None, solutions: str | None
) -> tuple[str | None, str | None]:
    """The usage errors of the input arguments, found without reading the files.

    Returns:
        ``(tasks_path, rollouts_path)``, with ``--dataset``'s one file as ROLLOUTS.
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
    if solutions == "canonical" and rollouts_path:
        raise click.UsageError("give either ROLLOUTS or --solutions canonical, not both")
    if solutions != "canonical" and not rollouts_path:
        raise click.UsageError("give a ROLLOUTS.jsonl file, or --solutions canonical")
    return tasks_path, rollouts_path


def _load_inputs(
    tasks_path: str | None, rollouts_path: str | None, dataset: str | None, solutions: str | None
) -> tuple[dict[str, Task], list[RolloutLine | LineProblem] | RolloutStream, dict[str, str]]:
    """The tasks, the rollouts and the skipped tasks ``{task_id: why}``.

    A rollouts file is a lazy :class:`RolloutStream`; the usage errors are those of
    :func:`_check_inputs`.
    """
    from execgym.tasks import Rollout, RolloutLine, canonical_rollouts, load_tasks
    from execgym.tasks.datasets import load_builtin

    tasks_path, rollouts_path = _check_inputs(tasks_path, rollouts_path, dataset, solutions)
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
        items: list[RolloutLine | LineProblem] = list(canonical_rollouts(tasks))
        for task_id, reference in (loaded.references if dataset else {}).items():
            rollout = Rollout(
                task_id=task_id, completion=reference, rollout_id=f"{task_id}#canonical"
            )
            items.append(RolloutLine(len(items), rollout))
        return tasks, items, skipped
    return tasks, RolloutStream(rollouts_path or "", tasks, skipped), skipped


class _Group(click.Group):
    """Ctrl-C, SIGTERM or SIGHUP at any stage (loading, self-test) exits 128 + signal.

    Quietly, after the sandboxes started so far are stopped: click's own handling prints
    "Aborted!" and exits 1, and SIGTERM or SIGHUP would kill us at once. A scoring batch
    that is running handles the signals itself (it reports the results written so far).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in _LAZY_COMMANDS:
            import importlib

            module, name = _LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), name)
        return command

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
    help="Results JSONL, one line per rollout, written as they finish; '-' writes them to "
    "stdout (the summary then goes to stderr).",
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
    "--calibrate-limits",
    is_flag=True,
    help="Fit each task's time limits to its reference solution: min(--timeout, "
    "max(FACTOR x the reference's time, FLOOR)), measured once per task in the same "
    "sandbox and cached; per test case for stdio and function_call tasks.",
)
@click.option(
    "--calibration-factor",
    type=click.FloatRange(min=1.0),
    default=10.0,
    show_default=True,
    help="With --calibrate-limits: FACTOR.",
)
@click.option(
    "--calibration-floor",
    type=float,
    default=1.0,
    show_default=True,
    callback=_positive_seconds,
    help="With --calibrate-limits: FLOOR, in seconds.",
)
@click.option(
    "--order",
    type=click.Choice(["input", "completion"]),
    default="input",
    show_default=True,
    help="Order of the results file: the rollouts' (results wait, in a bounded buffer, "
    "for earlier ones still running) or as they finish.",
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
@click.option(
    "--state",
    "state",
    type=click.Choice(["fresh", "shared"]),
    default=None,
    help="Python assert and function_call tasks: 'fresh' gives every call of the tests the "
    "solution's module as freshly imported (no state carries from case to case); 'shared' "
    "serves them all from one process. Overrides each task's `state` [default: the task's, "
    "fresh].",
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
    calibrate_limits: bool,
    calibration_factor: float,
    calibration_floor: float,
    order: str,
    ks: str,
    warm_pool: bool,
    allow_root: bool,
    reward_name: str | None,
    broker_url: str,
    compile_cache: Path | None,
    no_compile_cache: bool,
    store_url: str | None,
    batch_id: str | None,
    state: str | None,
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
        reward = None
        if reward_name is not None:
            from execgym.reward import load_spec

            reward = load_spec(reward_name)
        _check_inputs(tasks_path, rollouts_path, dataset, solutions)
        broker = None
        if broker_url not in EMBEDDED:
            if reward is not None:
                raise click.UsageError(
                    "--reward is computed where rollouts are judged and workers use the "
                    "binary reward for now: drop --reward, or score with --broker embedded"
                )
            if calibrate_limits:
                raise click.UsageError(
                    "--calibrate-limits measures references where rollouts are judged, "
                    "which workers do not yet: drop it, or score with --broker embedded"
                )
            from execgym.broker import open_broker

            broker = open_broker(broker_url)
    except Error as error:
        raise click.ClickException(str(error)) from error
    # After the usage errors (they say more), before any rollout is scored.
    to_stdout = output == "-"  # the results are the output: the summary goes to stderr
    if to_stdout and store_url is not None:
        raise click.UsageError("--store uploads the results file: give -o PATH, not -o -")
    if not to_stdout:
        _check_output(output, tasks_path, rollouts_path)
    if store_url is not None:
        from execgym._storage_cli import check_store

        check_store(store_url, batch_id)
    started = time.monotonic()
    if broker is not None:
        outcome, stream = _score_remote(
            broker, tasks_path, rollouts_path, dataset, solutions, limits, order, output, state
        )
        isolation_line = f"isolation: the workers' (see each result); broker: {broker_url}"
    else:
        cpus = os.cpu_count() or 1
        if workers and workers > cpus:
            click.echo(
                f"warning: {workers} sandboxes at once on {cpus} CPUs: wall-clock limits may "
                "fire for programs that are only waiting for a CPU",
                err=True,
            )
        scorer_options: dict[str, Any] = {
            "compile_cache": compile_cache,
            "use_cache": not no_compile_cache,
            "reward": reward,
            "breakers": breakers,
            "state": state,
        }
        if calibrate_limits:
            from execgym.calibration import Calibrator, default_cache_dir

            scorer_options["calibrator"] = Calibrator(
                factor=calibration_factor,
                floor_s=calibration_floor,
                cache_dir=default_cache_dir(),
                sandbox_name=f"{isolation}{'+warm-pool' if warm_pool else ''}",
            )
        inputs = (tasks_path, rollouts_path, dataset, solutions)
        outcome, stream = _score_local(
            lambda: _sandbox(isolation, warm_pool, allow_root),
            inputs,
            limits,
            scorer_options,
            workers,
            order,
            output,
        )
        isolation_line = f"isolation: {isolation}; results: {'stdout' if to_stdout else output}"
    if isinstance(stream, RolloutStream):
        stream.warn()
    summary = outcome.tally.summary(time.monotonic() - started, k_values).render()
    click.echo(summary, err=to_stdout)
    click.echo(isolation_line, err=to_stdout)
    if broker is None and (line := outcome.enforcement_line()):
        click.echo(line, err=to_stdout)
    if store_url is not None:
        from execgym._storage_cli import upload_results

        click.echo(upload_results(store_url, batch_id, Path(output)))
    if isinstance(stream, RolloutStream):
        _exit_if_damaged(stream.damaged)


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


def _score_local(
    make_sandbox: Callable[[], Sandbox],
    inputs: tuple[str | None, str | None, str | None, str | None],
    limits: Limits,
    scorer_options: dict[str, Any],
    workers: int | None,
    order: str,
    output: str,
) -> tuple[Outcome, object]:
    """Score on this host: one warm pool, started while the input is read.

    Start-up runs side by side: the sandbox is made on one thread (finding the
    toolchains waits on their probes), the tasks are parsed (and the judges imported)
    on another, and the warm pool's zygote boots in its own process meanwhile; the
    self-test then runs on that same pool, which serves the batch.
    """
    stream: list[object] = []

    async def prepare() -> tuple[Callable[[Write], Awaitable[None]], int]:
        made: concurrent.futures.Future[Sandbox] = concurrent.futures.Future()

        def make() -> Sandbox:
            try:
                made.set_result(make_sandbox())
            except BaseException as error:
                made.set_exception(error)
                raise
            return made.result()

        making = asyncio.ensure_future(asyncio.to_thread(make))
        loading = asyncio.ensure_future(
            asyncio.to_thread(_load_for_scoring, inputs, made, limits, scorer_options)
        )
        sandbox: Sandbox | None = None
        try:
            sandbox = await making
            starting = asyncio.ensure_future(start_sandbox(sandbox))
            try:
                scorer, items = await loading
            finally:
                await starting  # its failure says more than a loading error
            stream.append(items)
            await scorer.self_test()
        except BaseException:
            for pending in (making, loading):
                pending.cancel()
            if sandbox is not None:
                await close_sandbox(sandbox)
            raise
        total = items.total if isinstance(items, RolloutStream) else len(items)

        async def run(write: Write) -> None:
            try:
                await scorer.score(
                    items,
                    workers=workers,
                    on_result=write,
                    order=order,
                    collect=False,
                    output_tail=OUTPUT_TAIL,
                )
            finally:
                await close_sandbox(sandbox)

        return run, total

    outcome = run_batch(prepare, output)
    return outcome, stream[0] if stream else None


def _load_for_scoring(
    inputs: tuple[str | None, str | None, str | None, str | None],
    sandbox: concurrent.futures.Future[Sandbox],
    limits: Limits,
    scorer_options: dict[str, Any],
) -> tuple[Scorer, list[RolloutLine | LineProblem] | RolloutStream]:
    """The scorer and the rollouts, made off the event loop's thread.

    Run beside the sandbox's start: it imports the judges, parses the tasks and builds
    the judges' harnesses (registered before the first run, so the warm pool preloads
    them) while the zygote boots.
    """
    from execgym.judges.compile import Builder
    from execgym.scoring import Scorer

    tasks, items, skipped = _load_inputs(*inputs)
    options = dict(scorer_options)
    builder = Builder(options.pop("compile_cache"), use_cache=options.pop("use_cache"))
    scorer = Scorer(  # the sandbox is made on another thread, at the same time
        tasks, sandbox.result(), limits, skipped_tasks=skipped, builder=builder, **options
    )
    return scorer, items


def _score_remote(
    broker: Any,
    tasks_path: str | None,
    rollouts_path: str | None,
    dataset: str | None,
    solutions: str | None,
    limits: Limits,
    order: str,
    output: str,
    state: str | None = None,
) -> tuple[Outcome, object]:
    """Score through a broker, consumed by ``execgym worker`` nodes."""
    from execgym.broker import RemoteBatch

    try:
        tasks, loaded, skipped = _load_inputs(tasks_path, rollouts_path, dataset, solutions)
    except Error as error:
        raise click.ClickException(str(error)) from error
    if state is not None:  # the workers judge the tasks as sent
        tasks = {key: task.model_copy(update={"state": state}) for key, task in tasks.items()}
    items = list(loaded)

    async def prepare() -> tuple[Callable[[Write], Awaitable[None]], int]:
        remote = RemoteBatch(broker, tasks, items, limits, skipped)

        async def run(write: Write) -> None:
            await remote.run(write, ordered=order == "input", collect=False)

        return run, len(items)

    return run_batch(prepare, output), loaded


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
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address of --metrics-port (0.0.0.0 for a Prometheus on another host).",
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
    from execgym.broker import BrokerSettings, open_broker
    from execgym.worker import Worker, WorkerSettings, describe_broker, run_node

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


def _size_option(value: str | None) -> int | None:
    try:
        return None if value is None else parse_size(value)
    except Error as error:
        raise click.BadParameter(str(error)) from error


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (127/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )


def _check_exposure(host: str, token: str | None, allowed: bool) -> None:
    """Refuse to serve beyond loopback without a token unless explicitly allowed.

    Raises:
        click.UsageError: for a non-loopback ``host`` without a token or the allowance.
    """
    if token is not None or is_loopback(host):
        return
    risk = (
        f"--host {host!r} is reachable from other machines and no token is set: anyone "
        "who reaches it can run code in its sandboxes and read every job's results"
    )
    if not allowed:
        raise click.UsageError(
            f"{risk}. Set a token (--token or EXECGYM_SERVER_TOKEN; clients send "
            "'Authorization: Bearer <token>'), listen on 127.0.0.1, or, on a private "
            "network you trust, add --allow-no-token"
        )
    click.echo(f"WARNING: {risk} (--allow-no-token)", err=True)


def _serve_metrics(host: str, port: int) -> Metrics:
    """Start prometheus-client's HTTP server (a daemon thread) for a worker's metrics."""
    from prometheus_client import start_http_server

    from execgym.metrics import Metrics

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
@click.option(
    "--run-code-network",
    type=click.Choice(["none", "loopback"]),
    default=None,
    help="Network of /run_code programs: loopback lets a program serve and call itself "
    "on 127.0.0.1 (never beyond) [default: none].",
)
@click.option(
    "--max-body",
    "max_body",
    default=None,
    metavar="SIZE",
    callback=lambda ctx, param, value: _size_option(value),
    help="Largest request body, e.g. 16MiB; larger ones get 413 "
    "[env: EXECGYM_SERVER_MAX_BODY_BYTES; default: 64MiB].",
)
@click.option(
    "--allow-no-token",
    is_flag=True,
    default=None,
    help="Listen on a non-loopback --host without a token (refused otherwise) "
    "[env: EXECGYM_SERVER_ALLOW_NO_TOKEN].",
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
    run_code_network: str | None,
    max_body: int | None,
    allow_no_token: bool | None,
) -> None:
    """Serve the HTTP API: /v1/score, /v1/run, SandboxFusion's /run_code (docs at /docs).

    Other settings come from EXECGYM_SERVER_* variables (see the README). Without a
    token, only a loopback --host is allowed unless --allow-no-token is given.
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
            run_code_network=run_code_network,
            max_body_bytes=max_body,
            allow_no_token=allow_no_token or None,
        )
        _check_exposure(host, settings.token, settings.allow_no_token)
        app = create_app(settings)
    except Error as error:
        raise click.ClickException(str(error)) from error
    from execgym.server.protocol import header_deadline_protocol

    http = header_deadline_protocol(settings.header_timeout_s)
    if logs.json_configured():  # uvicorn's records go to our JSON handler, not its own
        uvicorn.run(app, host=host, port=port, log_level="info", log_config=None, http=http)
    else:
        uvicorn.run(app, host=host, port=port, log_level="info", http=http)


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

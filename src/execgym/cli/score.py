"""``execgym score``: score ROLLOUTS against TASKS and write results JSONL.

The command's options become one :class:`ScoreOptions`; :func:`run_score` checks them
(usage errors first, before any file is written), then runs the batch in ONE event
loop (:func:`~execgym.cli.score_batch.run_batch`) on this host
(:func:`~execgym.cli.score_batch.prepare_local`) or through a broker
(:func:`~execgym.cli.score_batch.prepare_remote`), and prints the summary.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from execgym.cli.options import (
    EMBEDDED,
    allow_root_option,
    breakers_option,
    dataset_option,
    isolation_option,
    memory_size,
    positive_seconds,
    reward_option,
    sandbox_for,
    seconds_option,
    timeout_option,
    warm_pool_option,
    workers_option,
)
from execgym.cli.score_batch import Items, prepare_local, prepare_remote, run_batch
from execgym.cli.score_inputs import RolloutStream, check_inputs, check_output
from execgym.errors import ConfigError, DamagedInput, Error
from execgym.limits import Limits

if TYPE_CHECKING:
    from execgym.ops.breakers import Breakers
    from execgym.reward import RewardSpec
    from execgym.sandbox import Sandbox

DAMAGED_INPUT_EXIT = 3
"""``execgym score``'s exit code when the rollouts file was damaged (a truncated
``.gz``): every complete line was scored and written, but rollouts are missing."""


@dataclass(frozen=True)
class ScoreOptions:
    """Every argument and option of ``execgym score``, as click parsed and checked them.

    The fields are the command's parameters by name (``--timeout`` is ``wall_time_s``,
    in seconds; ``--memory`` is ``memory_bytes``; ``--k`` is ``ks``, still text).
    """

    tasks_path: str | None
    rollouts_path: str | None
    dataset: str | None
    solutions: str | None
    output: str
    isolation: str
    wall_time_s: float
    cpu_time_s: float | None
    memory_bytes: int
    workers: int | None
    calibrate_limits: bool
    calibration_factor: float
    calibration_floor: float
    measure_references: str
    order: str
    ks: str
    warm_pool: bool
    allow_root: bool
    reward_name: str | None
    broker_url: str
    compile_cache: Path | None
    no_compile_cache: bool
    store_url: str | None
    batch_id: str | None
    state: str | None
    diagnose: str | None
    breakers: Breakers | None

    @property
    def inputs(self) -> tuple[str | None, str | None, str | None, str | None]:
        """``(tasks_path, rollouts_path, dataset, solutions)``, as the loaders take them."""
        return self.tasks_path, self.rollouts_path, self.dataset, self.solutions

    @property
    def limits(self) -> Limits:
        """The batch's limits (``--cpu-time`` defaults to ``--timeout``).

        Raises:
            execgym.errors.Error: limits that :class:`~execgym.limits.Limits` refuses.
        """
        cpu_time_s = self.cpu_time_s if self.cpu_time_s is not None else self.wall_time_s
        return Limits(
            wall_time_s=self.wall_time_s, cpu_time_s=cpu_time_s, memory_bytes=self.memory_bytes
        )

    @property
    def to_stdout(self) -> bool:
        """``-o -``: the results are the output, and the summary goes to stderr."""
        return self.output == "-"

    def sandbox(self) -> Sandbox:
        """The sandbox ``--isolation``, ``--warm-pool`` and ``--allow-root`` ask for."""
        return sandbox_for(self.isolation, self.warm_pool, self.allow_root)


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


@click.command()
@click.argument("tasks_path", metavar="[TASKS]", required=False, type=click.Path())
@click.argument("rollouts_path", metavar="[ROLLOUTS]", required=False, type=click.Path())
@dataset_option
@click.option(
    "--solutions",
    type=click.Choice(["canonical"]),
    help="Score the tasks' reference solutions instead of ROLLOUTS.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),  # checked by check_output, same for every user
    default="results.jsonl",
    show_default=True,
    help="Results JSONL, one line per rollout, written as they finish; '-' writes them to "
    "stdout (the summary then goes to stderr).",
)
@isolation_option()
@timeout_option("Wall-clock seconds per rollout (tasks may override).")
@click.option(
    "--cpu-time",
    "cpu_time_s",
    type=float,
    default=None,
    callback=positive_seconds,
    help="CPU seconds per rollout [default: same as --timeout].",
)
@click.option(
    "--memory",
    "memory_bytes",
    default="512MiB",
    show_default=True,
    callback=memory_size,
    help="Memory per rollout, e.g. 256MiB or 1GiB; a bare number is bytes (tasks may override).",
)
@workers_option("Sandboxes at once [default: CPU count].")
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
@seconds_option(
    "--calibration-floor",
    "calibration_floor",
    1.0,
    "With --calibrate-limits: FLOOR, in seconds.",
)
@click.option(
    "--measure-references",
    type=click.Choice(["as-needed", "first"]),
    default="as-needed",
    show_default=True,
    help="With --calibrate-limits: 'as-needed' runs a task's rollouts under FLOOR until "
    "one hits it, then measures the reference and runs that one again under the "
    "calibrated limits (same verdicts, no reference run for a task whose rollouts all "
    "end within FLOOR); 'first' measures each reference before its task's first rollout "
    "(always so with --broker).",
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
@warm_pool_option(
    "With bwrap, fork each Python rollout from a warm, pre-started interpreter "
    "(same isolation as a fresh sandbox, several times faster)."
)
@allow_root_option("Let --isolation none run untrusted code as root (refused otherwise).")
@reward_option
@click.option(
    "--broker",
    "broker_url",
    default="embedded",
    show_default=True,
    help="Where rollouts are judged: 'embedded' (here); redis://HOST:PORT/DB, consumed "
    "by `execgym worker` nodes (then --isolation, --workers and --warm-pool are theirs); "
    "'ray' (attach to the running Ray cluster) or ray://HOST:PORT: sandbox actors started "
    "on its nodes with this command's --isolation, --warm-pool, --reward, --breakers, and "
    "--workers sandboxes each.",
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
@click.option(
    "--diagnose",
    "diagnose",
    default=None,
    metavar="CHECKS",
    help="Diagnose each rollout that passes: a comma-separated list of leaks, hotspots, "
    "complexity (docs/diagnostics.md: what each costs); results then carry diagnostics, "
    "and the leak and scaling reward components apply. Overrides each task's `diagnose` "
    "checks [default: the task's, none without it].",
)
@breakers_option
def score(**params: Any) -> None:
    """Score ROLLOUTS against TASKS (or a built-in data set) and write results JSONL.

    With --dataset, the one file given is ROLLOUTS.

    \b
    Examples:
      execgym score --dataset humaneval --solutions canonical -o results.jsonl
      execgym score --dataset humaneval my_rollouts.jsonl -o results.jsonl
      execgym score tasks.jsonl rollouts.jsonl -o results.jsonl --timeout 5 --memory 256MiB
      execgym score --dataset humaneval --solutions canonical --reward quality
      execgym score tasks.jsonl rollouts.jsonl --diagnose leaks,hotspots --reward quality
      execgym score tasks.jsonl rollouts.jsonl --broker redis://localhost:6379/0
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are
    run_score(ScoreOptions(**params))


def run_score(options: ScoreOptions) -> None:
    """Check ``options``, score the batch in one event loop, print the summary.

    Raises:
        click.UsageError: options that contradict each other (exit 2).
        click.ClickException: the job cannot be done (exit 1); the message says why.
        SystemExit: 3 after the summary when the rollouts file was damaged; 128 + the
            signal when stopped.
    """
    # Pydantic looks for plugins among every installed package's entry points when the
    # first model is made (0.01-0.04 s, more with more packages); a batch uses none.
    # An explicit PYDANTIC_DISABLE_PLUGINS (even empty: load them all) is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    without_pydantic_plugins()
    k_values = _parse_ks(options.ks)
    try:
        limits = options.limits
        with _option_value("--reward"):
            reward = _load_reward(options.reward_name)
        with _option_value("--diagnose"):
            diagnose_checks(options.diagnose)
        check_inputs(*options.inputs)
        with _option_value("--broker", only_if=_unknown_broker(options.broker_url)):
            broker = _open_broker(options, reward)
    except Error as error:
        raise click.ClickException(str(error)) from error
    # After the usage errors (they say more), before any rollout is scored.
    if options.to_stdout and options.store_url is not None:
        raise click.UsageError("--store uploads the results file: give -o PATH, not -o -")
    if not options.to_stdout:
        check_output(options.output, options.tasks_path, options.rollouts_path)
    if options.store_url is not None:
        from execgym.cli.storage import check_store

        check_store(options.store_url, options.batch_id)
    started = time.monotonic()
    loaded: list[Items] = []
    where = "stdout" if options.to_stdout else options.output
    if broker is not None:
        prepare = prepare_remote(broker, options, limits, loaded)
        isolation_line = (
            f"isolation: the workers' (see each result); broker: {options.broker_url}; "
            f"results: {where}"
        )
    else:
        _warn_oversubscribed(options.workers)
        prepare = prepare_local(options, limits, reward, loaded)
        isolation_line = f"isolation: {options.isolation}; results: {where}"
    outcome = run_batch(prepare, options.output)  # the one event loop
    stream = loaded[0] if loaded else None
    if isinstance(stream, RolloutStream):
        stream.warn()
    summary = outcome.tally.summary(time.monotonic() - started, k_values).render()
    err = options.to_stdout
    click.echo(summary, err=err)
    click.echo(isolation_line, err=err)
    if broker is None and (line := outcome.enforcement_line()):
        click.echo(line, err=err)
    if options.store_url is not None:
        from execgym.cli.storage import upload_results

        click.echo(upload_results(options.store_url, options.batch_id, Path(options.output)))
    if isinstance(stream, RolloutStream):
        _exit_if_damaged(stream.damaged)


_PLUGIN_LOADER = "pydantic.plugin._loader"


def without_pydantic_plugins() -> None:
    """With every pydantic plugin disabled, do not import pydantic's plugin finder.

    The finder (``pydantic.plugin._loader``, imported when the first model is made)
    imports ``importlib.metadata`` at its top (with ``email``, ``zipfile``, ``csv``:
    about a twentieth of ``execgym score``'s start-up), only to read entry points that
    ``PYDANTIC_DISABLE_PLUGINS=__all__`` tells it to skip: its ``get_plugins()`` then
    returns ``()``. When that is the setting and the finder is not loaded yet, a
    module that answers the same stands in for it; any other name asked of it loads
    the real finder (so a pydantic that needs more of it still gets it). Anything
    else (plugins enabled, or only some disabled) leaves pydantic as it is.
    """
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__" or _PLUGIN_LOADER in sys.modules:
        return
    stand_in = types.ModuleType(_PLUGIN_LOADER, without_pydantic_plugins.__doc__)

    def get_plugins() -> tuple[()]:
        return ()

    def real(name: str) -> Any:
        if name.startswith("__"):  # the import system asks (__path__...): a plain module
            raise AttributeError(name)
        if sys.modules.get(_PLUGIN_LOADER) is stand_in:
            del sys.modules[_PLUGIN_LOADER]
        return getattr(importlib.import_module(_PLUGIN_LOADER), name)

    stand_in.get_plugins = get_plugins  # type: ignore[attr-defined]
    stand_in.__getattr__ = real  # type: ignore[method-assign]
    sys.modules[_PLUGIN_LOADER] = stand_in


@contextlib.contextmanager
def _option_value(name: str, *, only_if: bool = True) -> Iterator[None]:
    """Turn a :class:`ConfigError` about option ``name``'s value into bad usage (exit 2).

    docs/scoring.md: a bad option value is bad usage, exit 2, as click's own checks
    (``--isolation nope``) are; an unknown ``--reward``, ``--diagnose`` check or
    ``--broker`` scheme exited 1. ``only_if=False`` leaves the error as it is.
    """
    try:
        yield
    except ConfigError as error:
        if not only_if:
            raise
        raise click.BadParameter(str(error), param_hint=f"'{name}'") from error


def _unknown_broker(url: str) -> bool:
    """Whether ``--broker URL`` names no broker execgym knows (bad usage)."""
    known = ("redis://", "rediss://", "unix://", "ray://")
    return url not in EMBEDDED and url != "ray" and not url.startswith(known)


def diagnose_checks(text: str | None) -> tuple[str, ...] | None:
    """The checks of ``--diagnose`` (``None`` without it).

    Raises:
        ConfigError: for an unknown check, naming the known ones.
    """
    if text is None:
        return None
    from execgym.diagnostics import parse_checks

    return parse_checks(text)


def _load_reward(reward_name: str | None) -> RewardSpec | None:
    if reward_name is None:
        return None
    from execgym.reward import load_spec

    return load_spec(reward_name)


def _open_broker(options: ScoreOptions, reward: RewardSpec | None) -> Any:
    """The broker of ``--broker``, or None for the embedded one (score here).

    Raises:
        click.UsageError: for options only the embedded broker honours.
    """
    if options.broker_url in EMBEDDED:
        return None
    if options.broker_url == "ray" or options.broker_url.startswith("ray://"):
        return _ray_broker(options, reward)
    if reward is not None:
        raise click.UsageError(
            "--reward is computed where rollouts are judged: give it to the workers "
            "(execgym worker --reward NAME) and drop it here, or score with --broker embedded "
            "or --broker ray (whose actors this command starts)"
        )
    from execgym.broker import open_broker

    return open_broker(options.broker_url)


def _ray_broker(options: ScoreOptions, reward: RewardSpec | None) -> Any:
    """``--broker ray``: sandbox actors this command starts on the cluster, with its options.

    ``--isolation``, ``--warm-pool``, ``--allow-root``, ``--reward`` and ``--breakers``
    are the actors'; ``--workers`` is the sandboxes of each actor (one per node).
    """
    from execgym.broker.ray_actors import ActorConfig
    from execgym.broker.ray_broker import RayBroker

    breakers = options.breakers
    config = ActorConfig(
        isolation=options.isolation,
        warm_pool=options.warm_pool,
        allow_root=options.allow_root,
        reward=reward,
        breaker_key=(breakers.key_name or "dataset") if breakers is not None else "dataset",
    )
    return RayBroker(
        options.broker_url,
        config,
        concurrency=options.workers,
        breakers=breakers.policy if breakers is not None else None,
    )


def _warn_oversubscribed(workers: int | None) -> None:
    cpus = os.cpu_count() or 1
    if workers and workers > cpus:
        click.echo(
            f"warning: {workers} sandboxes at once on {cpus} CPUs: wall-clock limits may "
            "fire for programs that are only waiting for a CPU",
            err=True,
        )


def _exit_if_damaged(damaged: DamagedInput | None) -> None:
    """After the summary: name the damage again and exit 3 (the results are written)."""
    if damaged is not None:
        click.echo(
            f"error: the input was damaged: {damaged}; the {damaged.lines_read} line(s) "
            f"before it were scored (exit {DAMAGED_INPUT_EXIT})",
            err=True,
        )
        sys.exit(DAMAGED_INPUT_EXIT)

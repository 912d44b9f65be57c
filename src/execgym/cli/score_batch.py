"""How ``execgym score`` runs a batch: one event loop, streamed in, streamed out.

- :func:`run_batch` runs the whole batch (loading, the self-test, scoring) in ONE
  event loop and writes each result to the results file as soon as it is known; the
  summary is counted as results go by (:class:`~execgym.summary.Tally`: counts, and
  scored and passed rollouts per task for pass@k).
- Results are written in input order by default (``--order completion`` writes them
  as they finish): a result that finishes before an earlier one waits in a reorder
  buffer of bounded size (see :meth:`execgym.Scorer.score`), holding only the tail of
  its output that the file keeps.
- :func:`prepare_local`: one warm pool serves the self-test and the batch, and it starts
  while the input is read (the tasks are parsed on a thread while the zygote boots);
  the self-test runs as soon as the zygote is up, beside the loading and the first
  rollouts, whose results are held until it passed (:func:`score_after_self_test`).
  :func:`prepare_remote`: the rollouts go through a broker to ``execgym worker`` nodes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import signal
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from execgym.cli.group import resume_collection
from execgym.cli.score_inputs import RolloutStream, load_inputs
from execgym.errors import Error

if TYPE_CHECKING:  # imported when used: the command line starts before they are needed
    from execgym._results_file import ResultsFile
    from execgym.cli.score import ScoreOptions
    from execgym.limits import Limits
    from execgym.reward import RewardSpec
    from execgym.sandbox import PausableSandbox, Sandbox
    from execgym.scoring import ScoredRollout, Scorer
    from execgym.tasks.loaders import LineProblem, RolloutLine
    from execgym.tasks.models import Task

SHOWN_LIMITS = ("memory_bytes", "cpu_time_s", "max_processes")
"""The limits whose enforcement depends on the host (cgroups or rlimits), in the summary."""


@dataclass
class Outcome:
    """What a finished batch leaves besides its results file.

    Attributes:
        tally: Counts for the summary.
        enforcement: ``{limit: Counter(how it was enforced)}`` over the batch's runs.
    """

    tally: Any = None  # a Tally, made once the batch starts (its import is not light)
    enforcement: dict[str, Counter[str]] = field(
        default_factory=lambda: {name: Counter() for name in SHOWN_LIMITS}
    )

    def add(self, result: ScoredRollout) -> None:
        """Count one result."""
        if self.tally is None:
            self.tally = _tally()
        self.tally.add(result)
        run = result.judgement.run if result.judgement else None
        if run is not None:
            for name, count in self.enforcement.items():
                if name in run.enforcement:
                    count[run.enforcement[name]] += 1

    def enforcement_line(self) -> str:
        """How the host-dependent limits were enforced, as most runs of the batch say."""
        parts = [
            f"{name}: {count.most_common(1)[0][0]}"
            for name, count in self.enforcement.items()
            if count
        ]
        return "limits enforced by " + "; ".join(parts) if parts else ""


def _tally() -> Any:
    from execgym.summary import Tally

    return Tally()


class Results:
    """The batch's results on their way to the results file (and the summary).

    :meth:`write` hands a result on in the order it is to be written. Until
    :meth:`open` the file does not exist and results are held here: a local batch
    starts scoring while its self-test runs, and nothing is written (the file is not
    even created) unless the self-test passed; what the rollouts scored meanwhile
    (the results of at most the self-test's run time, each with only its output's
    tail) is written then, in order.

    Args:
        output: The results file (``-``: standard output).
        outcome: Counts each result written.
        stop: Called once if a write fails (the batch stops).

    Attributes:
        sink: The open results file, once :meth:`open` was called.
        failed: The write errors (at most one: writing stops at the first).
        on_written: Called after each result is written (the progress bar), if set.
    """

    def __init__(self, output: str, outcome: Outcome, stop: Callable[[], object]) -> None:
        self.output = output
        self.outcome = outcome
        self.sink: ResultsFile | None = None
        self.failed: list[OSError] = []
        self.on_written: Callable[[], object] | None = None
        self._stop = stop
        self._held: list[ScoredRollout] = []

    @property
    def written(self) -> int:
        """Results written to the file so far."""
        return self.sink.written if self.sink is not None else 0

    def open(self) -> None:
        """Create the results file and write the results held so far.

        Raises:
            click.ClickException: if the file cannot be created.
        """
        from execgym._results_file import ResultsFile

        if self.sink is not None:
            return
        try:
            self.sink = ResultsFile(self.output)
        except OSError as error:
            raise click.ClickException(
                f"cannot write the results to {self.output}: {error.strerror or error}"
            ) from error
        held, self._held = self._held, []
        for result in held:
            self.write(result)

    def write(self, result: ScoredRollout) -> None:
        """Write ``result`` (or hold it until :meth:`open`); a failed write stops the batch."""
        if self.failed:
            return
        if self.sink is None:
            self._held.append(result)
            return
        try:
            self.sink.write(result)
        except OSError as error:
            self.failed.append(error)
            self._stop()
            return
        self.outcome.add(result)
        if self.on_written is not None:
            self.on_written()

    def close(self) -> None:
        """Close the results file if it was opened (see :meth:`ResultsFile.close`)."""
        if self.sink is not None:
            self.sink.close()


Run = Callable[[Results], Awaitable[None]]
"""Scores a batch: hands each result to :meth:`Results.write` and calls
:meth:`Results.open` once nothing stands in the way of writing (its self-test passed)."""

Prepare = Callable[[], Awaitable[tuple[Run, int]]]
"""What :func:`run_batch` awaits first: everything before scoring, and the total."""


def run_batch(prepare: Prepare, output: str) -> Outcome:
    """Run a batch in one event loop, writing its results to ``output`` as they come.

    ``prepare()`` does what must come before scoring (loading, starting the sandbox)
    and returns ``(run, total)``: ``run(results)`` scores the batch, handing each
    result to :meth:`Results.write` in the order it is to be written, and opens the
    results file (:meth:`Results.open`) once its self-test passed. Until then nothing
    is written, so a failure or a signal before leaves nothing behind.

    SIGINT, SIGTERM and SIGHUP stop the batch after killing the running sandboxes:
    every result already written stays, and the exit status is 128 + the signal. A
    failed write (a full disk) stops it too, with the complete lines kept.

    Raises:
        click.ClickException: if the results cannot be written, or an
            :class:`~execgym.errors.Error` stops the batch (the message says how many
            results were written).
    """
    outcome = Outcome()
    stopped_by: list[int] = []
    state: dict[str, Any] = {}

    async def main() -> None:
        current = asyncio.current_task()

        def stop(signum: int) -> None:
            stopped_by.append(signum)
            if current is not None:
                current.cancel()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, stop, signum)
        run, total = await prepare()
        resume_collection(freeze=True)  # start-up's done: see execgym.cli.group
        outcome.tally = _tally()
        state["total"] = total
        results = Results(output, outcome, lambda: current.cancel() if current else None)
        state["results"] = results
        with _progress(results, total):
            await run(results)
        results.open()  # an empty batch: the file, empty

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        results = state.get("results")
        written = results.written if results is not None else 0
        total = state.get("total", 0)
        if results is not None and results.failed:
            error = results.failed[0]
            raise click.ClickException(
                f"cannot write the results to {output}: {error.strerror or error} "
                f"(the first {written} of {total} results were written); free space "
                "on that file system or choose another path with -o, then score again"
            ) from error
        if results is None or results.sink is None:
            click.echo("interrupted", err=True)
        else:
            click.echo(
                f"interrupted: {written} of {total} results were written to {output}", err=True
            )
        sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))
    except Error as error:
        results = state.get("results")
        suffix = (
            f" ({results.written} of {state.get('total', 0)} results were written to {output})"
            if results is not None and results.sink is not None
            else ""
        )
        raise click.ClickException(f"{error}{suffix}") from error
    finally:
        results = state.get("results")
        if results is not None:
            results.close()
    return outcome


@contextlib.contextmanager
def _progress(results: Results, total: int) -> Iterator[None]:
    """A progress bar on stderr while the batch runs, if stderr is a terminal.

    Without a terminal tqdm would draw nothing (``disable=None``): it is not even
    imported then (a hundredth of a second of every start).
    """
    if not sys.stderr.isatty():
        yield
        return
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    tqdm.monitor_interval = 0  # no monitor thread: we fork children with preexec_fn
    # One process writes the bar: a thread lock, not tqdm's default, which imports
    # multiprocessing for a cross-process lock (a hundredth of a second of start-up).
    tqdm.set_lock(threading.RLock())
    # Log records go through tqdm.write while the bar shows: each on a line of its own,
    # the bar redrawn below it (a record written straight to stderr broke the bar).
    with (
        logging_redirect_tqdm(tqdm_class=tqdm),
        tqdm(total=total, unit="rollout", file=sys.stderr, disable=None) as bar,
    ):
        results.on_written = lambda: bar.update(1)
        try:
            yield
        finally:
            results.on_written = None


OUTPUT_TAIL = 2000
"""Bytes of each result's stdout and stderr kept after it is judged: all the results file
shows (:data:`execgym.scoring.TAIL_BYTES`; a test keeps them equal)."""


async def start_sandbox(sandbox: object) -> None:
    """Start a sandbox that keeps processes between runs (the warm pool's zygote).

    Raises:
        SandboxSetupFailed: if it cannot start, as the self-test would have found.
    """
    from execgym.errors import SandboxSetupFailed

    start = getattr(sandbox, "start", None)
    if start is not None:
        try:
            await start()
        except SandboxSetupFailed as error:
            name = getattr(sandbox, "name", "the")
            raise SandboxSetupFailed(
                f"the {name} sandbox failed its self-test: it could not start ({error})"
            ) from error


Items = list["RolloutLine | LineProblem"] | RolloutStream
"""The rollouts of a batch: a list (canonical solutions, a broker batch) or a stream."""


def prepare_local(
    options: ScoreOptions, limits: Limits, reward: RewardSpec | None, loaded: list[Items]
) -> Prepare:
    """Score on this host: one warm pool, started while the input is read.

    Start-up runs side by side: the sandbox is made on one thread (finding the
    toolchains waits on their probes), the tasks are parsed (and the judges imported)
    on another, and the warm pool's zygote boots in its own process meanwhile. The
    self-test runs on that same pool, which serves the batch, as soon as the zygote is
    up: beside the loading and the batch's first rollouts, whose results wait for it
    (see :func:`score_after_self_test`). The rollouts, once read, are appended to
    ``loaded`` (for the warnings after the batch).
    """

    async def prepare() -> tuple[Run, int]:
        # The batch's runs go through `made` (its count of runs in flight tells whether
        # the self-test ran beside any, and it can hold them for a self-test alone).
        made: concurrent.futures.Future[PausableSandbox] = concurrent.futures.Future()

        def make() -> Sandbox:
            from execgym.sandbox import PausableSandbox

            try:
                made.set_result(PausableSandbox(options.sandbox()))
            except BaseException as error:
                made.set_exception(error)
                raise
            return made.result().inner

        making = asyncio.ensure_future(asyncio.to_thread(make))
        loading = asyncio.ensure_future(
            asyncio.to_thread(_load_for_scoring, options, limits, reward, made)
        )
        sandbox: Sandbox | None = None
        testing: asyncio.Future[None] | None = None
        try:
            sandbox = await making
            starting = asyncio.ensure_future(start_sandbox(sandbox))
            testing = asyncio.ensure_future(
                _self_test_once_started(starting, sandbox, made.result(), limits)
            )
            try:
                scorer, items = await loading
            finally:
                await starting  # its failure says more than a loading error
            loaded.append(items)
        except BaseException:
            for pending in (making, loading, testing):
                if pending is not None:
                    pending.cancel()
            if testing is not None:
                await asyncio.wait([testing])
                if not testing.cancelled():
                    testing.exception()  # superseded by the error raised
            if sandbox is not None:
                await sandbox.aclose()
            raise
        total = items.total if isinstance(items, RolloutStream) else len(items)

        async def run(results: Results) -> None:
            try:
                await score_after_self_test(scorer, items, results, options, testing)
            finally:
                await scorer.aclose()  # the sandboxes of tasks' environments
                await sandbox.aclose()

        return run, total

    return prepare


async def _self_test_once_started(
    starting: asyncio.Future[None], sandbox: Sandbox, batch: PausableSandbox, limits: Limits
) -> None:
    """The self-test, once the sandbox started, beside the batch's runs (``batch``).

    It needs neither the batch's tasks nor its judges: it runs while they are still
    being loaded, on the warm pool as soon as the zygote is up. If it fails while a
    rollout of the batch ran beside it, it runs again alone before it counts
    (:func:`execgym.scoring.selftest.self_test_beside`): a rollout is the model's
    program, and one that takes the CPU must not abort the batch.
    """
    await starting
    # Imported off the event loop: the loading thread may be importing the same modules.
    selftest = await asyncio.to_thread(importlib.import_module, "execgym.scoring.selftest")
    await selftest.self_test_beside(sandbox, batch, limits)


async def score_after_self_test(
    scorer: Scorer,
    items: Items,
    results: Results,
    options: ScoreOptions,
    testing: asyncio.Future[None] | None = None,
) -> None:
    """Score ``items`` with ``scorer``; write nothing unless its self-test passes.

    The self-test (one known-good rollout, :meth:`Scorer.self_test`; ``testing`` if it
    was started already, on the same sandbox and limits) runs beside the batch's first
    rollouts, and the batch's results are held (:class:`Results`) until it has passed:
    a broken sandbox still stops the batch with nothing written, no result scored by
    it, while a working one no longer waits for the self-test's run before its first
    rollout starts (its wall time was part of every command's start).

    Not side by side when a rollout's run can leave something behind that outlives
    the batch: ``--calibrate-limits`` (measurements cached on disk) or a task with an
    ``environment`` (built and cached); then the self-test passes first, as before.

    Raises:
        SandboxSetupFailed: the self-test did not pass (the rollouts in flight are
            cancelled, their results dropped).
        Error: what stops the batch (see :meth:`Scorer.score`).
    """

    async def score() -> None:
        await scorer.score(
            items,
            workers=options.workers,
            on_result=results.write,
            order=options.order,
            collect=False,
            output_tail=OUTPUT_TAIL,
        )

    if testing is None:
        testing = asyncio.ensure_future(scorer.self_test())
    scoring: asyncio.Future[None] | None = None
    try:
        if options.calibrate_limits or any(t.environment for t in scorer.tasks.values()):
            await testing
        scoring = asyncio.ensure_future(score())
        await testing  # no result is written, nor the file created, before it passed
        results.open()
        await scoring
    finally:
        tasks = [task for task in (testing, scoring) if task is not None]
        for task in tasks:
            task.cancel()  # nothing if done
        await asyncio.wait(tasks)
        for task in tasks:  # each failure was raised above, or is superseded by the one that was
            if not task.cancelled():
                task.exception()


def _load_for_scoring(
    options: ScoreOptions,
    limits: Limits,
    reward: RewardSpec | None,
    sandbox: concurrent.futures.Future[PausableSandbox],
) -> tuple[Scorer, Items]:
    """The scorer and the rollouts, made off the event loop's thread.

    Run beside the sandbox's start: it imports the judges, parses the tasks and builds
    the judges' harnesses (registered before the first run, so the warm pool preloads
    them) while the zygote boots.
    """
    from execgym.cli.score import diagnose_checks
    from execgym.judges.compile import Builder
    from execgym.scoring import Scorer

    tasks, items, skipped = load_inputs(*options.inputs)
    calibrator = None
    if options.calibrate_limits:
        from execgym.calibration import Calibrator, default_cache_dir

        calibrator = Calibrator(
            factor=options.calibration_factor,
            floor_s=options.calibration_floor,
            floor_first=options.measure_references == "as-needed",
            cache_dir=default_cache_dir(),
            sandbox_name=f"{options.isolation}{'+warm-pool' if options.warm_pool else ''}",
        )
    scorer = Scorer(  # the sandbox is made on another thread, at the same time
        tasks,
        sandbox.result(),
        limits,
        skipped_tasks=skipped,
        builder=Builder(options.compile_cache, use_cache=not options.no_compile_cache),
        reward=reward,
        breakers=options.breakers,
        state=options.state,
        calibrator=calibrator,
        diagnose=diagnose_checks(options.diagnose) if options.diagnose else None,
    )
    return scorer, items


def prepare_remote(
    broker: Any, options: ScoreOptions, limits: Limits, loaded: list[Items]
) -> Prepare:
    """Score through a broker, consumed by ``execgym worker`` nodes.

    The tasks are read now, the rollouts as the batch goes (a window of them in
    flight, see :mod:`execgym.broker.window`); they are appended to ``loaded``.

    Raises:
        click.ClickException: the inputs cannot be read.
    """
    from execgym.broker import RemoteBatch

    try:
        tasks, items, skipped = load_inputs(*options.inputs)
    except Error as error:
        raise click.ClickException(str(error)) from error
    tasks = sent_tasks(tasks, options)
    calibrator = None
    if options.calibrate_limits:  # each reference judged once, through the broker
        from execgym.calibration import Calibrator

        calibrator = Calibrator(
            factor=options.calibration_factor, floor_s=options.calibration_floor
        )
    loaded.append(items)
    total = items.total if isinstance(items, RolloutStream) else len(items)

    async def prepare() -> tuple[Run, int]:
        # The rollouts are read as the batch goes: a window of them is in flight.
        remote = RemoteBatch(broker, tasks, items, limits, skipped, calibrator)

        async def run(results: Results) -> None:
            results.open()  # the workers ran their self-tests when they started
            await remote.run(results.write, ordered=options.order == "input", collect=False)

        return run, total

    return prepare


def sent_tasks(tasks: dict[str, Task], options: ScoreOptions) -> dict[str, Task]:
    """The tasks as the workers must judge them: with ``--state`` and ``--diagnose``.

    The workers take neither option (they judge the tasks as sent): ``--state`` sets
    each task's ``state``, ``--diagnose`` its ``diagnose`` checks (keeping the task's
    ``sizes`` and ``inputs``), as the embedded scorer's overrides do.
    """
    from execgym.diagnostics import parse_checks
    from execgym.tasks.models import Diagnose

    checks = parse_checks(options.diagnose) if options.diagnose else None
    sent = {}
    for key, task in tasks.items():
        update: dict[str, object] = {}
        if options.state is not None:
            update["state"] = options.state
        if checks is not None:
            update["diagnose"] = (task.diagnose or Diagnose()).model_copy(update={"checks": checks})
        sent[key] = task.model_copy(update=update) if update else task
    return sent

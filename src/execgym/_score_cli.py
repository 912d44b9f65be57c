"""How ``execgym score`` runs a batch: streamed in, streamed out, in flat memory.

- The rollouts file is read lazily: a rollout is parsed when a sandbox is free for it,
  so only the rollouts in flight (and the reorder window) are in memory.
- Each result is written to the results file as soon as it is known and dropped; the
  summary is counted as results go by (:class:`~execgym.summary.Tally`: counts, and
  scored and passed rollouts per task for pass@k).
- Results are written in input order by default (``--order completion`` writes them
  as they finish): a result that finishes before an earlier one waits in a reorder
  buffer of bounded size (see :meth:`execgym.Scorer.score`), holding only the tail of
  its output that the file keeps.
- One warm pool serves the self-test and the batch, and it starts while the input is
  read (the tasks are parsed on a thread while the zygote boots).
"""

from __future__ import annotations

import array
import asyncio
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from execgym.errors import DamagedInput, Error

if TYPE_CHECKING:  # imported when used: the command line starts before they are needed
    from execgym.scoring import ScoredRollout
    from execgym.tasks.loaders import LineProblem, RolloutLine
    from execgym.tasks.models import Task

_SEEN_BITS = 1 << 25
"""Bits of :class:`RolloutStream`'s bitmap of rollout ids (4 MiB, touched as ids come)."""

SHOWN_LIMITS = ("memory_bytes", "cpu_time_s", "max_processes")
"""The limits whose enforcement depends on the host (cgroups or rlimits), in the summary."""


def count_lines(path: str) -> int:
    """Non-blank lines of a JSONL file, without parsing them.

    Counted as :func:`~execgym.tasks.loaders.read_jsonl` counts them (lines end at LF
    only; a ``.gz`` file is read streaming, up to any damage), so the total matches
    the indexes.
    """
    from execgym.tasks.loaders import _lines

    try:
        with open(path, "rb") as handle:
            return sum(1 for raw in _lines(Path(path), handle) if raw.strip())
    except (OSError, DamagedInput):
        return 0  # load_rollouts raises the error with the path when it reads the file


class RolloutStream:
    """The rollouts of a file, read one at a time, with what the warnings need.

    Iterating yields :class:`RolloutLine` and :class:`LineProblem` items (a problem is
    warned about at once). What would need every rollout in memory is kept small: a
    64-bit hash per rollout id (8 bytes each) to find repeated ids, and a count per
    unknown task id; :meth:`warn` reports both after the batch.
    """

    def __init__(self, path: str, tasks: dict[str, Task], skipped: dict[str, str]) -> None:
        self.path = path
        self.total = count_lines(path)
        self._tasks = tasks
        self._skipped = skipped
        self._seen = bytearray(_SEEN_BITS // 8)  # a bit per hash of a rollout id seen
        # Hashes whose bit was already set, in one buffer: scattered small int objects
        # would each pin an allocator page among the batch's short-lived objects.
        self._maybe_repeated = array.array("q")
        self._unknown: dict[str, int] = {}
        self.damaged: DamagedInput | None = None

    def __iter__(self) -> Iterator[RolloutLine | LineProblem]:
        try:
            yield from self._read()
        except DamagedInput as error:  # every complete line before the damage was read
            self.damaged = error
            click.echo(f"warning: {error}; scoring the lines read before it", err=True)

    def _read(self) -> Iterator[RolloutLine | LineProblem]:
        from execgym.tasks.loaders import LineProblem, load_rollouts

        for item in load_rollouts(self.path, warn=_warn_repaired):
            if isinstance(item, LineProblem):
                click.echo(f"warning: bad rollout line (scored as invalid): {item}", err=True)
            else:
                rollout = item.rollout
                rollout_id = rollout.rollout_id or f"{rollout.task_id}#{item.index}"
                digest = hash(rollout_id)
                bit = digest % _SEEN_BITS
                if self._seen[bit >> 3] & (1 << (bit & 7)):
                    self._maybe_repeated.append(digest)
                else:
                    self._seen[bit >> 3] |= 1 << (bit & 7)
                if rollout.task_id not in self._tasks:
                    self._unknown[rollout.task_id] = self._unknown.get(rollout.task_id, 0) + 1
            yield item

    def warn(self) -> None:
        """Warn of repeated rollout ids and of rollouts of unknown or skipped tasks."""
        self._warn_repeated()
        warn_unknown_tasks(self._unknown, self._skipped)

    def _warn_repeated(self) -> None:
        repeated_hashes = set(self._maybe_repeated)
        if not repeated_hashes:
            return
        from execgym.tasks.loaders import RolloutLine

        seen: set[str] = set()
        repeated: dict[str, None] = {}
        for item in _readable(self.path):  # again, for the ids' names (rare)
            if isinstance(item, RolloutLine):
                rollout = item.rollout
                rollout_id = rollout.rollout_id or f"{rollout.task_id}#{item.index}"
                if hash(rollout_id) in repeated_hashes:
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


def _warn_repaired(problem: LineProblem) -> None:
    click.echo(f"warning: {problem}", err=True)


def _readable(path: str) -> Iterator[RolloutLine | LineProblem]:
    """The rollouts of ``path`` up to any damage, quietly (they were warned about)."""
    from execgym.tasks.loaders import load_rollouts

    try:
        yield from load_rollouts(path, warn=lambda problem: None)
    except DamagedInput:
        return


def warn_unknown_tasks(unknown: dict[str, int], skipped: dict[str, str]) -> None:
    """Warn of rollouts (``{task_id: count}``) whose task is unknown or was skipped."""
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


Write = Callable[["ScoredRollout"], None]
"""Hands one result to the results file (and the summary)."""


def run_batch(
    prepare: Callable[[], Awaitable[tuple[Callable[[Write], Awaitable[None]], int]]],
    output: str,
) -> Outcome:
    """Run a batch in one event loop, writing its results to ``output`` as they come.

    ``prepare()`` does everything before the first result (loading, the self-test) and
    returns ``(run, total)``: ``run(write)`` scores the batch, handing each result to
    ``write`` in the order it is to be written. The results file is created only then,
    so a failure or a signal while preparing leaves nothing behind.

    SIGINT, SIGTERM and SIGHUP stop the batch after killing the running sandboxes:
    every result already written stays, and the exit status is 128 + the signal. A
    failed write (a full disk) stops it too, with the complete lines kept.

    Raises:
        click.ClickException: if the results cannot be written, or an
            :class:`~execgym.errors.Error` stops the batch (the message says how many
            results were written).
    """
    from execgym._results_file import ResultsFile

    outcome = Outcome()
    stopped_by: list[int] = []
    write_failed: list[OSError] = []
    state: dict[str, object] = {}

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
        outcome.tally = _tally()
        state["total"] = total
        try:
            sink = ResultsFile(output)
        except OSError as error:
            raise click.ClickException(
                f"cannot write the results to {output}: {error.strerror or error}"
            ) from error
        state["sink"] = sink
        await _write_all(run, sink, total, outcome, write_failed, current)

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        sink = state.get("sink")
        written = sink.written if isinstance(sink, ResultsFile) else 0
        total = state.get("total", 0)
        if write_failed:
            error = write_failed[0]
            raise click.ClickException(
                f"cannot write the results to {output}: {error.strerror or error} "
                f"(the first {written} of {total} results were written); free space "
                "on that file system or choose another path with -o, then score again"
            ) from error
        if sink is None:
            click.echo("interrupted", err=True)
        else:
            click.echo(
                f"interrupted: {written} of {total} results were written to {output}", err=True
            )
        sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))
    except Error as error:
        sink = state.get("sink")
        written = sink.written if isinstance(sink, ResultsFile) else 0
        suffix = (
            f" ({written} of {state.get('total', 0)} results were written to {output})"
            if sink is not None
            else ""
        )
        raise click.ClickException(f"{error}{suffix}") from error
    finally:
        sink = state.get("sink")
        if isinstance(sink, ResultsFile):
            sink.close()
    return outcome


async def _write_all(
    run: Callable[[Write], Awaitable[None]],
    sink: object,
    total: int,
    outcome: Outcome,
    write_failed: list[OSError],
    current: asyncio.Task[None] | None,
) -> None:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from execgym._results_file import ResultsFile

    assert isinstance(sink, ResultsFile)
    tqdm.monitor_interval = 0  # no monitor thread: we fork children with preexec_fn
    # Log records go through tqdm.write while the bar shows: each on a line of its own,
    # the bar redrawn below it (a record written straight to stderr broke the bar).
    with (
        logging_redirect_tqdm(tqdm_class=tqdm),
        tqdm(total=total, unit="rollout", file=sys.stderr, disable=None) as bar,
    ):

        def write(result: ScoredRollout) -> None:
            if write_failed:
                return
            try:
                sink.write(result)
            except OSError as error:
                write_failed.append(error)
                if current is not None:
                    current.cancel()
                return
            outcome.add(result)
            bar.update(1)

        await run(write)


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


async def close_sandbox(sandbox: object) -> None:
    """Stop a sandbox that keeps processes between runs (the warm pool), if it does."""
    aclose = getattr(sandbox, "aclose", None)
    if aclose is not None:
        await aclose()

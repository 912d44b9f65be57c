"""What ``execgym score`` reads and checks before it scores: inputs, output path, warnings.

- The usage errors of the input arguments (:func:`check_inputs`) and of ``-o``
  (:func:`check_output`) are found before any file is read or written.
- The rollouts file is read lazily (:class:`RolloutStream`): a rollout is parsed when a
  sandbox is free for it, so only the rollouts in flight are in memory; repeated ids
  and unknown tasks are warned about after the batch.
"""

from __future__ import annotations

import array
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from execgym.errors import DamagedInput, TaskError

if TYPE_CHECKING:  # imported when used: the command line starts before they are needed
    from execgym.tasks.loaders import LineProblem, RolloutLine
    from execgym.tasks.models import Task

_SEEN_BITS = 1 << 25
"""Bits of :class:`RolloutStream`'s bitmap of rollout ids (4 MiB, touched as ids come)."""


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


def check_inputs(
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


def load_inputs(
    tasks_path: str | None, rollouts_path: str | None, dataset: str | None, solutions: str | None
) -> tuple[dict[str, Task], list[RolloutLine | LineProblem] | RolloutStream, dict[str, str]]:
    """The tasks, the rollouts and the skipped tasks ``{task_id: why}``.

    A rollouts file is a lazy :class:`RolloutStream`; the usage errors are those of
    :func:`check_inputs`.
    """
    from execgym.tasks import Rollout, RolloutLine, canonical_rollouts, load_tasks

    tasks_path, rollouts_path = check_inputs(tasks_path, rollouts_path, dataset, solutions)
    skipped: dict[str, str] = {}
    if dataset:
        from execgym.tasks.datasets import load_builtin

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
            swapped = " (did you swap TASKS and ROLLOUTS?)" if _rollout_lines(tasks_path) else ""
            raise TaskError(
                f"no valid tasks in {tasks_path} ({why}); each line needs task_id and what "
                "its kind needs (assert: prompt, tests and entry_point; see "
                f"schemas/task.schema.json){swapped}"
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


def _rollout_lines(path: str | None) -> bool:
    """Whether the first line of ``path`` reads as a rollout (a ``completion``, no ``tests``).

    Only then does the error for a tasks file without tasks ask whether TASKS and
    ROLLOUTS were swapped: asked of every bad tasks file, it misled (an unsupported
    language is no swap).
    """
    from execgym.tasks.loaders import read_jsonl

    try:
        for _, _, value in read_jsonl(path or "", warn=lambda *_: None):
            return isinstance(value, dict) and "completion" in value and "tests" not in value
    except (TaskError, DamagedInput):
        pass  # the loader has said what is wrong with the file
    return False


def check_output(output: str, *inputs: str | None) -> None:
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

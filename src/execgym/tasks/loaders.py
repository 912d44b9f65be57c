"""Read tasks and rollouts from JSONL files, and the built-in data sets.

A malformed line never stops a file from loading: it becomes a :class:`LineProblem`
naming the file, the line number and what is wrong, and the rest is still read.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from execgym.errors import TaskError
from execgym.tasks.datasets import DATASETS as _REGISTRY
from execgym.tasks.datasets import load_builtin
from execgym.tasks.datasets.humaneval import humaneval_path  # noqa: F401 - re-exported
from execgym.tasks.models import Rollout, Task

DATASETS = tuple(_REGISTRY)
"""Names of the built-in data sets (:mod:`execgym.tasks.datasets` has their sources)."""


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line of an input file that could not be used.

    Attributes:
        path: The file.
        line_number: 1-based line number.
        index: 0-based index among the file's non-blank lines (the rollout index).
        message: What is wrong and how to fix it.
        task_id: The line's ``task_id``, when it has a readable one.
    """

    path: str
    line_number: int
    index: int
    message: str
    task_id: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line_number}: {self.message}"


@dataclass(frozen=True, slots=True)
class RolloutLine:
    """A rollout with its position in its file (``index`` is 0-based)."""

    index: int
    rollout: Rollout


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "line"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def read_jsonl(path: str | Path) -> Iterator[tuple[int, int, dict[str, Any] | LineProblem]]:
    """Yield ``(line_number, index, object or problem)`` for each non-blank line.

    Gzipped files (``.gz``) are read transparently.

    Raises:
        TaskError: if the file cannot be opened.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        # utf-8-sig: a byte-order mark (as some editors write) is not part of line 1.
        handle = opener(path, "rt", encoding="utf-8-sig", errors="replace")
    except OSError as error:
        raise TaskError(f"cannot read {path}: {error.strerror or error}") from error
    index = 0
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as error:
                value = LineProblem(str(path), number, index, f"not valid JSON ({error.msg})")
            except RecursionError:
                value = LineProblem(
                    str(path), number, index, "not usable JSON (nested too deeply to read)"
                )
            if not isinstance(value, dict | LineProblem):
                value = LineProblem(str(path), number, index, "each line must be a JSON object")
            yield number, index, value
            index += 1


def load_tasks(path: str | Path) -> tuple[dict[str, Task], list[LineProblem]]:
    """Load a tasks JSONL file.

    Returns:
        ``({task_id: Task}, problems)``; a duplicate task id is a problem (the first
        one is kept).

    Raises:
        TaskError: if the file cannot be opened.
    """
    tasks: dict[str, Task] = {}
    problems: list[LineProblem] = []
    for number, index, value in read_jsonl(path):
        if isinstance(value, LineProblem):
            problems.append(value)
            continue
        task_id = value.get("task_id") if isinstance(value.get("task_id"), str) else None
        try:
            task = Task.model_validate(value)
        except ValidationError as error:
            problems.append(LineProblem(str(path), number, index, _describe(error), task_id))
            continue
        if task.task_id in tasks:
            problems.append(
                LineProblem(
                    str(path),
                    number,
                    index,
                    f"duplicate task_id {task.task_id!r}; the first is kept",
                )
            )
            continue
        tasks[task.task_id] = task
    return tasks, problems


def load_rollouts(path: str | Path) -> Iterator[RolloutLine | LineProblem]:
    """Yield each rollout of a rollouts JSONL file, or a problem for an unusable line.

    Raises:
        TaskError: if the file cannot be opened.
    """
    for number, index, value in read_jsonl(path):
        if isinstance(value, LineProblem):
            yield value
            continue
        try:
            yield RolloutLine(index, Rollout.model_validate(value))
        except ValidationError as error:
            yield LineProblem(str(path), number, index, _describe(error))


def load_dataset(name: str) -> dict[str, Task]:
    """Load a built-in data set by name (never from the network); see :data:`DATASETS`.

    Tasks that cannot be judged on this host are left out; :func:`load_builtin` also
    says which and why.

    Raises:
        TaskNotFound: if ``name`` is not a built-in data set or its file is missing.
    """
    return load_builtin(name).tasks


def canonical_rollouts(tasks: dict[str, Task]) -> list[RolloutLine]:
    """One rollout per task whose completion is the task's reference solution.

    Raises:
        TaskError: if a task has no reference.
    """
    missing = [task_id for task_id, task in tasks.items() if task.reference is None]
    if missing:
        raise TaskError(f"{len(missing)} task(s) have no reference solution, e.g. {missing[0]}")
    return [
        RolloutLine(
            i,
            Rollout(
                task_id=t.task_id, completion=t.reference or "", rollout_id=f"{t.task_id}#canonical"
            ),
        )
        for i, t in enumerate(tasks.values())
    ]

"""Read tasks and rollouts from JSONL files, and the built-in data sets.

A malformed line never stops a file from loading: it becomes a :class:`LineProblem`
naming the file, the line number and what is wrong, and the rest is still read.
"""

from __future__ import annotations

import codecs
import difflib
import json
import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from execgym.errors import DamagedInput, TaskError
from execgym.tasks.models import Rollout, Task

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    """``DATASETS`` and ``humaneval_path``, from :mod:`execgym.tasks.datasets` on first use.

    ``DATASETS``: the names of the built-in data sets (that package has their sources).
    A batch read from files never loads that package and the task models it builds
    (issue 23: a few milliseconds of every ``execgym score``'s start).

    Raises:
        AttributeError: for any other name.
    """
    if name == "DATASETS":
        from execgym.tasks.datasets import DATASETS as registry

        value: Any = tuple(registry)
    elif name == "humaneval_path":
        from execgym.tasks.datasets.humaneval import humaneval_path

        value = humaneval_path
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the same object from now on
    return value


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


def describe_validation_error(error: ValidationError, whole: str = "line", data: Any = None) -> str:
    """``error``'s problems as ``"field: what is wrong"``, joined by ``"; "``.

    A problem of the whole object (a model validator's, which has no field) is named
    ``whole`` only when another problem names a field, and pydantic's ``"Value error, "``
    prefix is dropped: the message our validator wrote is what the user reads.

    Args:
        error: What pydantic found.
        whole: What to call the object in a problem that names no field.
        data: The object that was validated (a dict), if at hand: when a required
            field is missing and the object holds a key execgym does not read that
            looks meant for it (``test`` for ``tests``, ``response`` for
            ``completion``), the message says to rename that key.
    """
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(
            f"{where or whole}: {message}" if where or len(error.errors()) > 1 else message
        )
    return "; ".join(parts) + _rename_hint(error, data)


_MEANT_FOR = {
    "completion": ("response", "output", "generation", "solution", "code", "answer", "text"),
    "task_id": ("id", "problem_id", "name"),
    "tests": ("test", "test_code", "check"),
}
"""Keys seen in other tools' files for a field execgym needs under another name."""

_KNOWN_KEYS = frozenset(Task.model_fields) | frozenset(Rollout.model_fields)


def _rename_hint(error: ValidationError, data: Any) -> str:
    """``"; rename 'X' to 'Y'"`` per missing field ``Y`` a key ``X`` looks meant for.

    ``X`` is a key of ``data`` that execgym does not read; ``""`` when there is none.
    """
    if not isinstance(data, dict):
        return ""
    missing: list[str] = []
    for item in error.errors():
        if item["type"] == "missing" and item["loc"]:
            missing.append(str(item["loc"][-1]))
        else:  # a kind's own check: "Field required: an 'assert' task needs ['tests']"
            text = str(item["msg"])
            if "needs [" in text:
                listed = text.split("needs [", 1)[1].split("]", 1)[0]
                missing += [name.strip(" '\"") for name in listed.split(",")]
    unread = [key for key in data if isinstance(key, str) and key not in _KNOWN_KEYS]
    renames = []
    for name in missing:
        close = difflib.get_close_matches(name, unread, n=1, cutoff=0.75)
        meant = close or [key for key in unread if key.lower() in _MEANT_FOR.get(name, ())][:1]
        if meant:
            renames.append(f"rename {meant[0]!r} to {name!r} (execgym does not read {meant[0]!r})")
    return "".join(f"; {rename}" for rename in renames)


CHUNK_BYTES = 1 << 16
"""Bytes read from an input file at a time."""

Warn = Callable[[LineProblem], None]
"""Called with a usable line that needed repair (bytes that are not UTF-8)."""


def _log_warning(problem: LineProblem) -> None:
    log.warning("%s", problem)


def _chunks(path: Path, handle: BinaryIO) -> Iterator[bytes]:
    """The file's bytes, gunzipped for ``.gz`` (every member of a multi-member file).

    Raises:
        DamagedInput: after the last byte that could be read, if a ``.gz`` file ends
            before its end marker or is corrupt; ``lines_read`` is filled in by the
            caller.
    """
    if path.suffix != ".gz":
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk
        return
    inflate = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
    member_started = False
    read = 0
    while raw := handle.read(CHUNK_BYTES):
        read += len(raw)
        while raw:
            try:
                yield inflate.decompress(raw)
            except zlib.error as error:
                raise DamagedInput(
                    f"{path} is not a valid gzip file or is corrupt near byte {read} "
                    f"({error}); copy or download the file again",
                    str(path),
                    0,
                ) from error
            member_started = True
            raw = inflate.unused_data
            if inflate.eof:  # a member ended; another may follow (cat a.gz b.gz)
                inflate = zlib.decompressobj(wbits=31)
                member_started = bool(raw)
    yield inflate.flush()
    if member_started and not inflate.eof:
        raise DamagedInput(
            f"{path} is truncated: its gzip stream ends before the end marker (after "
            f"{read} compressed bytes), so the lines after the last complete one are "
            "missing; copy or download the file again",
            str(path),
            0,
        )


def _lines(path: Path, handle: BinaryIO) -> Iterator[bytes]:
    """The file's lines, split on LF only, without it.

    A carriage return, U+2028 or U+0085 never ends a line here (inside a JSON value
    they are data, and between tokens CR is whitespace). Only each new chunk is
    split: a line longer than a chunk is kept in pieces and joined once, so reading
    is linear in the file's size (joining the partial line to every chunk was
    quadratic: one 70 MiB line took 198 s).
    """
    pending: list[bytes] = []  # the pieces of the line not ended yet
    for chunk in _chunks(path, handle):
        if not chunk:
            continue
        first, *rest = chunk.split(b"\n")
        pending.append(first)
        if not rest:
            continue
        yield b"".join(pending)
        *whole, tail = rest
        yield from whole
        pending = [tail]
    tail = b"".join(pending)
    if tail:
        yield tail


def _decode(raw: bytes, path: Path, number: int, index: int, warn: Warn) -> str:
    """A line as text: UTF-8 (a byte-order mark on line 1 dropped); bad bytes replaced.

    Replacement keeps the line (its rollout is scored as written, with U+FFFD for
    each bad byte) and ``warn`` is told which line and byte.
    """
    if number == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start : error.start + 4]
        warn(
            LineProblem(
                str(path),
                number,
                index,
                f"bytes that are not UTF-8 (first at byte {error.start + 1} of the line: "
                f"{bad!r}) were replaced with U+FFFD; the line is scored as replaced. "
                "Write the file as UTF-8",
            )
        )
        return raw.decode("utf-8", errors="replace")


def read_jsonl(
    path: str | Path, *, warn: Warn | None = None
) -> Iterator[tuple[int, int, dict[str, Any] | LineProblem]]:
    """Yield ``(line_number, index, object or problem)`` for each non-blank line.

    Lines end at LF (U+000A) only; CRLF is fine (the CR is JSON whitespace), and a
    bare CR, U+2028 or U+0085 does not split a line, as JSON Lines says
    (https://jsonlines.org: the line separator is LF; RFC 8259 section 2 makes
    CR whitespace). Line numbers count LF-separated lines from 1, blank ones too;
    ``index`` counts non-blank ones from 0. Gzipped files (``.gz``) are read
    transparently, streaming.

    Args:
        path: The file.
        warn: Told about a line that is used after repair (bytes that are not UTF-8,
            replaced with U+FFFD); by default a warning is logged.

    Raises:
        TaskError: if the file cannot be opened.
        DamagedInput: after the last complete line, if a ``.gz`` file is truncated
            or corrupt (``lines_read`` says how many lines came before).
    """
    path = Path(path)
    warn = warn or _log_warning
    try:
        handle = path.open("rb")
    except OSError as error:
        raise TaskError(f"cannot read {path}: {error.strerror or error}") from error
    index = 0
    number = 0
    try:
        with handle:
            for number, raw in enumerate(_lines(path, handle), start=1):
                if not raw.strip():
                    continue
                value = _parse(_decode(raw, path, number, index, warn), path, number, index)
                yield number, index, value
                index += 1
    except DamagedInput as error:
        raise DamagedInput(str(error), str(path), number) from error.__cause__
    except OSError as error:
        raise TaskError(f"cannot read {path}: {error.strerror or error}") from error


def _parse(line: str, path: Path, number: int, index: int) -> dict[str, Any] | LineProblem:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        return LineProblem(str(path), number, index, f"not valid JSON ({error.msg})")
    except ValueError as error:  # an integer past Python's int_max_str_digits (4300)
        why = (
            f"not usable JSON ({error}); an integer this long cannot be read here: "
            "write it as a string"
        )
        return LineProblem(str(path), number, index, why)
    except RecursionError:
        return LineProblem(str(path), number, index, "not usable JSON (nested too deeply to read)")
    if isinstance(value, list):
        why = (
            "this line is a JSON array, and each line must be one JSON object (JSON Lines); "
            f"if the file is one array of objects, convert it: jq -c '.[]' {path} > "
            f"{path.stem}-lines.jsonl"
        )
        return LineProblem(str(path), number, index, why)
    if not isinstance(value, dict):
        return LineProblem(str(path), number, index, "each line must be a JSON object")
    return value


def load_tasks(path: str | Path) -> tuple[dict[str, Task], list[LineProblem]]:
    """Load a tasks JSONL file.

    A ``task_id`` defined on more than one line is resolved by :func:`duplicate_problems`:
    identical definitions keep one (a warning); different ones are all left out, so no
    rollout is scored against tests that were not meant for it, and each line becomes a
    problem naming every line of that id (the rollouts for it are then ``invalid``, with
    that reason).

    Returns:
        ``({task_id: Task}, problems)``.

    Raises:
        TaskError: if the file cannot be opened.
    """
    tasks: dict[str, Task] = {}
    problems: list[LineProblem] = []
    definitions: dict[str, list[tuple[int, int, Task | None]]] = {}
    for number, index, value in read_jsonl(path):
        if isinstance(value, LineProblem):
            problems.append(value)
            continue
        task_id = value.get("task_id") if isinstance(value.get("task_id"), str) else None
        try:
            task = Task.model_validate(value)
        except ValidationError as error:
            problems.append(
                LineProblem(
                    str(path), number, index, describe_validation_error(error, data=value), task_id
                )
            )
            if task_id is not None:
                definitions.setdefault(task_id, []).append((number, index, None))
            continue
        definitions.setdefault(task.task_id, []).append((number, index, task))
        tasks.setdefault(task.task_id, task)
    by_line = {problem.line_number: problem for problem in problems}
    for task_id, lines in definitions.items():
        if len(lines) > 1:
            found, keep = duplicate_problems(str(path), task_id, lines)
            if not keep:
                tasks.pop(task_id, None)
            for problem in found:  # an invalid line that is also a duplicate: both reasons
                also = by_line.get(problem.line_number)
                message = problem.message + (
                    f"; this line is also invalid: {also.message}" if also else ""
                )
                by_line[problem.line_number] = replace(problem, message=message)
    return tasks, [by_line[number] for number in sorted(by_line)]


def duplicate_problems(
    where: str, task_id: str, lines: list[tuple[int, int, Task | None]]
) -> tuple[list[LineProblem], bool]:
    """The problems of a ``task_id`` defined on several lines, and whether to keep it.

    Args:
        where: The file (or request field) the lines are in.
        task_id: The id.
        lines: ``(line_number, index, task or None if the line was invalid)`` of each
            definition, in file order.

    Returns:
        ``(problems, keep)``. ``keep`` is true when every definition is valid and they
        are all equal: the first is used and each later line is a warning. Otherwise
        ``keep`` is false and every line is a problem carrying ``task_id`` (callers mask
        the rollouts of that id with it): which definition a rollout was meant for
        cannot be known, so none is used.
    """
    numbers = [number for number, _, _ in lines]
    listed = ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"
    first = lines[0][2]
    if first is not None and all(task == first for _, _, task in lines):
        return [
            LineProblem(
                where,
                number,
                index,
                f"duplicate task_id {task_id!r}: this line repeats line {numbers[0]} exactly, "
                "so the repeat is ignored",
            )
            for number, index, _ in lines[1:]
        ], True
    message = (
        f"duplicate task_id {task_id!r}: defined on lines {listed} with different contents, "
        "so a rollout for it cannot be paired with its tests: every definition is left out and "
        "its rollouts are invalid; give each task its own task_id, or delete the "
        "definitions you did not mean"
    )
    return [LineProblem(where, number, index, message, task_id) for number, index, _ in lines], (
        False
    )


def load_rollouts(
    path: str | Path, *, warn: Warn | None = None
) -> Iterator[RolloutLine | LineProblem]:
    """Yield each rollout of a rollouts JSONL file, or a problem for an unusable line.

    Lines are read as :func:`read_jsonl` reads them (``warn`` is passed on).

    Raises:
        TaskError: if the file cannot be opened.
        DamagedInput: after the last complete line of a truncated or corrupt ``.gz``
            file; every rollout before it has been yielded.
    """
    for number, index, value in read_jsonl(path, warn=warn):
        if isinstance(value, LineProblem):
            yield value
            continue
        try:
            yield RolloutLine(index, Rollout.model_validate(value))
        except ValidationError as error:
            task_id = value.get("task_id") if isinstance(value.get("task_id"), str) else None
            why = describe_validation_error(error, data=value)
            if (
                "completion" not in value
                and "prompt" in value
                and ("tests" in value or "test_cases" in value)
            ):
                why += (
                    "; this line is a task (it has prompt and tests), not a rollout: "
                    "did you swap TASKS and ROLLOUTS?"
                )
            yield LineProblem(str(path), number, index, why, task_id)


def load_dataset(name: str) -> dict[str, Task]:
    """Load a built-in data set by name (never from the network); see :data:`DATASETS`.

    Tasks that cannot be judged on this host are left out; :func:`load_builtin` also
    says which and why.

    Raises:
        TaskNotFound: if ``name`` is not a built-in data set or its file is missing.
    """
    from execgym.tasks.datasets import load_builtin

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

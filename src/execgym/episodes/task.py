"""Repository-level tasks: a repo snapshot, its issue, visible and hidden tests.

A :class:`RepoTask` arrives as JSON (one per line of a JSONL file, or shipped with
execgym: :func:`example_tasks`). Its ``repo`` is a directory or a tarball (``.tar``,
``.tar.gz``, ``.tgz``, ``.tar.xz``, ``.tar.bz2``), given as a path or a ``file://``
URI; a relative path is read relative to the JSONL file it came from. Hidden tests
follow SWE-bench: ``fail_to_pass`` are the pytest node ids the fix must make pass,
``pass_to_pass`` those it must not break.

>>> task = example_tasks()[0]                                    # doctest: +SKIP
>>> files = repo_files(task)          # {"pkg/mod.py": b"...", ...}
"""

from __future__ import annotations

import io
import json
import tarfile
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from execgym.errors import TaskError, TaskNotFound
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox import safe_relative
from execgym.tasks.models import TaskLimits

SKIPPED_NAMES = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
"""Directory names never copied from a repo snapshot, nor out of an agent's tree."""

MAX_REPO_BYTES = 32 * 1024 * 1024
"""Largest repo snapshot accepted, in bytes of file contents (it lives in a tmpfs)."""

_TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")


class RepoTask(BaseModel):
    """A multi-turn task: fix a repository so its hidden tests pass.

    Attributes:
        id: Unique id.
        repo: The snapshot: a directory or a tarball, as a path or ``file://`` URI.
        setup: A shell command run once in the repo after it is copied in (optional).
        problem_statement: The issue text the agent sees.
        visible_tests: Test files or node ids of the repo that ``run_tests`` runs.
        hidden_tests: Test files (path -> content) the agent never sees, written fresh
            into a clean copy of its final tree for scoring.
        fail_to_pass: Node ids that fail before the fix and must pass after it.
        pass_to_pass: Node ids that pass before and must still pass.
        max_steps: Most tool calls in an episode; the last one ends it (truncated).
        time_budget_s: Wall-clock seconds from ``reset`` to the end of the episode.
        limits: Limits of the session and the scoring run (over execgym's defaults).
        test_command: The test runner (``pytest``: the only one today).
        environment: The root file system the session and the scoring run use
            (:mod:`execgym.environments`): ``None``/``"host"``, a name or digest, or an
            inline spec; the scoring run uses its Python and packages.
        test_args: More pytest arguments of the scoring run (``-o pythonpath=src``...).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    setup: str | None = None
    problem_statement: str = Field(min_length=1)
    visible_tests: list[str] = Field(default_factory=list)
    hidden_tests: dict[str, str] = Field(default_factory=dict)
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    max_steps: int = Field(default=50, gt=0, le=10_000)
    time_budget_s: float = Field(default=600.0, gt=0, le=86_400, allow_inf_nan=False)
    limits: TaskLimits | None = None
    test_command: str = "pytest"
    environment: str | dict[str, Any] | None = None
    test_args: list[str] = Field(default_factory=list)

    @field_validator("hidden_tests")
    @classmethod
    def _relative_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            try:
                safe_relative(name)
            except TaskError as error:
                raise ValueError(f"hidden_tests: {error}") from None
        return value

    @field_validator("test_command")
    @classmethod
    def _pytest_only(cls, value: str) -> str:
        if value != "pytest":
            raise ValueError(f"test_command {value!r} is not supported: use 'pytest'")
        return value

    @model_validator(mode="after")
    def _has_hidden_tests(self) -> RepoTask:
        if not (self.fail_to_pass or self.pass_to_pass):
            raise ValueError(
                "the task has no hidden tests: give fail_to_pass (and pass_to_pass) node ids"
            )
        return self

    @property
    def hidden_node_ids(self) -> list[str]:
        """``fail_to_pass`` then ``pass_to_pass``, without repeats."""
        return list(dict.fromkeys([*self.fail_to_pass, *self.pass_to_pass]))

    def limits_over(self, base: Limits = DEFAULT_LIMITS) -> Limits:
        """``base`` with this task's limit overrides."""
        if self.limits is None:
            return base
        return base.merged(**self.limits.model_dump(exclude_none=True))


def _resolve(repo: str, base_dir: Path | None) -> Path:
    parsed = urlparse(repo)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
    elif parsed.scheme and len(parsed.scheme) > 1:
        raise TaskError(
            f"repo {repo!r}: only local paths and file:// URIs are supported; "
            "download the tarball first"
        )
    else:
        path = Path(repo)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def _check_size(total: int, repo: str, max_bytes: int = MAX_REPO_BYTES) -> None:
    if total > max_bytes:
        raise TaskError(f"{repo} holds more than {max_bytes} bytes: trim it")


def _from_directory(root: Path, repo: str) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if SKIPPED_NAMES.intersection(relative.parts) or not path.is_file():
            continue
        if path.is_symlink():
            continue  # a snapshot's symlink could point anywhere on the host
        files[relative.as_posix()] = path.read_bytes()
        total += len(files[relative.as_posix()])
        _check_size(total, f"repo {repo!r}")
    return files


def tree_from_tar(
    data: bytes, *, what: str, max_bytes: int = MAX_REPO_BYTES, skip_unsafe: bool = False
) -> dict[str, bytes]:
    """The regular files of a tar archive, by relative name (symlinks are left out).

    Args:
        data: The archive (compressed or not).
        what: What it is, for error messages.
        max_bytes: Most bytes of file contents accepted.
        skip_unsafe: Leave out names that could not be written back into a work dir
            (a backslash, ``..``) instead of refusing the archive.

    Raises:
        TaskError: if the archive is unreadable, too big, or (unless ``skip_unsafe``)
            names a file outside it.
    """
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if not member.isfile() or SKIPPED_NAMES.intersection(PurePosixPath(name).parts):
                    continue
                try:
                    safe_relative(name)
                except TaskError:
                    if skip_unsafe:
                        continue
                    raise
                handle = archive.extractfile(member)
                if handle is not None:
                    files[name] = handle.read()
                    total += len(files[name])
                    _check_size(total, what, max_bytes)
    except (tarfile.TarError, EOFError, OSError) as error:
        raise TaskError(f"{what}: not a readable tar archive ({error})") from error
    return files


def repo_files(task: RepoTask, base_dir: Path | None = None) -> dict[str, bytes]:
    """The files of ``task``'s repo snapshot, by relative name.

    ``.git``, caches and symlinks are left out. A tarball whose entries all sit in
    one top directory (as ``git archive --prefix`` makes) is read from inside it.

    Raises:
        TaskError: if the snapshot is missing, unreadable or over :data:`MAX_REPO_BYTES`.
    """
    path = _resolve(task.repo, base_dir)
    if path.is_dir():
        files = _from_directory(path, task.repo)
    elif path.is_file() and path.name.endswith(_TARBALL_SUFFIXES):
        files = tree_from_tar(path.read_bytes(), what=f"repo {task.repo!r}")
        tops = {name.split("/", 1)[0] for name in files}
        if len(tops) == 1 and all("/" in name for name in files):
            top = tops.pop() + "/"
            files = {name.removeprefix(top): content for name, content in files.items()}
    else:
        raise TaskError(
            f"task {task.id}: repo {task.repo!r} is neither a directory nor a tarball "
            f"({', '.join(_TARBALL_SUFFIXES)}) at {path}"
        )
    if not files:
        raise TaskError(f"task {task.id}: repo {task.repo!r} holds no files")
    return files


def parse_repo_task(data: Any, *, base_dir: Path | None = None, source: str = "task") -> RepoTask:
    """A :class:`RepoTask` from parsed JSON, its relative ``repo`` made absolute.

    Raises:
        TaskError: naming each bad field and what is wrong with it.
    """
    try:
        task = RepoTask.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'task'}: {e['msg']}" for e in error.errors()
        )
        raise TaskError(f"{source}: {problems}") from error
    if base_dir is not None and "://" not in task.repo and not Path(task.repo).is_absolute():
        task = task.model_copy(update={"repo": str(base_dir / task.repo)})
    return task


def load_repo_tasks(path: str | Path) -> list[RepoTask]:
    """Read a JSONL file of repo tasks (blank lines are skipped).

    Raises:
        TaskError: naming the file, the line and what is wrong, for an unreadable
            file, a line that is not JSON or not a valid task, or an id used twice.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise TaskError(f"cannot read repo tasks from {path}: {error.strerror}") from error
    tasks: list[RepoTask] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise TaskError(f"{where}: not JSON ({error.msg})") from error
        tasks.append(parse_repo_task(data, base_dir=path.parent, source=where))
    ids = [task.id for task in tasks]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise TaskError(f"{path}: task ids used more than once: {repeated}")
    return tasks


def examples_dir() -> Path:
    """Where the shipped example tasks live (``execgym/data/episodes``)."""
    return Path(str(resources.files("execgym") / "data" / "episodes"))


def example_tasks() -> list[RepoTask]:
    """The example tasks shipped with execgym (see ``data/episodes/SOURCE.md``)."""
    return load_repo_tasks(examples_dir() / "tasks.jsonl")


def find_task(task_id: str, tasks: list[RepoTask]) -> RepoTask:
    """The task called ``task_id`` among ``tasks``.

    Raises:
        TaskNotFound: naming the ids there are.
    """
    for task in tasks:
        if task.id == task_id:
            return task
    raise TaskNotFound(f"no repo task {task_id!r}; known: {[t.id for t in tasks]}")

"""Reading the data files shipped in ``execgym/data/`` (each folder has SOURCE.md, LICENSE)."""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from execgym.errors import TaskError, TaskNotFound
from execgym.tasks.models import Task
from execgym.toolchains import PYTHON_LIBRARIES_DIR, python_libraries


@dataclass(frozen=True, slots=True)
class Loaded:
    """A data set's tasks, and the tasks left out with the reason for each.

    Attributes:
        tasks: ``{task_id: Task}``.
        skipped: ``{task_id: why}`` for tasks that cannot be judged on this host (a
            library their tests import is not installed): their rollouts get a masked
            ``invalid`` verdict with that reason, never a 0.
        references: ``{task_id: completion}`` for skipped tasks' reference solutions,
            so ``--solutions canonical`` still reports them.
    """

    tasks: dict[str, Task]
    skipped: dict[str, str] = field(default_factory=dict)
    references: dict[str, str] = field(default_factory=dict)


def data_path(folder: str, name: str) -> Path:
    """The path of a shipped data file, ``execgym/data/<folder>/<name>``.

    Raises:
        TaskNotFound: if it is missing (a broken install).
    """
    from importlib import resources  # when a data set is loaded, not for every batch

    path = Path(str(resources.files("execgym").joinpath("data", folder, name)))
    if not path.is_file():
        raise TaskNotFound(f"the data file {path} is missing: reinstall execgym")
    return path


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a (gzipped) JSONL file, or of a JSON list or dict.

    Raises:
        TaskError: if a line is not a JSON object (the shipped files are all valid).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    stem = path.name.removesuffix(".gz")
    if stem.endswith(".json"):
        value = json.loads(text)
        yield from value.values() if isinstance(value, dict) else value
        return
    # "\n" only: str.splitlines() would also split at a raw U+2028, U+0085 or "\r"
    # inside a JSON string (legal JSON), breaking the record in two.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict):
            raise TaskError(f"{path}:{number}: not a JSON object")
        yield record


def with_python_libraries(tests: str) -> str:
    """``tests`` preceded by a line that puts the host's site-packages on ``sys.path``.

    Sandboxed Python runs with ``-I -S`` (standard library only); the host
    environment's site-packages is bound read-only at
    :data:`execgym.toolchains.PYTHON_LIBRARIES_DIR`, so tests that import ``numpy``
    (EvalPlus) find it there.
    """
    return (
        f"import sys as _execgym_sys\n_execgym_sys.path.append({PYTHON_LIBRARIES_DIR!r})\n"
        f"del _execgym_sys\n{tests}"
    )


def missing_modules(modules: list[str]) -> list[str]:
    """Those of ``modules`` (top-level import names) a sandboxed program cannot import.

    The standard library is always there; any other module must be importable from the
    host site-packages that the sandbox binds (see :func:`with_python_libraries`).
    """
    if python_libraries() is None:
        return [m for m in modules if m not in sys.stdlib_module_names]
    return [m for m in modules if m not in sys.stdlib_module_names and find_spec(m) is None]


_IMPORT = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.M)


def imported_modules(source: str) -> list[str]:
    """Top-level module names that ``source`` imports (``import x.y`` -> ``x``), in order."""
    return list(dict.fromkeys(_IMPORT.findall(source)))

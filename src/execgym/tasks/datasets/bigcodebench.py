r"""BigCodeBench-Hard (148 tasks), in its "complete" and "instruct" splits.

Source (``execgym/data/bigcodebench-hard/``: SOURCE.md, LICENSE): Zhuo et al. 2024,
"BigCodeBench: Benchmarking Code Generation with Diverse Function Calls and Complex
Instructions", https://github.com/bigcode-project/bigcodebench, Apache-2.0; the hard
split as the Qwen2.5-Coder evaluation ships it (``bigcodebench_hard.json``).

Each task is a ``unittest`` task (:mod:`execgym.judges.unittest_tests`): the solution
and the task's ``TestCases`` class run as one module in one sandboxed process, as
``bigcodebench.eval.untrusted_check`` runs them. ``bigcodebench-hard`` (the complete
split) puts the task's ``complete_prompt`` (imports, signature, docstring) before the
model's completion; ``bigcodebench-hard-instruct`` gives the model the
``instruct_prompt`` (a natural-language statement) and runs its completion as the whole
program. Either way the reference (``--solutions canonical``) is upstream's ground
truth, ``complete_prompt + "\\n" + canonical_solution``.

The tests need third-party libraries (pandas, matplotlib, scikit-learn...): install
them into execgym's environment with ``pip install 'execgym[bigcodebench]'``; the
sandbox sees that environment's site-packages read-only. A task whose libraries are
not importable there, or that is listed in :data:`UNAVAILABLE` (it needs the network,
data files that are downloaded at run time, or a library left out of the extra), is
skipped with the reason: its rollouts are masked, never scored 0, and left out of the
pass rate.
"""

from __future__ import annotations

import ast
import sys
from typing import Any, Literal

from execgym.tasks.datasets._files import (
    Loaded,
    data_path,
    imported_modules,
    missing_modules,
    read_records,
)
from execgym.tasks.models import Task, TaskLimits

Split = Literal["complete", "instruct"]

LIMITS = TaskLimits(wall_time_s=240, cpu_time_s=240, memory_bytes=4 * 2**30, max_processes=128)
"""Limits for every task: upstream's (``bigcodebench.eval.untrusted_check`` allows 240 s
per task, ``bigcodebench.evaluate`` a 4 GiB data segment). Importing pandas, matplotlib
and scikit-learn alone takes seconds on a loaded 2-core machine; BigCodeBench/227's
reference (librosa, compiled by numba on first use) needs about 55 s here, 461's (it
polls finished scripts until each test's timeout) about 155 s."""

PIP_NAMES = {
    "sklearn": "scikit-learn",
    "bs4": "beautifulsoup4",
    "cv2": "opencv-python-headless",
    "PIL": "pillow",
    "Crypto": "pycryptodome",
    "docx": "python-docx",
    "Levenshtein": "levenshtein",
    "faker": "Faker",
}
"""The PyPI name of each import whose distribution is named otherwise."""

_NETWORK = "its tests reach the internet ({}); the sandbox has no network"
_NLTK = "its reference needs NLTK data ({}), which NLTK downloads at run time; no network here"

NOT_IN_EXTRA = frozenset({"tensorflow", "keras"})
"""Imports the ``bigcodebench`` extra does not install (size); their tasks are skipped."""

UNAVAILABLE: dict[str, str] = {
    "BigCodeBench/101": _NETWORK.format("urlopen of the Boston housing data set"),
    "BigCodeBench/147": _NETWORK.format("a real TCP connect to 192.168.0.0/30"),
    "BigCodeBench/590": _NETWORK.format("urlopen of https://www.google.com"),
    "BigCodeBench/1006": _NETWORK.format("a download from getsamplefiles.com"),
    "BigCodeBench/1012": _NETWORK.format("a download from drive.google.com"),
    "BigCodeBench/1040": _NETWORK.format("an AF_INET server socket"),
    "BigCodeBench/177": _NLTK.format("punkt_tab"),
    "BigCodeBench/655": _NLTK.format("stopwords"),
}
"""Tasks that cannot be judged here whatever is installed, with the reason (found by
running every reference in the sandbox: each fails only for this reason)."""


def _libs(record: dict[str, Any]) -> list[str]:
    libs = record.get("libs", [])
    return ast.literal_eval(libs) if isinstance(libs, str) else list(libs)


def _imports(source: str) -> list[str]:
    """Top-level modules ``source`` imports (parsed, so docstrings never count)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # shipped data parses; keep the lines that look like imports
        return imported_modules(source)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


def needed_modules(record: dict[str, Any]) -> list[str]:
    """The third-party modules a task's reference and tests import (and its ``libs``)."""
    reference = record["complete_prompt"] + "\n" + record["canonical_solution"]
    names = [*_libs(record), *_imports(reference), *_imports(record["test"])]
    return [m for m in dict.fromkeys(names) if m not in sys.stdlib_module_names]


def task_from_record(record: dict[str, Any], split: Split) -> Task:
    """One BigCodeBench record as a ``unittest`` task of ``split``."""
    complete = split == "complete"
    return Task(
        task_id=record["task_id"],
        kind="unittest",
        prompt=record["complete_prompt"] if complete else record["instruct_prompt"],
        solution_prefix=record["complete_prompt"] if complete else "",
        tests=record["test"],
        entry_point=record["entry_point"],
        reference=(
            "\n" + record["canonical_solution"]
            if complete
            else record["complete_prompt"] + "\n" + record["canonical_solution"]
        ),
        limits=LIMITS,
    )


def why_unavailable(record: dict[str, Any]) -> str:
    """Why a task cannot be judged on this host, or ``""``."""
    listed = UNAVAILABLE.get(record["task_id"])
    if listed:
        return listed
    missing = missing_modules(needed_modules(record))
    if not missing:
        return ""
    packages = " ".join(PIP_NAMES.get(m, m) for m in missing)
    if set(missing) <= NOT_IN_EXTRA:
        return (
            f"its code imports {', '.join(missing)}, which execgym[bigcodebench] leaves out "
            f"(about 600 MB for 2 of 148 tasks): pip install {packages}"
        )
    return (
        f"its code imports {', '.join(missing)}, not installed where execgym runs: "
        f"pip install 'execgym[bigcodebench]' (or: pip install {packages})"
    )


def load_bigcodebench_hard(split: Split = "complete") -> Loaded:
    """BigCodeBench-Hard's 148 tasks (``BigCodeBench/<n>``) in ``split``.

    Raises:
        TaskNotFound: if the data file is missing.
        ValueError: if ``split`` is neither ``complete`` nor ``instruct``.
    """
    if split not in ("complete", "instruct"):
        raise ValueError(f"unknown BigCodeBench split {split!r}: use 'complete' or 'instruct'")
    tasks: dict[str, Task] = {}
    skipped: dict[str, str] = {}
    references: dict[str, str] = {}
    for record in read_records(data_path("bigcodebench-hard", "bigcodebench_hard.json.gz")):
        task = task_from_record(record, split)
        why = why_unavailable(record)
        if why:
            skipped[task.task_id] = why
            references[task.task_id] = task.reference or ""
        else:
            tasks[task.task_id] = task
    return Loaded(tasks, skipped, references)

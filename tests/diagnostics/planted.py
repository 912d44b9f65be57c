"""The planted corpus (``corpus/``): programs with a known leak, or known to have none.

Each file's first line says what the leak finder must report: ``# expect: memory``
(``descriptor``, ``thread``, ``process``, ``cycle``, ``resident``; ``// expect: native``
in C and C++) or ``none``. Every program defines ``f(x)``; the task's tests call it
with ``1..5`` (a pass), so the finder sees the same inputs on every pass, as it does
with a real task's tests. Used by ``test_leak_corpus.py`` and ``benchmarks/diagnostics.py``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

from execgym.diagnostics import Diagnoser, Diagnostics
from execgym.judges.base import Judgement, Verdict
from execgym.limits import Limits
from execgym.sandbox.base import Sandbox
from execgym.tasks.models import Task

CORPUS = Path(__file__).parent / "corpus"
PYTHON_TESTS = "def check(candidate):\n    for x in (1, 2, 3, 4, 5):\n        candidate(x)\n"
C_TESTS = (
    "#include <assert.h>\nint main(void) {\n"
    "    for (int i = 1; i <= 5; i++) assert(f(i) >= 0);\n    return 0;\n}\n"
)
LIMITS = Limits(max_processes=512, wall_time_s=30.0, cpu_time_s=30.0)
"""The process-leak programs start a process per call (up to 80 over a measurement);
the wall time allows for a loaded machine (the budget is 80 % of it, most never used)."""


@dataclass(frozen=True)
class Planted:
    """One corpus program: its file name, expected leak kind (``none``) and task."""

    name: str
    expect: str
    task: Task
    completion: str


def load_corpus() -> list[Planted]:
    """Every program of ``corpus/``, in file-name order."""
    planted = []
    for path in sorted(CORPUS.iterdir()):
        source = path.read_text()
        expect = re.match(r"(?:#|//) expect: (\w+)", source)
        if expect is None:
            raise ValueError(f"{path.name}: the first line must be '# expect: <kind>'")
        language = {".py": "python", ".c": "c", ".cpp": "cpp"}[path.suffix]
        tests = PYTHON_TESTS if language == "python" else C_TESTS
        if language == "cpp":
            tests = tests.replace("<assert.h>", "<cassert>").replace("(void)", "()")
        task = Task(
            task_id=f"corpus/{path.name}",
            prompt=("# " if language == "python" else "// ") + "a planted program\n",
            language=language,
            entry_point="f" if language == "python" else None,
            tests=tests,
            diagnose={"checks": ["leaks"]},
        )
        planted.append(Planted(path.name, expect.group(1), task, source))
    return planted


async def diagnose_corpus(
    sandbox: Sandbox, corpus: list[Planted], *, workers: int = 2
) -> dict[str, Diagnostics]:
    """``{name: diagnostics}`` of every program, ``workers`` at a time."""
    diagnoser = Diagnoser()
    passed = Judgement(Verdict.PASSED)
    gate = asyncio.Semaphore(workers)

    async def one(item: Planted) -> tuple[str, Diagnostics]:
        async with gate:
            found = await diagnoser.diagnose(item.task, item.completion, sandbox, LIMITS, passed)
        assert found is not None
        return item.name, found

    return dict(await asyncio.gather(*(one(item) for item in corpus)))


def confusion(corpus: list[Planted], results: dict[str, Diagnostics]) -> dict[str, object]:
    """Precision and recall of the leak finder over ``corpus``.

    A leak program counts as found only if a leak of its expected kind is reported; an
    honest program reported with any leak is a false positive.
    """
    tp = fp = fn = tn = 0
    missed, false_alarms = [], []
    for item in corpus:
        kinds = {leak.kind for leak in results[item.name].leak_list}
        if item.expect == "none":
            if kinds:
                fp += 1
                false_alarms.append(item.name)
            else:
                tn += 1
        elif item.expect in kinds:
            tp += 1
        else:
            fn += 1
            missed.append(item.name)
    return {
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "missed": missed, "false_alarms": false_alarms,
    }  # fmt: skip

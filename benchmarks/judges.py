"""Throughput of each judge kind and language, and what the compile cache saves.

For every language, a stdin/stdout task (three cases) is scored for ``--rollouts``
identical rollouts (a task's repeated rollouts of the same source, as RL sampling gives
when several samples agree): once with the compile cache (the first rollout compiles,
the rest reuse it) and once with the cache off (every rollout compiles). Python runs
through the warm pool; other languages in fresh bwrap sandboxes. The assert,
function-call, pytest and unittest judges are measured in Python the same way, and the
unittest judge once more on a real BigCodeBench-Hard task (``BigCodeBench/503``, pandas:
its reference) when the ``bigcodebench`` extra is installed.

    .venv/bin/python benchmarks/judges.py [--rollouts 8] [--workers 2] [--languages c,go]

Prints, per kind and language: rollouts/s with the cache, without it, and the ratio;
and for compiled languages the time of one compile against one cached build.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from execgym import Builder, Limits, Scorer, Task, Verdict
from execgym.sandbox import WarmPoolSandbox
from execgym.tasks.datasets import load_builtin
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout
from execgym.testing import SUM_OF_TWO
from execgym.toolchains import find_toolchain

CASES = [{"input": f"{i} {i * 7}\n", "output": f"{i * 8}\n"} for i in (1, 20, 300)]
OTHER_KINDS = {
    "assert": (
        {
            "prompt": "def add(a, b):\n",
            "tests": "def check(c):\n    assert c(2, 3) == 5\n",
            "entry_point": "add",
        },
        "    return a + b\n",
    ),
    "function_call": (
        {
            "kind": "function_call",
            "fn_name": "add",
            "test_cases": [{"args": [i, i], "expected": 2 * i} for i in range(3)],
        },
        "def add(a, b):\n    return a + b\n",
    ),
    "pytest": (
        {
            "kind": "pytest",
            "test_files": {
                "test_add.py": "from solution import add\n\ndef test_add():\n"
                "    assert add(2, 3) == 5\n"
            },
        },
        "def add(a, b):\n    return a + b\n",
    ),
    "unittest": (
        {
            "kind": "unittest",
            "solution_prefix": "def add(a, b):\n",
            "tests": "import unittest\n\nclass TestCases(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
        },
        "    return a + b\n",
    ),
}
BIGCODEBENCH_TASK = "BigCodeBench/503"


async def _rate(
    task: Task, completion: str, sandbox, builder: Builder, rollouts: int, workers: int
) -> float:
    scorer = Scorer({task.task_id: task}, sandbox, Limits(wall_time_s=30), builder=builder)
    lines = [
        RolloutLine(i, Rollout(task_id=task.task_id, completion=completion))
        for i in range(rollouts)
    ]
    started = time.perf_counter()
    results = await scorer.score(lines, workers=workers)
    elapsed = time.perf_counter() - started
    bad = [r for r in results if r.verdict is not Verdict.PASSED]
    assert not bad, f"{task.task_id}: {bad[0].verdict.value}: {bad[0].message}"
    return rollouts / elapsed


async def _compile_once(task: Task, completion: str, sandbox, cache: Path) -> tuple[float, float]:
    builder = Builder(cache)
    started = time.perf_counter()
    await builder.build(task.language, completion, sandbox)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    await builder.build(task.language, completion, sandbox)
    return cold, time.perf_counter() - started


def _tasks(languages: list[str]) -> list[tuple[str, str, Task, str]]:
    rows = []
    for language in languages:
        record = {"task_id": f"stdio/{language}", "kind": "stdio", "language": language}
        rows.append(
            (
                "stdio",
                language,
                Task.model_validate(record | {"test_cases": CASES}),
                SUM_OF_TWO[language],
            )
        )
    for kind, (fields, completion) in OTHER_KINDS.items():
        rows.append((kind, "python", Task.model_validate({"task_id": kind, **fields}), completion))
    task = load_builtin("bigcodebench-hard").tasks.get(BIGCODEBENCH_TASK)
    if task is not None:  # its libraries are installed
        rows.append(("unittest", "bcb/503", task, task.reference or ""))
    return rows


async def main(rollouts: int, workers: int, languages: list[str]) -> None:
    present = [lang for lang in languages if find_toolchain(lang) is not None]
    missing = sorted(set(languages) - set(present))
    print(f"{rollouts} identical rollouts per row, {workers} at once; missing: {missing or 'none'}")
    print(
        f"{'kind':<14}{'language':<12}{'cached r/s':>11}{'uncached r/s':>14}{'ratio':>8}"
        f"{'compile s':>11}{'cached build s':>16}"
    )
    async with WarmPoolSandbox() as sandbox:
        for kind, language, task, completion in _tasks(present):
            with tempfile.TemporaryDirectory() as cache:
                cached = await _rate(
                    task, completion, sandbox, Builder(Path(cache)), rollouts, workers
                )
            line = f"{kind:<14}{language:<12}{cached:>11.2f}"
            toolchain = find_toolchain(language)
            if toolchain is not None and toolchain.compiler is not None:
                uncached = await _rate(
                    task, completion, sandbox, Builder(use_cache=False), rollouts, workers
                )
                with tempfile.TemporaryDirectory() as cache:
                    cold, warm = await _compile_once(task, completion, sandbox, Path(cache))
                ratio = cached / uncached
                line += f"{uncached:>14.2f}{ratio:>7.2f}x{cold:>11.2f}{warm:>16.4f}"
            else:
                line += f"{'(no compile step)':>22}"
            print(line, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--languages", default="python,c,cpp,java,javascript,rust,bash,go")
    args = parser.parse_args()
    asyncio.run(main(args.rollouts, args.workers, args.languages.split(",")))

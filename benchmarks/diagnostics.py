"""Cost per rollout of each diagnostic, against no diagnostics, and the leak finder's figures.

Scores HumanEval's canonical solutions (``src/execgym/data``) through the warm pool once
per configuration: no diagnostics (the baseline), ``leaks``, ``hotspots``, both. The
``complexity`` rows time three HumanEval tasks whose inputs scale (0, 4 and 8, given
sizes and an input generator here; HumanEval has none), against the same three
without diagnostics. Configurations alternate within each round so they share the
machine's load. It prints wall-clock milliseconds per rollout with the ratio to no
diagnostics, and the diagnostics' own seconds per rollout (``diagnostics.seconds``).
Then it diagnoses the planted corpus (``tests/diagnostics/corpus``) and prints the
leak finder's precision and recall.

    .venv/bin/python benchmarks/diagnostics.py [--rounds 1] [--workers N] [--tasks 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from execgym import Scorer, Task, Verdict, canonical_rollouts, load_dataset
from execgym.sandbox import BubblewrapSandbox, WarmPoolSandbox

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.diagnostics.planted import confusion, diagnose_corpus, load_corpus

CONFIGS: dict[str, tuple[str, ...]] = {
    "none": (),
    "leaks": ("leaks",),
    "hotspots": ("hotspots",),
    "leaks+hotspots": ("leaks", "hotspots"),
}
INPUTS = {
    "HumanEval/0": (
        (100, 200, 400, 800),
        "def make_input(n):\n    return [[2.0 * i for i in range(n)], 1.0]\n",
    ),
    "HumanEval/4": (
        (5000, 10000, 20000, 40000),
        "def make_input(n):\n    return [[float(i % 97) for i in range(n)]]\n",
    ),
    "HumanEval/8": ((5000, 10000, 20000, 40000), "def make_input(n):\n    return [[1] * n]\n"),
}
"""Sizes and inputs for three HumanEval tasks (HumanEval/0's canonical is O(n^2), the
others' O(n))."""


async def _measure(tasks: dict[str, Task], pool, checks, workers: int) -> tuple[float, float, list]:
    scorer = Scorer(tasks, pool, diagnose=checks)
    items = canonical_rollouts(tasks)
    started = time.perf_counter()
    results = await scorer.score(items, workers=workers)
    wall = time.perf_counter() - started
    passed = sum(r.verdict is Verdict.PASSED for r in results)
    assert passed == len(tasks), f"{checks}: only {passed} of {len(tasks)} passed"
    spent = [r.diagnostics.seconds for r in results if r.diagnostics is not None]
    if checks:
        assert len(spent) == len(results), "a rollout got no diagnostics"
    return wall / len(items) * 1000, sum(spent) / len(items) * 1000, results


def _scaling_tasks() -> dict[str, Task]:
    humaneval = load_dataset("humaneval")
    out = {}
    for task_id, (sizes, source) in INPUTS.items():
        diagnose = {"checks": ["complexity"], "sizes": list(sizes), "inputs": source}
        out[task_id] = Task.model_validate(
            {**humaneval[task_id].model_dump(), "diagnose": diagnose}
        )
    return out


async def main_async(rounds: int, workers: int, count: int) -> None:
    tasks = dict(list(load_dataset("humaneval").items())[:count])
    scaling = _scaling_tasks()
    rows = {name: ([], []) for name in CONFIGS} | {
        "3 tasks: none": ([], []),
        "3 tasks: complexity": ([], []),
    }
    fits = []
    async with WarmPoolSandbox() as pool:
        await _measure(tasks, pool, None, workers)  # warm up imports and the pool
        for round_no in range(1, rounds + 1):
            for name, checks in CONFIGS.items():
                wall, own, _ = await _measure(tasks, pool, checks, workers)
                rows[name][0].append(wall)
                rows[name][1].append(own)
            for name, checks in (("3 tasks: none", ()), ("3 tasks: complexity", ("complexity",))):
                wall, own, results = await _measure(scaling, pool, checks, workers)
                rows[name][0].append(wall)
                rows[name][1].append(own)
                if checks:
                    fits = results
            print(f"round {round_no} done", flush=True)
    base = statistics.median(rows["none"][0])
    base3 = statistics.median(rows["3 tasks: none"][0])
    print(f"{len(tasks)} HumanEval canonical rollouts, {workers} at once, {rounds} round(s)")
    print(f"{'diagnostics':24} {'wall ms/rollout':>16} {'x none':>8} {'diagnostics ms':>15}")
    for name, (walls, owns) in rows.items():
        wall, own = statistics.median(walls), statistics.median(owns)
        ratio = wall / (base3 if name.startswith("3 tasks") else base)
        print(f"{name:24} {wall:16.1f} {ratio:8.2f} {own:15.1f}")
    for result in fits:
        section = result.diagnostics.complexity
        if section.status == "measured":
            model, ref = section.data["model"], section.data["reference"]
            print(f"  {result.task_id}: canonical {model['class']} (slope {model['slope']}), "
                  f"reference {ref['class']}")  # fmt: skip
        else:
            print(f"  {result.task_id}: complexity {section.status}: {section.reason}")


async def corpus_figures(workers: int) -> None:
    corpus = load_corpus()
    started = time.perf_counter()
    results = await diagnose_corpus(BubblewrapSandbox(), corpus, workers=workers)
    wall = time.perf_counter() - started
    figures = confusion(corpus, results)
    leaks = sum(item.expect != "none" for item in corpus)
    print(
        f"planted corpus: {len(corpus)} programs ({leaks} leaking, {len(corpus) - leaks} "
        f"honest), {wall:.1f} s: precision {figures['precision']:.3f}, recall "
        f"{figures['recall']:.3f} (tp {figures['tp']}, fp {figures['fp']}, fn {figures['fn']}, "
        f"tn {figures['tn']}); missed {figures['missed']}, false alarms {figures['false_alarms']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tasks", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(main_async(args.rounds, args.workers, args.tasks))
    asyncio.run(corpus_figures(args.workers))


if __name__ == "__main__":
    main()

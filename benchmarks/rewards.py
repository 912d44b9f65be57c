"""Cost per rollout of each reward component, relative to correctness alone.

Scores HumanEval's canonical solutions through the warm pool once per reward spec:
``binary`` (correctness alone: the baseline), then correctness plus one component
(``fraction`` of cases, ``static``, ``complexity``, ``security``, ``efficiency``), then the
whole ``quality`` preset. Specs alternate within each round so they share the machine's
load. For each it prints wall-clock milliseconds per rollout and host CPU
milliseconds per rollout (this process and its children, e.g. ruff; the sandboxed runs
are not in it), each with its ratio to ``binary``.

    .venv/bin/python benchmarks/rewards.py [--rounds 1] [--workers N] [--tasks 164]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time

from execgym import Scorer, Verdict, canonical_rollouts, load_dataset
from execgym.reward import (
    PRESETS,
    Complexity,
    Correctness,
    Efficiency,
    RewardSpec,
    Security,
    Static,
)
from execgym.sandbox import WarmPoolSandbox

SPECS = {
    "binary (correctness)": PRESETS["binary"],
    "+ fraction of cases": PRESETS["fraction"],
    "+ static (ruff)": RewardSpec(components=(Correctness(), Static())),
    "+ complexity (radon)": RewardSpec(components=(Correctness(), Complexity())),
    "+ security (bandit)": RewardSpec(components=(Correctness(), Security())),
    "+ efficiency (reference run)": RewardSpec(components=(Correctness(), Efficiency())),
    "quality preset (all)": PRESETS["quality"],
}


def _host_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def _measure(tasks, pool, spec: RewardSpec, workers: int) -> tuple[float, float]:
    scorer = Scorer(tasks, pool, reward=spec)
    items = canonical_rollouts(tasks)
    cpu, started = _host_cpu_s(), time.perf_counter()
    results = await scorer.score(items, workers=workers)
    wall, cpu = time.perf_counter() - started, _host_cpu_s() - cpu
    passed = sum(r.verdict is Verdict.PASSED for r in results)
    assert passed == len(tasks), f"{spec.name}: only {passed} of {len(tasks)} passed"
    assert all(r.reward is not None and r.reward_breakdown for r in results)
    return wall / len(items) * 1000, cpu / len(items) * 1000


async def main_async(rounds: int, workers: int, count: int) -> None:
    tasks = dict(list(load_dataset("humaneval").items())[:count])
    walls: dict[str, list[float]] = {name: [] for name in SPECS}
    cpus: dict[str, list[float]] = {name: [] for name in SPECS}
    async with WarmPoolSandbox() as pool:
        await _measure(tasks, pool, PRESETS["quality"], workers)  # warm up imports and tools
        for round_no in range(1, rounds + 1):
            for name, spec in SPECS.items():
                wall, cpu = await _measure(tasks, pool, spec, workers)
                walls[name].append(wall)
                cpus[name].append(cpu)
            print(f"round {round_no} done")
    base_wall = statistics.median(walls["binary (correctness)"])
    base_cpu = statistics.median(cpus["binary (correctness)"])
    print(f"{len(tasks)} HumanEval canonical rollouts, {workers} at once, {rounds} round(s)")
    print(
        f"{'reward spec':30} {'wall ms/rollout':>16} {'x binary':>9} {'host CPU ms':>12} {'x':>6}"
    )
    for name in SPECS:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"{name:30} {wall:16.1f} {wall / base_wall:9.2f} {cpu:12.1f} {cpu / base_cpu:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tasks", type=int, default=164)
    args = parser.parse_args()
    asyncio.run(main_async(args.rounds, args.workers, args.tasks))


if __name__ == "__main__":
    main()

"""What metrics and circuit breakers cost per rollout, and whether it shows on a real batch.

Two measurements, each in alternating rounds (so both sides see the same machine load):

- **per rollout, nothing running**: :meth:`execgym.Scorer.score` over N rollouts whose
  sandbox runs nothing (:class:`execgym.testing.FakeSandbox` answering "passed"), plain
  vs with breakers, a :class:`~execgym.ops.metrics.Metrics` registry and a
  :class:`~execgym.ops.metrics.MeteredSandbox` (what ``execgym serve`` and ``execgym
  worker --metrics-port`` do); the difference per rollout is the bookkeeping's cost.
- **HumanEval canonical, real sandboxes** (bwrap, warm pool): rollouts/s of the 164
  reference solutions, plain vs instrumented.

    .venv/bin/python benchmarks/ops_overhead.py [--rounds 5] [--rollouts 20000] [--real-rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from execgym import RolloutLine, Scorer, canonical_rollouts, load_dataset
from execgym.ops.breakers import Breakers
from execgym.ops.metrics import MeteredSandbox, Metrics
from execgym.sandbox import Sandbox, WarmPoolSandbox
from execgym.tasks.models import Rollout
from execgym.testing import FakeSandbox, harness_pass


def scorer(tasks: dict, sandbox: Sandbox, instrumented: bool) -> Scorer:
    if not instrumented:
        return Scorer(tasks, sandbox)
    metrics = Metrics()
    breakers = Breakers()
    metrics.watch(breakers)
    return Scorer(tasks, MeteredSandbox(sandbox, metrics), breakers=breakers, metrics=metrics)


async def timed(s: Scorer, items: list[RolloutLine], workers: int) -> float:
    started = time.perf_counter()
    results = await s.score(items, workers=workers)
    elapsed = time.perf_counter() - started
    assert all(r.verdict.value == "passed" for r in results), "a rollout did not pass"
    return elapsed


async def fake_rounds(rounds: int, count: int) -> dict[bool, list[float]]:
    tasks = load_dataset("humaneval")
    ids = list(tasks)
    items = [
        RolloutLine(i, Rollout(task_id=ids[i % len(ids)], completion="    pass\n"))
        for i in range(count)
    ]
    per: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(rounds):
        for instrumented in (False, True) if round_ % 2 == 0 else (True, False):  # ABBA
            box = FakeSandbox(harness_pass, keep_calls=False)
            elapsed = await timed(scorer(tasks, box, instrumented), items, workers=8)
            per[instrumented].append(elapsed / count * 1e6)
    return per


async def real_rounds(rounds: int) -> dict[bool, list[float]]:
    tasks = load_dataset("humaneval")
    items = list(canonical_rollouts(tasks))
    per: dict[bool, list[float]] = {False: [], True: []}
    box = WarmPoolSandbox()
    try:
        await timed(scorer(tasks, box, False), items[:8], workers=2)  # warm up
        for round_ in range(rounds):
            for instrumented in (False, True) if round_ % 2 == 0 else (True, False):  # ABBA
                elapsed = await timed(scorer(tasks, box, instrumented), items, workers=2)
                per[instrumented].append(len(items) / elapsed)
    finally:
        await box.aclose()
    return per


def bookkeeping_us(count: int) -> float:
    """Microseconds per rollout of everything the instrumentation adds, called directly."""
    from execgym.testing import fake_result

    tasks = load_dataset("humaneval")
    s = scorer(tasks, FakeSandbox([fake_result()]), instrumented=True)
    task = tasks["HumanEval/0"]
    run = fake_result(wall_time_s=0.05, cpu_time_s=0.04)
    assert s.breakers is not None
    assert s.metrics is not None
    result = None
    started = time.perf_counter()
    for _ in range(count):
        ticket = s.breakers.admit(task)
        s.metrics.active_runs += 1
        s.metrics.active_runs -= 1
        s.metrics.observe_run(run, 0.06)
        assert ticket is not None
        s.breakers.record(ticket, infrastructure_failure=False)
        if result is None:
            from execgym.judges.base import Judgement, Verdict
            from execgym.scoring import ScoredRollout

            judgement = Judgement(Verdict.PASSED, run)
            result = ScoredRollout(0, task.task_id, "r", Verdict.PASSED, 1.0, judgement, "fake")
        s._finished(result, "HumanEval")
    return (time.perf_counter() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rollouts", type=int, default=20000)
    parser.add_argument("--real-rounds", type=int, default=3)
    args = parser.parse_args()
    direct = statistics.median(bookkeeping_us(args.rollouts) for _ in range(args.rounds))
    print(f"bookkeeping per rollout, called directly: {direct:.1f} us (median of {args.rounds})")
    fake = asyncio.run(fake_rounds(args.rounds, args.rollouts))
    plain, inst = statistics.median(fake[False]), statistics.median(fake[True])
    print(f"per rollout, nothing running ({args.rollouts} rollouts, median of {args.rounds}):")
    print(f"  plain {plain:.1f} us, with metrics + breakers {inst:.1f} us: {inst - plain:+.1f} us")
    if args.real_rounds:
        real = asyncio.run(real_rounds(args.real_rounds))
        plain, inst = statistics.median(real[False]), statistics.median(real[True])
        print(f"HumanEval canonical, bwrap warm pool, 2 at once (median of {args.real_rounds}):")
        print(
            f"  plain {plain:.1f} rollouts/s, with metrics + breakers {inst:.1f} rollouts/s "
            f"({(inst / plain - 1) * 100:+.1f} %)"
        )


if __name__ == "__main__":
    main()

"""What fresh state per test case costs: HumanEval canonical throughput, fresh vs shared.

With ``state: fresh`` (the default of Python ``assert`` and ``function_call`` tasks),
every call the tests make to the solution is served by a fork of the solution's process
taken after its import, so no global, memoised or class-level state carries from one
case to the next; ``shared`` serves every call from one process (the behaviour before).
Both run here in the warm pool, in alternating rounds in one process, so the ratio is
measured under the same machine load; HumanEval+ (about 1,000 calls per task for some
tasks) shows the cost where the tests call the solution most.

    .venv/bin/python benchmarks/fresh_state.py [--rounds 3] [--workers 2] [--plus]

Prints rollouts per second and the runs' CPU time for each mode and round, the medians,
the ratio, the number of calls the tests made (from ``details["calls"]``) and the CPU
time fresh state adds per call (less sensitive to the machine's load than wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from execgym import Limits, Scorer, Verdict, canonical_rollouts, load_dataset
from execgym.sandbox import WarmPoolSandbox


async def _round(tasks, state: str, workers: int) -> tuple[float, int, float]:
    async with WarmPoolSandbox() as box:
        scorer = Scorer(tasks, box, Limits(wall_time_s=60), state=state)
        await scorer.self_test()  # the pool's zygote is up before the clock starts
        started = time.perf_counter()
        results = await scorer.score(canonical_rollouts(tasks), workers=workers)
        elapsed = time.perf_counter() - started
    passed = sum(r.verdict is Verdict.PASSED for r in results)
    assert passed == len(tasks), f"{state}: only {passed} of {len(tasks)} passed"
    assert all(r.judgement and r.judgement.details.get("state") == state for r in results)
    calls = sum(int(r.judgement.details.get("calls", 0)) for r in results if r.judgement)
    cpu = sum(r.judgement.run.cpu_time_s for r in results if r.judgement and r.judgement.run)
    return len(tasks) / elapsed, calls, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--plus", action="store_true", help="HumanEval+ instead of HumanEval")
    args = parser.parse_args()
    name = "humanevalplus" if args.plus else "humaneval"
    tasks = load_dataset(name)
    rates: dict[str, list[float]] = {"fresh": [], "shared": []}
    cpus: dict[str, list[float]] = {"fresh": [], "shared": []}
    calls = {}
    for number in range(1, args.rounds + 1):
        for state in ("fresh", "shared"):
            rate, calls[state], cpu = asyncio.run(_round(tasks, state, args.workers))
            rates[state].append(rate)
            cpus[state].append(cpu)
            print(
                f"round {number} {state:6s}: {rate:6.1f} rollouts/s, {cpu:6.2f} s CPU in the runs",
                flush=True,
            )
    fresh, shared = statistics.median(rates["fresh"]), statistics.median(rates["shared"])
    print(f"{name}, {len(tasks)} canonical solutions, {args.workers} at once, warm pool:")
    print(f"  state fresh : {fresh:6.1f} rollouts/s (median of {args.rounds})")
    print(f"  state shared: {shared:6.1f} rollouts/s")
    print(f"  fresh / shared: {fresh / shared:.2f} ({calls['fresh']} calls of the tests)")
    extra = statistics.median(cpus["fresh"]) - statistics.median(cpus["shared"])
    print(f"  CPU added by fresh state: {extra * 1000 / calls['fresh']:.2f} ms per call")


if __name__ == "__main__":
    main()

"""Throughput of scoring HumanEval's 164 canonical solutions: sandboxed vs plain subprocess.

Both sides run the same programs (prompt + canonical solution + tests + check) with the
same interpreter and flags, with as many at once as there are CPUs, in alternating
rounds, so that the ratio is measured under the same machine load.

    .venv/bin/python benchmarks/humaneval_throughput.py [--rounds 3] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from execgym import Scorer, Verdict, canonical_rollouts, create_sandbox, load_dataset
from execgym.judges.assert_tests import build_program, python_command


def sandboxed(tasks, workers: int) -> float:
    scorer = Scorer(tasks, create_sandbox("bwrap"))
    started = time.perf_counter()
    results = asyncio.run(scorer.score(canonical_rollouts(tasks), workers=workers))
    elapsed = time.perf_counter() - started
    passed = sum(r.verdict is Verdict.PASSED for r in results)
    assert passed == len(tasks), f"sandboxed: only {passed} of {len(tasks)} passed"
    return len(tasks) / elapsed


def plain(tasks, workers: int) -> float:
    argv = python_command("-")[:-1]  # same interpreter and flags, program on stdin

    def one(task) -> bool:
        program = (
            build_program(task, task.reference)
            + "\n\n"
            + task.tests
            + f"\n\ncheck({task.entry_point})\n"
        )
        done = subprocess.run(
            [*argv, "-"], input=program.encode(), capture_output=True, timeout=10, check=False
        )
        return done.returncode == 0

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, tasks.values()))
    elapsed = time.perf_counter() - started
    assert all(ok), f"plain: {ok.count(False)} failed"
    return len(tasks) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    tasks = load_dataset("humaneval")
    print(
        f"interpreter: {python_command('x')[0]} (from {sys.executable}); "
        f"{args.workers} at once; {len(tasks)} tasks; {args.rounds} rounds"
    )
    box, bare = [], []
    for round_no in range(1, args.rounds + 1):
        bare.append(plain(tasks, args.workers))
        box.append(sandboxed(tasks, args.workers))
        print(
            f"round {round_no}: plain subprocess.run {bare[-1]:6.1f} rollouts/s   "
            f"bwrap sandbox {box[-1]:6.1f} rollouts/s"
        )
    b, p = statistics.median(box), statistics.median(bare)
    print(
        f"median: plain {p:.1f} rollouts/s, bwrap {b:.1f} rollouts/s, "
        f"ratio bwrap/plain = {b / p:.2f}"
    )


if __name__ == "__main__":
    main()

"""Throughput of scoring HumanEval's 164 canonical solutions, sandboxed vs plain subprocess.

Three ways, in alternating rounds so that their ratios are measured under the same
machine load, each with the same interpreter and flags and the same number of programs
at once:

- plain: ``subprocess.run`` of prompt + solution + tests + check, unsandboxed, with the
  sandbox's interpreter and flags (``-I -S``: no site-packages, the fastest start);
- plain, default flags: the same with ``sys.executable`` and no flags, as a harness
  that calls ``subprocess.run([sys.executable, ...])`` runs it (shown for reference;
  the ratios are to the first);
- bwrap: a fresh bubblewrap sandbox per rollout;
- bwrap + warm pool: each rollout forked from the warm pool's zygote into fresh
  namespaces (same isolation as a fresh sandbox);
- CLI end to end: ``execgym score --dataset humaneval --solutions canonical`` as a
  command, its start-up (interpreter, imports, loading, the pool's start, the
  self-test) included, where the library's figure starts its clock with the pool up;
- warm pool, empty program: 164 runs of ``pass`` in the warm pool, at the same number at
  once: what the pool's own per-run work (fresh namespaces, mounts, cgroup, two forked
  processes, supervision) allows before any test runs, the ceiling of its HumanEval
  figure;
- the same, one process: the empty program registered as a trusted program, so that it
  runs as the run's PID 1 with no second process (as a judge's harness does, before it
  starts the solution's process): the ceiling of any design that forks a fresh,
  namespaced CPython per rollout.

    .venv/bin/python benchmarks/humaneval_throughput.py [--rounds 3] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from execgym import Scorer, Verdict, canonical_rollouts, create_sandbox, load_dataset
from execgym.judges.assert_tests import build_program
from execgym.sandbox import Sandbox, WarmPoolSandbox
from execgym.sandbox._python import python_command
from execgym.sandbox._trusted import register_trusted_program


async def _score(tasks, sandbox: Sandbox, workers: int) -> float:
    scorer = Scorer(tasks, sandbox)
    await scorer.self_test()  # starts the pool's zygote before the clock starts
    started = time.perf_counter()
    results = await scorer.score(canonical_rollouts(tasks), workers=workers)
    elapsed = time.perf_counter() - started
    passed = sum(r.verdict is Verdict.PASSED for r in results)
    assert passed == len(tasks), f"{sandbox.name}: only {passed} of {len(tasks)} passed"
    return len(tasks) / elapsed


def fresh_bwrap(tasks, workers: int) -> float:
    return asyncio.run(_score(tasks, create_sandbox("bwrap"), workers))


def warm_pool(tasks, workers: int) -> float:
    async def run() -> float:
        async with WarmPoolSandbox() as pool:
            return await _score(tasks, pool, workers)

    return asyncio.run(run())


EMPTY = b"pass\n"
ONE_PROCESS = b"pass  # trusted: PID 1 itself\n"
register_trusted_program(ONE_PROCESS, compile(ONE_PROCESS, "runner.py", "exec"))


def empty_program(tasks, workers: int, source: bytes = EMPTY) -> float:
    async def run() -> float:
        async with WarmPoolSandbox() as pool:
            await pool.run_python(source)  # starts the zygote and preloads
            gate = asyncio.Semaphore(workers)

            async def one() -> bool:
                async with gate:
                    return (await pool.run_python(source)).exit_code == 0

            started = time.perf_counter()
            ok = await asyncio.gather(*(one() for _ in tasks))
            elapsed = time.perf_counter() - started
            assert all(ok), f"empty program: {ok.count(False)} failed"
            return len(tasks) / elapsed

    return asyncio.run(run())


def plain(tasks, workers: int, argv: list[str] | None = None) -> float:
    argv = argv or python_command("-")

    def one(task) -> bool:
        program = (
            build_program(task, task.reference)
            + "\n\n"
            + task.tests
            + f"\n\ncheck({task.entry_point})\n"
        )
        done = subprocess.run(
            argv, input=program.encode(), capture_output=True, timeout=10, check=False
        )
        return done.returncode == 0

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, tasks.values()))
    elapsed = time.perf_counter() - started
    assert all(ok), f"plain: {ok.count(False)} failed"
    return len(tasks) / elapsed


def cli_end_to_end(tasks, workers: int) -> float:
    """``execgym score --dataset humaneval --solutions canonical``, start-up included."""
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "-m", "execgym", "score", "--dataset", "humaneval"]
        argv += ["--solutions", "canonical", "--workers", str(workers), "--k", "1"]
        argv += ["-o", os.path.join(folder, "results.jsonl")]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"passed {len(tasks)}" in done.stdout, done.stdout
    return len(tasks) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    tasks = load_dataset("humaneval")
    print(
        f"interpreter: {python_command('x')[0]} (from {sys.executable}), flags "
        f"{' '.join(python_command('x')[1:-1])}; {args.workers} at once; {len(tasks)} tasks; "
        f"{args.rounds} rounds"
    )
    ways = {
        "plain subprocess.run": plain,
        "plain, default flags": lambda tasks, workers: plain(tasks, workers, [sys.executable, "-"]),
        "bwrap": fresh_bwrap,
        "bwrap + warm pool": warm_pool,
        "CLI end to end": cli_end_to_end,
        "warm pool, empty program": empty_program,
        "the same, one process": lambda tasks, workers: empty_program(tasks, workers, ONE_PROCESS),
    }
    figures: dict[str, list[float]] = {name: [] for name in ways}
    for round_no in range(1, args.rounds + 1):
        for name, way in ways.items():
            figures[name].append(way(tasks, args.workers))
        print(
            f"round {round_no}: "
            + "   ".join(f"{name} {values[-1]:6.1f}/s" for name, values in figures.items())
        )
    medians = {name: statistics.median(values) for name, values in figures.items()}
    base = medians["plain subprocess.run"]
    print(
        "median rollouts/s: "
        + ", ".join(
            f"{name} {value:.1f} ({value / base:.2f}x plain)" for name, value in medians.items()
        )
    )
    print(
        "CLI end to end (start-up included) to the library's warm pool (started before the "
        f"clock): {medians['CLI end to end'] / medians['bwrap + warm pool']:.2f}x (target 0.8x)"
    )
    default = medians["plain, default flags"]
    print(
        "to plain with default flags (what a harness calling subprocess.run([sys.executable,"
        " ...]) gets): "
        + ", ".join(
            f"{name} {medians[name] / default:.2f}x" for name in ("bwrap", "bwrap + warm pool")
        )
    )


if __name__ == "__main__":
    main()

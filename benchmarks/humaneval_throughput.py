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
- bwrap + warm pool, before: the same from another checkout's ``src`` (``--before DIR``), in
  a process of its own, interleaved with the rest: a change's before and after in one run
  (with ``--before``, the warm pool ways of this checkout run in a process of their own per
  round too, so neither side reuses the judge's per-process cache of compiled tests; the
  empty program gets a "before" way as well);
- warm pool, empty program: 164 runs of ``pass`` in the warm pool, at the same number at
  once: what the pool's own per-run work (fresh namespaces, mounts, cgroup, two forked
  processes, supervision) allows before any test runs, the ceiling of its HumanEval
  figure;
- the same, one process: the empty program registered as a trusted program, so that it
  runs as the run's PID 1 with no second process (as a judge's harness does, before it
  starts the solution's process): the ceiling of any design that forks a fresh,
  namespaced CPython per rollout.

Each way's CPU time per rollout is printed too (user + system, milliseconds): of this
process and its reaped children for the plain ways and bwrap, and for the warm pool of
this process and the zygote's whole process tree (read from ``/proc`` before and after,
as the zygote's runs are never reaped by us). It is less sensitive than wall time to a
machine shared with other jobs.

    .venv/bin/python benchmarks/humaneval_throughput.py [--rounds 3] [--workers N]
        [--before DIR] [--way NAME]...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from execgym import Scorer, Verdict, canonical_rollouts, create_sandbox, load_dataset
from execgym.judges.assert_tests import build_program
from execgym.sandbox import Sandbox, WarmPoolSandbox
from execgym.sandbox._python import python_command
from execgym.sandbox._trusted import register_trusted_program

Figure = tuple[float, float | None]
"""Rollouts per second, and CPU milliseconds per rollout (``None``: not measured)."""
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process (every thread) and of its reaped children."""
    own, reaped = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every descendant, live or reaped by one of them.

    Each live process's own time plus what it reaped (``/proc/<pid>/stat`` fields 14-17);
    a process that ended unreaped (killed with its parent) is lost, so read it while the
    tree is up.
    """
    return tree_usage(root)[0]


def tree_usage(root: int) -> tuple[float, int]:
    """``(CPU seconds, minor page faults)`` of ``root``'s tree, as :func:`tree_cpu_s`."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    faults: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # ended meanwhile
        fields = data[data.rindex(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
        ticks[int(name)] = sum(int(value) for value in fields[11:15])
        faults[int(name)] = int(fields[7]) + int(fields[8])
    total, faulted, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        faulted += faults.get(pid, 0)
        todo += children.get(pid, [])
    return total * _TICK_S, faulted


def _pool_cpu_s(sandbox: Sandbox) -> float:
    """This process's CPU time, plus the warm pool's zygote tree's if it has one."""
    proc = getattr(getattr(sandbox, "_zygote", None), "proc", None)
    return own_cpu_s() + (tree_cpu_s(proc.pid) if proc is not None else 0.0)


async def _score(tasks, sandbox: Sandbox, workers: int) -> Figure:
    scorer = Scorer(tasks, sandbox)
    await scorer.self_test()  # starts the pool's zygote before the clock starts
    cpu = _pool_cpu_s(sandbox)
    started = time.perf_counter()
    results = await scorer.score(canonical_rollouts(tasks), workers=workers)
    elapsed = time.perf_counter() - started
    cpu = _pool_cpu_s(sandbox) - cpu
    passed = sum(r.verdict is Verdict.PASSED for r in results)
    assert passed == len(tasks), f"{sandbox.name}: only {passed} of {len(tasks)} passed"
    return len(tasks) / elapsed, cpu * 1000 / len(tasks)


def fresh_bwrap(tasks, workers: int) -> Figure:
    return asyncio.run(_score(tasks, create_sandbox("bwrap"), workers))


def warm_pool(tasks, workers: int) -> Figure:
    async def run() -> Figure:
        async with WarmPoolSandbox() as pool:
            return await _score(tasks, pool, workers)

    return asyncio.run(run())


def warm_pool_from(source_dir: str, way: str = "warm_pool") -> Callable[[dict, int], Figure]:
    """A warm pool way (a function of this module), run by ``source_dir`` in a process of its own.

    A process per round, as the checkout compared with: the judge caches each task's
    compiled tests per process, so a way run in this process would pay for them in its
    first round only.
    """

    def run(tasks, workers: int) -> Figure:
        code = (
            "import json, sys\n"
            f"sys.path.insert(0, {source_dir!r})\n"
            f"sys.path.insert(1, {os.path.dirname(os.path.abspath(__file__))!r})\n"
            "import humaneval_throughput as bench\n"
            "from execgym import load_dataset\n"
            f"print(json.dumps(bench.{way}(load_dataset('humaneval'), {workers})))\n"
        )
        env = {**os.environ, "PYTHONPATH": source_dir}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        rate, cpu_ms = json.loads(done.stdout.splitlines()[-1])
        return rate, cpu_ms

    return run


EMPTY = b"pass\n"
ONE_PROCESS = b"pass  # trusted: PID 1 itself\n"
register_trusted_program(ONE_PROCESS, compile(ONE_PROCESS, "runner.py", "exec"))


def empty_program(tasks, workers: int, source: bytes = EMPTY) -> Figure:
    async def run() -> Figure:
        async with WarmPoolSandbox() as pool:
            await pool.run_python(source)  # starts the zygote and preloads
            gate = asyncio.Semaphore(workers)

            async def one() -> bool:
                async with gate:
                    return (await pool.run_python(source)).exit_code == 0

            cpu = _pool_cpu_s(pool)
            started = time.perf_counter()
            ok = await asyncio.gather(*(one() for _ in tasks))
            elapsed = time.perf_counter() - started
            cpu = _pool_cpu_s(pool) - cpu
            assert all(ok), f"empty program: {ok.count(False)} failed"
            return len(tasks) / elapsed, cpu * 1000 / len(tasks)

    return asyncio.run(run())


def plain(tasks, workers: int, argv: list[str] | None = None) -> Figure:
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

    cpu = own_cpu_s()
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, tasks.values()))
    elapsed = time.perf_counter() - started
    cpu = own_cpu_s() - cpu
    assert all(ok), f"plain: {ok.count(False)} failed"
    return len(tasks) / elapsed, cpu * 1000 / len(tasks)


def cli_end_to_end(tasks, workers: int) -> Figure:
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
    return len(tasks) / elapsed, None  # its zygote's runs are reaped by no process of ours


POOL_CPU_TARGET_MS = 21.0 / 2
"""Issue 23: the pool's CPU per rollout at most half of the 21 ms it spent then."""


def _cpu(value: float | None) -> str:
    return "   -   " if value is None else f"{value:5.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--before", metavar="DIR", help="also run the warm pool from this checkout's src"
    )
    parser.add_argument(
        "--way", action="append", metavar="NAME", help="run only this way (repeatable)"
    )
    args = parser.parse_args()
    tasks = load_dataset("humaneval")
    print(
        f"interpreter: {python_command('x')[0]} (from {sys.executable}), flags "
        f"{' '.join(python_command('x')[1:-1])}; {args.workers} at once; {len(tasks)} tasks; "
        f"{args.rounds} rounds"
    )
    ways: dict[str, Callable[[dict, int], Figure]] = {
        "plain subprocess.run": plain,
        "plain, default flags": lambda tasks, workers: plain(tasks, workers, [sys.executable, "-"]),
        "plain python -I": lambda tasks, workers: plain(
            tasks, workers, [sys.executable, "-I", "-"]
        ),
        "bwrap": fresh_bwrap,
        "bwrap + warm pool": warm_pool,
        "CLI end to end": cli_end_to_end,
        "warm pool, empty program": empty_program,
        "the same, one process": lambda tasks, workers: empty_program(tasks, workers, ONE_PROCESS),
    }
    if args.way:
        wanted = args.way
        unknown = [name for name in wanted if name not in ways]
        if unknown:
            parser.error(f"unknown ways {unknown}: choose among {list(ways)}")
        ways = {name: way for name, way in ways.items() if name in wanted}
    if args.before:
        # Before and after alike, each round in a process of its own (see warm_pool_from).
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        before = os.path.abspath(args.before)
        for name, function in (
            ("bwrap + warm pool", "warm_pool"),
            ("warm pool, empty program", "empty_program"),
        ):
            if name in ways:
                ways[name] = warm_pool_from(here, function)
                ways[name + ", before"] = warm_pool_from(before, function)
    rates: dict[str, list[float]] = {name: [] for name in ways}
    cpus: dict[str, list[float]] = {name: [] for name in ways}
    for round_no in range(1, args.rounds + 1):
        for name, way in ways.items():
            rate, cpu_ms = way(tasks, args.workers)
            rates[name].append(rate)
            if cpu_ms is not None:
                cpus[name].append(cpu_ms)
        print(
            f"round {round_no}: "
            + "   ".join(
                f"{name} {rates[name][-1]:6.1f}/s"
                + (f" {cpus[name][-1]:.1f} ms CPU" if len(cpus[name]) == round_no else "")
                for name in ways
            ),
            flush=True,
        )
    rate = {name: statistics.median(values) for name, values in rates.items()}
    cpu = {name: statistics.median(values) if values else None for name, values in cpus.items()}
    base = rate.get("plain subprocess.run")
    print("medians:                     rollouts/s   CPU per rollout")
    for name in ways:
        ratio = f"  ({rate[name] / base:.2f}x plain -I -S)" if base else ""
        print(f"  {name:27s} {rate[name]:7.1f}/s   {_cpu(cpu[name])}{ratio}")
    pool = "bwrap + warm pool"
    if "CLI end to end" in rate and pool in rate:
        print(
            "CLI end to end (start-up included) to the library's warm pool (started before "
            f"the clock): {rate['CLI end to end'] / rate[pool]:.2f}x (target 0.8x)"
        )
    if pool in rate and "plain python -I" in rate:
        print(
            f"warm pool to plain python -I: {rate[pool] / rate['plain python -I']:.2f}x "
            "(target 1.5x)"
        )
    if cpu.get(pool) is not None:
        print(
            f"warm pool CPU per rollout: {cpu[pool]:.1f} ms (target at most "
            f"{POOL_CPU_TARGET_MS:.1f} ms)"
            + (
                f"; before ({args.before}): {cpu[pool + ', before']:.1f} ms"
                if cpu.get(pool + ", before") is not None
                else ""
            )
        )
    if "plain, default flags" in rate:
        default = rate["plain, default flags"]
        print(
            "to plain with default flags (what a harness calling subprocess.run([sys.executable,"
            " ...]) gets): "
            + ", ".join(
                f"{name} {rate[name] / default:.2f}x" for name in ("bwrap", pool) if name in rate
            )
        )


if __name__ == "__main__":
    main()

"""Start-to-result latency of a trivial Python program, per way of running it.

Prints p50 and p99 (milliseconds) over N sequential runs of ``print('ok')`` for plain
``subprocess.run``, a fresh bwrap sandbox, the bwrap warm pool and gVisor (when runsc
is installed), each with its ratio to plain subprocess, all measured in one run and
interleaved run by run so that machine load hits every way alike. One more row, "bare
bwrap", runs the same program under ``subprocess.run`` of the very bwrap command line a
fresh sandbox uses (same namespaces, mounts and uid; no cgroup, init, seccomp filter or
supervision): the floor bubblewrap itself sets for a fresh sandbox on this machine.

    .venv/bin/python benchmarks/sandbox_latency.py [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable

from execgym.limits import DEFAULT_LIMITS
from execgym.sandbox import BubblewrapSandbox, RunResult, Status, WarmPoolSandbox
from execgym.sandbox._python import python_command

PROGRAM = b"print('ok')\n"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    argv = [*python_command("x")[:-1], "-c", PROGRAM.decode()]

    async def plain() -> None:
        done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, check=True)
        assert done.stdout == b"ok\n"

    fresh = BubblewrapSandbox()
    bare_argv = fresh._argv(argv, DEFAULT_LIMITS, [])

    async def bare() -> None:
        done = await asyncio.to_thread(subprocess.run, bare_argv, capture_output=True, check=True)
        assert done.stdout == b"ok\n", done

    prestarted = BubblewrapSandbox(prestart=1)
    pool = WarmPoolSandbox()
    await pool.start()

    async def check(run: Awaitable[RunResult]) -> None:
        result = await run
        if result.status is not Status.OK or result.stdout != b"ok\n":
            raise RuntimeError(f"the trivial program failed: {result}")

    ways: dict[str, Callable[[], Awaitable[None]]] = {
        "plain subprocess.run": plain,
        "bwrap": lambda: check(fresh.run_python(PROGRAM)),
        "bare bwrap": bare,
        "bwrap, prestarted": lambda: check(prestarted.run_python(PROGRAM)),
        "bwrap + warm pool": lambda: check(pool.run_python(PROGRAM)),
    }
    try:
        from execgym.sandbox.gvisor import GVisorSandbox

        gvisor = GVisorSandbox()
        ways["gvisor"] = lambda: check(gvisor.run_python(PROGRAM))
    except Exception as error:
        print(f"gvisor: skipped ({error})")
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for way in ways.values():  # warm up caches once
        await way()
    for _ in range(args.runs):
        for name, way in ways.items():
            started = time.perf_counter()
            await way()
            timings[name].append((time.perf_counter() - started) * 1000)
    await pool.aclose()
    await prestarted.aclose()
    base = percentile(timings["plain subprocess.run"], 0.5)
    print(f"{args.runs} runs each of {PROGRAM!r}, interleaved; milliseconds")
    for name, values in timings.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        print(f"{name:22s} p50 {p50:7.2f}  p99 {p99:7.2f}  p50 ratio to plain {p50 / base:5.2f}x")


if __name__ == "__main__":
    asyncio.run(main())

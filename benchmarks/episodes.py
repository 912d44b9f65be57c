"""Agent episodes: step latency in a live episode, and N concurrent episodes' memory.

Latency: one episode of the pager example, ``--steps`` steps of each tool timed one
by one (the session is warm: reset is not counted); p50 and p99 in milliseconds.

Concurrency (``--concurrent N``, default 64; 0 skips it): N episodes of the example
tasks at once, each replaying its shipped solution (without the visible-test runs)
and submitting, so N sessions and up to 8 gradings live together; memory is sampled
every 50 ms as this process's RSS plus every sandbox's cgroup (bwrap, the session's
agent, its commands and its tmpfs files), and after the run nothing may be left.

    .venv/bin/python benchmarks/episodes.py [--steps 200] [--concurrent 64]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from execgym.episodes import AsyncEnv, ScriptedAgent, example_tasks
from execgym.episodes.batch import EpisodeLine, play_episodes
from execgym.episodes.memory import MemorySampler, sandbox_memory_bytes
from execgym.limits import MiB

STEPS = {
    "run_command": {"tool": "run_command", "arguments": {"command": "echo hello"}},
    "write_file": {"tool": "write_file", "arguments": {"path": "notes.txt", "content": "x" * 4096}},
    "read_file": {"tool": "read_file", "arguments": {"path": "pager/core.py"}},
    "list_dir": {"tool": "list_dir", "arguments": {"path": "pager"}},
}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def latency(steps: int) -> None:
    task = example_tasks()[0].model_copy(update={"max_steps": 10 * steps * len(STEPS)})
    async with AsyncEnv(task) as env:
        started = time.perf_counter()
        await env.reset()
        print(
            f"reset (new session, repo copied in): {(time.perf_counter() - started) * 1e3:.1f} ms"
        )
        for name, action in STEPS.items():
            times = []
            for _ in range(steps):
                before = time.perf_counter()
                observation, *_ = await env.step(action)
                times.append((time.perf_counter() - before) * 1e3)
                assert observation["ok"], observation
            p50, p99 = statistics.median(times), _percentile(times, 0.99)
            print(f"{name:<12} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   ({steps} steps)")


async def concurrent(count: int) -> None:
    tasks = example_tasks()
    lines = []
    for index in range(count):
        task = tasks[index % len(tasks)]
        actions = [
            a for a in ScriptedAgent.for_example(task.id).actions if a["tool"] != "run_tests"
        ]
        lines.append(EpisodeLine(index + 1, task, actions))
    started = time.perf_counter()
    async with MemorySampler(interval_s=0.05) as sampler:
        records = [r async for r in play_episodes(lines, concurrency=count)]
    elapsed = time.perf_counter() - started
    solved = sum(r.get("reward") == 1.0 for r in records)
    peaks = sampler.peaks
    print(
        f"{count} concurrent episodes: {solved} solved in {elapsed:.1f} s; "
        f"peak {peaks.sandboxes} sandboxes alive at once"
    )
    print(
        f"memory peak: host RSS {peaks.host_rss_bytes / MiB:.0f} MiB "
        f"(baseline {sampler.baseline_rss_bytes / MiB:.0f} MiB), sandboxes "
        f"{peaks.sandbox_bytes / MiB:.0f} MiB ({peaks.sandbox_bytes / MiB / count:.1f} MiB per "
        f"episode), total {peaks.total_bytes / MiB:.0f} MiB"
    )
    left = sandbox_memory_bytes()
    print(f"left after the run: {left[1] if left else 0} sandbox cgroups")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=64)
    options = parser.parse_args()
    asyncio.run(latency(options.steps))
    if options.concurrent:
        asyncio.run(concurrent(options.concurrent))


if __name__ == "__main__":
    main()

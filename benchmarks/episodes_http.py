"""Agent episodes through ``execgym serve``: open, step and reclaim C at once, over TCP.

Starts a real ``execgym serve`` on a free port and plays E episodes of an example task,
C at a time, each through :class:`EpisodeClient` (keep-alive HTTP): open, K
``write_file`` and K ``run_command`` steps, ``submit`` without changes (reward 0:
the hidden tests run), delete. Prints p50/p99 step latency (ms) per tool over HTTP, the
open and submit times, episodes/s, and checks that no episode is left on the service.

With ``--routed``, the same run is made twice, one after the other: episodes in the
``execgym serve`` process, then on one ``execgym episode-worker`` reached through a
real ``redis-server`` (``EXECGYM_SERVER_EPISODE_BROKER``), and the p50 of each call is
compared (routed / in-process): what routing an episode's steps costs.

    .venv/bin/python benchmarks/episodes_http.py [--episodes 16] [--concurrency 8] [--steps 5]
    .venv/bin/python benchmarks/episodes_http.py --routed --episodes 8 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from server_throughput import percentile, start_server

from execgym.integrations.episode_client import EpisodeClient
from execgym.testing import RedisServer

TASK = "example/pager-last-page"


async def play(client: EpisodeClient, steps: int, times: dict[str, list[float]]) -> float | None:
    """One episode; each call's seconds go to ``times`` by name."""

    async def timed(name: str, call: object) -> object:
        started = time.perf_counter()
        result = await call  # type: ignore[misc]
        times.setdefault(name, []).append(time.perf_counter() - started)
        return result

    env = client.env(TASK)
    first: dict = await timed("open", env.reset())  # type: ignore[assignment]
    budget = int(first["max_steps"]) - 1  # the step that spends the budget ends the episode
    for index in range(min(steps, budget // 2)):
        write = {"tool": "write_file", "arguments": {"path": f"n{index}.txt", "content": "x"}}
        for action in (write, {"tool": "run_command", "arguments": {"command": "ls"}}):
            await timed(action["tool"], env.step(action))
    _, reward, *_ = await timed("submit", env.step({"tool": "submit", "arguments": {}}))  # type: ignore[misc]
    await timed("delete", env.aclose())
    return reward  # type: ignore[no-any-return]


@contextlib.contextmanager
def episode_worker(concurrency: int) -> Iterator[None]:
    """A redis-server and one ``execgym episode-worker``; the service's env points at them."""
    with tempfile.TemporaryDirectory() as directory:
        redis = RedisServer(Path(directory))
        redis.persistence = False
        redis.start()
        argv = [sys.executable, "-m", "execgym", "episode-worker", "--broker", redis.url]
        argv += ["--max-episodes", str(concurrency), "--prefix", "bench"]
        worker = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["EXECGYM_SERVER_EPISODE_BROKER"] = redis.url
        os.environ["EXECGYM_SERVER_EPISODE_PREFIX"] = "bench"
        try:
            yield
        finally:
            del (
                os.environ["EXECGYM_SERVER_EPISODE_BROKER"],
                os.environ["EXECGYM_SERVER_EPISODE_PREFIX"],
            )
            worker.terminate()
            worker.wait(timeout=60)
            redis.kill()


async def run(args: argparse.Namespace, label: str) -> dict[str, list[float]]:
    """One benchmark run against a fresh ``execgym serve``; the seconds of each call."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ["EXECGYM_SERVER_MAX_EPISODES"] = str(args.concurrency)
    server = start_server(port, os.cpu_count() or 1)
    times: dict[str, list[float]] = {}
    gate = asyncio.Semaphore(args.concurrency)
    try:
        async with EpisodeClient(f"http://127.0.0.1:{port}") as client:

            async def one() -> float | None:
                async with gate:
                    return await play(client, args.steps, times)

            started = time.perf_counter()
            rewards = await asyncio.gather(*(one() for _ in range(args.episodes)))
            spent_s = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"{label}: {args.episodes} episodes, {args.concurrency} at once, {args.steps} "
        f"write_file + {args.steps} run_command steps each: {spent_s:.1f} s, "
        f"{args.episodes / spent_s:.2f} episodes/s; rewards {sorted(set(rewards))}"
    )
    for name in NAMES:
        values = times.get(name, [])
        print(
            f"  {name:12} n={len(values):4}  p50 {1000 * percentile(values, 0.5):8.1f} ms"
            f"  p99 {1000 * percentile(values, 0.99):8.1f} ms"
        )
    return times


NAMES = ("open", "write_file", "run_command", "submit", "delete")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--routed", action="store_true", help="also through Redis and an episode worker"
    )
    args = parser.parse_args()
    here = await run(args, "in the serve process")
    if not args.routed:
        return
    with episode_worker(args.concurrency):
        routed = await run(args, "on an episode worker through Redis")
    print("routed / in-process, p50 (p50 routed - p50 in-process):")
    for name in NAMES:
        ours, theirs = percentile(routed[name], 0.5), percentile(here[name], 0.5)
        print(f"  {name:12} {ours / theirs:6.2f}x  ({1000 * (ours - theirs):+8.1f} ms)")


if __name__ == "__main__":
    asyncio.run(main())

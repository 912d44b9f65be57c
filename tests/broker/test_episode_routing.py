"""Episodes routed through a real redis-server to episode workers, in one process.

Two :class:`EpisodeHost` workers (in-memory episodes, :class:`FakeEpisodeEnv`) and two
:class:`RoutedEpisodes` front ends share one Redis: opens go to the worker with the
most room, any front end reaches any episode, a full cluster answers 429, and a worker
that is stopped ends what it holds with reward null and the reason, never touching an
episode that had already ended. The processes-and-kill version (real ``execgym serve``
replicas, a real worker killed with SIGKILL, bwrap sessions) is
``tests/server/test_episode_replicas.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from execgym.broker.episode_host import EpisodeHost, EpisodeHostSettings
from execgym.broker.episode_router import RoutedEpisodes
from execgym.errors import BrokerUnavailable, CapacityExceeded, EpisodeNotFound, EpisodeOver
from execgym.testing import FakeEpisodeEnv, FakeRepoTask, RedisServer

TASK = FakeRepoTask()
FIX = {"tool": "write_file", "arguments": {"path": "calc.py", "content": TASK.solution["calc.py"]}}
SUBMIT = {"tool": "submit", "arguments": {}}
Stop = asyncio.Event


@contextlib.asynccontextmanager
async def hosts(url: str, *capacities: int) -> AsyncIterator[list[tuple[EpisodeHost, Stop]]]:
    """Episode workers of these capacities, serving until the block ends (or stopped)."""
    running = []
    for number, capacity in enumerate(capacities):
        settings = EpisodeHostSettings(
            max_episodes=capacity, heartbeat_ttl_s=3.0, block_s=0.1, name=f"host{number}"
        )
        host = EpisodeHost(url, FakeEpisodeEnv, settings, prefix="t", task_of=_fake_task)
        stop = asyncio.Event()
        await host.beat()  # registered before the first open
        running.append((host, stop, asyncio.create_task(host.run(stop))))
    try:
        yield [(host, stop) for host, stop, _ in running]
    finally:
        for _, stop, _task in running:
            stop.set()
        await asyncio.gather(*(task for *_, task in running))


def _fake_task(record: Any) -> FakeRepoTask:
    return FakeRepoTask(**record)


async def test_any_front_end_reaches_an_episode_on_the_worker_with_room(
    redis_server: RedisServer,
) -> None:
    a, b = (RoutedEpisodes(redis_server.url, prefix="t", poll_s=0.1) for _ in range(2))
    try:
        async with hosts(redis_server.url, 2, 2):
            first, observation = await a.open(TASK)
            assert observation["problem_statement"] == TASK.statement
            second, _ = await a.open(TASK)
            owners = {(await b.get_view(e)).worker for e in (first, second)}
            assert owners == {"host0", "host1"}  # the second went to the emptier worker
            argv = ["-m", "execgym", "status", "--broker", redis_server.url, "--prefix", "t"]
            shown = await asyncio.create_subprocess_exec(
                sys.executable, *argv, stdout=asyncio.subprocess.PIPE
            )
            output = (await shown.communicate())[0].decode()
            assert shown.returncode == 0, output
            assert "episode workers: 2 (2 live episodes)" in output
            assert "host1: 1 of 2 episodes" in output
            await a.step(first, FIX)
            outcome = await b.step(first, SUBMIT)  # the other front end, the same session
            assert (outcome.reward, outcome.terminated) == (1.0, True)
            view = await a.get_view(first)
            assert (view.state, view.steps, view.reward, view.reason) == ("finished", 2, 1.0, None)
            with pytest.raises(EpisodeOver, match="has ended"):
                await a.step(first, SUBMIT)
            closed = await b.close(second)
            assert closed.state == "running"
            with pytest.raises(EpisodeNotFound):
                await a.step(second, FIX)
            assert (b.opened, b.steps_taken, a.opened, a.steps_taken) == (0, 1, 2, 1)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_full_cluster_answers_429_and_an_empty_one_names_the_command(
    redis_server: RedisServer,
) -> None:
    front = RoutedEpisodes(redis_server.url, prefix="t", poll_s=0.1)
    try:
        with pytest.raises(BrokerUnavailable, match="execgym episode-worker --broker"):
            await front.open(TASK)
        async with hosts(redis_server.url, 1):
            await front.open(TASK)
            with pytest.raises(CapacityExceeded, match="every episode worker is full"):
                await front.open(TASK)
    finally:
        await front.aclose()


async def test_a_stopped_worker_ends_its_live_episodes_masked_with_the_reason(
    redis_server: RedisServer,
) -> None:
    front = RoutedEpisodes(redis_server.url, prefix="t", poll_s=0.1)
    try:
        async with hosts(redis_server.url, 3) as [(host, stop)]:
            done, _ = await front.open(TASK)
            await front.step(done, SUBMIT)  # ended by the agent: reward 0, kept as it is
            live, _ = await front.open(TASK)
            await front.step(live, FIX)
            stop.set()
            while host.registry.ids():  # the worker drains, then ends what it holds
                await asyncio.sleep(0.05)
        view = await front.get_view(live)
        assert (view.state, view.reward, view.truncated, view.steps) == ("finished", None, True, 1)
        assert view.reason is not None
        assert "host0" in view.reason
        assert "shut down" in view.reason
        with pytest.raises(EpisodeOver, match="masked"):
            await front.step(live, SUBMIT)
        kept = await front.get_view(done)
        assert (kept.reward, kept.terminated, kept.reason) == (0.0, True, None)
    finally:
        await front.aclose()

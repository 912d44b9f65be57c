"""Many episodes at once: bounded memory, and every one reclaimed when it ends."""

from __future__ import annotations

import asyncio
import uuid

from execgym.episodes import AsyncEnv
from execgym.episodes.batch import EpisodeLine, play_episodes
from execgym.episodes.memory import MemorySampler, sandbox_memory_bytes
from execgym.limits import MiB
from tests.conftest import processes_with, run_cgroups

from .conftest import TASK_IDS, call, example, solution

CONCURRENT = 16


async def test_sixteen_concurrent_episodes_in_bounded_memory_all_reclaimed(needs_cgroup) -> None:
    marker = f"execgym-concurrent-{uuid.uuid4().hex}"
    leave_behind = call("run_command", command=f"(exec -a {marker} sleep 300) >/dev/null 2>&1 &")
    lines = []
    for index in range(CONCURRENT):
        task_id = TASK_IDS[index % len(TASK_IDS)]
        task = example(task_id)
        actions = [leave_behind, *solution(task_id, run_tests=False)]
        if index % 8 == 7:  # these run out of time in a long command: truncated, reclaimed
            task = task.model_copy(update={"time_budget_s": 2.0})
            actions = [leave_behind, call("run_command", command="sleep 60", timeout_s=60)]
        lines.append(EpisodeLine(index + 1, task, actions))
    async with MemorySampler(interval_s=0.05) as sampler:
        records = [r async for r in play_episodes(lines, concurrency=CONCURRENT)]
    assert len(records) == CONCURRENT
    by_line = {r["line"]: r for r in records}
    for line in lines:
        record = by_line[line.line_number]
        assert record["error"] is None, record
        if line.task is not None and line.task.time_budget_s == 2.0:
            assert record["truncated"], record
            assert record["reward"] == 0.0
        else:
            assert record["reward"] == 1.0, record
    peaks = sampler.peaks
    print(f"{CONCURRENT} episodes: {peaks}")
    assert peaks.sandboxes >= CONCURRENT // 2  # they really overlapped
    # Measured here: ~3 MiB per idle session (bwrap + agent + repo), ~40 MiB per pytest.
    assert peaks.sandbox_bytes < CONCURRENT * 48 * MiB, peaks
    assert peaks.host_rss_bytes - sampler.baseline_rss_bytes < 200 * MiB, peaks
    assert processes_with(marker) == []
    assert run_cgroups() == []
    assert sandbox_memory_bytes() == (0, 0)


async def test_an_abandoned_episode_is_reclaimed_after_its_idle_timeout() -> None:
    marker = f"execgym-abandoned-{uuid.uuid4().hex}"
    async with AsyncEnv(example(TASK_IDS[0]), idle_timeout_s=0.5) as env:
        await env.reset()
        await env.step(call("run_command", command=f"(exec -a {marker} sleep 300) >/dev/null &"))
        assert processes_with(marker)
        await asyncio.sleep(1.5)
        assert processes_with(marker) == []
        assert run_cgroups() == []
        observation, reward, terminated, truncated, info = await env.step(call("list_dir"))
        assert not terminated
        assert not observation["ok"]
        assert "idle" in observation["output"]
        assert truncated
        assert reward is None  # not the model's doing: masked, never 0
        assert info["masked"]

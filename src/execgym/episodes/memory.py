"""How much memory episodes take: this process's RSS plus every sandbox's cgroup.

Each session (and each grading run) has its own memory cgroup, named
``execgym-<pid>-<n>``, which counts everything in it: bwrap, the session's agent,
the agent's commands and the files of its tmpfs. :class:`MemorySampler` polls them
with this process's resident set size while episodes run, and keeps the peaks: the
figure behind "N concurrent episodes in M MiB" (``benchmarks/episodes.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from execgym.sandbox import detect_cgroups

_USAGE_FILES = {1: ("memory", "memory.usage_in_bytes"), 2: ("unified", "memory.current")}


def host_rss_bytes() -> int:
    """Resident set size of this process, in bytes (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def sandbox_memory_bytes() -> tuple[int, int] | None:
    """``(bytes, count)``: memory in use by this process's live sandbox cgroups.

    Returns ``None`` when the host has no memory cgroup to read.
    """
    host = detect_cgroups()
    if host.version not in _USAGE_FILES:
        return None
    controller, usage_file = _USAGE_FILES[host.version]
    parent = host.parents.get(controller)
    if parent is None:
        return None
    total = count = 0
    for group in parent.glob(f"execgym-{os.getpid()}-*"):
        with contextlib.suppress(OSError, ValueError):
            total += int((group / usage_file).read_text())
            count += 1
    return total, count


@dataclass(slots=True)
class MemoryPeaks:
    """The peaks a :class:`MemorySampler` saw (bytes; ``sandboxes`` is a count)."""

    host_rss_bytes: int = 0
    sandbox_bytes: int = 0
    total_bytes: int = 0
    sandboxes: int = 0
    samples: int = 0


class MemorySampler:
    """Poll host RSS and sandbox memory every ``interval_s`` while the block runs.

    >>> async with MemorySampler() as sampler:                   # doctest: +SKIP
    ...     await play_many_episodes()
    >>> sampler.peaks.total_bytes
    """

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peaks = MemoryPeaks()
        self.baseline_rss_bytes = host_rss_bytes()
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        """Take one sample now."""
        rss = host_rss_bytes()
        sandboxes = sandbox_memory_bytes() or (0, 0)
        peaks = self.peaks
        peaks.host_rss_bytes = max(peaks.host_rss_bytes, rss)
        peaks.sandbox_bytes = max(peaks.sandbox_bytes, sandboxes[0])
        peaks.total_bytes = max(peaks.total_bytes, rss + sandboxes[0])
        peaks.sandboxes = max(peaks.sandboxes, sandboxes[1])
        peaks.samples += 1

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)

    async def __aenter__(self) -> MemorySampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()

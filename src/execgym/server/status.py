"""The service's live state: ``GET /v1/status`` (JSON) and the ``/status`` page's data.

:class:`StatusBoard` keeps what the page shows that Prometheus counters do not give
directly: the throughput over the last minute (finish times of recent rollouts), the
verdict mix since start, and the heartbeat of this process's own scoring loop (the
embedded worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any

from execgym.ops.breakers import Breakers
from execgym.ops.metrics import Metrics
from execgym.scoring import ScoredRollout
from execgym.server.capacity import Capacity

THROUGHPUT_WINDOW_S = 60.0
"""Seconds over which ``throughput_per_s`` is averaged."""

HEARTBEAT_S = 5.0
"""Seconds between the embedded worker's heartbeats; three missed ones mark it unhealthy."""


def status_page() -> str:
    """The HTML of ``/status``: one self-contained file, no external assets."""
    return (resources.files("execgym.server") / "status.html").read_text(encoding="utf-8")


class StatusBoard:
    """Throughput, verdict mix and worker heartbeats of one service, and more.

    Besides rollouts: programs run through ``/run_code`` and ``/v1/run``, and agent
    episodes (``/v1/episodes``, OpenEnv's ``/reset``, ``/step`` and ``/ws``).

    Args:
        metrics: Read for active sandboxes and queue depth.
        capacity: In-flight items.
        breakers: The circuit breakers (``None`` when turned off).
        worker: This process's worker name (for its heartbeat).
        clock: Monotonic seconds; wall: Unix seconds (both injectable for tests).

    Attributes:
        episodes: The episode registry whose counters the snapshot reports (anything
            with ``live``, ``opened``, ``steps_taken``, ``finished``, ``reclaimed``,
            ``final_reward_sum`` and ``final_rewards``); ``None`` until the app sets it.
        shared: Breakers held by a broker's workers instead of ``breakers`` (anything
            with async ``breaker_views()`` and ``reset_breaker(type)``: the
            :class:`~execgym.server.jobs.BrokerJobRunner` of ``serve --broker``);
            ``None``: this process's.
    """

    def __init__(
        self,
        metrics: Metrics,
        capacity: Capacity,
        breakers: Breakers | None,
        *,
        worker: str,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.metrics = metrics
        self.capacity = capacity
        self.breakers = breakers
        self.worker = worker
        self._clock = clock
        self._wall = wall
        self._started = clock()
        self._recent: deque[float] = deque()
        self.verdicts: Counter[str] = Counter()
        self.heartbeats: dict[str, float] = {}
        self._recent_programs: deque[float] = deque()
        self.programs: Counter[str] = Counter()  # outcome (the run's status) -> programs
        self.program_languages: Counter[str] = Counter()
        self.episodes: Any = None
        self.shared: Any = None

    def record(self, result: ScoredRollout) -> None:
        """Count one finished rollout."""
        now = self._clock()
        self._recent.append(now)
        self.verdicts[result.verdict.value] += 1
        self._prune(now)

    def record_program(self, language: str, outcome: str) -> None:
        """Count one program run through ``/run_code`` or ``/v1/run``."""
        now = self._clock()
        self._recent_programs.append(now)
        self.programs[outcome] += 1
        self.program_languages[language] += 1
        self._prune(now)

    def _prune(self, now: float) -> None:
        horizon = now - THROUGHPUT_WINDOW_S
        for recent in (self._recent, self._recent_programs):
            while recent and recent[0] < horizon:
                recent.popleft()

    def _episodes(self) -> dict[str, object] | None:
        registry = self.episodes
        if registry is None:
            return None
        rewarded = registry.final_rewards
        return {
            "live": registry.live,
            "opened": registry.opened,
            "steps": registry.steps_taken,
            "finished": sum(registry.finished.values()),
            "terminated": registry.finished["terminated"],
            "truncated": registry.finished["truncated"],
            "reclaimed": registry.reclaimed,
            "mean_final_reward": round(registry.final_reward_sum / rewarded, 4)
            if rewarded
            else None,
        }

    def beat(self, worker: str | None = None) -> None:
        """Record a heartbeat of ``worker`` (default: this process's)."""
        name = worker or self.worker
        at = self._wall()
        self.heartbeats[name] = at
        self.metrics.worker_heartbeat.labels(name).set(at)

    @contextlib.asynccontextmanager
    async def heartbeating(self) -> AsyncIterator[None]:
        """Beat every :data:`HEARTBEAT_S` while the body runs (the app's lifespan)."""

        async def loop() -> None:
            while True:
                self.beat()
                await asyncio.sleep(HEARTBEAT_S)

        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def status(self) -> dict[str, object]:
        """:meth:`snapshot`, with the breakers the broker's workers share when it has them.

        Raises:
            BrokerError: the broker holding them cannot be reached.
        """
        snapshot = self.snapshot()
        if self.shared is not None:
            views = await self.shared.breaker_views()
            if views is not None:
                breakers = sorted(views, key=lambda view: str(view["task_type"]))
                snapshot["breakers"] = breakers
                snapshot["open_breakers"] = sum(1 for b in breakers if b["state"] != "closed")
                snapshot["breakers_enabled"] = True
                snapshot["breakers_shared"] = True
        return snapshot

    def snapshot(self) -> dict[str, object]:
        """Everything ``/v1/status`` answers, as JSON-ready data."""
        now = self._clock()
        self._prune(now)
        uptime_s = now - self._started
        window = min(THROUGHPUT_WINDOW_S, uptime_s) or 1.0
        wall = self._wall()
        workers = {
            name: {
                "last_heartbeat_s_ago": round(wall - at, 3),
                "healthy": wall - at < 3 * HEARTBEAT_S,
            }
            for name, at in sorted(self.heartbeats.items())
        }
        views = self.breakers.views() if self.breakers is not None else {}
        breakers = [view.to_json() for _, view in sorted(views.items())]
        return {
            "uptime_s": round(uptime_s, 3),
            "throughput_per_s": round(len(self._recent) / window, 3),
            "completed": sum(self.verdicts.values()),
            "verdicts": dict(sorted(self.verdicts.items())),
            "sandboxes_active": self.metrics.active_runs,
            "in_flight": self.capacity.in_flight,
            "in_flight_limit": self.capacity.limit,
            "breakers": breakers,
            "open_breakers": sum(1 for b in breakers if b["state"] != "closed"),
            "breakers_enabled": self.breakers is not None,
            "workers": workers,
            "programs": {
                "completed": sum(self.programs.values()),
                "throughput_per_s": round(len(self._recent_programs) / window, 3),
                "outcomes": dict(sorted(self.programs.items())),
                "languages": dict(sorted(self.program_languages.items())),
            },
            "episodes": self._episodes(),
        }

"""Bounded work: how many items the service holds at once, and how many sandboxes run.

:class:`Capacity` counts accepted but unfinished items (rollouts of jobs, programs of
``/run_code`` and ``/v1/run``); a request that would pass the limit is refused with
:class:`~execgym.errors.CapacityExceeded` and a retry delay estimated from recent run
times. :class:`BoundedSandbox` lets at most ``workers`` sandbox runs happen at once,
whoever asks for them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from execgym.errors import CapacityExceeded
from execgym.sandbox.base import RunResult, Sandbox, SandboxWrapper

MAX_RETRY_AFTER_S = 60
"""The longest ``Retry-After`` the service advises."""


class Capacity:
    """Counts in-flight items against a limit.

    Args:
        limit: Most items in flight at once.
        workers: Sandboxes at once (for the retry estimate).
        clock: Seconds, monotonic; injectable for tests.
    """

    def __init__(
        self, limit: int, workers: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.workers = workers
        self.in_flight = 0
        self._clock = clock
        self._mean_item_s = 1.0

    def reserve(self, count: int) -> None:
        """Take ``count`` slots.

        Raises:
            CapacityExceeded: if that would pass the limit, with a retry delay.
        """
        if self.in_flight + count > self.limit:
            excess = self.in_flight + count - self.limit
            wait_s = math.ceil(excess * self._mean_item_s / max(1, self.workers))
            retry = min(MAX_RETRY_AFTER_S, max(1, wait_s))
            raise CapacityExceeded(
                f"the service is at capacity ({self.in_flight} of {self.limit} items in "
                f"flight, {count} more asked for); retry in {retry} s",
                retry,
            )
        self.in_flight += count

    def release(self, count: int = 1, *, item_s: float | None = None) -> None:
        """Give back ``count`` slots; ``item_s`` (how long one took) feeds the estimate."""
        self.in_flight = max(0, self.in_flight - count)
        if item_s is not None:
            self._mean_item_s = 0.9 * self._mean_item_s + 0.1 * item_s

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body of the ``async with``.

        Raises:
            CapacityExceeded: if no slot is free.
        """
        self.reserve(1)
        started = self._clock()
        try:
            yield
        finally:
            self.release(1, item_s=self._clock() - started)


class BoundedSandbox(SandboxWrapper):
    """A sandbox that runs at most ``workers`` programs at once; the rest wait.

    Args:
        inner: The sandbox that runs them.
        workers: Runs at once.
    """

    def __init__(self, inner: Sandbox, workers: int) -> None:
        super().__init__(inner)
        self._gate = asyncio.Semaphore(workers)

    async def around(self, run: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """The run, once a worker is free."""
        async with self._gate:
            return await run()

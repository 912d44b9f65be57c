"""A sandbox whose new runs can be held back while one thing runs alone.

``execgym score`` runs its self-test beside the batch's first rollouts (issue 23: the
first rollout no longer waits for it). A verdict that must not depend on what other
runs do (the self-test that decides whether a batch runs at all) is taken again alone
when it failed beside them: :meth:`PausableSandbox.alone`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from execgym.sandbox.base import RunResult, Sandbox, SandboxWrapper


class _Gate:
    """What every copy of a :class:`PausableSandbox` shares: runs in flight, the pause."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.started = 0
        self.holds = 0
        self.open = asyncio.Event()
        self.open.set()
        self.idle = asyncio.Event()
        self.idle.set()


class PausableSandbox(SandboxWrapper):
    """A batch's sandbox whose new runs can be held back while something runs alone.

    Every run goes to ``inner`` (:class:`~execgym.sandbox.base.SandboxWrapper`);
    this counts the runs in flight and started, and :meth:`alone` holds new runs
    until the runs in flight have ended and its block is done. Copies (a task's
    environment, :func:`execgym.environments.routing.with_environment`) share the
    count and the pause.

    Args:
        inner: The sandbox that runs the programs.
    """

    def __init__(self, inner: Sandbox) -> None:
        super().__init__(inner)
        self._gate = _Gate()

    @property
    def in_flight(self) -> int:
        """Runs started through this sandbox and not yet ended."""
        return self._gate.in_flight

    @property
    def started(self) -> int:
        """Runs started through this sandbox so far."""
        return self._gate.started

    async def around(self, run: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """Wait while the sandbox is held (:meth:`alone`), then do the run, counted."""
        gate = self._gate
        while not gate.open.is_set():
            await gate.open.wait()
        gate.in_flight += 1
        gate.started += 1
        gate.idle.clear()
        try:
            return await run()
        finally:
            gate.in_flight -= 1
            if not gate.in_flight:
                gate.idle.set()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Hold new runs, wait for those in flight to end, and run the block alone.

        The wait is bounded by the runs' own time limits (each run is killed at its
        wall time). New runs start again when the block exits, however it exits.
        """
        gate = self._gate
        gate.holds += 1
        gate.open.clear()
        try:
            await gate.idle.wait()
            yield
        finally:
            gate.holds -= 1
            if not gate.holds:
                gate.open.set()

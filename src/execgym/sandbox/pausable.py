"""A sandbox whose new runs can be held back while one thing runs alone.

``execgym score`` runs its self-test beside the batch's first rollouts (issue 23: the
first rollout no longer waits for it). A verdict that must not depend on what other
runs do (the self-test that decides whether a batch runs at all) is taken again alone
when it failed beside them: :meth:`PausableSandbox.alone`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

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
        self.alone = asyncio.Lock()  # one block alone at a time


_HOLDER: contextvars.ContextVar[_Gate | None] = contextvars.ContextVar(
    "execgym_pausable_holder", default=None
)
"""The gate whose :meth:`PausableSandbox.alone` block this code runs in: its runs pass."""

_OWN: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "execgym_pausable_own", default=None
)
"""Counts the runs started inside a :meth:`PausableSandbox.watch` block."""


class Overlap:
    """Whether a run of others overlapped a :meth:`PausableSandbox.watch` block.

    Attributes:
        overlapped: ``True`` once a run not started inside the block was in flight at
            its start, started during it or was still in flight at its end (set when
            the block exits).
    """

    def __init__(self) -> None:
        self.overlapped = False


class PausableSandbox(SandboxWrapper):
    """A batch's sandbox whose new runs can be held back while something runs alone.

    Every run goes to ``inner`` (:class:`~execgym.sandbox.base.SandboxWrapper`);
    this counts the runs in flight and started, :meth:`watch` tells whether other
    runs overlapped a block, and :meth:`alone` holds new runs until the runs in
    flight have ended and its block is done. Copies (a task's environment,
    :func:`execgym.environments.routing.with_environment`) share the count and the
    pause.

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
        """Wait while the sandbox is held (:meth:`alone`), then do the run, counted.

        A run of the block that holds it (made in its context) is not held.
        """
        gate = self._gate
        if _HOLDER.get() is not gate:
            while not gate.open.is_set():
                await gate.open.wait()
        own = _OWN.get()
        if own is not None:
            own[0] += 1
        gate.in_flight += 1
        gate.started += 1
        gate.idle.clear()
        try:
            return await run()
        finally:
            gate.in_flight -= 1
            if not gate.in_flight:
                gate.idle.set()

    @contextlib.contextmanager
    def watch(self) -> Iterator[Overlap]:
        """Tell whether runs other than the block's own overlapped it.

        The block's own runs are those it starts through this sandbox (or a copy), in
        its context (its tasks included). Yields an :class:`Overlap`, decided when the
        block exits, however it exits.
        """
        gate = self._gate
        seen = Overlap()
        before_flight, before_started = gate.in_flight, gate.started
        own = [0]
        token = _OWN.set(own)
        try:
            yield seen
        finally:
            _OWN.reset(token)
            others = gate.started - before_started - own[0]
            seen.overlapped = before_flight > 0 or others > 0 or gate.in_flight > 0

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Hold new runs, wait for those in flight to end, and run the block alone.

        The block's own runs (made in its context) go through; one block runs alone
        at a time. The wait is bounded by the runs' own time limits (each run is killed
        at its wall time). New runs start again when the block exits, however it exits.
        """
        gate = self._gate
        gate.holds += 1
        gate.open.clear()
        try:
            async with gate.alone:
                await gate.idle.wait()
                token = _HOLDER.set(gate)
                try:
                    yield
                finally:
                    _HOLDER.reset(token)
        finally:
            gate.holds -= 1
            if not gate.holds:
                gate.open.set()

"""The one bridge from synchronous code to execgym's coroutines: a loop in a thread.

Trainers call reward functions synchronously, sometimes from threads, sometimes from
inside their own event loop (where ``asyncio.run`` is refused); a notebook or a plain
training loop drives an episode with blocking calls. Both run their coroutines on a
:class:`BackgroundLoop`: one event loop in a daemon thread, kept for as long as the
objects on it (a reward client's warm pool, an episode's sandbox session) live, since
those belong to the loop that made them.

Used by :mod:`execgym.integrations` (the shared reward client, the TRL episode
environment) and :class:`execgym.episodes.Env`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """An event loop running in a daemon thread, started at construction.

    Args:
        name: The thread's name (shown by ``py-spy`` and in thread dumps).
    """

    def __init__(self, name: str = "execgym-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The background loop (objects made by the coroutines live on it)."""
        return self._loop

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and block until its result (or exception).

        Raises:
            RuntimeError: if the loop is closed (the coroutine is closed unstarted).
        """
        if self._closed:
            coroutine.close()
            raise RuntimeError("the background loop is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and await it from another running loop.

        Raises:
            RuntimeError: if the loop is closed.
        """
        if self._closed:
            coroutine.close()
            raise RuntimeError("the background loop is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def close(self) -> None:
        """Stop the loop, join its thread and close it; idempotent.

        Close what lives on the loop first (with :meth:`run`): its tasks are not awaited.
        """
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

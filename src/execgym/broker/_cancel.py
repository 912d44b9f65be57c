"""Stopping helper tasks that may miss a cancellation.

On Python 3.11, ``asyncio.wait_for`` drops a cancellation that arrives in the step
where the operation it waits for completes: it returns the operation's result instead
of raising ``CancelledError`` (CPython gh-86296, fixed in 3.12, whose ``wait_for`` is
built on ``asyncio.timeout``). redis-py sends every command through ``wait_for``
(``redis/asyncio/connection.py``, ``Connection.send_packed_command``, redis 8.1.0), so a
helper task that loops over Redis calls (the batch client's audit, a worker's
heartbeat) can miss the one ``cancel()`` it gets and loop on, and whoever then awaits it
waits forever: ``score_jobs`` after its last result, a worker after SIGTERM.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

AGAIN_S = 0.1
"""Seconds between two cancellations of a task that is still running."""


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], again_s: float = AGAIN_S) -> None:
    """Cancel ``tasks`` and return once every one has finished.

    A task still running ``again_s`` seconds after a cancellation is cancelled again,
    until it ends: one missed cancellation (see the module's docstring) delays the
    return by ``again_s``, never forever. The tasks' results and exceptions are marked
    retrieved and dropped (call ``exception()`` on a task afterwards to see its own).
    If the caller itself is cancelled meanwhile, that ``CancelledError`` propagates
    (the tasks stay cancelled).

    Args:
        tasks: Tasks or futures, done or not; a done one is left as it is.
        again_s: Seconds between cancellations of a task that is still running (> 0).
    """
    every = list(tasks)
    running = {task for task in every if not task.done()}
    while running:
        for task in running:
            task.cancel()
        _, running = await asyncio.wait(running, timeout=again_s)
    for task in every:
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit

"""Staged inits: a run's PID 1 forked, in its own cgroup, before the run arrives.

Joining a cgroup is slow on cgroup v1 (each ``mkdir`` blocks for 0.2 ms or more), so
the warm pool keeps a few inits ready, each already in a new cgroup of its own; a run
takes one, and the cgroup gets the run's limits. Staging is best effort: where it
fails the run makes its own cgroup, which costs speed, never correctness.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox._cgroup import RunCgroup
from execgym.sandbox.pool._control import CGROUP_MOUNT, ZygoteControl

log = logging.getLogger(__name__)


def procs_in_zygote(cgroup: RunCgroup | None) -> list[str]:
    """The ``cgroup.procs`` paths of ``cgroup`` as the zygote sees them."""
    dirs = cgroup.dirs.items() if cgroup else []
    return [f"{CGROUP_MOUNT}/{key}/{path.name}/cgroup.procs" for key, path in dirs]


def _new_cgroups(count: int) -> list[RunCgroup]:
    """Up to ``count`` new cgroups for staged inits (fewer where they cannot be made)."""
    made = []
    for _ in range(count):
        try:
            cgroup = RunCgroup.create(DEFAULT_LIMITS, prefix="execgym-staged")
        except OSError as error:
            log.debug("warm pool: could not stage a run: %s", error)
            break
        if cgroup is None:
            break
        made.append(cgroup)
    return made


class Stager:
    """Keeps up to ``target`` inits staged in the running zygote.

    Args:
        zygote: The zygote the inits are staged in.
        next_slot: Hands out slot numbers (shared with run ids: one counter).

    Attributes:
        staged: ``(slot, cgroup)`` of each staged init, oldest first.
        target: How many to keep staged (``0`` stages none).
        making: The cgroups being made for the next inits, while they are.
    """

    def __init__(self, zygote: ZygoteControl, next_slot: Callable[[], int]) -> None:
        self._zygote = zygote
        self._next_slot = next_slot
        self.staged: collections.deque[tuple[int, RunCgroup]] = collections.deque()
        self.target = max(2, os.cpu_count() or 1)
        self.making: asyncio.Future[list[RunCgroup]] | None = None
        self._maker: ThreadPoolExecutor | None = None  # makes them, off the event loop

    def take(self, limits: Limits) -> tuple[int | None, RunCgroup | None]:
        """A staged init and its cgroup, given the run's limits; else a new cgroup.

        Raises:
            OSError: if a new cgroup cannot be made.
        """
        if self.staged:
            slot, cgroup = self.staged.popleft()
            cgroup.apply(limits)
            return slot, cgroup
        return None, RunCgroup.create(limits)

    def replenish(self) -> None:
        """Stage inits (each in its own new cgroup) up to the target; best effort.

        Staging only pays where joining a cgroup is slow, so it needs cgroups. The
        cgroups are made on a thread of the pool's own: the event loop, and so every
        other run on it, would otherwise wait for each ``mkdir``.
        """
        if self._zygote.control is None or self.making is not None:
            return
        wanted = self.target - len(self.staged)
        if wanted <= 0:
            return
        if self._maker is None:
            self._maker = ThreadPoolExecutor(1, thread_name_prefix="execgym-pool-staging")
        control = self._zygote.control
        making = asyncio.get_running_loop().run_in_executor(self._maker, _new_cgroups, wanted)
        making.add_done_callback(lambda done: self._stage(done, control))
        self.making = making

    def _stage(self, done: asyncio.Future[list[RunCgroup]], control: socket.socket) -> None:
        """Have the zygote stage an init in each cgroup made (on the event loop)."""
        self.making = None
        cgroups = [] if done.cancelled() or done.exception() else done.result()
        for cgroup in cgroups:
            if self._zygote.control is not control:  # closed, or restarted, meanwhile
                cgroup.remove_soon()
                continue
            slot = self._next_slot()
            try:
                control.send(
                    json.dumps({"stage": slot, "cgroup_procs": procs_in_zygote(cgroup)}).encode()
                )
            except OSError:
                cgroup.remove_soon()
                continue
            self.staged.append((slot, cgroup))
        if cgroups and self._zygote.control is control:
            self.replenish()  # runs may have taken slots while these were made

    def drop(self) -> None:
        """Remove the cgroups of the staged inits (their zygote, and they, are gone)."""
        while self.staged:
            _, cgroup = self.staged.popleft()
            cgroup.remove()

    async def aclose(self) -> None:
        """Wait for cgroups being made (removed once made) and stop the maker thread."""
        if self.making is not None:  # its cgroups are removed once made (see _stage)
            with contextlib.suppress(Exception):
                await self.making
        if self._maker is not None:
            self._maker.shutdown(wait=False)
            self._maker = None

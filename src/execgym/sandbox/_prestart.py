r"""Prestarted bwrap sandboxes: fresh sandboxes set up before their run is known.

Setting a bwrap sandbox up (namespaces, mounts, the seccomp filter, moving it into a
cgroup, which sleeps for ~11 ms on cgroup v1 here) takes longer than starting Python.
A :class:`Prestarter` does that ahead: it keeps a few complete sandboxes, each in its
own fresh cgroup, whose command is :mod:`execgym.guest.trampoline`, waiting for a
job. A run takes one, gives its cgroup the run's limits, sends the job (argv,
environment, files, stdin, rlimits) and the trampoline ``execve``\ s the program. Each
prestarted sandbox serves exactly one run and is then gone, so isolation is that of a
fresh sandbox: no run ever sees another's processes, files or memory.

Only used where a cgroup measures the run's CPU time (the clock is restarted when the
job arrives, see :meth:`RunCgroup.reset_clock`); elsewhere runs start cold.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import marshal
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from execgym import guest
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox._cgroup import RunCgroup, detect_cgroups
from execgym.sandbox._process import (
    Launched,
    ProcessSpec,
    launch,
    memfd_with,
    supervise,
)
from execgym.sandbox._results import interpret, with_init_count
from execgym.sandbox._run import BASE_ENV, enforcement_of
from execgym.sandbox._seccomp import seccomp_program
from execgym.sandbox._supervise import resolve
from execgym.sandbox._uids import UidBlock
from execgym.sandbox.base import RunResult

log = logging.getLogger(__name__)

TRAMPOLINE_FD, STARTED_FD = 7, 8
"""The descriptors the trampoline reads its job from and says it started on, inside."""


_PIPE_BYTES = 1024 * 1024

Key = tuple[int, str]
"""What a sandbox is set up for before its job: ``(disk_bytes, network)``."""


def trampoline_source() -> str:
    """The source of :mod:`execgym.guest.trampoline`, run with ``python -c``."""
    return guest.source("trampoline")


def prestart_possible() -> bool:
    """Whether this host has cgroups that measure a run's CPU time (needed, see above)."""
    host = detect_cgroups()
    return host.version == 2 or (host.version == 1 and "cpuacct" in host.parents)


@dataclass(slots=True)
class Ready:
    """One prestarted sandbox: its tree, its cgroup and the pipe its job goes down."""

    launched: Launched
    cgroup: RunCgroup
    request_fd: int
    started_fd: int
    key: Key
    capacity: int
    reaped: bool = False
    count_fd: int = -1  # where its init writes what it counted (see bwrap.INIT_SCRIPT)
    uid: int | None = None  # the host uid its program runs as, taken from ``block``
    block: UidBlock | None = None

    def give_uid(self) -> None:
        """Return the run's uid to its block (once: its processes are all gone)."""
        if self.block is not None and self.uid is not None:
            self.block.give(self.uid)
        self.uid = None


@dataclass(frozen=True, slots=True)
class Job:
    """What a run needs besides its sandbox (see :mod:`execgym.guest.trampoline`)."""

    argv: Sequence[str]
    env: Mapping[str, str]
    dirs: Sequence[str]
    files: Sequence[tuple[str, bytes]]
    stdin: bytes
    want_report: bool


class Prestarter:
    """Keeps up to ``depth`` prestarted sandboxes per :data:`Key`, refilled in the background.

    Args:
        build_argv: ``build_argv(limits, command, uid)``: the full bwrap argv that sets
            up a sandbox for ``limits`` (its disk size and network) and runs ``command``
            as host ``uid`` (``None``: the default, see :mod:`execgym.sandbox._uids`),
            holding it with ``--info-fd 5 --block-fd 6`` and reading its seccomp
            filter from fd 9.
        interpreter: The argv prefix of the interpreter that runs the trampoline.
        depth: Sandboxes kept ready per key.
        enforcement: How the backend enforces what rlimits and cgroups do not.
        init_fds: ``init_fds()``: fresh descriptors ``{fd in the sandbox: memfd}`` the
            argv's init needs (its binary, and at ``count_fd`` where it writes what it
            counted: see ``bwrap.INIT_SCRIPT``); ``None`` for bwrap's own init.
        count_fd: See ``init_fds``.
        uids: Where each sandbox's host uid comes from (as root); ``None``: the default.

    Use it from one event loop; call :meth:`aclose` to reclaim what it holds.
    """

    def __init__(
        self,
        build_argv: Callable[[Limits, list[str], int | None], list[str]],
        interpreter: Sequence[str],
        depth: int,
        enforcement: Callable[[Limits], dict[str, str]],
        init_fds: Callable[[], dict[int, int]] | None = None,
        count_fd: int = -1,
        uids: UidBlock | None = None,
    ) -> None:
        self._build = build_argv
        self._uids = uids
        self._init_fds = init_fds
        self._count_fd = count_fd
        self._command = [
            *interpreter,
            "-c",
            trampoline_source(),
            str(TRAMPOLINE_FD),
            str(STARTED_FD),
        ]
        self._depth = depth
        self._enforcement = enforcement
        self._ready: dict[Key, collections.deque[Ready]] = {}
        self._fillers: dict[Key, asyncio.Task[None]] = {}
        self._closed = False

    @staticmethod
    def key(limits: Limits) -> Key:
        """The set-up a run with ``limits`` needs."""
        return (limits.disk_bytes, limits.network)

    def has_ready(self, limits: Limits) -> bool:
        """Whether a prestarted sandbox for ``limits`` is waiting."""
        return bool(self._ready.get(self.key(limits)))

    def take(self, limits: Limits) -> Ready | None:
        """A live prestarted sandbox for ``limits``, or ``None``.

        Refills in the background: at once if there was none (this run starts cold),
        else when the run that takes it has ended (see :meth:`run`), so setting the
        next sandbox up never competes with the run for the CPU.
        """
        if self._closed:
            return None
        key = self.key(limits)
        queue = self._ready.setdefault(key, collections.deque())
        found = None
        while queue and found is None:
            ready = queue.popleft()
            if self._alive(ready):
                found = ready
            else:
                self.discard(ready)
        if found is None:
            self._refill(limits)
        return found

    def _refill(self, limits: Limits) -> None:
        key = self.key(limits)
        filler = self._fillers.get(key)
        if not self._closed and (filler is None or filler.done()):
            self._fillers[key] = asyncio.get_running_loop().create_task(self._fill(limits))

    async def fill(self, limits: Limits) -> None:
        """Prestart sandboxes for ``limits`` until ``depth`` are ready (or one fails)."""
        key = self.key(limits)
        filler = self._fillers.get(key)
        if filler is not None and not filler.done():
            await filler
        await self._fill(limits)
        queue = self._ready.get(key, collections.deque())
        for ready in list(queue):
            if not await self.started(ready):
                queue.remove(ready)
                self.discard(ready)

    async def _fill(self, limits: Limits) -> None:
        queue = self._ready.setdefault(self.key(limits), collections.deque())
        while not self._closed and len(queue) < self._depth:
            ready = await self._start(limits)
            if ready is None:
                return
            if self._closed:
                self.discard(ready)
                return
            queue.append(ready)

    async def _start(self, limits: Limits) -> Ready | None:
        """Start one sandbox for ``limits``' key; ``None`` (logged) if it cannot start."""
        setup = Limits(disk_bytes=limits.disk_bytes, network=limits.network)
        try:
            cgroup = RunCgroup.create(DEFAULT_LIMITS, prefix="execgym-ready")
        except OSError as error:
            log.warning("cannot prestart a sandbox: cgroup: %s", error)
            return None
        if cgroup is None:
            return None
        request_read, request_write = os.pipe()
        started_read, started_write = os.pipe()
        fds = [request_read, started_write]
        init = self._init_fds() if self._init_fds is not None else {}
        fds += [fd for number, fd in init.items() if number != self._count_fd]
        count_fd = init.get(self._count_fd, -1)
        uid = self._uids.take() if self._uids is not None else None
        try:
            with contextlib.suppress(OSError):
                fcntl.fcntl(request_write, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
            seccomp = memfd_with(seccomp_program(limits.network), "execgym-seccomp")
            fds.append(seccomp)
            spec = ProcessSpec(
                argv=self._build(setup, self._command, uid),
                env=dict(BASE_ENV),
                stdin=b"",
                wall_time_s=setup.wall_time_s,
                cpu_time_s=setup.cpu_time_s,
                max_output_bytes=setup.max_output_bytes,
                cgroup=cgroup,
                fd_map={
                    TRAMPOLINE_FD: request_read,
                    STARTED_FD: started_write,
                    9: seccomp,
                    **init,
                },
                want_report=True,
                hold_fds=(5, 6),
            )
            launched = await launch(spec)
        except BaseException as error:
            os.close(request_write)
            os.close(started_read)
            if count_fd >= 0:
                os.close(count_fd)
            cgroup.remove()
            if uid is not None and self._uids is not None:
                self._uids.give(uid)
            if not isinstance(error, Exception):
                raise
            log.warning("cannot prestart a sandbox: %s", error)
            return None
        finally:
            for fd in fds:
                os.close(fd)
        capacity = fcntl.fcntl(request_write, fcntl.F_GETPIPE_SZ)
        return Ready(
            launched,
            cgroup,
            request_write,
            started_read,
            self.key(limits),
            capacity,
            False,
            count_fd,
            uid,
            self._uids,
        )

    @staticmethod
    def _alive(ready: Ready) -> bool:
        try:
            pid, _ = os.waitpid(ready.launched.pid, os.WNOHANG)
        except ChildProcessError:
            pid = ready.launched.pid
        if pid != 0:
            ready.reaped = True
            return False
        return True

    @staticmethod
    def discard(ready: Ready) -> None:
        """Kill a prestarted sandbox that will not be used, and reclaim all of it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ready.launched.pid, signal.SIGKILL)
        ready.cgroup.remove()
        if not ready.reaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(ready.launched.pid, 0)
        for fd in (ready.request_fd, ready.started_fd, ready.launched.inner, ready.count_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        for fd in ready.launched.read_ends.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        ready.give_uid()

    async def run(self, ready: Ready, job: Job, limits: Limits) -> RunResult | None:
        """Run ``job`` in ``ready`` under ``limits``.

        Returns:
            The result, or ``None`` if the sandbox had died before it got the job (it
            is reclaimed; the caller starts the run cold instead).
        """
        cgroup = ready.cgroup
        if not await self.started(ready):
            log.warning("a prestarted sandbox ended before its job")
            self.discard(ready)
            self._refill(limits)
            return None
        try:
            cgroup.apply(limits)
            cgroup.reset_clock()
            rlimits, how = enforcement_of(limits, cgroup, backend=self._enforcement(limits))
            payload = marshal.dumps(
                {
                    "argv": list(job.argv),
                    "env": dict(job.env),
                    "dirs": list(job.dirs),
                    "files": list(job.files),
                    "stdin": job.stdin,
                    "report": job.want_report,
                    "rlimits": rlimits,
                }
            )
            started = time.monotonic()
            if len(payload) <= ready.capacity:  # fits in the pipe: never blocks
                _write_all(ready.request_fd, payload)
            else:
                await asyncio.to_thread(_write_all, ready.request_fd, payload)
        except OSError as error:
            log.warning("a prestarted sandbox could not take its job: %s", error)
            self.discard(ready)
            self._refill(limits)
            return None
        finally:
            with contextlib.suppress(OSError):
                os.close(ready.request_fd)
        read_ends = dict(ready.launched.read_ends)
        if not job.want_report:
            os.close(read_ends.pop("report"))
        spec = ProcessSpec(
            argv=job.argv,
            env=job.env,
            stdin=b"",
            wall_time_s=limits.wall_time_s,
            cpu_time_s=limits.cpu_time_s,
            max_output_bytes=limits.max_output_bytes,
            cgroup=cgroup,
        )
        try:
            launched = Launched(ready.launched.pid, read_ends, ready.launched.inner)
            outcome = await supervise(spec, launched, started=started)
            count = os.pread(ready.count_fd, 64, 0) if ready.count_fd >= 0 else b""
        finally:
            cgroup.remove_soon()  # its processes are all gone: PID 1 (the init) was reaped
            ready.give_uid()
            self._refill(limits)
            if ready.count_fd >= 0:
                os.close(ready.count_fd)
        result = interpret(
            outcome,
            isolation="bwrap",
            enforcement={**how, "start": "prestarted sandbox (set up before the run, used once)"},
            shifted_signals=True,
            memory_bytes=limits.memory_bytes,
        )
        # The trampoline's own writes: its start signal, the run's files and stdin.
        ours = 1 + sum(len(content) for _, content in job.files) + len(job.stdin)
        return with_init_count(result, count, not_the_runs=ours)

    @staticmethod
    async def started(ready: Ready) -> bool:
        """Wait until ``ready``'s trampoline has started; ``False`` if it died first."""
        if ready.started_fd < 0:
            return True
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(ready.started_fd, resolve, readable)
        try:
            await readable
            said = os.read(ready.started_fd, 1)
        finally:
            loop.remove_reader(ready.started_fd)
            os.close(ready.started_fd)
            ready.started_fd = -1
        return said == b"r"

    async def aclose(self) -> None:
        """Stop refilling and reclaim every prestarted sandbox."""
        self._closed = True
        for filler in self._fillers.values():
            filler.cancel()
        for filler in self._fillers.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await filler
        self._fillers.clear()
        for queue in self._ready.values():
            while queue:
                self.discard(queue.popleft())

    def close_now(self) -> None:
        """Reclaim every prestarted sandbox without an event loop (interpreter exit)."""
        self._closed = True
        for queue in self._ready.values():
            while queue:
                self.discard(queue.popleft())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

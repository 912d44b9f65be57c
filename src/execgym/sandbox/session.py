"""Persistent sessions: one bwrap sandbox kept alive across many calls.

Multi-turn agent episodes need a sandbox whose files (and background processes) survive
between commands. :func:`open_session` starts a bwrap sandbox with the same isolation
as a one-shot run (namespaces, read-only system view, an unprivileged uid, as root a
host uid of its own, seccomp, a private tmpfs ``/work`` of ``Limits.disk_bytes``)
whose program is a small agent (:mod:`execgym.guest.session_agent`). Memory and
process limits apply to the whole session through its cgroup; each command has its own
wall-clock, CPU and output limits.

A session is reclaimed, with every process in it, when it is closed, when it has been
idle for ``idle_timeout_s``, when it has lived ``max_lifetime_s``, when its agent dies,
and when execgym dies (bwrap's ``--die-with-parent``).

>>> async with open_session() as session:                       # doctest: +SKIP
...     await session.write_files({"a.py": b"print(2 + 2)"})
...     result = await session.run(["python3", "a.py"])
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import resource
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from execgym import guest
from execgym.environments.model import Environment
from execgym.environments.mounts import remap_argv, run_env
from execgym.errors import SandboxError, SandboxSetupFailed
from execgym.limits import DEFAULT_LIMITS, Limits, MiB
from execgym.sandbox._cgroup import RunCgroup
from execgym.sandbox._paths import archive_files
from execgym.sandbox._process import ProcessSpec, _make_preexec, memfd_with
from execgym.sandbox._python import python_command
from execgym.sandbox._results import interpret, sandbox_error
from execgym.sandbox._rlimits import rlimits_for
from execgym.sandbox._run import BASE_ENV
from execgym.sandbox._seccomp import seccomp_program
from execgym.sandbox._supervise import RunPipes, outcome_of, stop_guest, supervised
from execgym.sandbox._uids import UidBlock, process_block
from execgym.sandbox.base import RunResult
from execgym.sandbox.bwrap import WORK_DIR, BubblewrapSandbox

_CONTROL_FD = 8
_SECCOMP_FD = 9
_START_TIMEOUT_S = 10.0
_requests = itertools.count(1)


class SessionClosed(SandboxError):
    """The session is closed (by the caller, a timeout, or because its agent died)."""


class Session:
    """A live sandbox: write and read files, run commands, state kept between calls.

    Made by :func:`open_session`; use it as an async context manager.

    Attributes:
        closed_because: Why the session closed, or ``None`` while it is open.
    """

    name = "bwrap-session"

    def __init__(
        self,
        limits: Limits,
        idle_timeout_s: float,
        max_lifetime_s: float,
        environment: Environment | None = None,
    ) -> None:
        self.environment = (
            environment if environment is not None and not environment.is_host else None
        )
        self.limits = limits
        self.idle_timeout_s = idle_timeout_s
        self.max_lifetime_s = max_lifetime_s
        self.closed_because: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._cgroup: RunCgroup | None = None
        self._waiters: dict[int, asyncio.Queue[tuple[dict[str, Any], list[int]]]] = {}
        self._opened = time.monotonic()
        self._last_used = self._opened
        self._watchdog: asyncio.Task[None] | None = None
        self._uids: UidBlock | None = None  # as root, the session's own host uid
        self._uid: int | None = None

    async def _start(self) -> None:
        box = BubblewrapSandbox(environment=self.environment)
        if os.geteuid() == 0:  # a host uid no other run or session has (see _uids)
            self._uids = process_block()
            self._uid = self._uids.take() if self._uids is not None else None
        loop = asyncio.get_running_loop()
        host_end, agent_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._cgroup = RunCgroup.create(self.limits)
        rlimits, _ = rlimits_for(
            self.limits, cgroup_enforced=dict(self._cgroup.enforced) if self._cgroup else {}
        )
        # CPU time is limited per command by the agent; the session itself lives long.
        rlimits = [limit for limit in rlimits if limit[0] != resource.RLIMIT_CPU]
        agent = guest.source("session_agent")
        argv = box._argv(
            remap_argv(
                [*python_command("-c")[:-1], "-c", agent, str(_CONTROL_FD)], self.environment
            ),
            self.limits,
            ["--seccomp", str(_SECCOMP_FD)],
            uid=self._uid,
        )
        seccomp_fd = memfd_with(seccomp_program(self.limits.network), "execgym-seccomp")
        fd_map = {_CONTROL_FD: agent_end.fileno(), _SECCOMP_FD: seccomp_fd}
        spec = ProcessSpec(
            argv=argv,
            env={**run_env(self.environment, BASE_ENV), "HOME": WORK_DIR, "TMPDIR": "/tmp"},
            stdin=b"",
            wall_time_s=self.max_lifetime_s,
            cpu_time_s=self.max_lifetime_s,
            max_output_bytes=MiB,
            rlimits=rlimits,
            cgroup=self._cgroup,
            fd_map=fd_map,
        )
        try:
            # Returns once the agent has exec'd; it speaks over its own socket (as the pool).
            self._proc = subprocess.Popen(  # noqa: ASYNC220
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=dict(spec.env),
                pass_fds=tuple(fd_map),
                preexec_fn=_make_preexec(spec, fd_map),
                start_new_session=True,
            )
        except BaseException:
            self._give_uid()
            raise
        finally:
            agent_end.close()
            os.close(seccomp_fd)
        host_end.setblocking(False)
        self._control = host_end
        ready = self._expect(0)
        loop.add_reader(host_end.fileno(), self._on_message)
        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                await ready.get()
        except TimeoutError as error:
            errors = self._shutdown("the agent did not start")
            raise SandboxSetupFailed(f"the session did not start: {errors}") from error
        self._waiters.pop(0, None)
        self._watchdog = asyncio.create_task(self._watch_time())

    def _expect(self, request: int) -> asyncio.Queue[tuple[dict[str, Any], list[int]]]:
        queue: asyncio.Queue[tuple[dict[str, Any], list[int]]] = asyncio.Queue()
        self._waiters[request] = queue
        return queue

    def _on_message(self) -> None:
        if self._control is None:  # its reader is removed before the socket is closed
            return
        fds = array.array("i")
        try:
            message, ancillary, _, _ = self._control.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 4))
        except BlockingIOError:
            return
        except OSError:
            message, ancillary = b"", []
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
        if not message:
            self._shutdown("its agent died (a command may have killed it)")
            return
        body = json.loads(message)
        queue = self._waiters.get(body.get("id", 0) if "ready" not in body else 0)
        if queue is None:
            for fd in fds:
                os.close(fd)
            return
        queue.put_nowait((body, list(fds)))

    async def _watch_time(self) -> None:
        while self.closed_because is None:
            now = time.monotonic()
            idle_left = self._last_used + self.idle_timeout_s - now
            life_left = self._opened + self.max_lifetime_s - now
            if life_left <= 0:
                self._shutdown(f"it reached its maximum lifetime ({self.max_lifetime_s} s)")
                return
            if idle_left <= 0 and not self._busy():
                self._shutdown(f"it was idle for {self.idle_timeout_s} s")
                return
            await asyncio.sleep(max(0.05, min(idle_left, life_left, 1.0)))

    def _busy(self) -> bool:
        return any(request > 0 for request in self._waiters)

    def _shutdown(self, why: str) -> str:
        """Kill everything in the session and release it; returns the agent's stderr."""
        if self.closed_because is None:
            self.closed_because = why
        errors = ""
        if self._control is not None:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._control.fileno())
            self._control.close()
            self._control = None
        for queue in self._waiters.values():
            queue.put_nowait(({"closed": why}, []))
        if self._proc is not None:
            errors = stop_guest(self._proc, cgroup=self._cgroup)
            self._proc = None
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        self._give_uid()  # every process of the session is gone
        if self._watchdog is not None and self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        return errors

    def _give_uid(self) -> None:
        if self._uids is not None and self._uid is not None:
            self._uids.give(self._uid)
        self._uid = None

    def peak_memory_bytes(self) -> int | None:
        """Peak memory of the whole session so far (its cgroup), or ``None`` if unknown."""
        return self._cgroup.peak_memory_bytes() if self._cgroup is not None else None

    async def aclose(self) -> None:
        """Kill every process of the session and delete its files; idempotent."""
        self._shutdown("it was closed")
        if self._watchdog is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog

    async def _request(
        self, header: dict[str, Any], fds: Sequence[int] = ()
    ) -> tuple[int, asyncio.Queue[tuple[dict[str, Any], list[int]]]]:
        if self._control is None:
            raise SessionClosed(f"the session is closed: {self.closed_because}")
        self._last_used = time.monotonic()
        request = next(_requests)
        queue = self._expect(request)
        try:
            self._control.sendmsg(
                [json.dumps({**header, "id": request}).encode()],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [],
            )
        except OSError as error:
            self._waiters.pop(request, None)
            raise SessionClosed(f"the session is closed: {error}") from error
        return request, queue

    async def _answer(
        self, request: int, queue: asyncio.Queue[tuple[dict[str, Any], list[int]]]
    ) -> tuple[dict[str, Any], list[int]]:
        body, fds = await queue.get()
        self._last_used = time.monotonic()
        if "closed" in body:
            self._waiters.pop(request, None)
            raise SessionClosed(f"the session is closed: {body['closed']}")
        if "error" in body:
            self._waiters.pop(request, None)
            raise SandboxError(f"the session could not do it: {body['error']}")
        return body, fds

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        """Write files (relative names, bytes) into the session's ``/work``.

        Raises:
            TaskError: if a name would leave the work dir.
            SessionClosed: if the session is closed.
            SandboxError: if the agent could not write them (disk full, say).
        """
        archive = memfd_with(archive_files(files), "execgym-files")
        try:
            request, queue = await self._request({"op": "write"}, [archive])
        finally:
            os.close(archive)
        await self._answer(request, queue)
        self._waiters.pop(request, None)

    async def read_file(self, name: str, *, max_bytes: int = MiB) -> bytes:
        """Read a file of the session's ``/work`` (at most ``max_bytes`` bytes).

        Raises:
            SessionClosed: if the session is closed.
            SandboxError: if the file cannot be read (missing, a directory, outside).
        """
        request, queue = await self._request({"op": "read", "name": name, "max_bytes": max_bytes})
        _, fds = await self._answer(request, queue)
        self._waiters.pop(request, None)
        try:
            return os.pread(fds[0], max_bytes, 0)
        finally:
            for fd in fds:
                os.close(fd)

    async def list_dir(
        self, name: str = ".", *, max_entries: int = 500
    ) -> tuple[list[tuple[str, str, int]], bool]:
        """List a directory of the session's ``/work`` (symlinks are not followed).

        Returns:
            ``([(name, kind, size_bytes)...], truncated)``, sorted by name; ``kind`` is
            ``file``, ``dir``, ``link`` or ``other`` (size 0 but for files); ``truncated``
            when there were more than ``max_entries`` entries.

        Raises:
            SessionClosed: if the session is closed.
            SandboxError: if it is not a directory of ``/work``.
        """
        header = {"op": "list", "name": name, "max_entries": max_entries}
        request, queue = await self._request(header)
        body, fds = await self._answer(request, queue)
        self._waiters.pop(request, None)
        for fd in fds:
            os.close(fd)
        entries = [(str(n), str(kind), int(size)) for n, kind, size in body["entries"]]
        return entries, bool(body["truncated"])

    async def export_tree(self, *, skip: Sequence[str] = ()) -> bytes:
        """The whole of ``/work`` as an uncompressed tar archive (symlinks as symlinks).

        Args:
            skip: Directory or file names left out wherever they are (``__pycache__``).

        Raises:
            SessionClosed: if the session is closed.
            SandboxError: if the agent could not pack it.
        """
        request, queue = await self._request({"op": "export", "skip": list(skip)})
        _, fds = await self._answer(request, queue)
        self._waiters.pop(request, None)
        try:
            return os.pread(fds[0], os.fstat(fds[0]).st_size, 0)
        finally:
            for fd in fds:
                os.close(fd)

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Run a command in the session; files and processes it leaves stay.

        Args:
            argv: The command, run in ``/work`` (never through a shell unless you ask
                for one, e.g. ``["bash", "-c", "..."]``).
            stdin: Bytes for stdin; empty means ``/dev/null``.
            limits: Per-command ``wall_time_s``, ``cpu_time_s``, ``max_output_bytes``,
                ``max_file_bytes`` and ``max_open_files`` (the session's by default);
                memory, processes, disk and network are the session's.
            env: Extra environment variables.
            want_report: Collect fd 3, as :meth:`Sandbox.run` does.

        Returns:
            A :class:`RunResult`; ``SANDBOX_ERROR`` if the session is (or gets) closed.
        """
        limits = limits or self.limits
        rlimits, _ = rlimits_for(limits, cgroup_enforced={"memory_bytes": "", "max_processes": ""})
        pipes = RunPipes(want_report=want_report)
        given = [
            memfd_with(stdin, "execgym-stdin") if stdin else os.open(os.devnull, os.O_RDONLY),
            *pipes.write_ends.values(),
        ]
        header = {
            "op": "run",
            "argv": list(argv),
            "rlimits": rlimits,
            "env": {**BASE_ENV, "HOME": WORK_DIR, "TMPDIR": "/tmp", **(env or {})},
        }
        started = time.monotonic()
        cpu_before = self._cgroup.cpu_time_s() if self._cgroup else None
        try:
            request, queue = await self._request(header, given)
        except SessionClosed as error:
            pipes.close_read_ends()
            return sandbox_error(self.name, str(error))
        finally:
            for fd in given:
                os.close(fd)
        return await self._supervise(request, queue, pipes, limits, started, cpu_before)

    async def _supervise(
        self,
        request: int,
        queue: asyncio.Queue[tuple[dict[str, Any], list[int]]],
        pipes: RunPipes,
        limits: Limits,
        started: float,
        cpu_before: float | None,
    ) -> RunResult:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[dict[str, Any]] = loop.create_future()

        async def follow() -> None:
            try:
                while True:
                    body, _ = await self._answer(request, queue)
                    if "status" in body:
                        ended.set_result(body)
                        return
            except SandboxError as error:
                if not ended.done():
                    ended.set_exception(error)

        def kill() -> None:
            if self._control is not None:
                with contextlib.suppress(OSError):
                    self._control.send(json.dumps({"op": "kill", "target": request}).encode())

        follower = asyncio.create_task(follow())
        async with supervised(
            pipes.read_ends, max_output_bytes=limits.max_output_bytes, kill=kill
        ) as watcher:
            try:
                await watcher.watch(
                    ended,
                    started=started,
                    wall_time_s=limits.wall_time_s,
                    cpu_time_s=limits.cpu_time_s,
                    cgroup=None,
                )
                body = ended.result()
                await watcher.drain()
            except SandboxError as error:
                return sandbox_error(self.name, str(error))
            finally:
                follower.cancel()
                self._waiters.pop(request, None)
                self._last_used = time.monotonic()
        cpu_after = self._cgroup.cpu_time_s() if self._cgroup else None
        outcome = outcome_of(
            watcher,
            wait_status=body["status"],
            wall_time_s=time.monotonic() - started,
            cgroup=None,
            rusage_cpu_s=(cpu_after - cpu_before)
            if (cpu_after is not None and cpu_before is not None)
            else 0.0,
            rusage_peak_bytes=(self._cgroup.peak_memory_bytes() or 0) if self._cgroup else 0,
        )
        how = {
            "wall_time_s": "timer + kill of the command's process group",
            "max_output_bytes": "capture cap + kill",
            "memory_bytes": f"cgroup-v{self._cgroup.version} (whole session)"
            if self._cgroup
            else "rlimit-as (per process)",
            "max_processes": f"cgroup-v{self._cgroup.version} (whole session)"
            if self._cgroup
            else "rlimit-nproc (per user)",
            "cpu_time_s": "rlimit (per process)",
            "network": "network namespace",
            "disk_bytes": "tmpfs size (whole session)",
            "reclaim": "processes a command leaves run until the session closes",
        }
        oom = self._cgroup is not None and self._cgroup.oom_killed()
        outcome = dataclasses.replace(outcome, oom_killed=oom)
        return interpret(
            outcome, isolation="bwrap", enforcement=how, memory_bytes=self.limits.memory_bytes
        )


@asynccontextmanager
async def open_session(
    limits: Limits = DEFAULT_LIMITS,
    *,
    idle_timeout_s: float = 300.0,
    max_lifetime_s: float = 3600.0,
    environment: Environment | None = None,
) -> AsyncIterator[Session]:
    """Open a persistent bwrap session; it is reclaimed when the block ends.

    Args:
        limits: Memory, processes, disk and network for the whole session; the other
            fields are the default per-command limits.
        idle_timeout_s: Seconds without a call after which the session closes itself.
        max_lifetime_s: Seconds after which the session closes itself, busy or not.
        environment: The root file system the session sees (:mod:`execgym.environments`;
            ``None``: the host's); its agent runs with the environment's Python.

    Raises:
        SandboxUnavailable: if bwrap is missing.
        SandboxSetupFailed: if the sandbox does not come up.
    """
    session = Session(limits, idle_timeout_s, max_lifetime_s, environment)
    try:
        await session._start()
        yield session
    finally:
        await session.aclose()


__all__ = ["Session", "SessionClosed", "open_session"]

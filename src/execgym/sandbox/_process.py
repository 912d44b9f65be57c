"""Spawn one process tree, feed it, read its outputs with caps, and enforce its clock.

Everything here is argv only (never a shell), reads stdout and stderr while the program
runs (so a chatty program can neither deadlock us nor pass as a timeout), and kills the
whole tree (process group and cgroup) before returning: no process of a run survives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from execgym.sandbox._cgroup import RunCgroup

REPORT_FD = 3
"""The fd number of the harness report channel inside the sandbox."""

_READ_CHUNK = 65536
_REPORT_CAP_BYTES = 8 * 1024 * 1024
_CPU_POLL_S = 0.05
_DRAIN_GRACE_S = 0.5


@dataclass(slots=True)
class _Capture:
    """Bytes kept from one pipe, up to a cap, plus whether more was written."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    overflowed: bool = False

    def add(self, chunk: bytes) -> bool:
        """Keep what fits; return ``True`` once the cap has been passed."""
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.data += chunk[: max(room, 0)]
            self.overflowed = True
        else:
            self.data += chunk
        return self.overflowed


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """Everything needed to start one process tree.

    Attributes:
        argv: The program and its arguments.
        env: The complete environment of the child (nothing is inherited).
        stdin: Bytes for stdin, served from an in-memory file; empty means ``/dev/null``.
        cwd: Working directory of the child on the host side (``None``: unchanged).
        rlimits: ``(resource, value)`` pairs applied in the child before exec.
        cgroup: The run's cgroup, joined by the child before exec.
        fd_map: ``{fd in child: fd in parent}`` for extra inherited descriptors.
        want_report: Open a pipe on fd 3 in the child and collect what it writes.
        wall_time_s: Wall-clock budget in seconds.
        cpu_time_s: CPU budget of the tree in seconds, enforced by polling the cgroup.
        max_output_bytes: Cap for each of stdout and stderr; passing it kills the run.
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    stdin: bytes
    wall_time_s: float
    cpu_time_s: float
    max_output_bytes: int
    cwd: str | None = None
    rlimits: Sequence[tuple[int, int]] = ()
    cgroup: RunCgroup | None = None
    fd_map: Mapping[int, int] = field(default_factory=dict)
    want_report: bool = False


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """What one process tree did, before any interpretation by a backend."""

    wait_status: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    report: bytes
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int | None
    killed_for: str | None  # the Limits field we killed it for, if we did
    oom_killed: bool


def memfd_with(data: bytes, name: str = "execgym") -> int:
    """Return a close-on-exec in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _make_preexec(spec: ProcessSpec, fd_map: dict[int, int]) -> Callable[[], None]:
    procs_files = spec.cgroup.procs_files() if spec.cgroup else []
    rlimits = list(spec.rlimits)

    def preexec() -> None:  # runs in the child between fork and exec: keep it minimal
        pid = str(os.getpid()).encode()
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        # Move sources out of the way first: a source may sit on another's target.
        parked = {target: fcntl.fcntl(src, fcntl.F_DUPFD, 100) for target, src in fd_map.items()}
        for target, src in parked.items():
            os.dup2(src, target, inheritable=True)
            os.close(src)
        for kind, value in rlimits:  # last: RLIMIT_NOFILE would forbid the moves above
            resource.setrlimit(kind, (value, value))

    return preexec


def _reader(
    fd: int, capture: _Capture, on_overflow: Callable[[], None] | None, done: asyncio.Future[None]
) -> Callable[[], None]:
    loop = asyncio.get_running_loop()

    def on_readable() -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            loop.remove_reader(fd)
            if not done.done():
                done.set_result(None)
            return
        if capture.add(chunk) and on_overflow is not None:
            on_overflow()

    return on_readable


def tree_cpu_time_s(root: int) -> float:
    """CPU seconds used so far by ``root`` and every descendant, read from ``/proc``.

    Counts each live process's user + system time and what its reaped children used.
    Used only where no cgroup measures the tree; a process that cannot be read (gone,
    or owned by another user) counts as 0.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    total, pending, seen = 0, [root], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                    pending.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total / ticks


def _kill_tree(pid: int, cgroup: RunCgroup | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill()


async def run_process(spec: ProcessSpec) -> ProcessOutcome:
    """Start ``spec.argv``, enforce its wall and CPU clocks and output caps, and reap it.

    Returns:
        The raw :class:`ProcessOutcome`; the whole tree is dead when this returns.

    Raises:
        OSError: if the process could not be started (the caller reports a sandbox error).
    """
    loop = asyncio.get_running_loop()
    pipes = {name: os.pipe() for name in ("stdout", "stderr")}
    if spec.want_report:
        pipes["report"] = os.pipe()
    fd_map = dict(spec.fd_map)
    if spec.want_report:
        fd_map[3] = pipes["report"][1]
    stdin_fd = memfd_with(spec.stdin, "execgym-stdin") if spec.stdin else None
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(spec.argv),
            stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL,
            stdout=pipes["stdout"][1],
            stderr=pipes["stderr"][1],
            env=dict(spec.env),
            cwd=spec.cwd,
            pass_fds=tuple(fd_map),
            preexec_fn=_make_preexec(spec, fd_map),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        for _, write_end in pipes.values():
            os.close(write_end)
        if stdin_fd is not None:
            os.close(stdin_fd)
    captures = {
        "stdout": _Capture(spec.max_output_bytes),
        "stderr": _Capture(spec.max_output_bytes),
        "report": _Capture(_REPORT_CAP_BYTES),
    }
    killed_for: list[str] = []

    sampled_cpu_s = [0.0]

    def kill_for(reason: str) -> None:
        if not killed_for:
            killed_for.append(reason)
            if spec.cgroup is None or not spec.cgroup.measures_cpu:
                # Killed processes are never reaped into rusage: read their clocks first.
                sampled_cpu_s[0] = tree_cpu_time_s(proc.pid)
            _kill_tree(proc.pid, spec.cgroup)

    eofs: list[asyncio.Future[None]] = []
    for name, (read_end, _) in pipes.items():
        os.set_blocking(read_end, False)
        eof: asyncio.Future[None] = loop.create_future()
        eofs.append(eof)
        overflow = (lambda: kill_for("max_output_bytes")) if name != "report" else None
        loop.add_reader(read_end, _reader(read_end, captures[name], overflow, eof))
    pidfd = os.pidfd_open(proc.pid)
    exited: asyncio.Future[None] = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    try:
        deadline = started + spec.wall_time_s
        measures_cpu = spec.cgroup is not None and spec.cgroup.measures_cpu
        while not exited.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kill_for("wall_time_s")
                break
            step = min(remaining, _CPU_POLL_S) if measures_cpu else remaining
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation (Ctrl-C) that arrives as the process exits.
            await asyncio.wait({exited}, timeout=step)
            if measures_cpu and not exited.done():
                used = spec.cgroup.cpu_time_s() if spec.cgroup else None
                if used is not None and used >= spec.cpu_time_s:
                    kill_for("cpu_time_s")
                    break
        await exited
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        ended = time.monotonic()
        _kill_tree(proc.pid, spec.cgroup)  # orphans and daemons die with the run
        await asyncio.wait(eofs, timeout=_DRAIN_GRACE_S)
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        for read_end, _ in pipes.values():
            loop.remove_reader(read_end)
            os.close(read_end)
        if proc.returncode is None:
            _kill_tree(proc.pid, spec.cgroup)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, 0)
            proc.returncode = -9
    cgroup = spec.cgroup
    cpu = cgroup.cpu_time_s() if cgroup is not None else None
    peak = cgroup.peak_memory_bytes() if cgroup is not None else None
    return ProcessOutcome(
        wait_status=wait_status,
        stdout=bytes(captures["stdout"].data),
        stderr=bytes(captures["stderr"].data),
        stdout_truncated=captures["stdout"].overflowed,
        stderr_truncated=captures["stderr"].overflowed,
        report=bytes(captures["report"].data),
        wall_time_s=ended - started,
        cpu_time_s=cpu
        if cpu is not None
        else max(usage.ru_utime + usage.ru_stime, sampled_cpu_s[0]),
        peak_memory_bytes=peak if peak is not None else usage.ru_maxrss * 1024,
        killed_for=killed_for[0] if killed_for else None,
        oom_killed=cgroup.oom_killed() if cgroup is not None else False,
    )

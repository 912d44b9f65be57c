"""Watch one running program: read its pipes with caps and enforce its clocks.

Shared by every way of starting a run (a launched ``bwrap``, a fork of the warm pool's
zygote, a session's command), through :class:`RunPipes`, :func:`supervised` and
:func:`outcome_of` (what the run did, as a :class:`ProcessOutcome`): the caller starts
the program and says how to kill it; the supervisor reads
stdout, stderr and the report channel while it runs, kills it when it writes too much or
its wall-clock or CPU budget is spent, and waits for it to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from execgym.sandbox._cgroup import RunCgroup

READ_CHUNK_BYTES = 65536
REPORT_CAP_BYTES = 8 * 1024 * 1024
CPU_POLL_S = 0.05
DRAIN_GRACE_S = 0.5


@dataclass(slots=True)
class Capture:
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
    processes_started: int | None = None
    bytes_written: int | None = None


class Supervisor:
    """Reads a run's pipes and enforces its limits until it has ended.

    Args:
        read_ends: ``{"stdout": fd, "stderr": fd, "report": fd}`` (report optional),
            read ends of pipes whose write ends the caller has closed; the supervisor
            owns and closes them.
        max_output_bytes: Cap for each of stdout and stderr; passing it kills the run.
        kill: Kills the whole run; called once, with the reason (a ``Limits`` field).
    """

    def __init__(
        self, read_ends: Mapping[str, int], *, max_output_bytes: int, kill: Callable[[], None]
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._kill = kill
        self.killed_for: str | None = None
        self.sampled_cpu_s = 0.0
        self.sampled_peak_bytes = 0
        self.captures = {
            "stdout": Capture(max_output_bytes),
            "stderr": Capture(max_output_bytes),
            "report": Capture(REPORT_CAP_BYTES),
        }
        self._fds = dict(read_ends)
        self._eofs: list[asyncio.Future[None]] = []
        for name, fd in self._fds.items():
            os.set_blocking(fd, False)
            eof: asyncio.Future[None] = self._loop.create_future()
            self._eofs.append(eof)
            self._loop.add_reader(fd, self._on_readable, name, fd, eof)

    def _on_readable(self, name: str, fd: int, eof: asyncio.Future[None]) -> None:
        try:
            chunk = os.read(fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._loop.remove_reader(fd)
            if not eof.done():
                eof.set_result(None)
            return
        if self.captures[name].add(chunk) and name != "report":
            self.kill_for("max_output_bytes")

    def kill_for(self, reason: str) -> None:
        """Kill the run (once) and remember which limit it broke."""
        if self.killed_for is None:
            self.killed_for = reason
            self._kill()

    async def watch(
        self,
        exited: asyncio.Future[Any],
        *,
        started: float,
        wall_time_s: float,
        cpu_time_s: float,
        cgroup: RunCgroup | None,
        sample_cpu: Callable[[], float] | None = None,
        sample_memory: Callable[[], int] | None = None,
        memory_bytes: int | None = None,
    ) -> None:
        """Return once ``exited`` is done, killing the run first if a clock runs out.

        The CPU clock is the cgroup's when it measures CPU; otherwise, with
        ``sample_cpu`` (seconds used so far by the whole tree, read from ``/proc``), it
        is sampled every ``CPU_POLL_S`` and the largest figure is kept in
        :attr:`sampled_cpu_s`: processes killed or never reaped into rusage still count.
        With ``sample_memory`` (the tree's resident bytes, where no cgroup limits
        memory), memory is sampled as often, the largest figure kept in
        :attr:`sampled_peak_bytes`, and the run is killed once it holds more than
        ``memory_bytes``.
        """
        deadline = started + wall_time_s
        if cgroup is not None and cgroup.measures_cpu:
            sample_cpu = cgroup.cpu_time_s  # type: ignore[assignment]
        polls = sample_cpu is not None or sample_memory is not None
        # Sampled memory is the only peak figure there is: sample early too, so that a
        # short run has one (5, 10 and 20 ms in, then every CPU_POLL_S).
        ramp = [0.005, 0.01, 0.02] if sample_memory is not None else []
        while not exited.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill_for("wall_time_s")
                break
            step = min(remaining, ramp.pop(0) if ramp else CPU_POLL_S) if polls else remaining
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation (Ctrl-C) that arrives as the process exits.
            await asyncio.wait({exited}, timeout=step)
            if exited.done():
                break
            if sample_memory is not None and memory_bytes is not None:
                held = sample_memory()
                self.sampled_peak_bytes = max(self.sampled_peak_bytes, held)
                if held > memory_bytes:
                    self.kill_for("memory_bytes")
                    break
            if sample_cpu is not None:
                used = sample_cpu()
                if used is not None:
                    self.sampled_cpu_s = max(self.sampled_cpu_s, used)
                if used is not None and used >= cpu_time_s:
                    self.kill_for("cpu_time_s")
                    break
        await exited

    async def drain(self) -> None:
        """Read what is left in the pipes, waiting at most ``DRAIN_GRACE_S``."""
        await asyncio.wait(self._eofs, timeout=DRAIN_GRACE_S)

    def close(self) -> None:
        """Stop reading and close the pipes."""
        for fd in self._fds.values():
            self._loop.remove_reader(fd)
            os.close(fd)
        self._fds.clear()


class RunPipes:
    """The output pipes of one run: stdout, stderr and, when asked, the report channel.

    Args:
        want_report: Open the report channel's pipe too.
        report: Opens the report channel's ``(read_end, write_end)`` (default
            :func:`os.pipe`; gVisor's is a named pipe).

    Raises:
        OSError: if a pipe cannot be opened (``EMFILE`` with hundreds of runs at once);
            the ones already opened are closed first.
    """

    def __init__(
        self, *, want_report: bool, report: Callable[[], tuple[int, int]] = os.pipe
    ) -> None:
        self.ends: dict[str, tuple[int, int]] = {}
        try:
            self.ends["stdout"] = os.pipe()
            self.ends["stderr"] = os.pipe()
            if want_report:
                self.ends["report"] = report()
        except OSError:
            self.close_read_ends()
            self.close_write_ends()
            raise

    @property
    def read_ends(self) -> dict[str, int]:
        """``{"stdout": fd, "stderr": fd[, "report": fd]}``: what :func:`supervised` reads."""
        return {name: ends[0] for name, ends in self.ends.items()}

    @property
    def write_ends(self) -> dict[str, int]:
        """The ends the program writes to, by name."""
        return {name: ends[1] for name, ends in self.ends.items()}

    def close_write_ends(self) -> None:
        """Close our copies of the write ends (the program, or the guest, holds its own)."""
        for _, write_end in self.ends.values():
            os.close(write_end)

    def close_read_ends(self) -> None:
        """Close the read ends of a run that will not be supervised."""
        for read_end, _ in self.ends.values():
            os.close(read_end)


@contextlib.asynccontextmanager
async def supervised(
    read_ends: Mapping[str, int], *, max_output_bytes: int, kill: Callable[[], None]
) -> AsyncIterator[Supervisor]:
    """A :class:`Supervisor` over ``read_ends`` for the block; its pipes closed after it.

    The one way every kind of run (a launched process tree, a fork of the warm pool's
    zygote, a session's command) is watched: in the block, ``await watcher.watch(...)``
    until the run ends, reap it, ``await watcher.drain()``; then read the outcome
    (:func:`execgym.sandbox._process.outcome_of`).

    Args:
        read_ends: As for :class:`Supervisor` (owned, and closed, here).
        max_output_bytes: Cap for each of stdout and stderr.
        kill: Kills the whole run.
    """
    watcher = Supervisor(read_ends, max_output_bytes=max_output_bytes, kill=kill)
    try:
        yield watcher
    finally:
        watcher.close()


def resolve(future: asyncio.Future[Any]) -> None:
    """Set ``future``'s result to ``None`` unless it is already done.

    A reader callback fires for as long as its descriptor stays readable: this completes
    the future once, however often it is called.
    """
    if not future.done():
        future.set_result(None)


def stop_guest(proc: subprocess.Popen[bytes], *, cgroup: RunCgroup | None = None) -> str:
    """Kill a long-lived guest (the warm pool's zygote, a session's agent) and its tree.

    Kills ``proc``'s process group (``bwrap`` started it in a session of its own; its
    PID namespace dies with its init), then ``cgroup`` if given, and reaps ``proc``.

    Returns:
        The first 4,000 bytes of its error output, decoded (for the message saying
        why it stopped).
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    if cgroup is not None:
        cgroup.kill()
    proc.wait()
    errors = ""
    if proc.stderr is not None:
        errors = proc.stderr.read(4000).decode("utf-8", "replace")
        proc.stderr.close()
    return errors


def outcome_of(
    watcher: Supervisor,
    *,
    wait_status: int,
    wall_time_s: float,
    cgroup: RunCgroup | None,
    rusage_cpu_s: float,
    rusage_peak_bytes: int | None,
) -> ProcessOutcome:
    """Collect a supervised run's outcome; the cgroup's figures win over rusage."""
    cpu = cgroup.cpu_time_s() if cgroup is not None else None
    peak = cgroup.peak_memory_bytes() if cgroup is not None else None
    captures = watcher.captures
    return ProcessOutcome(
        wait_status=wait_status,
        stdout=bytes(captures["stdout"].data),
        stderr=bytes(captures["stderr"].data),
        stdout_truncated=captures["stdout"].overflowed,
        stderr_truncated=captures["stderr"].overflowed,
        report=bytes(captures["report"].data),
        wall_time_s=wall_time_s,
        cpu_time_s=cpu if cpu is not None else rusage_cpu_s,
        peak_memory_bytes=peak if peak is not None else rusage_peak_bytes,
        killed_for=watcher.killed_for,
        oom_killed=cgroup.oom_killed() if cgroup is not None else False,
    )

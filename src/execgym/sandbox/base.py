"""The sandbox contract every backend implements.

How a run ended (:class:`Status`), what it used (:class:`RunResult`), and the
:class:`Sandbox` protocol.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from execgym.limits import DEFAULT_LIMITS, Limits


class Status(enum.Enum):
    """How a run ended. Only ``SANDBOX_ERROR`` is about us; the rest are about the code."""

    OK = "ok"  # exited with code 0
    RUNTIME_ERROR = "runtime_error"  # exited with a non-zero code
    SIGNALED = "signaled"  # died on a signal we did not send
    TIME_LIMIT = "time_limit"  # we killed it: wall or CPU budget spent
    MEMORY_LIMIT = "memory_limit"  # OOM-killed inside its cgroup
    OUTPUT_LIMIT = "output_limit"  # we killed it: too much stdout or stderr
    SANDBOX_ERROR = "sandbox_error"  # we could not run it; says nothing about the code


@dataclass(frozen=True, slots=True)
class RunResult:
    """What happened to one process tree (modelled on isolate's meta file).

    Attributes:
        status: How the run ended.
        exit_code: The exit code, or ``None`` unless the program exited by itself.
        signal: The signal that ended it, if any (including ours, ``SIGKILL`` = 9).
        stdout: Captured stdout, at most ``Limits.max_output_bytes`` bytes.
        stderr: Captured stderr, at most ``Limits.max_output_bytes`` bytes.
        stdout_truncated: Whether more stdout was written than was kept.
        stderr_truncated: Whether more stderr was written than was kept.
        report: Bytes written to the harness report channel (fd 3 in the sandbox), when
            the run asked for one; ``b""`` otherwise.
        wall_time_s: Seconds from start to exit.
        cpu_time_s: User + system CPU seconds of the whole tree (cgroup) or of the
            processes that were waited for (rusage).
        peak_memory_bytes: Peak memory of the run, or ``None`` if it cannot be measured.
        processes_started: Processes and threads the run's program started, itself
            included (each takes a PID of the run's PID namespace; the namespace's init
            is not counted), the namespace's last PID (``ns_last_pid``) as its init
            read it when the run ended; past ``pid_max`` it wraps. ``None`` where it is
            not counted: a run killed before its init could count (a limit, a timeout),
            the ``none`` tier (no PID namespace) and gVisor.
        bytes_written: Bytes the program and its processes passed to ``write``-family
            system calls (files, pipes, stdout and stderr alike), from Linux's per-task
            I/O accounting (``wchar`` in ``/proc/PID/io``), summed over the processes
            the run's init reaped (on a fresh sandbox, a process still running when the
            program ends is not). ``None`` where it is not measured: a run killed first,
            gVisor (its kernel is in user space), a fresh sandbox as an ordinary user
            (its init cannot read its own figures), the ``none`` tier as one.
        limit_hit: The :class:`~execgym.limits.Limits` field that ended the run, if any.
        isolation: The backend's name: ``"bwrap"`` or ``"none"``.
        enforcement: For each limit, how it was enforced on this host, for example
            ``{"memory_bytes": "cgroup-v1", "cpu_time_s": "rlimit (per process)"}``;
            ``"not enforced"`` where nothing enforces it.
        message: For humans, never parsed.
    """

    status: Status
    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int | None
    isolation: str
    report: bytes = b""
    limit_hit: str | None = None
    enforcement: Mapping[str, str] = field(default_factory=dict)
    message: str = ""
    processes_started: int | None = None
    bytes_written: int | None = None


class Sandbox(Protocol):
    """A place to run untrusted programs, one fresh, fully reclaimed environment per run.

    Implementations: :class:`~execgym.sandbox.bwrap.BubblewrapSandbox` (namespaces) and
    :class:`~execgym.sandbox.unisolated.UnisolatedSandbox` (no isolation, development
    only).
    """

    name: str

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Run ``argv`` in a fresh work dir holding ``files`` and return what happened.

        Args:
            argv: The program and its arguments; never run through a shell.
            stdin: Bytes the program reads on stdin; empty means ``/dev/null``.
            files: Relative file names and contents put in the work dir first.
            limits: Resource limits for this run.
            env: Extra environment variables; the host's environment never leaks in.
            want_report: Open the harness report channel on fd 3 and return what is
                written to it in ``RunResult.report``.

        Returns:
            A :class:`RunResult`; what the program did is data, never an exception.

        Raises:
            SandboxSetupFailed: if the run could not be set up at all.
        """
        ...

    async def run_python(
        self,
        source: bytes,
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Run the Python script ``source`` (UTF-8) like :meth:`run`, as ``runner.py``.

        The standard library is importable, nothing else. Backends may serve this
        faster than :meth:`run` (the warm pool forks a ready interpreter) but never
        with weaker isolation.

        Returns:
            A :class:`RunResult`, as for :meth:`run`.

        Raises:
            TaskError: if a file name would escape the work dir.
        """
        ...


class SandboxWrapper:
    """A sandbox that hands every run to ``inner`` through :meth:`around`.

    Subclasses override :meth:`around` to bound, meter or log runs without repeating
    the :class:`Sandbox` signatures.

    Args:
        inner: The sandbox that runs the programs.
    """

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner
        self.name = inner.name

    async def around(self, run: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """Do the run ``run()`` starts; the default just awaits it."""
        return await run()

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """:meth:`Sandbox.run` of ``inner``, through :meth:`around`."""
        return await self.around(
            lambda: self.inner.run(
                argv, stdin=stdin, files=files, limits=limits, env=env, want_report=want_report
            )
        )

    async def run_python(
        self,
        source: bytes,
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """:meth:`Sandbox.run_python` of ``inner``, through :meth:`around`."""
        return await self.around(
            lambda: self.inner.run_python(
                source, stdin=stdin, files=files, limits=limits, env=env, want_report=want_report
            )
        )

    async def aclose(self) -> None:
        """Close ``inner`` if it keeps processes (the warm pool)."""
        aclose = getattr(self.inner, "aclose", None)
        if aclose is not None:
            await aclose()

"""The sandbox contract every backend implements.

What to run (:class:`RunRequest`), how a run ended (:class:`Status`), what it used
(:class:`RunResult`), the :class:`Sandbox` protocol, and :class:`BaseSandbox`, which
backends extend for its lifecycle and keyword conveniences.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Protocol, Self

from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox._paths import safe_relative


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


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One program to run in a fresh sandbox: what it is, what it gets, its limits.

    Exactly one of ``argv`` and ``python_source`` says what runs. Built once, checked
    once (here), and handed unchanged to any backend.

    Attributes:
        argv: The program and its arguments; never run through a shell. Empty when
            ``python_source`` is given.
        python_source: A Python script (UTF-8 bytes) to run as ``runner.py`` with only
            the standard library importable; backends may serve it faster than an
            ``argv`` run (the warm pool forks a ready interpreter), never with weaker
            isolation.
        stdin: Bytes the program reads on stdin; empty means ``/dev/null``.
        files: ``{relative name: content bytes}`` put in the work dir first.
        limits: Resource limits for this run (:class:`~execgym.limits.Limits`, every
            field with its unit in its name).
        env: Extra environment variables; the host's environment never leaks in.
        want_report: Open the harness report channel on fd 3 and return what is
            written to it in :attr:`RunResult.report`.

    Raises:
        TaskError: if a file name would escape the work dir (empty, absolute, ``..``,
            NUL or backslash).
        TypeError: if a field has the wrong type (``argv`` of non-strings, ``stdin``
            not bytes...).
        ValueError: if neither or both of ``argv`` and ``python_source`` are given.
    """

    argv: Sequence[str] = ()
    python_source: bytes | None = field(default=None, repr=False)
    stdin: bytes = field(default=b"", repr=False)
    files: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    limits: Limits = DEFAULT_LIMITS
    env: Mapping[str, str] = field(default_factory=dict)
    want_report: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.argv, str | bytes):
            raise TypeError(f"argv must be a sequence of strings, not one string: {self.argv!r}")
        argv = tuple(self.argv)
        if not all(isinstance(word, str) for word in argv):
            raise TypeError(f"argv must hold strings only: {argv!r}")
        if (not argv) == (self.python_source is None):
            raise ValueError("a RunRequest needs exactly one of argv and python_source")
        _check_bytes("python_source", self.python_source, optional=True)
        _check_bytes("stdin", self.stdin)
        files = dict(self.files or {})
        for name, content in files.items():
            if not isinstance(name, str):
                raise TypeError(f"file names must be strings: {name!r}")
            safe_relative(name)
            _check_bytes(f"files[{name!r}]", content)
        env = dict(self.env or {})
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"env must map strings to strings: {key!r}={value!r}")
        if not isinstance(self.limits, Limits):
            raise TypeError(f"limits must be a Limits, not {type(self.limits).__name__}")
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "files", MappingProxyType(files))
        object.__setattr__(self, "env", MappingProxyType(env))
        object.__setattr__(self, "want_report", bool(self.want_report))

    def as_script_file(self, command: Sequence[str]) -> RunRequest:
        """This Python request as an ``argv`` one: ``command`` runs ``runner.py``.

        Args:
            command: The argv that starts the interpreter on ``runner.py`` (see
                :func:`execgym.sandbox._python.python_command`).

        Returns:
            The request itself when it already runs an ``argv``.
        """
        if self.python_source is None:
            return self
        return RunRequest(
            argv=tuple(command),
            stdin=self.stdin,
            files={**self.files, "runner.py": self.python_source},
            limits=self.limits,
            env=self.env,
            want_report=self.want_report,
        )


def _check_bytes(what: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")


class Sandbox(Protocol):
    """A place to run untrusted programs, one fresh, fully reclaimed environment per run.

    Open one with :func:`execgym.sandbox.open_sandbox` and close it with
    :meth:`aclose` or ``async with``: a backend may keep processes between runs (the
    warm pool's zygote, prestarted sandboxes). Implementations:
    :class:`~execgym.sandbox.bwrap.BubblewrapSandbox` (namespaces),
    :class:`~execgym.sandbox.gvisor.GVisorSandbox` (gVisor),
    :class:`~execgym.sandbox.pool.WarmPoolSandbox` (a warm fork server in bwrap),
    :class:`~execgym.sandbox.unisolated.UnisolatedSandbox` (no isolation, development
    only) and the doubles of :mod:`execgym.testing`.

    Attributes:
        name: The isolation, as every result's :attr:`RunResult.isolation` says it.
    """

    name: str

    async def run(self, request: RunRequest) -> RunResult:
        """Run ``request`` in a fresh work dir holding its files and return what happened.

        Returns:
            A :class:`RunResult`; what the program did is data, never an exception.

        Raises:
            TaskError: if the command is too big for Linux to start, or (the warm pool)
                the environment too big to hand on.
            SandboxSetupFailed: if the run could not be set up at all.
        """
        ...

    async def aclose(self) -> None:
        """Reclaim every process and cgroup the sandbox keeps between runs; idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None: ...


class BaseSandbox:
    """What every backend shares: the lifecycle, and keyword conveniences over ``run``.

    A backend defines ``name`` and :meth:`run` (and :meth:`aclose` when it keeps
    processes); :meth:`run_argv` and :meth:`run_python` build the :class:`RunRequest`
    for callers who would rather pass keywords.
    """

    name: str = "base"

    async def run(self, request: RunRequest) -> RunResult:
        """Run ``request``; see :meth:`Sandbox.run`."""
        raise NotImplementedError(f"{type(self).__name__} does not define run()")

    async def run_argv(self, argv: Sequence[str], /, **options: Any) -> RunResult:
        """``run(RunRequest(argv=argv, **options))``; ``options`` are its other fields.

        Raises:
            TaskError, TypeError, ValueError: as :class:`RunRequest` and :meth:`run` do.
        """
        return await self.run(RunRequest(argv=argv, **options))

    async def run_python(self, source: bytes, /, **options: Any) -> RunResult:
        """``run(RunRequest(python_source=source, **options))``; see :meth:`run_argv`."""
        return await self.run(RunRequest(python_source=source, **options))

    async def aclose(self) -> None:
        """Nothing to reclaim by default; backends that keep processes override it."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()


class SandboxWrapper(BaseSandbox):
    """A sandbox that hands every run to ``inner`` through :meth:`around`.

    Subclasses override :meth:`around` to bound, meter or log runs.

    Args:
        inner: The sandbox that runs the programs (closed with this one).
    """

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner
        self.name = inner.name

    async def around(self, run: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """Do the run ``run()`` starts; the default just awaits it."""
        return await run()

    async def run(self, request: RunRequest) -> RunResult:
        """:meth:`Sandbox.run` of ``inner``, through :meth:`around`."""
        return await self.around(lambda: self.inner.run(request))

    async def aclose(self) -> None:
        """Close ``inner``."""
        await self.inner.aclose()

"""Turn a raw :class:`ProcessOutcome` into a :class:`RunResult` with a :class:`Status`."""

from __future__ import annotations

import dataclasses
import os
import signal as signals
from collections.abc import Mapping

from execgym.sandbox._supervise import ProcessOutcome
from execgym.sandbox.base import RunResult, Status

_KILL_STATUS = {
    "wall_time_s": Status.TIME_LIMIT,
    "cpu_time_s": Status.TIME_LIMIT,
    "max_output_bytes": Status.OUTPUT_LIMIT,
    "memory_bytes": Status.MEMORY_LIMIT,  # resident memory sampled from /proc, no cgroup
}


def _exit_and_signal(wait_status: int, *, shifted_signals: bool) -> tuple[int | None, int | None]:
    if os.WIFSIGNALED(wait_status):
        return None, os.WTERMSIG(wait_status)
    code = os.WEXITSTATUS(wait_status)
    # bwrap reports a child killed by signal N as exit code 128 + N.
    if shifted_signals and 128 < code < 128 + 65:
        return None, code - 128
    return code, None


def _stalled_at_memory_limit(
    outcome: ProcessOutcome, enforcement: Mapping[str, str], memory_bytes: int | None
) -> bool:
    return (
        outcome.killed_for in ("wall_time_s", "cpu_time_s")
        and memory_bytes is not None
        and outcome.peak_memory_bytes is not None
        and enforcement.get("memory_bytes", "").startswith("cgroup")
        and outcome.peak_memory_bytes >= memory_bytes * 0.98
    )


_ALLOCATION_FAILED = (
    b"MemoryError",  # Python
    b"Cannot allocate memory",  # ENOMEM from mmap/brk/fork, any language
    b"std::bad_alloc",  # C++
    b"java.lang.OutOfMemoryError",  # Java
    b"heap out of memory",  # Node.js
    b"memory allocation of",  # Rust: "memory allocation of N bytes failed"
    b"runtime: out of memory",  # Go
)
"""What a program prints when an allocation fails under ``RLIMIT_AS`` (its last 4 KiB of
stderr are searched)."""


def _allocation_failed(
    outcome: ProcessOutcome,
    enforcement: Mapping[str, str],
    exit_code: int | None,
    signal: int | None,
) -> bool:
    """Whether a failed run's error says an allocation failed under ``RLIMIT_AS``.

    With no cgroup to see the limit reached, the error output is the evidence.
    """
    if "rlimit-as" not in enforcement.get("memory_bytes", ""):
        return False
    if exit_code in (None, 0) and signal != signals.SIGABRT:
        return False
    tail = outcome.stderr[-4096:]
    return any(signature in tail for signature in _ALLOCATION_FAILED)


def interpret(
    outcome: ProcessOutcome,
    *,
    isolation: str,
    enforcement: Mapping[str, str],
    shifted_signals: bool = False,
    memory_bytes: int | None = None,
) -> RunResult:
    """Decide how a run ended: our kills first, then the OOM killer, then the exit.

    Where only ``RLIMIT_AS`` limits memory (no writable cgroup), a run that fails with
    an allocation error on stderr (:data:`_ALLOCATION_FAILED`) is ``MEMORY_LIMIT``: the
    kernel refused the memory, the program did not crash on its own. Printing such a
    line only turns a program's own failure into another failure.

    Args:
        outcome: What the process tree did.
        isolation: The backend's name, copied into the result.
        enforcement: How each limit was enforced, copied into the result.
        shifted_signals: The launcher reports signal N as exit code 128 + N (bwrap).
        memory_bytes: The run's memory limit, to tell a run that stalled at it from a
            slow one.
    """
    exit_code, signal = _exit_and_signal(outcome.wait_status, shifted_signals=shifted_signals)
    limit_hit = outcome.killed_for
    message = ""
    if limit_hit is not None and _stalled_at_memory_limit(outcome, enforcement, memory_bytes):
        # Under memory pressure at its cgroup's limit a program can stall in reclaim
        # until the clock runs out; that is a memory verdict, not a slow program.
        status, limit_hit, exit_code = Status.MEMORY_LIMIT, "memory_bytes", None
        message = "stalled at the memory limit until the time limit: memory_bytes exceeded"
    elif limit_hit is not None:
        status = _KILL_STATUS[limit_hit]
        message = f"killed: {limit_hit} exceeded"
        exit_code = None
    elif outcome.oom_killed:
        status, limit_hit, exit_code = Status.MEMORY_LIMIT, "memory_bytes", None
        message = "killed by the kernel: memory_bytes exceeded"
    elif _allocation_failed(outcome, enforcement, exit_code, signal):
        status, limit_hit = Status.MEMORY_LIMIT, "memory_bytes"
        message = (
            "an allocation failed at the address-space rlimit: memory_bytes exceeded "
            "(inferred from the error output; no cgroup measures memory here)"
        )
    elif signal == signals.SIGXCPU:
        status, limit_hit, message = Status.TIME_LIMIT, "cpu_time_s", "killed: cpu rlimit"
    elif signal == signals.SIGXFSZ:
        status, limit_hit = Status.SIGNALED, "max_file_bytes"
        message = "killed: a file grew past max_file_bytes"
    elif signal is not None:
        status, message = Status.SIGNALED, f"died on signal {signals.Signals(signal).name}"
    elif exit_code == 0:
        status = Status.OK
    else:
        status, message = Status.RUNTIME_ERROR, f"exited with code {exit_code}"
    return RunResult(
        status=status,
        exit_code=exit_code,
        signal=signal,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        stdout_truncated=outcome.stdout_truncated,
        stderr_truncated=outcome.stderr_truncated,
        report=outcome.report,
        wall_time_s=outcome.wall_time_s,
        cpu_time_s=outcome.cpu_time_s,
        peak_memory_bytes=outcome.peak_memory_bytes,
        isolation=isolation,
        limit_hit=limit_hit,
        enforcement=dict(enforcement),
        message=message,
        processes_started=outcome.processes_started,
        bytes_written=outcome.bytes_written,
    )


def with_init_count(result: RunResult, count: bytes, *, not_the_runs: int = 0) -> RunResult:
    """``result`` with what a fresh sandbox's init counted (see ``bwrap.INIT_SCRIPT``).

    Args:
        result: The run's result.
        count: What the init wrote: the PID namespace's last PID, then (where it could
            read them) its ``wchar`` with and without what it reaped; empty if it was
            killed before it counted.
        not_the_runs: Bytes written by execgym's own code among those reaped (a
            prestarted sandbox's trampoline writes the run's files and stdin).
    """
    try:
        figures = [int(field) for field in count.split()]
    except ValueError:
        figures = []
    if not figures:
        return result
    return dataclasses.replace(
        result,
        processes_started=figures[0] - 1,  # PID 1, the init, is ours
        # As an ordinary user the init cannot read its own figures (it is not dumpable).
        bytes_written=(
            max(figures[1] - figures[2] - not_the_runs, 0) if len(figures) == 3 else None
        ),
    )


def sandbox_error(isolation: str, message: str) -> RunResult:
    """A result for a run we could not carry out; it says nothing about the code."""
    return RunResult(
        status=Status.SANDBOX_ERROR,
        exit_code=None,
        signal=None,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        wall_time_s=0.0,
        cpu_time_s=0.0,
        peak_memory_bytes=None,
        isolation=isolation,
        message=message,
    )

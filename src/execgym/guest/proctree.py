"""CPU time and resident memory of a process tree from ``/proc``; standard library only.

Imported by the host, and prepended to the warm pool's zygote source (which runs
inside its sandbox with the standard library only), so both count the same way.
"""

import os
import signal
import time

STOP_WAIT_S = 0.05  # longest wait for SIGSTOP to land on every process before reading


def _tree_pids(root: int) -> list[int]:
    """``root`` and every descendant found through ``/proc/<pid>/task/<tid>/children``."""
    found, pending, seen = [], [root], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                    pending.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def _state(pid: int) -> bytes:
    """The one-letter state in ``/proc/<pid>/stat`` (``R``, ``S``, ``T``...); ``X`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"X"


def _cpu_ticks(pid: int) -> int:
    """User + system ticks of ``pid`` and of its reaped children; 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return 0


def tree_cpu_time_s(root: int, *, stop: bool = False) -> float:
    """CPU seconds used so far by ``root`` and every descendant, read from ``/proc``.

    Counts each live process's user + system time and what its reaped children used.
    Used only where no cgroup measures the tree; a process that cannot be read (gone,
    or owned by another user) counts as 0. The kernel reports whole clock ticks
    (``SC_CLK_TCK``, usually 10 ms), user and system time each rounded down.

    With ``stop=True`` (used just before the tree is killed) every process found is
    sent SIGSTOP before any clock is read, so nothing runs on between the reading and
    the kill: the figure is what the run really used, not what it had used some
    milliseconds earlier. A signal lands asynchronously, so it waits (at most
    ``STOP_WAIT_S``) until every process shows as stopped, dead or in the kernel
    (``D``: it cannot run user code until it leaves).
    """
    pids = _tree_pids(root)
    if stop:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                continue
        pids = _tree_pids(root)  # children forked while stopping are counted too
        give_up = time.monotonic() + STOP_WAIT_S
        running = [pid for pid in pids if _state(pid) in (b"R", b"S")]
        while running and time.monotonic() < give_up:
            time.sleep(0.0005)
            running = [pid for pid in running if _state(pid) in (b"R", b"S")]
    return sum(_cpu_ticks(pid) for pid in pids) / os.sysconf("SC_CLK_TCK")


def tree_rss_bytes(root: int) -> int:
    """Resident memory (bytes) of ``root`` and every descendant, read from ``/proc``.

    The sum of each live process's RSS (``/proc/<pid>/statm``, second field, in pages):
    pages shared between processes of the tree count once per process, so the figure
    is at least what the tree holds. A process that cannot be read counts as 0.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in _tree_pids(root):
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def _wchar(path: str) -> int | None:
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.startswith(b"wchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def total_bytes_written(zombie: int) -> int | None:
    """Bytes ``zombie`` and every child it reaped wrote, read before it is reaped itself.

    ``/proc/<pid>/io``'s ``wchar`` counts what a process and every child it reaped
    (theirs included, down the tree) passed to ``write``-family system calls; read it
    once ``zombie`` has exited but before it is reaped: the figure is final then.
    ``None`` if ``/proc`` does not tell (no I/O accounting in the kernel, or not
    allowed: Linux 6.x lets only root read a zombie's figures).
    """
    return _wchar(f"/proc/{zombie}/io")

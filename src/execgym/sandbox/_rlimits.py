"""rlimits applied to every run: backstops where cgroups enforce, the limit where not."""

from __future__ import annotations

import math
import os
import resource

from execgym.limits import Limits


def rlimits_for(
    limits: Limits, *, cgroup_enforced: dict[str, str]
) -> tuple[list[tuple[int, int, int]], dict[str, str]]:
    """Translate ``limits`` into rlimits and say which limits they enforce.

    The CPU rlimit is per process, so it only backstops the cgroup's whole-tree
    budget; address space is limited only where no cgroup limits memory, because
    ``RLIMIT_AS`` counts reserved, not used, memory and breaks some runtimes; and the
    process count falls back to ``RLIMIT_NPROC`` (the user's current count plus the
    limit) only where no pids cgroup exists, since it is shared by all of a user's
    processes.

    The CPU limit's hard value is one second above its soft one: the kernel sends
    ``SIGXCPU`` at the soft limit (a ``timeout`` verdict) and ``SIGKILL`` only at the
    hard one, for a program that ignores ``SIGXCPU``; with both equal it sends
    ``SIGKILL`` at once, which reads as a crash.

    Returns:
        ``([(resource, soft, hard), ...], {limit name: how it is enforced})``.
    """
    cpu = math.ceil(limits.cpu_time_s) + 1
    pairs = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    enforced = {
        "max_file_bytes": "rlimit",
        "max_open_files": "rlimit",
        "cpu_time_s": "rlimit (per process)",
    }
    if "memory_bytes" not in cgroup_enforced:
        pairs.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
        enforced["memory_bytes"] = "rlimit-as (per process, virtual memory)"
    if "max_processes" not in cgroup_enforced:
        nproc = _user_tasks() + limits.max_processes
        pairs.append((resource.RLIMIT_NPROC, nproc, nproc))
        enforced["max_processes"] = (
            "rlimit-nproc (per user: shared with this user's other processes and runs)"
        )
    return pairs, enforced


def _user_tasks() -> int:
    """Processes and threads this user has now (``RLIMIT_NPROC`` counts them all)."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count

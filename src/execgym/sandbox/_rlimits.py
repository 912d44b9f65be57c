"""rlimits applied to every run: backstops where cgroups enforce, the limit where not."""

from __future__ import annotations

import math
import resource

from execgym.limits import Limits


def rlimits_for(
    limits: Limits, *, cgroup_enforced: dict[str, str]
) -> tuple[list[tuple[int, int]], dict[str, str]]:
    """Translate ``limits`` into rlimits and say which limits they enforce.

    The CPU rlimit is per process, so it only backstops the cgroup's whole-tree
    budget; address space is limited only where no cgroup limits memory, because
    ``RLIMIT_AS`` counts reserved, not used, memory and breaks some runtimes.

    Returns:
        ``([(resource, value), ...], {limit name: how it is enforced})``.
    """
    pairs = [
        (resource.RLIMIT_CPU, math.ceil(limits.cpu_time_s) + 1),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes),
        (resource.RLIMIT_NOFILE, limits.max_open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    enforced = {
        "max_file_bytes": "rlimit",
        "max_open_files": "rlimit",
        "cpu_time_s": "rlimit (per process)",
    }
    if "memory_bytes" not in cgroup_enforced:
        pairs.append((resource.RLIMIT_AS, limits.memory_bytes))
        enforced["memory_bytes"] = "rlimit-as (per process, virtual memory)"
    if "max_processes" not in cgroup_enforced:
        enforced["max_processes"] = "not enforced (no pids cgroup)"
    return pairs, enforced

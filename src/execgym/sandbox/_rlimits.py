"""rlimits applied to every run: backstops where cgroups enforce, the limit where not."""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Mapping, Sequence

from execgym.limits import Limits


def rlimits_for(
    limits: Limits, *, cgroup_enforced: dict[str, str], reserves_address_space: bool = False
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

    ``reserves_address_space``: the program is a runtime that reserves far more address
    space than it uses (the JVM's class space and heap, V8's code range and cage), which
    ``RLIMIT_AS`` would stop at start-up; it then gets none (the supervisor's sampling of
    resident memory is what limits it, see :func:`execgym.sandbox._run.enforcement_of`).

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
    if "memory_bytes" not in cgroup_enforced and reserves_address_space:
        enforced["memory_bytes"] = "not enforced (RLIMIT_AS would stop this runtime)"
    elif "memory_bytes" not in cgroup_enforced:
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


RESERVING_RUNTIMES = frozenset({"java", "javac", "node", "nodejs", "tsc", "deno", "bun"})
"""Programs that reserve address space far beyond what they use (JVM, V8)."""


RESERVES_ADDRESS_SPACE_ENV = ("EXECGYM_ADDRESS_SPACE", "reserved")
"""An environment entry a caller sets for a program that reserves address space but is
not known by name (a compiled Go binary: its runtime reserves its page summaries)."""


def reserves_address_space(argv: Sequence[str], env: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher command runs a runtime that reserves address space up front.

    True when ``env`` holds :data:`RESERVES_ADDRESS_SPACE_ENV`, else when one of
    :data:`RESERVING_RUNTIMES` is named. Looks at every word after the last ``--``
    (bwrap's and setpriv's end of options; the whole command when there is none): the
    program, or a tool a driver program is given as an argument (the compile driver is
    given the compiler's path). A program that merely has such an argument loses
    ``RLIMIT_AS`` too; its resident memory is still sampled and limited.
    """
    name, value = RESERVES_ADDRESS_SPACE_ENV
    if env is not None and env.get(name) == value:
        return True
    words = list(argv)
    if "--" in words:
        words = words[len(words) - words[::-1].index("--") :]
    return any(os.path.basename(word) in RESERVING_RUNTIMES for word in words)

"""CPU time of a process tree from ``/proc``; standard library only.

Imported by the host, and prepended to the warm pool's zygote source (which runs
inside its sandbox with the standard library only), so both count the same way.
"""

import os


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

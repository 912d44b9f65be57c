"""Per-run cgroups, v2 or v1, detected at run time.

A run gets its own cgroup below the cgroup execgym itself runs in, so that memory,
process count and CPU time are limited and measured for the whole process tree, and the
tree can be killed as one. Hosts differ: most have cgroup v2 (one unified hierarchy);
some, like CI machines here, mount the v1 controllers ``memory``, ``pids``,
``cpuacct`` and ``cpu`` separately; an ordinary user often has no writable cgroup at
all. Then :func:`detect_cgroups` says why, and the sandbox falls back to rlimits and
says so in every result.

The ``cpu`` controller (v2: enabled for the children; v1: a cgroup of its own where
``cpu`` is mounted apart from ``cpuacct``) makes each run ONE entity for the kernel's
scheduler, weighted as any other: a run's share of the CPU no longer depends on what
other runs do. Without it a rollout that forks spinning processes, each in a session of
its own (an autogroup each), took the CPU from the runs beside it until a correct
rollout, or the self-test, missed a 0.5 s wall limit (issue 23).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import logging
import os
import queue
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from execgym.limits import Limits

log = logging.getLogger(__name__)

_V1_CONTROLLERS = ("memory", "pids", "cpuacct", "cpu")
_V1_OPTIONAL = ("cpuacct", "cpu")
"""Used where mounted and writable; without them a run is not measured or grouped."""
_counter = itertools.count()


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """What this host lets us do with cgroups.

    Attributes:
        version: 2, 1, or ``None`` when no usable hierarchy is writable.
        parents: Directory under which run cgroups are made, per controller (v1) or
            under the key ``"unified"`` (v2).
        reason: Why cgroups are unusable, when ``version`` is ``None``; for humans.
    """

    version: int | None
    parents: dict[str, Path] = field(default_factory=dict)
    reason: str = ""


def _read_mountinfo() -> list[tuple[str, str, str, str]]:
    """Return (root, mount point, fstype, super options) for each cgroup mount."""
    mounts = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            parts, rparts = left.split(), right.split()
            if len(parts) >= 5 and len(rparts) >= 3 and rparts[0] in ("cgroup", "cgroup2"):
                mounts.append((parts[3], parts[4], rparts[0], rparts[2]))
    return mounts


def _own_cgroups() -> dict[str, str]:
    """Map each controller (or ``""`` for v2) to the path of our own cgroup."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    return own


def _inside(mount_root: str, mount_point: str, path: str) -> Path:
    relative = path[len(mount_root) :] if path.startswith(mount_root) else path
    return Path(mount_point) / relative.lstrip("/")


def _probe_writable(parent: Path) -> bool:
    probe = parent / f"execgym-probe-{os.getpid()}-{next(_counter)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _detect_v2(mounts: list[tuple[str, str, str, str]], own: dict[str, str]) -> CgroupHost:
    unified = [m for m in mounts if m[2] == "cgroup2"]
    for root, point, _, _ in unified:
        base = _inside(root, point, own.get("", "/"))
        available = (
            (base / "cgroup.controllers").read_text().split()
            if (base / "cgroup.controllers").exists()
            else []
        )
        if "memory" not in available or "pids" not in available:
            continue
        if not _enable_v2_controllers(base):
            return CgroupHost(
                None,
                reason=(
                    f"cgroup v2 at {base} cannot delegate memory and pids to child cgroups "
                    "(other processes share our cgroup); run execgym in its own systemd scope "
                    "with Delegate=yes, e.g. "
                    "`systemd-run --user --scope -p Delegate=yes execgym ...`"
                ),
            )
        if _probe_writable(base):
            return CgroupHost(2, {"unified": base})
        return CgroupHost(None, reason=f"cgroup v2 at {base} is not writable by this user")
    return CgroupHost(None, reason="no cgroup v2 hierarchy with the memory and pids controllers")


def _enable_v2_controllers(base: Path) -> bool:
    """Enable memory, pids and cpu for children of ``base``; move us to a leaf if needed."""
    control = base / "cgroup.subtree_control"
    wanted = (
        "+memory +pids +cpu"
        if "cpu" in (base / "cgroup.controllers").read_text()
        else ("+memory +pids")
    )
    try:
        control.write_text(wanted)
        return True
    except OSError as error:
        if error.errno != errno.EBUSY:
            return False
    # The "no internal processes" rule: a cgroup with processes cannot hand controllers
    # to its children. If we are alone in it, move ourselves into a leaf and retry.
    members = (base / "cgroup.procs").read_text().split()
    if members != [str(os.getpid())]:
        return False
    leaf = base / f"execgym-supervisor-{os.getpid()}"
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
        control.write_text(wanted)
    except OSError:
        return False
    return True


def _detect_v1(mounts: list[tuple[str, str, str, str]], own: dict[str, str]) -> CgroupHost:
    parents: dict[str, Path] = {}
    for controller in _V1_CONTROLLERS:
        for root, point, fstype, options in mounts:
            if fstype == "cgroup" and controller in options.split(","):
                parent = _inside(root, point, own.get(controller, "/"))
                # co-mounted (cpu,cpuacct): one hierarchy, one directory per run
                if controller not in _V1_OPTIONAL or parent not in parents.values():
                    parents[controller] = parent
                break
    missing = [name for name in ("memory", "pids") if name not in parents]
    if missing:
        return CgroupHost(None, reason=f"cgroup v1 controller(s) {missing} are not mounted")
    for name in _V1_OPTIONAL:
        if name in parents and not _probe_writable(parents[name]):
            del parents[name]
    if not all(_probe_writable(parent) for parent in parents.values()):
        return CgroupHost(
            None,
            reason=(
                "cgroup v1 hierarchies are not writable by this user (run as root, or on a "
                "cgroup v2 host with a delegated subtree)"
            ),
        )
    return CgroupHost(1, parents)


@cache
def detect_cgroups() -> CgroupHost:
    """Find the strongest usable cgroup setup on this host, once per process.

    Returns:
        A :class:`CgroupHost`; ``version`` is ``None`` with a reason when none is usable.
    """
    try:
        mounts, own = _read_mountinfo(), _own_cgroups()
    except OSError as error:
        return CgroupHost(None, reason=f"cannot read cgroup information: {error}")
    if any(fstype == "cgroup2" and point == "/sys/fs/cgroup" for _, point, fstype, _ in mounts):
        return _detect_v2(mounts, own)
    host = _detect_v1(mounts, own)
    if host.version is None:
        v2 = _detect_v2(mounts, own)
        if v2.version is not None:
            return v2
    return host


def _write(path: Path | str, value: str) -> bool:
    """Write ``value`` to a cgroup file with one ``write(2)``; whether the kernel took it."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, value.encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _read(path: Path | str) -> str:
    """The whole (small) content of a cgroup file.

    Raises:
        OSError: if it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _read_int(path: Path | str) -> int | None:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_keyed(path: Path | str, key: str) -> int | None:
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


_STALE_NAME = re.compile(r"execgym-(?:staged-|ready-)?(\d+)-\d+")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_swept: set[Path] = set()


def sweep_stale(host: CgroupHost) -> tuple[str, ...]:
    """Remove the run cgroups left by execgym processes that died (once per process).

    A run's cgroup is removed when the run ends, even on our errors; only a SIGKILL of
    execgym itself (or a power cut) leaves one behind. Its name says which process made
    it (``execgym-<pid>-<n>``, ``execgym-staged-...``, ``execgym-ready-...``); those of processes no
    longer alive are killed and removed here. Those of live processes are never touched.

    Returns:
        The names of the cgroups removed.
    """
    removed = []
    for key, parent in host.parents.items():
        if parent in _swept:
            continue
        _swept.add(parent)
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for path in entries:
            match = _STALE_NAME.fullmatch(path.name)
            if match is None or _alive(int(match.group(1))) or not path.is_dir():
                continue
            stale = RunCgroup(host, {key: path})
            stale.remove()
            if not path.exists():
                removed.append(path.name)
    if removed:
        log.info("removed %d cgroup(s) left by dead execgym processes", len(removed))
    return tuple(removed)


_removals: queue.Queue[RunCgroup] = queue.Queue()
_remover: list[threading.Thread] = []
_remover_lock = threading.Lock()


def _remove_queued() -> None:
    while True:
        group = _removals.get()
        try:
            group.remove()
        except Exception:  # never let the remover die: log and go on
            log.exception("could not remove cgroup %s", list(group.dirs.values()))
        finally:
            _removals.task_done()


def _start_remover() -> None:
    with _remover_lock:
        if not _remover:
            thread = threading.Thread(target=_remove_queued, name="execgym-cgroup-remover")
            thread.daemon = True
            thread.start()
            _remover.append(thread)
            atexit.register(flush_removals)


def flush_removals() -> None:
    """Wait until every cgroup queued by :meth:`RunCgroup.remove_soon` is deleted."""
    if _remover:
        _removals.join()


class RunCgroup:
    """The cgroup(s) of one run: created with limits, joined by the child, then removed.

    Use :meth:`create`; it returns ``None`` when the host has no usable cgroups.
    """

    def __init__(self, host: CgroupHost, dirs: dict[str, Path]) -> None:
        self.version = host.version
        self.dirs = dirs
        self.enforced: dict[str, str] = {}
        self._cpu_base_s = 0.0
        self._written: dict[Path, str] = {}  # what apply() set, so equal limits cost nothing

    def _set(self, path: Path, value: str) -> bool:
        """Write a limit file unless this cgroup already holds ``value`` there."""
        if self._written.get(path) == value:
            return True
        if not _write(path, value):
            return False
        self._written[path] = value
        return True

    @classmethod
    def create(cls, limits: Limits, *, prefix: str = "execgym") -> RunCgroup | None:
        """Make a fresh cgroup for one run and apply ``limits`` to it.

        Returns:
            The cgroup, or ``None`` if this host has no usable cgroups.

        Raises:
            OSError: if the cgroup directory cannot be made although detection said it
                could (the caller reports a sandbox error).
        """
        host = detect_cgroups()
        if host.version is None:
            return None
        sweep_stale(host)
        name = f"{prefix}-{os.getpid()}-{next(_counter)}"
        dirs = {key: parent / name for key, parent in host.parents.items()}
        made: list[Path] = []
        try:
            for path in dirs.values():
                path.mkdir()
                made.append(path)
        except OSError:
            for path in made:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        group = cls(host, dirs)
        group.apply(limits)
        return group

    def apply(self, limits: Limits) -> None:
        """Set this cgroup's memory and process limits to ``limits`` (again, if need be).

        A cgroup made ahead of its run (the warm pool stages some) gets its run's limits
        here; :attr:`enforced` then names what the kernel enforces for that run.
        """
        self.enforced = {}
        tag = f"cgroup-v{self.version}"
        if self.version == 2:
            base = self.dirs["unified"]
            if self._set(base / "memory.max", str(limits.memory_bytes)):
                self.enforced["memory_bytes"] = tag
            self._set(base / "memory.swap.max", "0")
            if self._set(base / "pids.max", str(limits.max_processes)):
                self.enforced["max_processes"] = tag
            return
        memory = self.dirs["memory"]
        self._set(memory / "memory.swappiness", "0")
        # memory+swap may never be below memory: lower memory first, raise memsw first.
        limit, memsw = memory / "memory.limit_in_bytes", memory / "memory.memsw.limit_in_bytes"
        applied = self._set(limit, str(limits.memory_bytes))
        self._set(memsw, str(limits.memory_bytes))
        if applied or self._set(limit, str(limits.memory_bytes)):
            self.enforced["memory_bytes"] = tag
        if self._set(self.dirs["pids"] / "pids.max", str(limits.max_processes)):
            self.enforced["max_processes"] = tag

    @property
    def measures_cpu(self) -> bool:
        """Whether :meth:`cpu_time_s` covers the whole tree."""
        return self.version == 2 or "cpuacct" in self.dirs

    def add(self, pid: int) -> None:
        """Move process ``pid`` into every controller of this run's cgroup.

        Raises:
            OSError: if a ``cgroup.procs`` file cannot be written.
        """
        data = str(pid).encode()
        for path in self.procs_files():
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def procs_files(self) -> list[str]:
        """Paths of the ``cgroup.procs`` files a new child writes its pid into."""
        return [str(path / "cgroup.procs") for path in self.dirs.values()]

    def cpu_time_s(self) -> float | None:
        """CPU seconds (user + system) used by every process of the run so far.

        Counted from :meth:`reset_clock` if it was called, else from the cgroup's start.
        """
        used = self._raw_cpu_time_s()
        return None if used is None else max(0.0, used - self._cpu_base_s)

    def _raw_cpu_time_s(self) -> float | None:
        if self.version == 2:
            usec = _read_keyed(self.dirs["unified"] / "cpu.stat", "usage_usec")
            return None if usec is None else usec / 1e6
        if "cpuacct" in self.dirs:
            nsec = _read_int(self.dirs["cpuacct"] / "cpuacct.usage")
            return None if nsec is None else nsec / 1e9
        return None

    def reset_clock(self) -> None:
        """Start the run's CPU clock and peak memory now, for a cgroup made ahead of it.

        A prestarted sandbox's own start-up ran in this cgroup: :meth:`cpu_time_s`
        counts from here on, and on cgroup v1 the peak memory is reset too. cgroup v2's
        ``memory.peak`` cannot be reset on most kernels, so there the peak may include
        the start-up's (about 10 MB for the Python that waits for the job).
        """
        self._cpu_base_s = self._raw_cpu_time_s() or 0.0
        if self.version == 1:
            _write(self.dirs["memory"] / "memory.max_usage_in_bytes", "0")

    def peak_memory_bytes(self) -> int | None:
        """Peak memory of the run in bytes, or ``None`` if the kernel does not say."""
        if self.version == 2:
            return _read_int(self.dirs["unified"] / "memory.peak")
        return _read_int(self.dirs["memory"] / "memory.max_usage_in_bytes")

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for exceeding memory."""
        if self.version == 2:
            count = _read_keyed(self.dirs["unified"] / "memory.events", "oom_kill")
            return bool(count)
        memory = self.dirs["memory"]
        count = _read_keyed(memory / "memory.oom_control", "oom_kill")
        if count is not None:
            return count > 0
        return bool(_read_int(memory / "memory.failcnt"))

    def _members(self) -> list[int]:
        # The child joins every controller before exec and descendants inherit them
        # all, so one controller's list (pids, or memory) names every process.
        path = self.dirs.get("pids") or next(iter(self.dirs.values()))
        try:
            return [int(p) for p in _read(path / "cgroup.procs").split()]
        except (OSError, ValueError):
            return []

    def kill(self, *, until_empty: bool = True) -> None:
        """SIGKILL every process of the run, including any that forked or setsid'ed.

        Args:
            until_empty: On cgroup v1, which has no ``cgroup.kill``, signal the members
                again (every 1 ms, for at most 0.1 s) until none is left, so a process
                forking meanwhile cannot escape. ``False`` signals each member once and
                returns at once: for a caller on the event loop whose run can no longer
                fork, such as a warm-pool run whose PID 1 killed the rest before it
                reported (:meth:`remove_soon` finishes the job in the background).
        """
        if self.version == 2 and _write(self.dirs["unified"] / "cgroup.kill", "1"):
            return
        for _ in range(100 if until_empty else 1):
            members = self._members()
            if not members:
                return
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if until_empty:
                time.sleep(0.001)

    def remove_soon(self) -> None:
        """Kill what is left now and delete the directories in the background.

        Deleting a cgroup v1 memory cgroup takes 1-2 ms of the kernel's time per run
        here; a run's result does not wait for it. :func:`flush_removals` waits for
        every removal queued so far (execgym waits for them at exit).
        """
        self.kill(until_empty=False)  # the removal kills until empty, off the event loop
        _removals.put(self)
        _start_remover()

    def remove(self) -> None:
        """Kill what is left and delete the cgroup directories (retried briefly)."""
        self.kill()
        for path in self.dirs.values():
            for attempt in range(200):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt % 10 == 0:
                        self.kill()
                    time.sleep(0.005)

"""Spawn one process tree, feed it, read its outputs with caps, and enforce its clock.

Everything here is argv only (never a shell), reads stdout and stderr while the program
runs (so a chatty program can neither deadlock us nor pass as a timeout), and kills the
whole tree (process group and cgroup) before returning: no process of a run survives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import resource
import select
import shlex
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from execgym.guest.proctree import total_bytes_written, tree_cpu_time_s, tree_rss_bytes
from execgym.sandbox._cgroup import RunCgroup
from execgym.sandbox._supervise import (
    ProcessOutcome,
    RunPipes,
    outcome_of,
    resolve,
    supervised,
)

REPORT_FD = 3
"""The fd number of the harness report channel inside the sandbox."""

_FIFO_BUFFER_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """Everything needed to start one process tree.

    Attributes:
        argv: The program and its arguments.
        env: The complete environment of the child (nothing is inherited).
        stdin: Bytes for stdin, served from an in-memory file; empty means ``/dev/null``.
        cwd: Working directory of the child on the host side (``None``: unchanged).
        rlimits: ``(resource, soft, hard)`` applied in the child before exec.
        cgroup: The run's cgroup, joined by the child before exec.
        fd_map: ``{fd in child: fd in parent}`` for extra inherited descriptors.
        want_report: Open a pipe on fd 3 in the child and collect what it writes.
        report_path: With ``want_report``, a named pipe (FIFO) to use as that pipe, for a
            sandbox that cannot inherit fd 3 and opens the FIFO by name instead (gVisor).
            Its write end still goes to the child on fd 3, so the channel ends only when
            the whole tree is gone.
        wall_time_s: Wall-clock budget in seconds.
        cpu_time_s: CPU budget of the tree in seconds, enforced by polling the cgroup.
        max_output_bytes: Cap for each of stdout and stderr; passing it kills the run.
        hold_fds: For a bwrap launcher whose argv has ``--info-fd A --block-fd B``,
            ``(A, B)``: it is held by bwrap itself (see :func:`spawn_held`).
        memory_bytes: Where set, the tree's resident memory is sampled from ``/proc``
            with the CPU clock and the run killed above it (hosts where no cgroup
            limits memory).
        held_rlimits: With ``hold_fds``, rlimits that replace those of ``rlimits`` for
            bwrap's sandbox process only, set once it is inside its namespaces. For a
            sandbox in its own user namespace, ``RLIMIT_NPROC`` there counts only the
            processes of that namespace, so it can be the run's own budget.
        count_writes: The launcher is the program (no sandbox between): its
            :attr:`ProcessOutcome.bytes_written` is what it and every process it reaped
            wrote, read from ``/proc`` while it is a zombie (where the kernel lets an
            ordinary user read a zombie's I/O figures; root always can).
        stdin_mode: File mode of stdin's in-memory file (default: memfd's 0777). gVisor
            passes ``0o600``: a process of the run can then read the descriptor it was
            given but not reopen the file through ``/proc/<pid>/fd/0``.
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    stdin: bytes
    wall_time_s: float
    cpu_time_s: float
    max_output_bytes: int
    cwd: str | None = None
    rlimits: Sequence[tuple[int, int, int]] = ()
    cgroup: RunCgroup | None = None
    fd_map: Mapping[int, int] = field(default_factory=dict)
    want_report: bool = False
    report_path: str | None = None
    hold_fds: tuple[int, int] | None = None
    held_rlimits: Sequence[tuple[int, int, int]] = ()
    memory_bytes: int | None = None
    count_writes: bool = False
    stdin_mode: int | None = None


def memfd_with(data: bytes, name: str = "execgym") -> int:
    """Return a close-on-exec in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _open_fifo(path: str) -> tuple[int, int]:
    """Open both ends of the named pipe at ``path``, like :func:`os.pipe` (close-on-exec).

    Its buffer is raised to 1 MiB (``pipe-max-size``): gVisor cuts a write to a host
    FIFO short at what the buffer holds instead of blocking as Linux does, so a
    program's single ``write`` of up to 1 MiB arrives whole.
    """
    read_end = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        write_end = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        os.close(read_end)
        raise
    with contextlib.suppress(OSError):
        fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, _FIFO_BUFFER_BYTES)
    return read_end, write_end


def _make_preexec(spec: ProcessSpec, fd_map: dict[int, int]) -> Callable[[], None]:
    """A ``preexec_fn`` that joins the cgroup, moves descriptors and sets rlimits.

    Only for long-lived processes (sessions): a ``preexec_fn`` makes :mod:`subprocess`
    fork the whole interpreter instead of using ``vfork``, which costs several
    milliseconds per start; short runs use :func:`spawn_gated` instead.
    """
    procs_files = spec.cgroup.procs_files() if spec.cgroup else []
    rlimits = list(spec.rlimits)

    def preexec() -> None:  # runs in the child between fork and exec: keep it minimal
        pid = str(os.getpid()).encode()
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        # Move sources out of the way first: a source may sit on another's target.
        parked = {target: fcntl.fcntl(src, fcntl.F_DUPFD, 100) for target, src in fd_map.items()}
        for target, src in parked.items():
            os.dup2(src, target, inheritable=True)
            os.close(src)
        for kind, soft, hard in rlimits:  # last: RLIMIT_NOFILE would forbid the moves above
            resource.setrlimit(kind, (soft, hard))

    return preexec


_GATE_SHELL = "/bin/sh"
_DEFAULT_SIGNALS = tuple(
    s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)
)


def _gate_script(gate_fd: int, cwd: str | None) -> str:
    # Wait for one line on the gate; on EOF (we died) exit without starting anything.
    # cd sets OLDPWD, the host's directory: the program's environment is only its own.
    change_dir = f"cd -- {shlex.quote(cwd)} || exit 126; unset OLDPWD; " if cwd else ""
    return f'IFS= read -r _ <&{gate_fd} || exit 125; exec {gate_fd}<&-; {change_dir}exec "$@"'


def _find_program(argv0: str, env: Mapping[str, str]) -> str:
    found = shutil.which(argv0, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such program", argv0)
    return found


def park_descriptors(
    fds: Mapping[int, int], *, stdout: int, stderr: int, stdin: int | None
) -> dict[int, int]:
    """Private copies of a child's descriptors, ``{fd in child: copy}``, above fd 10.

    The copies belong to the spawn (:func:`spawn_held` closes them), so the caller may
    close its own at once, even if the spawn is still going on in another thread.
    """
    targets: dict[int, int | None] = {0: stdin, 1: stdout, 2: stderr, **fds}
    floor = max(*targets, 9) + 1  # above every target, the gate's (3-9) included
    parked: dict[int, int] = {}
    try:
        for target, source in targets.items():
            if source is None:
                null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                parked[target] = fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, floor)
                os.close(null)
            else:
                parked[target] = fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, floor)
    except BaseException:
        for fd in parked.values():
            os.close(fd)
        raise
    return parked


def spawn_held(spec: ProcessSpec, parked: dict[int, int]) -> tuple[int, int]:
    """Start ``spec.argv`` held before it runs anything, place it, then let it go.

    Blocking (it waits for the kernel to move the process into its cgroup, several
    milliseconds on some hosts): call it in a worker thread. The child gets the
    descriptors of ``parked`` (see :func:`park_descriptors`) on their numbers, its own
    session, default signal handling and the complete environment ``spec.env``.

    Two ways to hold it, both without forking this interpreter (``posix_spawn``):

    - ``spec.hold_fds`` set (bubblewrap's ``--info-fd`` and ``--block-fd``): bwrap
      starts at once and sets its namespaces up while we move its sandbox process
      (which has not started the program yet) into the cgroup and set its rlimits;
      then a byte on the block pipe lets it start the program.
    - otherwise ``/bin/sh`` waits on a gate pipe; its pid is placed, then one line on
      the gate lets it ``exec`` the program.

    Either way everything the program ever starts is accounted and limited.

    Returns:
        ``(pid, inner)``: the pid of the child (the launcher), leader of its own session,
        and with ``spec.hold_fds`` a pidfd of bwrap's sandbox process (the init of the
        run's PID namespace), else -1. bwrap's launcher exits as soon as the program
        does, while its init may still be killing what is left in the namespace; where
        no cgroup can be waited on, :func:`supervise` waits for that init instead.

    Raises:
        OSError: if the program is not found or the child cannot be started, placed
            or released (it is killed and reaped first).
    """
    # bwrap is ours to find; a program behind the gate is the shell's to find, on the
    # run's PATH and from its working directory: a missing one is then exit 127, the
    # program's failure as in any sandbox, not ours.
    first = _find_program(spec.argv[0], spec.env) if spec.hold_fds else spec.argv[0]
    program, *argv = [first, *spec.argv[1:]]
    # Every source of a dup2 sits above every target, so no action undoes another.
    floor = max(*parked, *(spec.hold_fds or ()), 9) + 1
    hold_read, hold_write = _above(os.pipe(), floor)
    info_read, info_write = _above(os.pipe(), floor) if spec.hold_fds else (-1, -1)
    try:
        if spec.hold_fds:
            info_fd, block_fd = spec.hold_fds
            given = {**parked, info_fd: info_write, block_fd: hold_read}
            path, full = program, [program, *argv]
        else:
            # dash reads only one-digit descriptors in redirections: take a free one.
            gate_fd = next(fd for fd in range(3, 10) if fd not in parked)
            given = {**parked, gate_fd: hold_read}
            script = _gate_script(gate_fd, spec.cwd)
            path, full = _GATE_SHELL, [_GATE_SHELL, "-c", script, "execgym-gate", program, *argv]
        closed = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds(set(given))]
        pid = os.posix_spawn(
            path,
            full,
            dict(spec.env),
            file_actions=closed
            + [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in given.items()],
            setsid=True,
            setsigmask=(),
            setsigdef=_DEFAULT_SIGNALS,
        )
    except BaseException:
        for fd in (hold_write, info_read):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (hold_read, info_write, *parked.values()):
            if fd >= 0:
                os.close(fd)
    inner = -1
    try:
        members = [pid, *([_held_child(info_read)] if spec.hold_fds else [])]
        if spec.hold_fds:
            inner = os.pidfd_open(members[-1])
        _place(spec, members)
        os.write(hold_write, b"\n")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        if inner >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(inner, signal.SIGKILL)
            os.close(inner)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(hold_write)
        if info_read >= 0:
            os.close(info_read)
    return pid, inner


def _place(spec: ProcessSpec, members: list[int]) -> None:
    """Put a held child into ``spec``'s cgroup and set its rlimits, before it runs.

    ``members`` is the launcher, then (with ``spec.hold_fds``) bwrap's sandbox process,
    which is the one placed in the cgroup and given ``spec.held_rlimits`` too.
    """
    if spec.cgroup is not None:
        spec.cgroup.add(members[-1])
    for member in members:
        for kind, soft, hard in spec.rlimits:
            resource.prlimit(member, kind, (soft, hard))
    if spec.hold_fds:
        for kind, soft, hard in spec.held_rlimits:
            resource.prlimit(members[-1], kind, (soft, hard))


_HOLD_TIMEOUT_S = 10.0


def _inherited_fds(keep: set[int]) -> list[int]:
    """This process's inheritable descriptors outside ``keep``: a child must not get them.

    execgym opens every descriptor close-on-exec, but the process it runs in may hold
    inheritable ones from whoever started it (a trainer's launcher, a shell's job
    pipe); ``posix_spawn`` would pass them on, and neither bwrap nor the program's init
    closes them, so a sandboxed program could write into a host pipe.
    """
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep:
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return found


def _above(pipe: tuple[int, int], floor: int) -> tuple[int, int]:
    """Both ends of ``pipe`` moved to descriptors at or above ``floor`` (close-on-exec)."""
    moved = []
    for fd in pipe:
        moved.append(fd if fd >= floor else fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor))
        if moved[-1] != fd:
            os.close(fd)
    return moved[0], moved[1]


def _held_child(info_read: int) -> int:
    """The pid of bwrap's sandbox process, from the JSON bwrap writes on ``--info-fd``."""
    data = b""
    deadline = time.monotonic() + _HOLD_TIMEOUT_S
    while b"}" not in data:
        ready, _, _ = select.select([info_read], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(info_read, 4096) if ready else b""
        if not chunk:
            raise OSError(errno.EIO, "bwrap ended or said nothing before its sandbox started")
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError) as error:
        raise OSError(errno.EIO, f"bwrap's --info-fd said {data[:200]!r}") from error


async def spawn(
    spec: ProcessSpec, fds: Mapping[int, int], *, stdout: int, stderr: int, stdin: int | None
) -> tuple[int, int]:
    """:func:`spawn_held` in a worker thread, so the event loop never waits on the kernel.

    If this coroutine is cancelled while the thread runs, the thread's child is killed
    and reaped when the thread is done: nothing it started outlives the cancellation.
    """
    parked = park_descriptors(fds, stdout=stdout, stderr=stderr, stdin=stdin)
    task = asyncio.ensure_future(asyncio.to_thread(spawn_held, spec, parked))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_reclaim_spawned(spec.cgroup))
        raise


def _reclaim_spawned(
    cgroup: RunCgroup | None,
) -> Callable[[asyncio.Future[tuple[int, int]]], None]:
    def reclaim(task: asyncio.Future[tuple[int, int]]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        pid, inner = task.result()
        _kill_tree(pid, cgroup)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        if inner >= 0:
            _kill_inner(inner)
            os.close(inner)

    return reclaim


def _kill_tree(pid: int, cgroup: RunCgroup | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill()


def _kill_inner(inner: int) -> None:
    """SIGKILL the init of a run's PID namespace through its pidfd, if it is still there.

    The kernel then kills every process left in the namespace.
    """
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(inner, signal.SIGKILL)


async def _wait_inner(inner: int, timeout_s: float = 5.0) -> None:
    """Kill the namespace's init and wait until it (so every process of the run) is gone.

    Its pidfd becomes readable only once the init has exited, which it does only after
    the kernel has killed and reaped the rest of its namespace.
    """
    _kill_inner(inner)
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    loop.add_reader(inner, resolve, gone)
    try:
        await asyncio.wait({gone}, timeout=timeout_s)
    finally:
        loop.remove_reader(inner)


@dataclass(frozen=True, slots=True)
class Launched:
    """A started process tree: its launcher's pid and the read ends of its pipes.

    ``inner`` is a pidfd of the init of the run's PID namespace (bwrap's sandbox
    process), or -1; whoever ends the run closes it.
    """

    pid: int
    read_ends: dict[str, int]
    inner: int = -1


async def launch(spec: ProcessSpec) -> Launched:
    """Start ``spec.argv`` with pipes on stdout, stderr (and fd 3 with ``want_report``).

    Raises:
        OSError: if the process could not be started (its pipes are closed first).
    """
    report_path = spec.report_path
    pipes = RunPipes(
        want_report=spec.want_report,
        report=(lambda: _open_fifo(report_path)) if report_path else os.pipe,
    )
    writes = pipes.write_ends
    fd_map = dict(spec.fd_map)
    if spec.want_report:
        fd_map[REPORT_FD] = writes["report"]
    stdin_fd = memfd_with(spec.stdin, "execgym-stdin") if spec.stdin else None
    try:
        if stdin_fd is not None and spec.stdin_mode is not None:
            os.fchmod(stdin_fd, spec.stdin_mode)
        pid, inner = await spawn(
            spec, fd_map, stdout=writes["stdout"], stderr=writes["stderr"], stdin=stdin_fd
        )
    except BaseException:
        pipes.close_read_ends()
        raise
    finally:
        pipes.close_write_ends()
        if stdin_fd is not None:
            os.close(stdin_fd)
    return Launched(pid, pipes.read_ends, inner)


async def run_process(spec: ProcessSpec) -> ProcessOutcome:
    """Start ``spec.argv``, enforce its wall and CPU clocks and output caps, and reap it.

    Returns:
        The raw :class:`ProcessOutcome`; the whole tree is dead when this returns.

    Raises:
        OSError: if the process could not be started (the caller reports a sandbox error).
    """
    started = time.monotonic()
    return await supervise(spec, await launch(spec), started=started)


async def supervise(spec: ProcessSpec, launched: Launched, *, started: float) -> ProcessOutcome:
    """Enforce ``spec``'s clocks and output caps on a launched tree, and reap it.

    Args:
        spec: The run's limits (``wall_time_s``, ``cpu_time_s``, ``max_output_bytes``)
            and cgroup.
        launched: The started tree; its pipes are owned and closed here.
        started: ``time.monotonic()`` when the run's clock started.

    Returns:
        The raw :class:`ProcessOutcome`; the whole tree is dead when this returns.
    """
    loop = asyncio.get_running_loop()
    pid = launched.pid
    sampled_cpu_s = [0.0]

    measured = spec.cgroup is not None and spec.cgroup.measures_cpu

    def kill() -> None:
        if not measured:
            # Killed processes are never reaped into rusage: read their clocks first.
            sampled_cpu_s[0] = tree_cpu_time_s(pid, stop=True)
        _kill_tree(pid, spec.cgroup)

    reaped = False
    try:
        async with supervised(
            launched.read_ends, max_output_bytes=spec.max_output_bytes, kill=kill
        ) as watcher:
            pidfd = os.pidfd_open(pid)
            exited: asyncio.Future[object] = loop.create_future()
            loop.add_reader(pidfd, resolve, exited)
            try:
                await watcher.watch(
                    exited,
                    started=started,
                    wall_time_s=spec.wall_time_s,
                    cpu_time_s=spec.cpu_time_s,
                    cgroup=spec.cgroup,
                    sample_cpu=None if measured else (lambda: tree_cpu_time_s(pid)),
                    sample_memory=None
                    if spec.memory_bytes is None
                    else (lambda: tree_rss_bytes(pid)),
                    memory_bytes=spec.memory_bytes,
                )
                # Read while the launcher is a zombie: its I/O figures are final.
                written = total_bytes_written(pid) if spec.count_writes else None
                # The pidfd said it exited: a zombie is reaped at once, nothing blocks.
                _, wait_status, usage = os.wait4(pid, 0)  # noqa: ASYNC222
                reaped = True
                ended = time.monotonic()
                _kill_tree(pid, spec.cgroup)  # orphans and daemons die with the run
                if launched.inner >= 0 and spec.cgroup is None:
                    await _wait_inner(launched.inner)  # no cgroup to empty: the PID ns then
                await watcher.drain()
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
    finally:
        if not reaped:
            _kill_tree(pid, spec.cgroup)
            with contextlib.suppress(ChildProcessError):  # SIGKILLed just above: it ends at once
                os.waitpid(pid, 0)  # noqa: ASYNC222
        if launched.inner >= 0:
            _kill_inner(launched.inner)
            os.close(launched.inner)
    outcome = outcome_of(
        watcher,
        wait_status=wait_status,
        wall_time_s=ended - started,
        cgroup=spec.cgroup,
        rusage_cpu_s=max(usage.ru_utime + usage.ru_stime, sampled_cpu_s[0], watcher.sampled_cpu_s),
        rusage_peak_bytes=(
            # Sampled (no cgroup): the launcher's rusage would count our own memory, which
            # posix_spawn's child shares until it execs; a run too short to be sampled
            # has no figure.
            (watcher.sampled_peak_bytes or None)
            if spec.memory_bytes is not None
            else usage.ru_maxrss * 1024
        ),
    )
    return dataclasses.replace(outcome, bytes_written=written)

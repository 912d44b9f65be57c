"""The warm pool: a fork server inside one bwrap sandbox, so rollouts skip start-up.

A rollout in a fresh sandbox pays for ``bwrap`` and for starting the Python interpreter
(about 20 ms here). :class:`WarmPoolSandbox` starts one zygote ahead of time: a Python
interpreter inside a bwrap sandbox that has already imported the modules rollouts
commonly use. For each Python run it forks a child which gets, before any untrusted
code exists in it, everything a fresh bwrap sandbox gives: its own cgroup (memory,
processes, CPU), new mount, PID, network (or a reused one verified to hold no socket),
IPC and UTS namespaces, a private tmpfs ``/work`` and ``/tmp``, a fresh ``/proc`` and
``/dev/pts``, as root a host uid no other live run has (from a block of uids the pool
leases, see :mod:`execgym.sandbox._uids`; as an ordinary user uid 0 of the pool's user
namespace, i.e. yours) with no capabilities,
``no_new_privs``, the same seccomp filter, and only the run's own descriptors. The
zygote never runs user code and never reads a job's contents (they travel in
descriptors it only hands on), so one rollout cannot see another's. See
:mod:`execgym.guest.zygote` for the child's steps.

Non-Python programs (``run(argv)``) go to a plain :class:`BubblewrapSandbox`.

>>> async with WarmPoolSandbox() as box:                          # doctest: +SKIP
...     result = await box.run_python(b"print('hi')")
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import resource
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

from execgym import guest
from execgym.errors import SandboxSetupFailed, SandboxUnavailable, TaskError
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox._cgroup import RunCgroup, detect_cgroups
from execgym.sandbox._paths import safe_relative
from execgym.sandbox._process import memfd_with, outcome_of
from execgym.sandbox._python import python_command
from execgym.sandbox._results import interpret, sandbox_error
from execgym.sandbox._run import BASE_ENV, check_exec_size, enforcement_of
from execgym.sandbox._seccomp import seccomp_program
from execgym.sandbox._supervise import Supervisor
from execgym.sandbox._trusted import (
    TrustedProgram,
    marshal_tag,
    registered_programs,
    trusted_program,
)
from execgym.sandbox._uids import UidBlock
from execgym.sandbox.base import RunResult
from execgym.sandbox.bwrap import (
    SANDBOX_UID,
    WORK_DIR,
    BubblewrapSandbox,
    ReadOnlyPath,
    default_read_only_paths,
    read_only_binds,
    resolve_paths,
    system_binds,
)

log = logging.getLogger(__name__)

_CGROUP_MOUNT = "/run/execgym-cgroup"
_ZYGOTE_CAPS = (
    "CAP_SYS_ADMIN",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_KILL",
    "CAP_NET_ADMIN",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_DAC_OVERRIDE",
)
_START_TIMEOUT_S = 10.0
MAX_ENV_BYTES = 128 * 1024
"""The largest environment (as JSON, bytes) a pooled run takes: a run's header, its
environment included, is one message to the zygote, and Linux caps a Unix socket
message near 208 KiB (``net.core.wmem_default``)."""
_runs = itertools.count(1)


def _procs_in_zygote(cgroup: RunCgroup | None) -> list[str]:
    """The ``cgroup.procs`` paths of ``cgroup`` as the zygote sees them."""
    dirs = cgroup.dirs.items() if cgroup else []
    return [f"{_CGROUP_MOUNT}/{key}/{path.name}/cgroup.procs" for key, path in dirs]


def _archive(files: Mapping[str, bytes]) -> bytes:
    """Pack files for the zygote: per file, name size (4 bytes), name, size (8), data."""
    parts = []
    for name, content in files.items():
        encoded = str(safe_relative(name)).encode("utf-8")
        parts += [
            len(encoded).to_bytes(4, "little"),
            encoded,
            len(content).to_bytes(8, "little"),
            content,
        ]
    return b"".join(parts)


def _zygote_polls(limits: Limits, cgroup: RunCgroup | None) -> dict[str, float]:
    """What the zygote samples and enforces for a run, where no cgroup does it.

    ``{"cpu_time_s": s, "memory_bytes": n}`` (either or both, or empty): the run's whole
    tree is read from the zygote's ``/proc`` every 50 ms and killed past either figure.
    """
    poll: dict[str, float] = {}
    if cgroup is None or not cgroup.measures_cpu:
        poll["cpu_time_s"] = limits.cpu_time_s
    if cgroup is None or "memory_bytes" not in cgroup.enforced:
        poll["memory_bytes"] = limits.memory_bytes
    return poll


def _raise_open_file_limit() -> None:
    """Raise this process's soft limit of open files to its hard limit (once, best effort).

    Each run in flight holds a few descriptors here (its output pipes); hundreds at
    once pass an ordinary user's usual soft limit of 1024, and those runs then failed
    with EMFILE. The hard limit is the user's own ceiling; nothing is raised past it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        log.debug("warm pool: raised the open-file limit from %d to %d", soft, hard)
    except (OSError, ValueError):
        pass  # keep it: past it, each run fails alone (EMFILE), not the pool


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _new_cgroups(count: int) -> list[RunCgroup]:
    """Up to ``count`` new cgroups for staged inits (fewer where they cannot be made)."""
    made = []
    for _ in range(count):
        try:
            cgroup = RunCgroup.create(DEFAULT_LIMITS, prefix="execgym-staged")
        except OSError as error:
            log.debug("warm pool: could not stage a run: %s", error)
            break
        if cgroup is None:
            break
        made.append(cgroup)
    return made


class WarmPoolSandbox:
    """Python runs forked from a warm zygote; each as isolated as a fresh bwrap sandbox.

    Use it as an async context manager (or call :meth:`aclose`): the zygote starts on
    first use and is killed, with everything it forked, on close or if execgym dies.

    Args:
        read_only_paths: Host directories exposed read-only, as for
            :class:`BubblewrapSandbox` (default: the interpreter's prefix).

    Raises:
        SandboxUnavailable: if bwrap, or the seccomp filter, is not available.
    """

    name = "bwrap"

    def __init__(self, *, read_only_paths: Sequence[ReadOnlyPath] | None = None) -> None:
        self._fresh = BubblewrapSandbox(read_only_paths=read_only_paths)
        found = shutil.which("bwrap")
        if found is None:  # BubblewrapSandbox() above would have raised already
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
        self._bwrap = found
        paths = default_read_only_paths() if read_only_paths is None else read_only_paths
        self._read_only = resolve_paths(paths)
        self._as_root = os.geteuid() == 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._began: dict[int, asyncio.Future[None]] = {}  # set when the zygote starts it
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._lock = asyncio.Lock()
        self._staged: collections.deque[tuple[int, RunCgroup]] = collections.deque()
        self._stage_target = max(2, os.cpu_count() or 1)
        self._making: asyncio.Future[list[RunCgroup]] | None = None  # cgroups to stage in
        self._maker: ThreadPoolExecutor | None = None  # makes them, off the event loop
        self._later: set[asyncio.Task[None]] = set()  # kills waiting for the zygote to read
        self._preloaded: set[str] = set()  # trusted programs the running zygote holds
        self._loads_marshal = False  # whether the zygote's interpreter loads our code
        self._uids: UidBlock | None = None  # the running zygote's run uids (as root)

    async def __aenter__(self) -> WarmPoolSandbox:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _zygote_argv(self, control_fd: int, uids: UidBlock | None = None) -> list[str]:
        argv = [
            self._bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        if not self._as_root:
            argv += ["--unshare-user", "--uid", "0", "--gid", "0"]
        argv += ["--cap-drop", "ALL"]
        for cap in _ZYGOTE_CAPS:
            argv += ["--cap-add", cap]
        argv += system_binds()
        argv += read_only_binds(self._read_only)
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", WORK_DIR]
        for key, parent in detect_cgroups().parents.items():
            argv += ["--bind", str(parent), f"{_CGROUP_MOUNT}/{key}"]
        source = guest.bundle("zygote")
        return [
            *argv,
            "--chdir",
            WORK_DIR,
            "--",
            *python_command("-c")[:-1],
            "-c",
            source,
            str(uids.first if uids else 0),
            str(uids.size if uids else 0),
            str(control_fd),
        ]

    async def start(self) -> None:
        """Start the zygote if it is not running.

        Raises:
            SandboxSetupFailed: if it does not come up within 10 s (the message has its
                error output).
        """
        async with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            if self._proc is not None:  # it died: fail what it had, free what it held
                self._broken("the warm pool's zygote exited")
                log.warning("warm pool zygote exited: %s", self._stop_zygote()[-2000:])
            await self._start()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        _raise_open_file_limit()
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if self._as_root and self._uids is None:
            self._uids = UidBlock.lease()  # the zygote hands each run a uid of its own
        self._proc = subprocess.Popen(
            self._zygote_argv(zygote_end.fileno(), self._uids),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(zygote_end.fileno(),),
            env=dict(BASE_ENV),
            start_new_session=True,
        )
        zygote_end.close()
        host_end.setblocking(False)
        self._control = host_end
        self._ready = loop.create_future()
        loop.add_reader(host_end.fileno(), self._on_message)
        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                await self._ready
        except (TimeoutError, SandboxSetupFailed) as error:
            errors = self._stop_zygote()
            raise SandboxSetupFailed(f"the warm pool's zygote did not start: {errors}") from error
        self._preloaded = set()
        self._loads_marshal = self._ready.result().get("cache_tag") == marshal_tag()
        for trusted in registered_programs():  # before staging: staged inits inherit them
            self._send_preload(trusted)
        for network in ("none", "loopback"):
            program = seccomp_program(network).hex()
            host_end.send(json.dumps({"seccomp": program, "network": network}).encode())
        self._replenish()
        if self._making is not None:  # the first runs find their inits staged
            with contextlib.suppress(Exception):
                await self._making

    def _on_message(self) -> None:
        assert self._control is not None
        try:
            message = self._control.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            message = b""
        if not message:
            self._broken("the warm pool's zygote exited")
            return
        body = json.loads(message)
        if "ready" in body:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(body)
            return
        began = self._began.pop(body.get("began", body.get("run")), None)
        if began is not None and not began.done():
            at = body.get("at") if "began" in body else None
            began.set_result(at if isinstance(at, int | float) else None)
        if "began" in body:
            return
        future = self._pending.pop(body["run"], None)
        if future is not None and not future.done():
            future.set_result(body)

    def _broken(self, why: str) -> None:
        if self._control is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self._control.fileno())
        error = SandboxSetupFailed(why)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
        for future in [*self._pending.values(), *self._began.values()]:
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._began.clear()

    def _stop_zygote(self) -> str:
        errors = ""
        if self._control is not None:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                loop = asyncio.get_running_loop()
                loop.remove_reader(self._control.fileno())
                loop.remove_writer(self._control.fileno())  # a send waiting for room
            self._control.close()
            self._control = None
        for task in self._later:
            task.cancel()
        self._later.clear()
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, 9)
            self._proc.wait()
            if self._proc.stderr is not None:
                errors = self._proc.stderr.read(4000).decode("utf-8", "replace")
                self._proc.stderr.close()
            self._proc = None
        self._drop_staged()  # the zygote, and the inits it staged, are gone
        if self._uids is not None:  # every run of the zygote is gone with it
            self._uids.release()
            self._uids = None
        return errors

    def _take_slot(self, limits: Limits) -> tuple[int | None, RunCgroup | None]:
        """A staged init and its cgroup, given the run's limits; else a new cgroup.

        Raises:
            OSError: if a new cgroup cannot be made.
        """
        if self._staged:
            slot, cgroup = self._staged.popleft()
            cgroup.apply(limits)
            return slot, cgroup
        return None, RunCgroup.create(limits)

    def _replenish(self) -> None:
        """Stage inits (each in its own new cgroup) up to the target; best effort.

        Staging only pays where joining a cgroup is slow, so it needs cgroups; a failure
        here costs the next runs speed, never correctness (they make their own). The
        cgroups are made on a thread of the pool's own: on cgroup v1 each ``mkdir``
        blocks for 0.2 ms or more, which the event loop, and so every other run on it,
        would otherwise wait for.
        """
        if self._control is None or self._making is not None:
            return
        wanted = self._stage_target - len(self._staged)
        if wanted <= 0:
            return
        if self._maker is None:
            self._maker = ThreadPoolExecutor(1, thread_name_prefix="execgym-pool-staging")
        control = self._control
        making = asyncio.get_running_loop().run_in_executor(self._maker, _new_cgroups, wanted)
        making.add_done_callback(lambda done: self._stage(done, control))
        self._making = making

    def _stage(self, done: asyncio.Future[list[RunCgroup]], control: socket.socket) -> None:
        """Have the zygote stage an init in each cgroup made (on the event loop)."""
        self._making = None
        cgroups = [] if done.cancelled() or done.exception() else done.result()
        for cgroup in cgroups:
            if self._control is not control:  # closed, or restarted, meanwhile
                cgroup.remove_soon()
                continue
            slot = next(_runs)
            try:
                control.send(
                    json.dumps({"stage": slot, "cgroup_procs": _procs_in_zygote(cgroup)}).encode()
                )
            except OSError:
                cgroup.remove_soon()
                continue
            self._staged.append((slot, cgroup))
        if cgroups and self._control is control:
            self._replenish()  # runs may have taken slots while these were made

    def _drop_staged(self) -> None:
        while self._staged:
            _, cgroup = self._staged.popleft()
            cgroup.remove()

    async def aclose(self) -> None:
        """Kill the zygote and every run it forked; idempotent."""
        self._broken("the warm pool was closed")
        self._stop_zygote()
        if self._making is not None:  # its cgroups are removed once made (see _stage)
            with contextlib.suppress(Exception):
                await self._making
        if self._maker is not None:
            self._maker.shutdown(wait=False)
            self._maker = None

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
        """Run any program in a fresh bwrap sandbox (the pool only serves Python)."""
        return await self._fresh.run(
            argv, stdin=stdin, files=files, limits=limits, env=env, want_report=want_report
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
        """Run a Python script forked from the warm zygote; see :meth:`Sandbox.run_python`.

        Raises:
            TaskError: if a file name would escape the work dir, an environment entry
                is over Linux's 128 KiB, or the whole environment over
                :data:`MAX_ENV_BYTES` (it travels in one message to the zygote).
        """
        archive = _archive(files or {})
        full_env = {**BASE_ENV, "HOME": WORK_DIR, "TMPDIR": "/tmp", **(env or {})}
        check_exec_size(["python"], full_env)
        size = len(json.dumps(full_env))
        if size > MAX_ENV_BYTES:
            raise TaskError(
                f"the environment takes {size} bytes; the warm pool passes at most "
                f"{MAX_ENV_BYTES}: pass large data as a file, or run without the warm pool"
            )
        try:
            await self.start()
        except SandboxSetupFailed as error:
            return sandbox_error(self.name, str(error))
        try:
            slot, cgroup = self._take_slot(limits)
        except OSError as error:
            return sandbox_error(self.name, f"could not create the run's cgroup: {error}")
        try:
            return await self._run_forked(
                source, stdin, archive, limits, full_env, want_report, cgroup, slot
            )
        except (OSError, SandboxSetupFailed) as error:
            return sandbox_error(self.name, f"the warm pool could not run it: {error}")
        finally:
            if cgroup is not None:
                cgroup.remove_soon()

    def _forget(self, task: asyncio.Task[None]) -> None:
        """A kill sent later is done: drop it, its failure included (the pool closed)."""
        self._later.discard(task)
        if not task.cancelled():
            task.exception()

    async def _send(
        self, message: bytes, fds: Sequence[int], *, deadline_s: float | None = _START_TIMEOUT_S
    ) -> None:
        """Send one message (and descriptors) to the zygote, waiting while it is behind.

        The control socket is non-blocking: with hundreds of runs started at once, its
        buffer fills and ``sendmsg`` fails with EAGAIN until the zygote reads.

        Args:
            message: The JSON header.
            fds: Descriptors to pass with it (``SCM_RIGHTS``).
            deadline_s: Give up after this many seconds without room (``None``: wait
                as long as the zygote lives, as a kill must).

        Raises:
            OSError: if the zygote is gone, or took nothing for ``deadline_s``.
        """
        loop = asyncio.get_running_loop()
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        deadline = None if deadline_s is None else loop.time() + deadline_s
        while True:
            control = self._control
            if control is None:
                raise OSError("the warm pool's zygote is gone")
            try:
                control.sendmsg([message], ancillary)
                return
            except BlockingIOError:
                if deadline is not None and loop.time() > deadline:
                    why = f"the warm pool's zygote took no job for {_START_TIMEOUT_S:g} s"
                    raise OSError(why) from None
            writable = loop.create_future()
            fd = control.fileno()
            loop.add_writer(fd, _set_once, writable)
            try:
                async with asyncio.timeout(0.1):  # re-checked: the pool may close meanwhile
                    await writable
            except TimeoutError:
                pass  # no room yet: try again, and see whether the pool closed meanwhile
            finally:
                if self._control is control:  # else _stop_zygote removed it, and closed fd
                    with contextlib.suppress(ValueError, OSError):
                        loop.remove_writer(fd)

    def _preload(self, source: bytes) -> str | None:
        """The key of ``source``'s preloaded code in the zygote, if it is a trusted program.

        The first run of a registered harness sends its code to the zygote; runs then
        name it instead of having it parsed each time. The script still travels with
        every run, for an init staged before the code arrived.
        """
        trusted = trusted_program(source)
        if trusted is None or not self._send_preload(trusted):
            return None
        return trusted.key

    def _send_preload(self, trusted: TrustedProgram) -> bool:
        """Have the zygote hold ``trusted``'s code (once); whether it can."""
        if not self._loads_marshal or self._control is None:
            return False
        if trusted.key not in self._preloaded:
            code = memfd_with(trusted.code, "execgym-preload")
            try:
                self._control.sendmsg(
                    [json.dumps({"preload": trusted.key, "entry": trusted.entry}).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [code]))],
                )
            finally:
                os.close(code)
            self._preloaded.add(trusted.key)
        return True

    async def _run_forked(
        self,
        source: bytes,
        stdin: bytes,
        archive: bytes,
        limits: Limits,
        env: Mapping[str, str] | None,
        want_report: bool,
        cgroup: RunCgroup | None,
        slot: int | None,
    ) -> RunResult:
        loop = asyncio.get_running_loop()
        rlimits, how = enforcement_of(
            limits, cgroup, backend=self._fresh.enforcement(limits), polls_tree=False
        )
        names = ("stdout", "stderr", "report") if want_report else ("stdout", "stderr")
        pipes: dict[str, tuple[int, int]] = {}
        given: list[int] = []
        try:  # EMFILE part-way (hundreds of runs at once) must not leak what was opened
            for name in names:
                pipes[name] = os.pipe()
            given += [
                memfd_with(stdin, "execgym-stdin") if stdin else os.open(os.devnull, os.O_RDONLY)
            ]
            given += [pipes["stdout"][1], pipes["stderr"][1]]
            given += [pipes["report"][1]] if want_report else []
            given += [memfd_with(archive, "execgym-files")]
            given += [memfd_with(source, "execgym-script")]
        except OSError:
            for fd in {*given, *(fd for ends in pipes.values() for fd in ends)}:
                os.close(fd)
            raise
        run_id = next(_runs)
        program = self._preload(source)
        poll = _zygote_polls(limits, cgroup)
        if "cpu_time_s" in poll:
            how["cpu_time_s"] = (
                "whole tree sampled from /proc every 50 ms by the zygote + rlimit (per process)"
            )
        if "memory_bytes" in poll:
            how["memory_bytes"] = (
                "whole tree's resident memory sampled from /proc every 50 ms by the zygote + "
                + how["memory_bytes"]
            )
        header = {
            "run": run_id,
            "slots": [0, 1, 2, 3, 4, 5] if want_report else [0, 1, 2, 4, 5],
            "rlimits": rlimits,
            "uid": SANDBOX_UID if self._as_root else None,
            "network": limits.network,
            "disk_bytes": limits.disk_bytes,
            "env": env,
            "cgroup_procs": _procs_in_zygote(cgroup),
            "staged": slot,
            "program": program,
            "poll": poll,
        }
        exited: asyncio.Future[dict[str, Any]] = loop.create_future()
        began: asyncio.Future[float | None] = loop.create_future()
        self._pending[run_id] = exited
        self._began[run_id] = began

        def abandon() -> None:  # the run will not be watched: forget it, free our ends
            self._pending.pop(run_id, None)
            self._began.pop(run_id, None)
            for future in (exited, began):  # failed by _broken meanwhile, perhaps: read it
                if future.done() and not future.cancelled():
                    future.exception()
            for read_end, _ in pipes.values():
                os.close(read_end)

        sent = time.monotonic()
        try:
            await self._send(json.dumps(header).encode(), given)
        except BaseException:
            abandon()
            raise
        finally:
            for fd in given:
                os.close(fd)
        self._replenish()
        try:
            # The clocks start when the zygote starts the run, not while the job waits
            # in its queue (hundreds at once on a busy machine): a run is never timed
            # out for our queue, and a kill never goes to a run not forked yet.
            zygote_began = await began
        except BaseException:
            abandon()
            raise
        started = time.monotonic()
        # The wall time reported is the zygote's (CLOCK_MONOTONIC, the host's too: no time
        # namespace): this coroutine may resume much later on a busy event loop, even
        # after the run ended (its wall time was then near 0, which --calibrate-limits
        # took for the reference's). The limit is still enforced from `started`: a run
        # is never timed out for our event loop's lateness.
        began_at = started
        if zygote_began is not None and sent <= zygote_began <= started:
            began_at = zygote_began

        def kill() -> None:
            if cgroup is not None:
                # One pass, not a wait on the event loop (the removal kills until empty);
                # the zygote also kills the run's PID 1 by its pid, which takes the
                # whole PID namespace with it, even one still joining its cgroup.
                cgroup.kill(until_empty=False)
            if self._control is not None:
                message = json.dumps({"kill": run_id}).encode()
                try:
                    self._control.send(message)
                except BlockingIOError:  # the zygote is behind: send it when it can take it
                    task = loop.create_task(self._send(message, [], deadline_s=None))
                    self._later.add(task)
                    task.add_done_callback(self._forget)
                except OSError:
                    pass  # the zygote is gone, and its runs with it

        watcher = Supervisor(
            {name: ends[0] for name, ends in pipes.items()},
            max_output_bytes=limits.max_output_bytes,
            kill=kill,
        )
        try:
            await watcher.watch(
                exited,
                started=started,
                wall_time_s=limits.wall_time_s,
                cpu_time_s=limits.cpu_time_s,
                cgroup=cgroup,
            )
            ended = time.monotonic()
            body = exited.result()
            at = body.get("at")
            if isinstance(at, int | float) and began_at <= at <= ended:
                ended = at  # when the zygote saw the run end, not when we got round to it
            if "error" in body:
                raise SandboxSetupFailed(body["error"])
            if cgroup is not None:
                # Its PID 1 killed and reaped every other process before reporting (or,
                # killed itself, took them with it): one pass, not a wait on the loop.
                cgroup.kill(until_empty=False)
            await watcher.drain()
        finally:
            self._pending.pop(run_id, None)
            watcher.close()
        outcome = outcome_of(
            watcher,
            wait_status=body["status"],
            wall_time_s=ended - began_at,
            cgroup=cgroup,
            rusage_cpu_s=body["cpu_s"],
            rusage_peak_bytes=max(body["maxrss_kb"] * 1024, body.get("peak_bytes", 0)),
        )
        outcome = dataclasses.replace(
            outcome,
            killed_for=outcome.killed_for or body.get("killed_for"),  # the zygote's sampling
            processes_started=body.get("processes"),
            bytes_written=body.get("written"),
        )
        how["reclaim"] = "pid namespace per run, forked from the warm pool's zygote"
        return interpret(
            outcome,
            isolation=self.name,
            enforcement=how,
            shifted_signals=True,
            memory_bytes=limits.memory_bytes,
        )

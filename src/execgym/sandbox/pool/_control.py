"""The warm pool's zygote as the host sees it: its process and its control socket.

:class:`ZygoteControl` starts the zygote (a Python interpreter in one bwrap sandbox,
running :mod:`execgym.guest.zygote`), sends it jobs and kills over a
``SOCK_SEQPACKET`` socket (descriptors travel with them as ``SCM_RIGHTS``), routes its
answers to the run waiting for them, and kills it with everything it forked.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import logging
import os
import resource
import socket
import subprocess
from collections.abc import Sequence
from typing import Any

from execgym import guest
from execgym.environments.model import Environment
from execgym.environments.mounts import bwrap_root_args, remap_argv
from execgym.errors import SandboxSetupFailed
from execgym.sandbox._cgroup import detect_cgroups
from execgym.sandbox._process import memfd_with
from execgym.sandbox._python import python_command
from execgym.sandbox._run import BASE_ENV
from execgym.sandbox._seccomp import seccomp_program
from execgym.sandbox._supervise import stop_guest
from execgym.sandbox._trusted import TrustedProgram, marshal_tag, registered_programs
from execgym.sandbox._uids import UidBlock
from execgym.sandbox.bwrap import WORK_DIR, read_only_binds, system_binds

log = logging.getLogger(__name__)

CGROUP_MOUNT = "/run/execgym-cgroup"
"""Where the zygote sees the host's run cgroup parents (one directory per controller)."""
START_TIMEOUT_S = 10.0
"""Seconds the zygote has to come up, and a job to be taken by it."""
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


ZYGOTE_BOOTSTRAP = "import sys; exec(compile(sys.argv[1], '<zygote>', 'exec'))"
"""The zygote's ``-c`` program: it compiles the zygote's source (its first argument) and runs it.

The source is not the ``-c`` program itself: CPython keeps the syntax tree of a ``-c``
program until that program returns, and the zygote's never does. Its tree (about 2.8 MiB
for 50 KB of source) stayed in the zygote, and every run's fork copied it: compiled
with ``compile()``, it is freed before the zygote serves (see ``trim_heap`` in
:mod:`execgym.guest.zygote_world`)."""


ZYGOTE_ENV = {**BASE_ENV, "LD_BIND_NOW": "1"}
"""The zygote's own environment (each run's is set in its fork, see ``set_environ``).

``LD_BIND_NOW``: the dynamic linker binds every symbol of the interpreter, libpython
and libc when the zygote starts, instead of the first call of each in each process that
makes it; otherwise each fork that first calls a function writes its PLT slot (a page
fault and a lookup in every call's fork): 207 -> 195 page faults per call's fork.
Extension modules are bound at load anyway (``sys.getdlopenflags()`` is ``RTLD_NOW``);
programs a run starts get the run's environment, without it."""


def zygote_source() -> str:
    """The zygote's program: the guest bundle ``zygote`` (see :data:`execgym.guest.BUNDLES`)."""
    return guest.bundle("zygote")


class ZygoteControl:
    """The zygote process and its control socket; one zygote at a time.

    Args:
        bwrap: The ``bwrap`` binary.
        read_only: Resolved ``(host, inside)`` directories the zygote sees read-only.
        environment: The root file system the zygote and its runs see (``None``: the
            host's); the zygote runs the environment's own Python.

    Attributes:
        proc: The zygote's ``bwrap``, while one was started and not stopped.
        control: Our end of the control socket, while the zygote runs.
        pending: ``{run id: future}`` of each run's end report.
        began: ``{run id: future}`` set when the zygote starts the run (with its clock).
    """

    def __init__(
        self,
        bwrap: str,
        read_only: Sequence[tuple[str, str]],
        environment: Environment | None = None,
    ) -> None:
        self._bwrap = bwrap
        self._read_only = read_only
        self._environment = environment
        self.as_root = os.geteuid() == 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.began: dict[int, asyncio.Future[Any]] = {}
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._later: set[asyncio.Task[None]] = set()  # kills waiting for the zygote to read
        self._preloaded: set[str] = set()  # trusted programs the running zygote holds
        self._loads_marshal = False  # whether the zygote's interpreter loads our code
        self._uids: UidBlock | None = None  # the running zygote's run uids (as root)

    def running(self) -> bool:
        """Whether a zygote was started and is still alive."""
        return self.proc is not None and self.proc.poll() is None

    def argv(self, control_fd: int, uids: UidBlock | None = None) -> list[str]:
        """The ``bwrap`` command line that starts the zygote on ``control_fd``."""
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
        if not self.as_root:
            argv += ["--unshare-user", "--uid", "0", "--gid", "0"]
        argv += ["--cap-drop", "ALL"]
        for cap in _ZYGOTE_CAPS:
            argv += ["--cap-add", cap]
        if self._environment is None:
            argv += system_binds()
        else:
            argv += bwrap_root_args(self._environment)
        argv += read_only_binds(self._read_only)
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", WORK_DIR]
        for key, parent in detect_cgroups().parents.items():
            argv += ["--bind", str(parent), f"{CGROUP_MOUNT}/{key}"]
        return [
            *argv,
            "--chdir",
            WORK_DIR,
            "--",
            *remap_argv(python_command("-c")[:-1], self._environment),
            "-c",
            ZYGOTE_BOOTSTRAP,
            zygote_source(),
            str(uids.first if uids else 0),
            str(uids.size if uids else 0),
            str(control_fd),
        ]

    async def start(self) -> None:
        """Start the zygote and wait until it is ready for jobs.

        Raises:
            SandboxSetupFailed: if it does not come up within ``START_TIMEOUT_S`` (the
                message has its error output).
        """
        loop = asyncio.get_running_loop()
        _raise_open_file_limit()
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if self.as_root and self._uids is None:
            self._uids = UidBlock.lease()  # the zygote hands each run a uid of its own
        # Popen returns once the child has exec'd (no wait); the zygote speaks over its
        # own socket, not asyncio's pipes, so asyncio's subprocess transport adds nothing.
        self.proc = subprocess.Popen(  # noqa: ASYNC220
            self.argv(zygote_end.fileno(), self._uids),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(zygote_end.fileno(),),
            env=ZYGOTE_ENV,
            start_new_session=True,
        )
        zygote_end.close()
        host_end.setblocking(False)
        self.control = host_end
        self._ready = loop.create_future()
        loop.add_reader(host_end.fileno(), self._on_message)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await self._ready
        except (TimeoutError, SandboxSetupFailed) as error:
            errors = self.stop()
            raise SandboxSetupFailed(f"the warm pool's zygote did not start: {errors}") from error
        self._preloaded = set()
        self._loads_marshal = self._ready.result().get("cache_tag") == marshal_tag()
        for trusted in registered_programs():  # before staging: staged inits inherit them
            self.send_preload(trusted)
        for network in ("none", "loopback"):
            program = seccomp_program(network).hex()
            host_end.send(json.dumps({"seccomp": program, "network": network}).encode())

    def _on_message(self) -> None:
        if self.control is None:  # its reader is removed before the socket is closed
            return
        try:
            message = self.control.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            message = b""
        if not message:
            self.broken("the warm pool's zygote exited")
            return
        body = json.loads(message)
        if "ready" in body:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(body)
            return
        began = self.began.pop(body.get("began", body.get("run")), None)
        if began is not None and not began.done():
            at = body.get("at") if "began" in body else None
            began.set_result(at if isinstance(at, int | float) else None)
        if "began" in body:
            return
        future = self.pending.pop(body["run"], None)
        if future is not None and not future.done():
            future.set_result(body)

    def broken(self, why: str) -> None:
        """Fail every run waiting on the zygote with :class:`SandboxSetupFailed` (``why``)."""
        if self.control is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self.control.fileno())
        error = SandboxSetupFailed(why)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
        for future in [*self.pending.values(), *self.began.values()]:
            if not future.done():
                future.set_exception(error)
        self.pending.clear()
        self.began.clear()

    def stop(self) -> str:
        """Kill the zygote and every run it forked; return its error output (idempotent)."""
        errors = ""
        if self.control is not None:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                loop = asyncio.get_running_loop()
                loop.remove_reader(self.control.fileno())
                loop.remove_writer(self.control.fileno())  # a send waiting for room
            self.control.close()
            self.control = None
        for task in self._later:
            task.cancel()
        self._later.clear()
        if self.proc is not None:
            errors = stop_guest(self.proc)
            self.proc = None
        if self._uids is not None:  # every run of the zygote is gone with it
            self._uids.release()
            self._uids = None
        return errors

    async def send(
        self, message: bytes, fds: Sequence[int], *, deadline_s: float | None = START_TIMEOUT_S
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
            control = self.control
            if control is None:
                raise OSError("the warm pool's zygote is gone")
            try:
                control.sendmsg([message], ancillary)
                return
            except BlockingIOError:
                if deadline is not None and loop.time() > deadline:
                    why = f"the warm pool's zygote took no job for {START_TIMEOUT_S:g} s"
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
                if self.control is control:  # else stop() removed it, and closed fd
                    with contextlib.suppress(ValueError, OSError):
                        loop.remove_writer(fd)

    def kill_run(self, run_id: int) -> None:
        """Have the zygote kill run ``run_id`` now, or as soon as it takes messages."""
        if self.control is None:
            return  # the zygote is gone, and its runs with it
        message = json.dumps({"kill": run_id}).encode()
        try:
            self.control.send(message)
        except BlockingIOError:  # the zygote is behind: send it when it can take it
            task = asyncio.get_running_loop().create_task(self.send(message, [], deadline_s=None))
            self._later.add(task)
            task.add_done_callback(self._forget)
        except OSError:
            pass  # the zygote is gone, and its runs with it

    def _forget(self, task: asyncio.Task[None]) -> None:
        """A kill sent later is done: drop it, its failure included (the pool closed)."""
        self._later.discard(task)
        if not task.cancelled():
            task.exception()

    def preload(self, trusted: TrustedProgram | None) -> str | None:
        """The key of ``trusted``'s preloaded code in the zygote, if it can hold it.

        The first run of a registered harness sends its code to the zygote; runs then
        name it instead of having it parsed each time. The script still travels with
        every run, for an init staged before the code arrived.
        """
        if trusted is None or not self.send_preload(trusted):
            return None
        return trusted.key

    def send_preload(self, trusted: TrustedProgram) -> bool:
        """Have the zygote hold ``trusted``'s code (once); whether it can."""
        if not self._loads_marshal or self.control is None:
            return False
        if trusted.key not in self._preloaded:
            code = memfd_with(trusted.code, "execgym-preload")
            try:
                self.control.sendmsg(
                    [json.dumps({"preload": trusted.key, "entry": trusted.entry}).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [code]))],
                )
            finally:
                os.close(code)
            self._preloaded.add(trusted.key)
        return True

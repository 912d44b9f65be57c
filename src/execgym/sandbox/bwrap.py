"""The default sandbox: Linux namespaces through bubblewrap (``bwrap``).

Each run gets fresh PID, network, IPC, UTS, cgroup and mount namespaces (and a user
namespace when started by an ordinary user), a read-only view of ``/usr`` and of the
interpreter's own prefix and nothing else from the host, a private tmpfs work dir
(``/work``) and ``/tmp`` of ``Limits.disk_bytes`` each, and runs as uid 65534 with no
capabilities and ``no_new_privs``. When bwrap is started by root it sets up the
namespaces privileged and ``setpriv`` drops to a host uid of the run's own (from
:mod:`execgym.sandbox._uids`; 65534 if none can be leased) before the program starts,
so the program is unprivileged on the host too, not merely inside a user namespace, and
shares no per-user kernel limit (in-flight descriptors, inotify instances) with another
run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from execgym.environments.model import Environment
from execgym.environments.mounts import bwrap_root_args, environment_shell, remap_argv, run_env
from execgym.errors import SandboxUnavailable, TaskError
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox._paths import safe_relative
from execgym.sandbox._prestart import Job, Prestarter, prestart_possible
from execgym.sandbox._process import memfd_with
from execgym.sandbox._python import python_command, script_request
from execgym.sandbox._results import sandbox_error, with_init_count
from execgym.sandbox._run import BASE_ENV, check_exec_size, run_contained
from execgym.sandbox._seccomp import BLOCKED_SYSCALLS, seccomp_program
from execgym.sandbox._uids import process_block
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult

SANDBOX_UID = 65534
"""The uid (and gid) programs run as inside the sandbox ("nobody") as an ordinary user
(mapped to yours), and as root where no block of run uids can be leased: as root each
run otherwise gets a host uid of its own (:mod:`execgym.sandbox._uids`)."""

WORK_DIR = "/work"
"""The program's working directory inside the sandbox: a private, writable tmpfs."""

_SECCOMP_FD = 9
_INIT_FD = 10  # the run's init, a shell binary (bwrap copies it in and closes the fd)
_FIRST_FILE_FD = 11
_INFO_FD, _BLOCK_FD = 5, 6  # bwrap holds the sandbox until its cgroup is set (see _process)
COUNT_FD = 4  # where the init writes what it counted (dash takes one-digit fds only)
_INIT_PATH = "/run/execgym/sh"  # named sh: a busybox shell picks its applet by name
INIT_SCRIPT = (
    "exec 6>&2 2>/dev/null; trap '' INT QUIT; "
    '(trap - INT QUIT; exec "$@" 2>&6 6>&- 4>&-); s=$?; '
    "read x x x x n </proc/loadavg; "
    'while read k v; do [ "$k" = wchar: ] && a=$v; done </proc/self/io; '
    'while read k v; do [ "$k" = wchar: ] && b=$v; done </proc/self/task/$$/io; '
    'echo "$n $a $b" >&4; exit $s'
)
"""What the init of a fresh sandbox runs (``sh -c``), with the program's argv as ``$@``.

The init is PID 1 of the run's PID namespace: it starts the program (PID 2; ``exec``, so
a program named like a shell builtin is still the real one) and reaps orphans while it
waits. The shell's own messages (such as "Killed" for its child) go to /dev/null, the
program keeps the run's stderr; SIGINT and SIGQUIT, which the shell would catch, are
ignored by it and default in the program, so the program cannot end its PID 1. As the
program ends, the init writes to fd 4 the namespace's last PID (so the number of
processes and threads the run had) and ``wchar`` of ``/proc/self/io``, with and without
what it reaped (what the run's processes wrote; see ``RunResult.bytes_written``).

The last PID is the fifth field of ``/proc/loadavg``, which Linux prints for the
reader's own PID namespace (``fs/proc/loadavg.c``: the namespace's PID cursor less 1,
the figure ``/proc/sys/kernel/ns_last_pid`` shows). Not ``ns_last_pid`` itself: dash's
and busybox's ``read`` take a file one byte per ``read()``, and a sysctl file answers
only a read at offset 0 (``proc_dointvec``), so ``read`` got its first digit alone
(10 processes read as 1, counted as 0). ``/proc/loadavg`` is a seq_file, read right in
any size.

It is a copy of the host's shell that the sandbox can execute but not read: a process
started from an unreadable file is not dumpable, so the program, although it has the
same uid, cannot open the init's ``/proc/1/mem`` to change the exit status it reports
(bwrap's own init can be written that way when bwrap runs as an ordinary user). The
price: as an ordinary user the init cannot open its own ``/proc/self/io`` either, so
``bytes_written`` is ``None`` there. bwrap's launcher waits for this init, so it also
waits until every process of the run is gone.
"""
_INSTALL_HINT = (
    "bubblewrap (bwrap) is not installed. Install it with `sudo apt-get install bubblewrap` "
    "(Debian/Ubuntu) or `sudo dnf install bubblewrap` (Fedora), or pass --isolation none "
    "to run WITHOUT isolation on a development machine."
)


def system_binds() -> list[str]:
    """Bind /usr read-only and recreate the merged-/usr symlinks (or bind real dirs)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    return args


ReadOnlyPath = str | tuple[str, str]
"""A host directory bound read-only at the same path, or ``(host, path inside)``."""


def resolve_paths(paths: Sequence[ReadOnlyPath]) -> list[tuple[str, str]]:
    """``(real host path, path inside the sandbox)`` for each of ``paths``."""
    pairs = []
    for path in paths:
        host, inside = (path, path) if isinstance(path, str) else path
        real = os.path.realpath(host)
        pairs.append((real, real if isinstance(path, str) else inside))
    return pairs


def read_only_binds(paths: Sequence[tuple[str, str]]) -> list[str]:
    """Bind each ``(host, inside)`` directory read-only.

    The directories above it are created world-traversable (0755) first: bwrap would
    otherwise copy, say, ``/root``'s 0700 and the unprivileged program could not reach
    the interpreter below it.
    """
    args: list[str] = []
    made: set[str] = set()
    for host, inside in paths:
        for parent in reversed(Path(inside).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", host, inside]
    return args


def interpreter_paths() -> list[str]:
    """Host directories the current Python interpreter needs, outside ``/usr``."""
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
    return sorted(p for p in prefixes if not p.startswith("/usr/") and p != "/usr")


def default_read_only_paths() -> list[ReadOnlyPath]:
    """What every sandbox sees read-only besides ``/usr``.

    The interpreter's prefix, the toolchains found outside ``/usr`` (see
    :mod:`execgym.toolchains`) at their own paths, and the host environment's
    site-packages (for pytest) at :data:`execgym.toolchains.PYTHON_LIBRARIES_DIR`.

    Python runs with ``-S``, so site-packages is on no program's path unless a harness
    (the pytest judge's) puts it there.
    """
    from execgym import toolchains

    paths: list[ReadOnlyPath] = [*interpreter_paths(), *toolchains.toolchain_paths()]
    libraries = toolchains.python_libraries()
    if libraries is not None:
        paths.append(libraries)
    return paths


class BubblewrapSandbox(BaseSandbox):
    """Run each program in fresh namespaces with bubblewrap; see the module docstring.

    Args:
        read_only_paths: Host directories to expose read-only (at the same path, or
            as ``(host, path inside)``), in addition to ``/usr``; by default
            :func:`default_read_only_paths`.
        bwrap_path: The ``bwrap`` binary; found on PATH by default.
        prestart: Keep this many sandboxes set up ahead of their runs (per disk size
            and network setting), so a run does not wait for bwrap's set-up: see
            :mod:`execgym.sandbox._prestart`. Each still serves one run only. ``0``
            (default) starts every run cold. Needs cgroups that measure CPU time;
            without them runs start cold. Call :meth:`aclose` (or use ``async with``)
            to reclaim the prestarted sandboxes.
        environment: The root file system runs see (:mod:`execgym.environments`): by
            default the host's (``/usr`` and ``read_only_paths``); an imported or built
            environment's root instead, read-only, with the host interpreter's name in
            an argv mapped to the environment's Python and the environment's own
            ``/bin/sh`` as the run's init (see :mod:`execgym.environments.mounts`).
            ``read_only_paths`` are bound on top of it only when given.

    Raises:
        SandboxUnavailable: if bwrap (or, as root, setpriv) is missing, with the
            command that installs it.
    """

    name = "bwrap"

    def __init__(
        self,
        *,
        read_only_paths: Sequence[ReadOnlyPath] | None = None,
        bwrap_path: str | None = None,
        prestart: int = 0,
        environment: Environment | None = None,
    ) -> None:
        found = bwrap_path or shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable(_INSTALL_HINT)
        self._bwrap = found
        self._as_root = os.geteuid() == 0
        self._setpriv = shutil.which("setpriv") if self._as_root else None
        if self._as_root and self._setpriv is None:
            raise SandboxUnavailable(
                "running as root needs setpriv (util-linux) to drop to an unprivileged uid; "
                "install it with `apt-get install util-linux`"
            )
        try:
            seccomp_program(DEFAULT_LIMITS.network)
        except (ImportError, OSError) as error:
            raise SandboxUnavailable(
                f"cannot build the seccomp filter ({error}); install libseccomp "
                "(`apt-get install libseccomp2`) and the pyseccomp package "
                "(`pip install pyseccomp`)"
            ) from error
        self.environment = (
            environment if environment is not None and not environment.is_host else None
        )
        self._settings: dict[str, Any] = {
            "read_only_paths": read_only_paths,
            "bwrap_path": bwrap_path,
            "prestart": prestart,
        }
        if self.environment is None:
            paths = default_read_only_paths() if read_only_paths is None else read_only_paths
            self._read_only = resolve_paths(paths)
            self._binds = system_binds() + read_only_binds(self._read_only)  # same every run
            shell = shutil.which("dash") or shutil.which("sh")
            if shell is None:
                raise SandboxUnavailable(
                    "no POSIX shell (dash or sh) on PATH for the sandbox's init"
                )
            self._init_binary = Path(os.path.realpath(shell)).read_bytes()
        else:
            self._read_only = resolve_paths(read_only_paths or [])
            self._binds = bwrap_root_args(self.environment) + read_only_binds(self._read_only)
            self._init_binary = environment_shell(self.environment)
        self._prestarter: Prestarter | None = None
        if prestart > 0 and prestart_possible():
            self._prestarter = Prestarter(
                lambda limits, command, uid: self._argv(
                    command, limits, ["--seccomp", str(_SECCOMP_FD)], hold=True, init=True, uid=uid
                ),
                remap_argv(python_command("x")[:-1], self.environment),
                prestart,
                self.enforcement,
                init_fds=lambda: {
                    _INIT_FD: memfd_with(self._init_binary, "execgym-init"),
                    COUNT_FD: memfd_with(b"", "execgym-count"),
                },
                count_fd=COUNT_FD,
                uids=process_block(),
            )
            atexit.register(self._prestarter.close_now)

    def with_environment(self, environment: Environment | None) -> BubblewrapSandbox:
        """The same tier, with the same settings, running in ``environment`` instead."""
        return BubblewrapSandbox(**self._settings, environment=environment)

    async def aclose(self) -> None:
        """Reclaim the prestarted sandboxes, if any (see ``prestart``)."""
        if self._prestarter is not None:
            await self._prestarter.aclose()
            atexit.unregister(self._prestarter.close_now)

    async def prestart(self, limits: Limits = DEFAULT_LIMITS) -> bool:
        """Have sandboxes for runs with ``limits`` ready now (normally done on first use).

        Returns:
            Whether one is ready (``False`` without ``prestart`` or where it cannot be).
        """
        if self._prestarter is None:
            return False
        await self._prestarter.fill(limits)
        return self._prestarter.has_ready(limits)

    def enforcement(self, limits: Limits) -> dict[str, str]:
        """How this backend enforces network, syscall, disk and reclaim limits."""
        network = "network namespace" + (
            " + seccomp: no Internet sockets" if limits.network == "none" else " (loopback only)"
        )
        return {
            "network": network,
            "syscalls": f"seccomp: {len(BLOCKED_SYSCALLS)} calls and namespace flags refused",
            "disk_bytes": "tmpfs size",
            "reclaim": "pid namespace: every process dies with the run",
        }

    def _argv(
        self,
        argv: Sequence[str],
        limits: Limits,
        file_args: list[str],
        *,
        hold: bool = False,
        init: bool = False,
        uid: int | None = None,
    ) -> list[str]:
        command = [
            self._bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
        ]
        if hold:
            command += ["--info-fd", str(_INFO_FD), "--block-fd", str(_BLOCK_FD)]
        if not self._as_root:
            command += [
                "--unshare-user",
                "--uid",
                str(SANDBOX_UID),
                "--gid",
                str(SANDBOX_UID),
                "--disable-userns",
            ]
        command += self._binds

        def tmpfs(path: str, mode: str) -> list[str]:
            return ["--size", str(limits.disk_bytes), "--perms", mode, "--tmpfs", path]

        command += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *tmpfs("/tmp", "1777"),
            *tmpfs(WORK_DIR, "0777"),
            *(["--perms", "0111", "--ro-bind-data", str(_INIT_FD), _INIT_PATH] if init else []),
            *file_args,
            # Writable: the size-limited tmpfs and a fresh /dev/shm, nothing else (the
            # root and /dev tmpfs bwrap makes are not limited in size).
            "--remount-ro",
            "/",
            "--remount-ro",
            "/dev",
            *tmpfs("/dev/shm", "1777"),
            "--chdir",
            WORK_DIR,
        ]
        if init:  # see INIT_SCRIPT
            command += ["--as-pid-1", "--", _INIT_PATH, "-c", INIT_SCRIPT, "execgym-init"]
        else:
            command += ["--"]
        if self._as_root:
            ids = str(SANDBOX_UID if uid is None else uid)
            command += [
                self._setpriv or "setpriv",
                "--reuid",
                ids,
                "--regid",
                ids,
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        return command + list(argv)

    async def run(self, request: RunRequest) -> RunResult:
        """Run ``request`` in a fresh bubblewrap sandbox; see :meth:`Sandbox.run`.

        Raises:
            TaskError: if the command is too big for Linux to start
                (:func:`~execgym.sandbox._run.check_exec_size`).
        """
        request = script_request(request)
        files, limits = request.files, request.limits
        full_env = {**run_env(self.environment, BASE_ENV), "HOME": WORK_DIR, "TMPDIR": "/tmp"}
        full_env.update(request.env)
        argv = remap_argv(request.argv, self.environment)
        check_exec_size(argv, full_env)
        if self._prestarter is not None:
            dirs: list[str] = []
            named: list[tuple[str, bytes]] = []
            for name, content in files.items():
                relative = safe_relative(name)
                for parent in reversed(relative.parents[:-1]):
                    if str(parent) not in dirs:
                        dirs.append(str(parent))
                named.append((str(relative), content))
            ready = self._prestarter.take(limits)
            if ready is not None:
                job = Job(list(argv), full_env, dirs, named, request.stdin, request.want_report)
                result = await self._prestarter.run(ready, job, limits)
                if result is not None:
                    return result
        return await self._run_cold(
            argv, request.stdin, files, limits, full_env, request.want_report
        )

    async def _run_cold(
        self,
        argv: Sequence[str],
        stdin: bytes,
        files: Mapping[str, bytes] | None,
        limits: Limits,
        full_env: Mapping[str, str],
        want_report: bool,
    ) -> RunResult:
        fd_map: dict[int, int] = {}
        file_args: list[str] = ["--seccomp", str(_SECCOMP_FD)]
        dirs: set[str] = set()
        block = process_block() if self._as_root else None
        uid = block.take() if block is not None else None
        try:
            fd_map[_SECCOMP_FD] = memfd_with(seccomp_program(limits.network), "execgym-seccomp")
            fd_map[_INIT_FD] = memfd_with(self._init_binary, "execgym-init")
            fd_map[COUNT_FD] = memfd_with(b"", "execgym-count")
            for offset, (name, content) in enumerate((files or {}).items()):
                relative = safe_relative(name)
                for parent in reversed(relative.parents[:-1]):
                    if str(parent) not in dirs:
                        dirs.add(str(parent))
                        file_args += ["--perms", "0777", "--dir", f"{WORK_DIR}/{parent}"]
                fd_map[_FIRST_FILE_FD + offset] = memfd_with(content, "execgym-file")
                file_args += [
                    "--perms",
                    "0666",
                    "--file",
                    str(_FIRST_FILE_FD + offset),
                    f"{WORK_DIR}/{relative}",
                ]
            result = await run_contained(
                self._argv(argv, limits, file_args, hold=True, init=True, uid=uid),
                hold_fds=(_INFO_FD, _BLOCK_FD),
                own_user_namespace=not self._as_root,
                isolation=self.name,
                env=full_env,
                stdin=stdin,
                limits=limits,
                fd_map=fd_map,
                want_report=want_report,
                shifted_signals=True,
                enforcement=self.enforcement(limits),
            )
            return with_init_count(result, os.pread(fd_map[COUNT_FD], 64, 0))
        except TaskError:
            raise
        except OSError as error:
            return sandbox_error(self.name, f"could not prepare the sandbox: {error}")
        finally:
            if block is not None and uid is not None:
                block.give(uid)  # run_contained returns once every process of it is gone
            for fd in fd_map.values():
                os.close(fd)

"""The gVisor sandbox: each run gets its own user-space kernel (``runsc``).

bwrap puts a program in namespaces of the host kernel; gVisor puts it on a kernel of its
own (the Sentry, a Go program that implements Linux system calls), so a kernel bug the
program can reach is a bug in the Sentry, which itself runs in a seccomp jail. Each run
is one ``runsc run`` of a fresh OCI bundle: a read-only root holding only ``/usr`` (and
its ``/bin``, ``/lib``... symlinks) and the interpreter's own prefix, gVisor's own
``/proc``, ``/sys`` and ``/dev``, a private tmpfs ``/work`` (the cwd) and ``/tmp`` of
``Limits.disk_bytes`` each, gVisor's network stack with no interface but loopback
(``--network=none``), uid and gid 65534 with no capabilities and ``no_new_privs``, and
bwrap's seccomp rules (namespaces, mounts, BPF... refused; sockets other than Unix ones
only with ``network="loopback"``), enforced by the Sentry (see :func:`_seccomp`).

How the run is wired to the host:

- stdin, stdout and stderr are the launcher's own, which runsc hands to the program.
- runsc cannot pass any other descriptor in, so the report channel (fd 3) is a named
  pipe in the run's host directory, bind-mounted at ``/.execgym/report`` (runsc's
  ``--host-fifo=open``). The host reads it like the pipe bwrap gets (same cap, same
  end of channel); its buffer is 1 MiB, as gVisor cuts short a write to a full host
  FIFO. gVisor's ``/proc`` does not hide a non-dumpable process from processes of its
  uid: they can reopen its ``/proc/<pid>/fd/N`` whenever the file's own mode lets them
  (only that is checked), and read its ``environ``, ``cmdline`` and ``maps``. So a run
  with a report channel starts as uid 0 of gVisor's kernel (with ``CAP_SETUID``,
  ``CAP_SETGID`` and ``CAP_SETPCAP`` only): a ``/bin/sh`` stub opens the FIFO, which
  is root's with mode 0600, on fd 3 and execs ``setpriv``, which drops to uid 65534,
  empties the bounding set and execs the program. No process of the run can open the
  FIFO again, by its path or through ``/proc`` (issue 18: a program wrote a fake
  report there). Its stdin, the host's in-memory file, is root's with mode 0600 too,
  so a harness's child cannot reopen the harness's ``/proc/<pid>/fd/0`` and read the
  job (with the judge's nonce) from its start. Nothing secret may travel in the
  environment or argv: every process of the run can read them.
- ``files`` are written to a host directory, bind-mounted read-only at
  ``/.execgym/files``, and copied into the tmpfs ``/work`` by a stub (``cp``, as 65534),
  so the work dir has bwrap's size limit and is the program's to change.
- ``runsc --ignore-cgroups`` keeps runsc, its Gofer and its Sentry in the run's own
  cgroup (without it runsc moves them to a cgroup of its own at the top of every
  hierarchy, left behind when it is killed): the cgroup measures and limits all of it,
  and ``cgroup.kill`` kills all of it. runsc's state (``--root``) lives in the run's
  host directory, deleted with the bundle after every run, killed or not.

``memory_bytes`` limits the whole sandbox: the program, its tmpfs files, and gVisor's own
processes (runsc, Gofer, Sentry: about 16 MiB more than the same small Python program
under bwrap, measured here), so a program gets that much less than under bwrap, and
``peak_memory_bytes`` includes it. The rlimits (file size, open files, processes) are
set by the Sentry for the program alone, in the run's own kernel, so ``max_processes``
counts exactly the run's processes and threads; the host cgroup's process count is only
a backstop sized for gVisor's own threads (see :func:`host_tasks_backstop`). CPU time
is the cgroup's, gVisor's own CPU included; ``wall_time_s`` includes gVisor's start-up
(about 0.15 s here).

Differences a program can see: it is PID 1 of its sandbox (under bwrap, bwrap is), and
gVisor's errno values and permission checks differ from Linux's in corners (``mknod``
of a device works on the tmpfs, but the node opens nothing; a 100 MB argv is
``ENAMETOOLONG``, not ``E2BIG``).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from execgym.environments.model import Environment
from execgym.environments.mounts import remap_argv, resolve_inside, root_entries, run_env
from execgym.errors import SandboxUnavailable, TaskError
from execgym.limits import Limits
from execgym.sandbox import _cgroup
from execgym.sandbox._paths import safe_relative
from execgym.sandbox._python import script_request
from execgym.sandbox._results import sandbox_error
from execgym.sandbox._run import BASE_ENV, check_exec_size, run_contained
from execgym.sandbox._seccomp import _NAMESPACE_FLAGS, BLOCKED_SYSCALLS
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult
from execgym.sandbox.bwrap import (
    SANDBOX_UID,
    WORK_DIR,
    ReadOnlyPath,
    default_read_only_paths,
    resolve_paths,
)

CHANNEL_DIR = "/.execgym"
"""Where the report FIFO and the staged files appear inside the sandbox."""

_INSTALL_HINT = (
    "gVisor (runsc) is not installed. Install it with `sudo apt-get install -y runsc` "
    "(Debian 12 and later), or see https://gvisor.dev/docs/user_guide/install/; "
    "or use --isolation bwrap."
)
_HOST_TASKS_BASE = 256
_HOST_TASKS_PER_PROCESS = 32
_COPY_FILES = f"cp -R {CHANNEL_DIR}/files/. {WORK_DIR}/"
_OPEN_REPORT = f'exec 3>{CHANNEL_DIR}/report && exec "$@"'
"""Run as uid 0 of gVisor's kernel: opens the report FIFO, which is root's (mode 0600), so
that no process of uid 65534 can open it, by its path or by reopening a holder's
``/proc/<pid>/fd/3`` (gVisor checks the file's own mode there, not dumpability), then
execs ``setpriv`` (:data:`_DROP_TO_SANDBOX_UID`), which drops to 65534 for good."""
_INIT_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
"""What a run with a report channel starts with, in gVisor's kernel only, for setpriv."""
_DROP_TO_SANDBOX_UID = (
    f"--reuid={SANDBOX_UID}",
    f"--regid={SANDBOX_UID}",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
)


_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def host_tasks_backstop(max_processes: int) -> int:
    """The host cgroup's process limit for a run allowed ``max_processes`` in gVisor.

    The Sentry, Gofer and runsc are Go programs with about 40 host threads between
    them, and each process of the program adds a host stub process with threads of
    its own (ptrace platform). Measured here: 39 host tasks for one sleeping process,
    60 for 64 threads, and at the peak of a fork bomb (processes created and torn down
    at full speed) 370 for 16 processes and 1,270 for 64. The Sentry cannot survive
    hitting this limit (Go aborts when it cannot make a thread), so it is set well
    above what gVisor needs: the limit that programs meet is the rlimit in gVisor.
    """
    return _HOST_TASKS_BASE + _HOST_TASKS_PER_PROCESS * max_processes


def _bind(source: str, destination: str, *, writable: bool = False) -> dict[str, Any]:
    options = ["rbind", "rw" if writable else "ro", "nosuid", "nodev"]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def _tmpfs(destination: str, mode: str, size: int) -> dict[str, Any]:
    options = ["nosuid", "nodev", f"mode={mode}", f"size={size}"]
    return {"destination": destination, "type": "tmpfs", "source": "tmpfs", "options": options}


def _rlimit(kind: str, value: int, hard: int | None = None) -> dict[str, Any]:
    return {"type": kind, "hard": value if hard is None else hard, "soft": value}


def _seccomp(network: str) -> dict[str, Any]:
    """The bwrap seccomp rules as an OCI profile, applied by the Sentry (``--oci-seccomp``).

    This gVisor returns ``EPERM`` for every refused call (it ignores ``errnoRet``) and
    has no ``clone3`` at all (``ENOSYS``, so libc falls back to ``clone``, whose flags
    are checked here): refusing ``clone3`` too, as bwrap does, would break threads.
    """
    refuse = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    rules: list[dict[str, Any]] = [{"names": list(BLOCKED_SYSCALLS), **refuse}]
    for flag in _NAMESPACE_FLAGS:
        test = {"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}
        rules.append({"names": ["clone"], "args": [test], **refuse})
    # gVisor lets an unprivileged program take a negative nice (only its own scheduler
    # sees it, never the host's); refused as on Linux: priority arguments below zero.
    negative = {"index": 2, "value": 1 << 31, "valueTwo": 1 << 31, "op": "SCMP_CMP_MASKED_EQ"}
    rules.append({"names": ["setpriority"], "args": [negative], **refuse})
    # Socket families, an allow-list as under bwrap: Unix sockets, plus IPv4 and IPv6 for
    # network="loopback" (gVisor's own loopback); no packet, netlink, vsock, AF_ALG...
    allowed = {socket.AF_UNIX} | ({socket.AF_INET, socket.AF_INET6} if network != "none" else set())
    top = max(allowed)
    beyond = {"index": 0, "value": int(top), "op": "SCMP_CMP_GT"}
    rules.append({"names": ["socket"], "args": [beyond], **refuse})
    for family in sorted(set(range(top)) - allowed):
        test = {"index": 0, "value": family, "op": "SCMP_CMP_EQ"}
        rules.append({"names": ["socket"], "args": [test], **refuse})
    return {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules}


def _make_root(
    rootfs: Path, read_only: Sequence[tuple[str, str]], environment: Environment | None = None
) -> list[dict[str, Any]]:
    """Lay out the read-only root (mount points, merged-/usr symlinks); return its binds.

    With an ``environment``, its top-level directories are bound read-only and its
    top-level symlinks made again instead of the host's ``/usr`` (see
    :mod:`execgym.environments.mounts`).
    """
    for name in ("proc", "dev", "sys", "tmp", WORK_DIR.lstrip("/")):
        (rootfs / name).mkdir()
    if environment is not None:
        mounts = []
        for entry in root_entries(environment):
            if entry.host is None:
                (rootfs / entry.name.lstrip("/")).symlink_to(str(entry.target))
            else:  # a shared directory's mount point is in the directory bound above it
                (rootfs / entry.name.lstrip("/")).mkdir(parents=True, exist_ok=True)
                mounts.append(_bind(entry.host, entry.name))
        for host, inside in read_only:
            (rootfs / inside.lstrip("/")).mkdir(parents=True, exist_ok=True)
            mounts.append(_bind(host, inside))
        return mounts
    mounts = [_bind("/usr", "/usr")]
    (rootfs / "usr").mkdir()
    for name in _MERGED_USR:
        top = Path("/") / name
        if top.is_symlink():
            (rootfs / name).symlink_to(os.readlink(top))
        elif top.is_dir():
            (rootfs / name).mkdir()
            mounts.append(_bind(str(top), f"/{name}"))
    for host, inside in read_only:
        (rootfs / inside.lstrip("/")).mkdir(parents=True, exist_ok=True)
        mounts.append(_bind(host, inside))
    return mounts


def _environment_setpriv(environment: Environment) -> str:
    """The environment's own ``setpriv`` (util-linux), which drops a reporting run's uid.

    gVisor runs it inside the environment's root, where the host's is not.

    Raises:
        SandboxUnavailable: The environment has none (Debian and Ubuntu images do;
            on Alpine, ``apk add setpriv``).
    """
    if environment.rootfs is None:
        raise SandboxUnavailable(
            f"environment {environment.short} is the host's: no setpriv of its own"
        )
    for candidate in ("/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"):
        if resolve_inside(environment, candidate) is not None:
            return candidate
    raise SandboxUnavailable(
        f"environment {environment.short} has no setpriv, which the gVisor tier needs to "
        "drop a reporting run's privileges: install util-linux in its image or spec"
    )


def _stage_files(directory: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` under ``directory``, readable by the sandbox user."""
    relatives = {safe_relative(name): content for name, content in files.items()}
    directory.mkdir()
    # Read-only for others: runsc's sandbox user reads them; nothing there is secret.
    os.chmod(directory, 0o755)  # noqa: S103
    for relative, content in relatives.items():
        target = directory / relative
        for parent in reversed(relative.parents[:-1]):
            (directory / parent).mkdir(exist_ok=True)
            os.chmod(directory / parent, 0o755)  # noqa: S103 (as above)
        target.write_bytes(content)
        os.chmod(target, 0o644)


class GVisorSandbox(BaseSandbox):
    """Run each program on its own gVisor kernel with ``runsc``; see the module docstring.

    Args:
        read_only_paths: Host directories to expose read-only (at the same path, or
            as ``(host, path inside)``), in addition to ``/usr``; by default
            :func:`~execgym.sandbox.bwrap.default_read_only_paths` (the interpreter's
            prefix, toolchains outside ``/usr``, site-packages for pytest).
        runsc_path: The ``runsc`` binary; found on PATH by default.
        environment: The root file system runs see (:mod:`execgym.environments`): the
            host's by default; an environment's root, read-only, instead (the OCI
            bundle's root gets its top-level directories bound, and the host
            interpreter's name in an argv becomes the environment's Python).

    Raises:
        SandboxUnavailable: if runsc is missing (with the command that installs it), or
            execgym does not run as root (runsc needs root to set up its sandbox).
    """

    name = "gvisor"

    def __init__(
        self,
        *,
        read_only_paths: Sequence[ReadOnlyPath] | None = None,
        runsc_path: str | None = None,
        environment: Environment | None = None,
    ) -> None:
        found = runsc_path or shutil.which("runsc")
        if found is None:
            raise SandboxUnavailable(_INSTALL_HINT)
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "the gVisor sandbox needs root (runsc sets up its own namespaces and "
                "cgroup as root); run execgym as root, or use --isolation bwrap"
            )
        self._runsc = found
        self._setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        if environment is not None and environment.is_host:
            environment = None
        self.environment = environment
        self._settings: dict[str, Any] = {
            "read_only_paths": read_only_paths,
            "runsc_path": runsc_path,
        }
        if environment is None:
            paths = default_read_only_paths() if read_only_paths is None else read_only_paths
        else:
            paths = read_only_paths or []
            self._setpriv = _environment_setpriv(environment)
        self._read_only = resolve_paths(paths)

    def with_environment(self, environment: Environment | None) -> GVisorSandbox:
        """The same tier, with the same settings, running in ``environment`` instead."""
        return GVisorSandbox(**self._settings, environment=environment)

    def _spec(
        self,
        command: list[str],
        env: Mapping[str, str],
        limits: Limits,
        mounts: list[Any],
        *,
        as_init: bool = False,
    ) -> dict[str, Any]:
        size = limits.disk_bytes
        cpu_s = math.ceil(limits.cpu_time_s) + 1
        rlimits = [
            _rlimit("RLIMIT_NOFILE", limits.max_open_files),
            _rlimit("RLIMIT_FSIZE", limits.max_file_bytes),
            _rlimit("RLIMIT_NPROC", limits.max_processes),
            _rlimit("RLIMIT_CORE", 0),
            # Set as under bwrap, so it cannot be raised; but this gVisor (2022-12) does
            # not enforce it: the cgroup's CPU clock does.
            _rlimit("RLIMIT_CPU", cpu_s, cpu_s + 1),
        ]
        if _cgroup.detect_cgroups().version is None:  # nothing else limits memory then
            rlimits.append(_rlimit("RLIMIT_AS", limits.memory_bytes))
        kinds = ("bounding", "effective", "inheritable", "permitted", "ambient")
        capabilities: dict[str, list[str]] = {kind: [] for kind in kinds}
        user = SANDBOX_UID
        if as_init:  # uid 0 of gVisor's kernel until setpriv drops it (see _OPEN_REPORT)
            user = 0
            for kind in ("bounding", "effective", "permitted"):
                capabilities[kind] = list(_INIT_CAPABILITIES)
        return {
            "ociVersion": "1.0.2",
            "process": {
                "user": {"uid": user, "gid": user},
                "args": command,
                "env": [f"{key}={value}" for key, value in env.items()],
                "cwd": WORK_DIR,
                "capabilities": capabilities,
                "noNewPrivileges": True,
                "rlimits": rlimits,
            },
            "root": {"path": "rootfs", "readonly": True},
            "hostname": "sandbox",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                _tmpfs("/tmp", "1777", size),
                _tmpfs(WORK_DIR, "0777", size),
                *mounts,
            ],
            "linux": {
                "namespaces": [
                    {"type": kind} for kind in ("pid", "network", "ipc", "uts", "mount")
                ],
                "seccomp": _seccomp(limits.network),
            },
        }

    def _prepare(
        self,
        run_dir: Path,
        argv: Sequence[str],
        *,
        files: Mapping[str, bytes],
        env: Mapping[str, str],
        limits: Limits,
        want_report: bool,
    ) -> list[str]:
        """Write the run's bundle under ``run_dir``; return the runsc command line."""
        bundle = run_dir / "bundle"
        rootfs = bundle / "rootfs"
        rootfs.mkdir(parents=True)
        mounts = _make_root(rootfs, self._read_only, self.environment)
        steps = []
        if files:
            (rootfs / CHANNEL_DIR.lstrip("/") / "files").mkdir(parents=True)
            _stage_files(run_dir / "files", files)
            mounts.append(_bind(str(run_dir / "files"), f"{CHANNEL_DIR}/files"))
            steps.append(_COPY_FILES)
        command = list(argv)
        if steps:
            # A constant script; the program's argv goes in as "$@", never into the text.
            script = " && ".join([*steps, 'exec "$@"'])
            command = ["/bin/sh", "-c", script, "sh", *command]
        if want_report:
            (rootfs / CHANNEL_DIR.lstrip("/")).mkdir(exist_ok=True)
            (rootfs / CHANNEL_DIR.lstrip("/") / "report").touch()
            os.mkfifo(run_dir / "report", 0o600)  # root's: see _OPEN_REPORT
            mounts.append(_bind(str(run_dir / "report"), f"{CHANNEL_DIR}/report", writable=True))
            drop = [self._setpriv, *_DROP_TO_SANDBOX_UID, "--"]
            command = ["/bin/sh", "-c", _OPEN_REPORT, "sh", *drop, *command]
        spec = self._spec(command, env, limits, mounts, as_init=want_report)
        (bundle / "config.json").write_text(json.dumps(spec))
        flags = [
            f"--root={run_dir / 'state'}",
            "--network=none",
            "--ignore-cgroups",
            "--oci-seccomp",
        ]
        if want_report:
            flags.append("--host-fifo=open")
        container_id = f"execgym-{uuid.uuid4().hex}"
        return [self._runsc, *flags, "run", f"--bundle={bundle}", container_id]

    def _enforcement(self, limits: Limits) -> dict[str, str]:
        """How each limit is enforced under gVisor on this host, for every result."""
        host = _cgroup.detect_cgroups()
        how = {
            "network": "gVisor network stack, --network=none (its own loopback only)"
            + ("; seccomp allows Unix sockets only" if limits.network == "none" else ""),
            "disk_bytes": "gVisor tmpfs size (kept in the sandbox's memory)",
            "max_file_bytes": "rlimit in the gVisor kernel",
            "max_open_files": "rlimit in the gVisor kernel",
            "max_processes": "rlimit-nproc in the gVisor kernel (the run's own kernel: "
            "every process and thread of the run)",
            "memory_bytes": "rlimit-as in the gVisor kernel (per process, virtual memory)",
            "cpu_time_s": "not enforced (no cgroup measures CPU; gVisor ignores RLIMIT_CPU)",
            "reclaim": "process-group kill of runsc only: its Sentry and Gofer may outlive "
            "a killed run (no writable cgroup here)",
        }
        if host.version is None:
            return how
        cgroup = f"cgroup-v{host.version}"
        backstop = host_tasks_backstop(limits.max_processes)
        how["max_processes"] += f"; host {cgroup} backstop of {backstop} tasks for gVisor"
        how["memory_bytes"] = f"{cgroup} (the whole sandbox: program, tmpfs and gVisor's own)"
        if host.version == 2 or "cpuacct" in host.parents:
            how["cpu_time_s"] = f"{cgroup} (the whole sandbox, gVisor's own CPU included)"
        how["reclaim"] = "cgroup kill of runsc, its Gofer and Sentry; bundle and state deleted"
        return how

    async def run(self, request: RunRequest) -> RunResult:
        """Run ``request`` in a fresh gVisor sandbox; see :meth:`Sandbox.run`.

        Raises:
            TaskError: if the command is too big for Linux to start (``check_exec_size``).
        """
        request = script_request(request)
        files, limits = request.files, request.limits
        stdin, want_report = request.stdin, request.want_report
        full_env = {**run_env(self.environment, BASE_ENV), "HOME": WORK_DIR, "TMPDIR": "/tmp"}
        full_env.update(request.env)
        argv = remap_argv(request.argv, self.environment)
        check_exec_size(argv, full_env)
        run_dir = Path(tempfile.mkdtemp(prefix="execgym-gvisor-"))
        try:
            command = self._prepare(
                run_dir,
                argv,
                files=files,
                env=full_env,
                limits=limits,
                want_report=want_report,
            )
            host_limits = dataclasses.replace(
                limits, max_processes=host_tasks_backstop(limits.max_processes)
            )
            return await run_contained(
                command,
                isolation=self.name,
                env=BASE_ENV,
                stdin=stdin,
                limits=host_limits,
                fd_map={},
                want_report=want_report,
                report_path=str(run_dir / "report") if want_report else None,
                # root's, 0600: the program reads the fd it was given, but no process of
                # the run can reopen it through /proc/<pid>/fd/0 (gVisor checks the
                # file's mode there, not dumpability) and read a harness's job again.
                stdin_mode=0o600 if want_report else None,
                apply_rlimits=False,
                shifted_signals=True,
                enforcement=self._enforcement(limits),
            )
        except TaskError:
            raise
        except OSError as error:
            return sandbox_error(self.name, f"could not prepare the sandbox: {error}")
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

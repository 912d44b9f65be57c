"""How a sandbox tier lays an environment's root file system out for a run.

Every tier builds the run's root the same way: a fresh, empty root (bwrap's tmpfs, the
gVisor bundle's directory), on which each top-level directory of the environment's
assembled root is bound read-only and each top-level symlink (``/bin -> usr/bin``) is
made again; the tier then mounts its own ``/proc``, ``/dev``, ``/tmp``, ``/work`` and
``/run`` pieces as it does on the host. Directories the environment shares with its
base (:attr:`Environment.shared <execgym.environments.model.Environment.shared>`) are
bound read-only over their empty mount points next, parents first, from the base's
root. So the shared root is never written, never needs
mount points of its own, and a run's only writable places are its tmpfs mounts
(``Limits.disk_bytes`` each) — the private writable layer of the run.

Programs name the host's interpreter (``python_command`` resolves ``sys.executable``);
:func:`remap_argv` makes that name the environment's own interpreter, so judges and
harnesses run unchanged with the environment's Python.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from execgym.environments.model import Environment

SKIPPED = frozenset({"proc", "dev", "sys", "tmp", "run", "work"})
"""Top-level names the tiers mount themselves (``/work`` is the run's work dir)."""


@dataclass(frozen=True)
class RootEntry:
    """One top-level entry of an environment's root.

    Attributes:
        name: Its path inside the sandbox (``/usr``).
        host: For a directory, its host path (bound read-only); ``None`` for a symlink.
        target: For a symlink, what it points to (``usr/bin``); ``None`` otherwise.
    """

    name: str
    host: str | None = None
    target: str | None = None


def root_entries(environment: Environment) -> list[RootEntry]:
    """What a tier mounts to lay ``environment``'s root out, in order.

    The top-level directories (bound read-only) and symlinks (made again) by name, then
    the directories shared with its base (bound over their empty mount points), parents
    first. Files at the top level are left out (images have none that programs need).

    Raises:
        ValueError: for the host environment (it has no root of its own).
    """
    if environment.rootfs is None:
        raise ValueError("the host environment has no root file system of its own")
    tops = {inside: host for inside, host in environment.shared if inside.count("/") == 1}
    entries = []
    for entry in sorted(os.scandir(environment.rootfs), key=lambda e: e.name):
        if entry.name in SKIPPED:
            continue
        if entry.is_symlink():
            entries.append(RootEntry(f"/{entry.name}", target=os.readlink(entry.path)))
        elif entry.is_dir():
            entries.append(RootEntry(f"/{entry.name}", host=tops.get(f"/{entry.name}", entry.path)))
    for inside, host in environment.shared:
        if inside not in tops and inside.split("/")[1] not in SKIPPED:
            entries.append(RootEntry(inside, host=host))
    return entries


def bwrap_root_args(environment: Environment) -> list[str]:
    """Bwrap arguments that lay ``environment``'s root out read-only (see the module)."""
    args: list[str] = []
    for entry in root_entries(environment):
        if entry.host is not None:
            args += ["--ro-bind", entry.host, entry.name]
        else:
            args += ["--symlink", str(entry.target), entry.name]
    return args


def host_interpreter() -> str:
    """The host interpreter's path as ``python_command`` writes it (symlinks resolved)."""
    return os.path.realpath(sys.executable)


def interpreter(environment: Environment) -> str:
    """The Python interpreter programs in ``environment`` run with.

    Raises:
        ValueError: The environment has no Python (``/usr/bin/python3`` or
            ``/usr/local/bin/python3``); install one in its image or spec.
    """
    if environment.is_host:
        return host_interpreter()
    if environment.config.python is None:
        raise ValueError(
            f"environment {environment.short} has no Python interpreter (no "
            "/usr/bin/python3 or /usr/local/bin/python3): add python3 to its image or spec"
        )
    return environment.config.python


def remap_argv(argv: Sequence[str], environment: Environment | None) -> list[str]:
    """``argv`` with the host interpreter replaced by ``environment``'s (see the module).

    Raises:
        ValueError: It names the host interpreter and the environment has none.
    """
    command = list(argv)
    if environment is None or environment.is_host or not command:
        return command
    if command[0] in (host_interpreter(), sys.executable):
        command[0] = interpreter(environment)
    return command


def run_env(environment: Environment | None, base: dict[str, str]) -> dict[str, str]:
    """A run's environment variables: ``base`` with the image's ``PATH`` (if it sets one)."""
    if environment is None or environment.is_host or "PATH" not in environment.config.env:
        return dict(base)
    return {**base, "PATH": environment.config.env["PATH"]}


def resolve_inside(rootfs: Path | Environment, path: str) -> str | None:
    """``path`` with every symlink resolved as it would be with ``rootfs`` as ``/``.

    ``rootfs`` is a root's directory, or an environment (its root with the directories
    it shares, :meth:`Environment.host_path`). Absolute targets stay inside the root.
    ``None`` past 40 links or if missing.
    """
    if isinstance(rootfs, Environment):
        environment = rootfs
        return _resolve(lambda parts: environment.host_path("/".join(parts)), path)
    directory = rootfs
    return _resolve(lambda parts: directory.joinpath(*parts), path)


def _resolve(host_of: Callable[[list[str]], Path], path: str) -> str | None:
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        host = host_of([*done, part])
        if host.is_symlink():
            hops += 1
            if hops > 40:
                return None
            target = os.readlink(host)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        if not host.exists():
            return None
        done.append(part)
    return "/" + "/".join(done)


def environment_shell(environment: Environment) -> bytes:
    """The bytes of the environment's own ``/bin/sh``, which a fresh sandbox runs as init.

    Symlinks are resolved inside its root. Not the host's shell: it may not run on the
    image's C library.

    Raises:
        ValueError: The environment has no ``/bin/sh``.
    """
    if environment.rootfs is None:
        raise ValueError(
            f"environment {environment.short} is the host's: it has no /bin/sh of its own"
        )
    path = resolve_inside(environment, "/bin/sh")
    host = environment.host_path(path) if path else None
    if host is None or not host.is_file():
        raise ValueError(f"environment {environment.short} has no /bin/sh for the sandbox's init")
    return host.read_bytes()

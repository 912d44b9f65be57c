r"""Sandboxes: run untrusted programs with limits, and report what happened as data.

>>> from execgym.sandbox import RunRequest, Status, open_sandbox   # doctest: +SKIP
>>> async with open_sandbox("bwrap", warm_pool=True) as box:        # doctest: +SKIP
...     result = await box.run(RunRequest(argv=["/usr/bin/echo", "hi"]))
>>> result.status is Status.OK, result.stdout                       # doctest: +SKIP
(True, b'hi\\n')

Host code in other packages uses a few of the sandbox's helpers; they are exported
here, so no other package reaches into this package's private modules:
:func:`python_command` (how a sandbox starts Python), :data:`BASE_ENV` (a sandboxed
program's environment before per-run additions), :data:`RESERVES_ADDRESS_SPACE_ENV`
(the marker for a runtime that reserves address space), :func:`detect_cgroups`,
:func:`safe_relative` (a work-dir file name checked) and
:func:`register_trusted_program` (a harness script declared execgym's own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from execgym.errors import ConfigError
from execgym.sandbox._cgroup import CgroupHost, detect_cgroups
from execgym.sandbox._paths import safe_relative
from execgym.sandbox._python import python_command
from execgym.sandbox._rlimits import RESERVES_ADDRESS_SPACE_ENV
from execgym.sandbox._run import BASE_ENV
from execgym.sandbox._trusted import register_trusted_program
from execgym.sandbox.base import BaseSandbox, RunRequest, RunResult, Sandbox, Status
from execgym.sandbox.bwrap import BubblewrapSandbox, ReadOnlyPath
from execgym.sandbox.pausable import PausableSandbox
from execgym.sandbox.pool import WarmPoolSandbox
from execgym.sandbox.session import Session, SessionClosed, open_session
from execgym.sandbox.unisolated import UnisolatedSandbox

if TYPE_CHECKING:
    from execgym.environments.model import Environment

ISOLATIONS = ("bwrap", "gvisor", "none")
"""Backend names accepted by :func:`open_sandbox`."""


def open_sandbox(
    isolation: str = "bwrap",
    *,
    warm_pool: bool = False,
    prestart: int = 0,
    read_only_paths: Sequence[ReadOnlyPath] | None = None,
    environment: Environment | None = None,
    allow_root: bool = False,
) -> Sandbox:
    """The one way to make a sandbox: the backend called ``isolation``, configured.

    Close what it returns (``async with``, or ``await box.aclose()``): the warm pool and
    prestarted sandboxes keep processes between runs.

    Args:
        isolation: ``"bwrap"`` (default: namespaces), ``"gvisor"`` (gVisor's user-space
            kernel, ``runsc``: a stronger boundary, slower start; needs root) or
            ``"none"`` (no isolation, for development only; every result is marked
            ``isolation: none``).
        warm_pool: With ``"bwrap"``, serve Python runs from the warm pool
            (:class:`WarmPoolSandbox`); ignored by the other backends.
        prestart: With ``"bwrap"`` and no warm pool, keep this many sandboxes set up
            ahead of their runs (see :class:`BubblewrapSandbox`).
        read_only_paths: Host directories the programs see read-only (bwrap, the warm
            pool and gVisor); by default the interpreter's prefix.
        environment: The root file system the programs see (bwrap, the warm pool and
            gVisor; see :mod:`execgym.environments`); the host's by default.
        allow_root: Let ``"none"`` run untrusted code as root; refused otherwise.

    Raises:
        SandboxUnavailable: if the backend cannot run here, or ``"none"`` is asked for
            as root without ``allow_root``; the message says how to fix it.
        ConfigError: if ``isolation`` is not a known backend name.
    """
    if isolation == "bwrap":
        if warm_pool:
            return WarmPoolSandbox(read_only_paths=read_only_paths, environment=environment)
        return BubblewrapSandbox(
            read_only_paths=read_only_paths, prestart=prestart, environment=environment
        )
    if isolation == "gvisor":
        from execgym.sandbox.gvisor import GVisorSandbox

        return GVisorSandbox(read_only_paths=read_only_paths, environment=environment)
    if isolation == "none":
        return UnisolatedSandbox(allow_root=allow_root)
    raise ConfigError(f"unknown isolation {isolation!r}; choose one of {list(ISOLATIONS)}")


def create_sandbox(isolation: str = "bwrap", *, allow_root: bool = False) -> Sandbox:
    """``open_sandbox(isolation, allow_root=allow_root)``: the name earlier releases used.

    Raises:
        SandboxUnavailable, ConfigError: as :func:`open_sandbox`.
    """
    return open_sandbox(isolation, allow_root=allow_root)


__all__ = [
    "BASE_ENV",
    "ISOLATIONS",
    "RESERVES_ADDRESS_SPACE_ENV",
    "BaseSandbox",
    "BubblewrapSandbox",
    "CgroupHost",
    "PausableSandbox",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "Session",
    "SessionClosed",
    "Status",
    "UnisolatedSandbox",
    "WarmPoolSandbox",
    "create_sandbox",
    "detect_cgroups",
    "open_sandbox",
    "open_session",
    "python_command",
    "register_trusted_program",
    "safe_relative",
]

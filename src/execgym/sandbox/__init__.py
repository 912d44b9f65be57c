r"""Sandboxes: run untrusted programs with limits, and report what happened as data.

>>> from execgym.sandbox import create_sandbox, Status   # doctest: +SKIP
>>> box = create_sandbox("bwrap")                         # doctest: +SKIP
>>> result = await box.run(["/usr/bin/echo", "hi"])       # doctest: +SKIP
>>> result.status is Status.OK, result.stdout             # doctest: +SKIP
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

from execgym.errors import ConfigError
from execgym.sandbox._cgroup import CgroupHost, detect_cgroups
from execgym.sandbox._paths import safe_relative
from execgym.sandbox._python import python_command
from execgym.sandbox._rlimits import RESERVES_ADDRESS_SPACE_ENV
from execgym.sandbox._run import BASE_ENV
from execgym.sandbox._trusted import register_trusted_program
from execgym.sandbox.base import RunResult, Sandbox, Status
from execgym.sandbox.bwrap import BubblewrapSandbox
from execgym.sandbox.pool import WarmPoolSandbox
from execgym.sandbox.session import Session, SessionClosed, open_session
from execgym.sandbox.unisolated import UnisolatedSandbox

ISOLATIONS = ("bwrap", "gvisor", "none")
"""Backend names accepted by :func:`create_sandbox`."""


def create_sandbox(isolation: str = "bwrap", *, allow_root: bool = False) -> Sandbox:
    """Return the sandbox backend called ``isolation``.

    Args:
        isolation: ``"bwrap"`` (default: namespaces), ``"gvisor"`` (gVisor's user-space
            kernel, ``runsc``: a stronger boundary, slower start; needs root) or
            ``"none"`` (no isolation, for development only; every result is marked
            ``isolation: none``).
        allow_root: Let ``"none"`` run untrusted code as root; refused otherwise.

    Raises:
        SandboxUnavailable: if the backend cannot run here, or ``"none"`` is asked for
            as root without ``allow_root``; the message says how to fix it.
        ConfigError: if ``isolation`` is not a known backend name.
    """
    if isolation == "bwrap":
        return BubblewrapSandbox()
    if isolation == "gvisor":
        from execgym.sandbox.gvisor import GVisorSandbox

        return GVisorSandbox()
    if isolation == "none":
        return UnisolatedSandbox(allow_root=allow_root)
    raise ConfigError(f"unknown isolation {isolation!r}; choose one of {list(ISOLATIONS)}")


__all__ = [
    "BASE_ENV",
    "ISOLATIONS",
    "RESERVES_ADDRESS_SPACE_ENV",
    "BubblewrapSandbox",
    "CgroupHost",
    "RunResult",
    "Sandbox",
    "Session",
    "SessionClosed",
    "Status",
    "UnisolatedSandbox",
    "WarmPoolSandbox",
    "create_sandbox",
    "detect_cgroups",
    "open_session",
    "python_command",
    "register_trusted_program",
    "safe_relative",
]

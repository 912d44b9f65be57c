"""How sandboxes start Python: the interpreter, its flags, and scripts as files."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Protocol

from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox.base import RunResult


def python_command(script: str, executable: str | None = None) -> list[str]:
    """The argv that runs ``script`` with a Python interpreter inside a sandbox.

    Args:
        script: Path of the script, relative to the sandbox's work dir.
        executable: The interpreter; the one running execgym by default. Symlinks are
            resolved, so a virtual environment's interpreter runs as its base.

    The interpreter is started isolated (``-I``: no environment variables, no user
    site), without ``site`` (``-S``: no site-packages and no ``.pth`` files, which cost
    tens of milliseconds per start) and in UTF-8 mode, so only the standard library is
    importable.
    """
    resolved = os.path.realpath(executable or sys.executable)
    return [resolved, "-I", "-S", "-B", "-X", "utf8", script]


class _Runs(Protocol):
    async def run(
        self,
        argv: list[str],
        *,
        stdin: bytes,
        files: Mapping[str, bytes],
        limits: Limits,
        env: Mapping[str, str] | None,
        want_report: bool,
    ) -> RunResult: ...


async def run_python_as_file(
    sandbox: _Runs,
    source: bytes,
    *,
    stdin: bytes,
    files: Mapping[str, bytes] | None,
    limits: Limits,
    env: Mapping[str, str] | None,
    want_report: bool,
) -> RunResult:
    """Run a Python script by writing it as ``runner.py`` and starting the interpreter."""
    return await sandbox.run(
        python_command("runner.py"),
        stdin=stdin,
        files={**(files or {}), "runner.py": source},
        limits=limits,
        env=env,
        want_report=want_report,
    )


class PythonAsFile:
    """``run_python`` for a backend whose ``run`` takes files: the script as ``runner.py``.

    Shared by the bwrap, gVisor and unisolated backends (the warm pool has its own).
    """

    async def run_python(
        self: _Runs,
        source: bytes,
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
        want_report: bool = False,
    ) -> RunResult:
        """Run a Python script (as ``runner.py``); see :meth:`Sandbox.run_python`."""
        return await run_python_as_file(
            self, source, stdin=stdin, files=files, limits=limits, env=env, want_report=want_report
        )

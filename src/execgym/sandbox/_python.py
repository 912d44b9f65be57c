"""How sandboxes start Python: the interpreter, its flags, and scripts as files."""

from __future__ import annotations

import os
import sys

from execgym.sandbox.base import RunRequest


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


def script_request(request: RunRequest, executable: str | None = None) -> RunRequest:
    """``request`` as a plain ``argv`` run: its Python script as ``runner.py``.

    Shared by the backends that run Python by starting an interpreter (bwrap, gVisor,
    unisolated); the warm pool forks its own.
    """
    return request.as_script_file(python_command("runner.py", executable))

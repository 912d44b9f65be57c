"""SandboxFusion's ``/run_code`` on execgym: its limits, its network, and our differences.

SandboxFusion (``sandbox/server/sandbox_api.py`` and ``sandbox/runners/base.py`` at
commit 469de0845cb7d665bc68044d541aa3aa28c5b30a) runs a program with whatever
``run_timeout`` and ``compile_timeout`` it is sent, with the host's network, and with
third-party packages preinstalled; the program writes anywhere in an overlay of ``/``.
execgym keeps its own rules where they protect the trainer, and says so in the
response's ``message`` instead of failing the request:

- a timeout above the server's ``max_wall_time_s`` is lowered to it (a 422 would make
  verl score every test case of the sample as failed);
- the network is none, or loopback only (``127.0.0.1`` inside the run's own network
  namespace) when the server or the request asks for it; never beyond;
- programs see the standard library and the language's own runtime only;
- programs write under ``/work`` (their working directory, where ``files`` go) and
  ``/tmp``; ``fetch_files`` reads from there (a relative path is under ``/work``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from execgym.errors import TaskError
from execgym.sandbox.base import RunResult
from execgym.server.programs import ProgramOutcome

WRITABLE_DIRS = ("/work", "/tmp")
"""Where a ``/run_code`` program may write, and ``fetch_files`` may read from."""

_MISSING_PACKAGE = (
    re.compile(r"ModuleNotFoundError: No module named '([^'.]+)"),  # Python
    re.compile(r"Cannot find module '([^'./][^']*)'"),  # Node.js, TypeScript
    re.compile(r"error: package ([\w.]+) does not exist"),  # Java
    re.compile(r"error\[E0432\]: unresolved import `(\w+)"),  # Rust (a crate)
    re.compile(r"cannot find package \"([\w./-]+)\""),  # Go
)
_NO_ROUTE = re.compile(
    r"Network is unreachable|Temporary failure in name resolution|Name or service not known"
    r"|ENETUNREACH|EAI_AGAIN|getaddrinfo|Could not resolve host|No address associated"
)
_NO_SOCKET = re.compile(r"Operation not permitted|EPERM|EACCES|Permission denied")
_SOCKET_USE = re.compile(r"socket|connect|listen|bind|http|urlopen|server", re.IGNORECASE)
_READ_ONLY = re.compile(r"Read-only file system|EROFS")


def timeout_note(field: str, asked_s: float, allowed_s: float) -> str:
    """What to tell the caller when its ``field`` timeout was lowered to ``allowed_s``."""
    return (
        f"{field} {asked_s:g} s is more than this server allows; the program ran with "
        f"{allowed_s:g} s (the server's max_wall_time_s, EXECGYM_SERVER_MAX_WALL_TIME_S)"
    )


def differences(outcome: ProgramOutcome, network: str, fetch_files: Sequence[str]) -> list[str]:
    """Notes on where execgym's sandbox, not the code, explains a failure.

    Args:
        outcome: What the program did.
        network: The run's network, ``"none"`` or ``"loopback"``.
        fetch_files: The paths the request asked back.

    Returns:
        One sentence per difference that shows in this run's output (a missing
        third-party package, a network beyond loopback, a write outside the writable
        directories, a fetched path outside them); empty when none shows.
    """
    output = "\n".join(_stderr(step) for step in (outcome.compile, outcome.run) if step)
    notes = []
    for pattern in _MISSING_PACKAGE:
        match = pattern.search(output)
        if match:
            notes.append(
                f"{match.group(1)!r} is not installed: execgym runs programs with the "
                "language's standard library only, no preinstalled third-party packages"
            )
            break
    if _NO_ROUTE.search(output):
        notes.append(
            "execgym gives programs no network beyond loopback (127.0.0.1 inside the "
            "run); hosts outside the sandbox cannot be reached"
        )
    elif network == "none" and _NO_SOCKET.search(output) and _SOCKET_USE.search(output):
        notes.append(
            "this server runs /run_code without a network, so sockets are refused; for "
            'a program that serves and calls itself on 127.0.0.1, send "network": '
            '"loopback" or start the server with --run-code-network loopback'
        )
    if _READ_ONLY.search(output):
        notes.append(_writable_note())
    outside = [path for path in fetch_files if not writable(path)]
    if outside:
        notes.append(
            f"fetch_files {outside} are outside the writable directories: " + _writable_note()
        )
    return notes


def place_files(files: Mapping[str, bytes]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Split a request's ``files`` into ``(work dir files, /tmp files)``, names relative.

    SandboxFusion documents relative names (in the program's directory) and absolute
    ones such as ``/tmp/flag.txt`` (``docs/docs/docs/how-to/run-code/
    upload-download-files.mdx``); here ``/work/...`` and relative names go to the work
    dir, ``/tmp/...`` to ``/tmp``.

    Raises:
        TaskError: for an absolute name elsewhere (nothing else is writable), or one
            that climbs out with ``..``.
    """
    work: dict[str, bytes] = {}
    tmp: dict[str, bytes] = {}
    for name, content in files.items():
        for root, into in (("/work/", work), ("/tmp/", tmp)):
            if name.startswith(root):
                into[name[len(root) :]] = content
                break
        else:
            if name.startswith("/"):
                raise TaskError(
                    f"files: {name!r} is outside the writable directories: " + _writable_note()
                )
            work[name] = content
    for name in tmp:
        if not name or ".." in name.split("/") or name.startswith("/"):
            raise TaskError(f"files: '/tmp/{name}' must name a file inside /tmp (no '..')")
    return work, tmp


def writable(path: str) -> bool:
    """Whether a program can write ``path`` (relative paths are under ``/work``)."""
    if not path.startswith("/"):
        return True
    return any(path == root or path.startswith(root + "/") for root in WRITABLE_DIRS)


def _writable_note() -> str:
    return (
        "programs may write only under /work (their working directory, where `files` "
        "are put; relative paths) and /tmp"
    )


def _stderr(step: RunResult) -> str:
    return (step.stderr + b"\n" + step.stdout[-4096:]).decode("utf-8", errors="replace")

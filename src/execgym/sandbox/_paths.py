"""File names from users never escape the work dir."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from execgym.errors import TaskError


def safe_relative(name: str) -> PurePosixPath:
    """Check a user-supplied file name and return it as a relative path.

    Raises:
        TaskError: if the name is empty, absolute, contains ``..``, a NUL byte, or a
            backslash: such a name could point outside the work dir.
    """
    if not name or "\x00" in name or "\\" in name:
        raise TaskError(f"file name {name!r} is empty or has a NUL byte or backslash")
    path = PurePosixPath(name)
    escapes = any(part in ("..", "") for part in path.parts)
    if path.is_absolute() or escapes or path == PurePosixPath("."):
        raise TaskError(
            f"file name {name!r} must be relative and stay inside the work dir (no '..')"
        )
    return path


def archive_files(files: Mapping[str, bytes]) -> bytes:
    """Pack files for a guest that unpacks them (the warm pool's zygote, a session's agent).

    Per file: the name's size (4 bytes, little-endian), the name (UTF-8), the content's
    size (8 bytes), the content.

    Raises:
        TaskError: if a name would escape the work dir (see :func:`safe_relative`).
    """
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

"""What execgym derives from its own sources, kept on disk between processes.

Every ``execgym`` process used to rebuild its programs before the first rollout: the
guest bundles (:func:`execgym.guest.bundle`, every part parsed with :mod:`ast`) and the
judges' harnesses (compiled to marshalled code), about 0.1 s of CPU on a quiet 2-core
machine, a third of the fixed cost of ``execgym score`` (issue 23). They are pure
functions of execgym's own files and of the interpreter, so they are kept, as Python
keeps bytecode in ``__pycache__``, in ``$XDG_CACHE_HOME/execgym/programs``
(``~/.cache/execgym/programs`` by default), each under the SHA-256 of everything it is
made from: an upgrade or an edited checkout has other keys, and its entries are made
again on first use. The bwrap sandbox's seccomp filter is kept here too
(:mod:`execgym.sandbox._seccomp`: keyed also by the pyseccomp and libseccomp files).

Trust: an entry is as trusted as execgym's own bytecode (a harness holds the run's
report channel), so entries are read only from a directory the user owns that no one
else may write (mode ``0700`` when made here), and written whole (a temporary file
renamed into place), so a reader never sees half of one. Where that directory cannot be
used (a read-only home, another owner, group or world write), nothing is read or
written and each process builds its programs as before. ``EXECGYM_PROGRAM_CACHE=off``
turns the cache off; ``rm -r ~/.cache/execgym/programs`` empties it. Standard library
only: the guest reader imports it.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType

__all__ = ["cache_dir", "cached_bytes", "compile_cached"]

_OFF = ("0", "off", "false", "no")


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/execgym/programs`` (``~/.cache/execgym/programs``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "execgym" / "programs"


@functools.cache
def _usable_dir(path: Path) -> Path | None:
    """``path``, made if missing, if it is ours and only ours to write; else ``None``."""
    if os.environ.get("EXECGYM_PROGRAM_CACHE", "").lower() in _OFF:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path


def cached_bytes(kind: str, inputs: Iterable[bytes], make: Callable[[], bytes]) -> bytes:
    """``make()``, kept on disk under the hash of ``kind`` and ``inputs``.

    Args:
        kind: What is made (a short name, part of the entry's file name).
        inputs: Everything the result depends on; equal inputs must mean an equal result.
        make: Makes the result when there is no entry (its exceptions propagate, and
            nothing is written).

    Returns:
        The entry's bytes, or ``make()``'s (then written as the entry, best effort).
    """
    digest = hashlib.sha256(kind.encode())
    for part in inputs:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    folder = _usable_dir(cache_dir())
    entry = folder / f"{kind}-{digest.hexdigest()[:32]}" if folder is not None else None
    if entry is not None:
        try:
            return entry.read_bytes()
        except OSError:
            pass
    made = make()
    if entry is not None:
        _write(entry, made)
    return made


def _write(entry: Path, data: bytes) -> None:
    """Write ``data`` to ``entry`` whole, or not at all (best effort: a full disk is fine)."""
    import tempfile  # only on a miss: a command with its programs cached needs none

    try:
        handle, temporary = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as sink:
            sink.write(data)
        os.replace(temporary, entry)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def compile_cached(source: bytes, filename: str) -> CodeType:
    """``compile(source, filename, "exec", dont_inherit=True, optimize=0)``, kept on disk.

    Keyed by the source, the file name and this interpreter's bytecode tag
    (``sys.implementation.cache_tag``) and version, as ``.pyc`` files are.

    Raises:
        SyntaxError: if ``source`` does not compile (nothing is written).
    """
    version = f"{sys.implementation.cache_tag}:{sys.hexversion}".encode()

    def make() -> bytes:
        return marshal.dumps(compile(source, filename, "exec", dont_inherit=True, optimize=0))

    blob = cached_bytes("code", (version, filename.encode(), source), make)
    try:
        code = marshal.loads(blob)  # noqa: S302 - our own entry, in a directory only we write
    except (EOFError, ValueError, TypeError):  # a damaged entry: compile again
        code = None
    if not isinstance(code, CodeType):
        return compile(source, filename, "exec", dont_inherit=True, optimize=0)
    return code

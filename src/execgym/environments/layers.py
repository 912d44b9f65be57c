"""Layers: unpack an image layer once, and assemble root file systems from layers.

A layer is a tar of file-system changes (OCI image spec, ``layer.md``): entries add or
replace files; an entry ``DIR/.wh.NAME`` (a *whiteout*) deletes ``DIR/NAME`` of the layers
below, and ``DIR/.wh..wh..opq`` (an *opaque* marker) hides everything the layers below
had in ``DIR``. :func:`unpack_layer` extracts a layer's tar once into a directory of its
own (the *layer store* keeps one per layer digest) and records its whiteouts apart, so
the extracted tree holds only real entries. :func:`assemble` builds a root file system
from layers in order: directories are made anew, every other entry is a hard link to
the layer store's inode, so N environments on one base cost the base once plus their
own layers and a directory tree each (measured by ``benchmarks/environments.py``).

Ownership: as root, entries keep the tar's numeric uid and gid (``root`` owns ``/etc``
in the sandbox as in the image). As an ordinary user every entry is the user's (which
the sandbox's user namespace maps to its own uid), directories are made ``u+rwx`` so
the cache can be assembled and collected, and files ``u+r``. Set-uid and set-gid bits
are cleared (runs have ``no_new_privs`` anyway); device nodes and FIFOs are skipped
(each sandbox mounts its own ``/dev``). Paths that would leave the layer's directory
(``..``, absolute names, through a symlink) are refused by :mod:`tarfile`'s ``tar``
extraction filter (PEP 706).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
TREE = "tree"
WHITEOUTS = "whiteouts.json"


class LayerError(ValueError):
    """A layer that cannot be unpacked.

    Not a tar, a compression we cannot read, or its content does not match its digest.
    """


class _Hashing:
    """A read-only stream that hashes what is read through it (the layer's ``diff_id``)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.hash = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def decompressed(blob: IO[bytes]) -> tuple[IO[bytes], subprocess.Popen[bytes] | None]:
    """The uncompressed stream of a layer blob (plain tar, gzip or zstd, by magic bytes).

    Returns:
        The stream and, for zstd, the ``zstd -dc`` process producing it (wait for it).

    Raises:
        LayerError: zstd without the ``zstd`` program.
    """
    head = blob.read(4)
    blob.seek(0)
    if head[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=blob, mode="rb"), None  # type: ignore[return-value]
    if head == b"\x28\xb5\x2f\xfd":
        zstd = shutil.which("zstd")
        if zstd is None:
            raise LayerError("a zstd-compressed layer needs `zstd` (apt-get install zstd)")
        process = subprocess.Popen([zstd, "-dc"], stdin=blob, stdout=subprocess.PIPE)
        if process.stdout is None:  # stdout=PIPE always gives one
            raise RuntimeError("zstd was started without a pipe for its output")
        return process.stdout, process
    return blob, None


@dataclass(frozen=True)
class UnpackedLayer:
    """A layer in the layer store.

    Attributes:
        digest: ``sha256:`` of its uncompressed tar (the OCI ``diff_id``).
        path: Its directory: ``tree/`` (the entries) and ``whiteouts.json``.
        whiteouts: Paths (relative, ``/``-separated) the layer deletes from those below.
        opaque: Directories whose lower contents the layer hides.
    """

    digest: str
    path: Path
    whiteouts: tuple[str, ...]
    opaque: tuple[str, ...]

    @property
    def tree(self) -> Path:
        """The directory holding the layer's entries."""
        return self.path / TREE

    @classmethod
    def load(cls, digest: str, path: Path) -> UnpackedLayer:
        """Read a layer the store holds at ``path``."""
        marks = json.loads((path / WHITEOUTS).read_text())
        return cls(digest, path, tuple(marks["whiteouts"]), tuple(marks["opaque"]))


def _normal(name: str) -> str:
    return os.path.normpath(name.lstrip("/")).removeprefix("./")


def _inside_tree(tree: str, name: str, *, follow_last: bool) -> None:
    """Refuse ``name`` if writing it would land outside ``tree`` (as it is on disk now).

    The same check as :mod:`tarfile`'s ``tar`` filter (PEP 706), made here too because
    interpreters before 3.11.4 (Debian 12's 3.11.2) have no filters.

    Raises:
        LayerError: ``..``, an absolute name, or a path through a symlink leading out.
    """
    if name == ".." or name.startswith("../") or os.path.isabs(name):
        raise LayerError(f"the layer's entry {name!r} would leave its directory")
    target = os.path.join(tree, name)
    real = os.path.realpath(target if follow_last else os.path.dirname(target))
    if real != tree and not real.startswith(tree + os.sep):
        raise LayerError(f"the layer's entry {name!r} would be written outside it, at {real}")


def _members(
    archive: tarfile.TarFile, whiteouts: list[str], opaque: list[str], as_root: bool, tree: str
) -> Iterator[tarfile.TarInfo]:
    for member in archive:
        name = _normal(member.name)
        if name in ("", "."):
            continue
        directory, base = os.path.split(name)
        if base == OPAQUE_MARKER:
            opaque.append(directory or ".")
            continue
        if base.startswith(WHITEOUT_PREFIX):
            whiteouts.append(os.path.join(directory, base[len(WHITEOUT_PREFIX) :]))
            continue
        if member.ischr() or member.isblk() or member.isfifo():
            continue
        member.name = name
        _inside_tree(tree, name, follow_last=not member.issym())
        if member.islnk():
            member.linkname = _normal(member.linkname)
            _inside_tree(tree, member.linkname, follow_last=True)
        member.mode &= ~(stat.S_ISUID | stat.S_ISGID)
        if not as_root:
            member.mode |= 0o700 if member.isdir() else 0o400
        yield member


def unpack_layer(blob: IO[bytes], dest: Path, expected: str | None = None) -> UnpackedLayer:
    """Extract the layer tar ``blob`` (plain, gzip or zstd) into the new directory ``dest``.

    Args:
        blob: The layer as stored in the image (seekable, opened for reading).
        dest: A directory that does not exist yet; ``dest/tree`` gets the entries and
            ``dest/whiteouts.json`` the whiteouts and opaque markers.
        expected: The layer's ``diff_id`` (``sha256:`` of the uncompressed tar), checked.

    Returns:
        The unpacked layer, named by the digest of what was read.

    Raises:
        LayerError: The blob is not a tar, or does not match ``expected``.
        OSError: ``dest`` cannot be written.
    """
    stream, process = decompressed(blob)
    hashing = _Hashing(stream)
    whiteouts: list[str] = []
    opaque: list[str] = []
    tree = dest / TREE
    tree.mkdir(parents=True)
    as_root = os.geteuid() == 0
    try:
        with tarfile.open(fileobj=hashing, mode="r|") as archive:  # type: ignore[call-overload]
            members = _members(archive, whiteouts, opaque, as_root, os.path.realpath(tree))
            if hasattr(tarfile, "tar_filter"):  # Python 3.11.4 and later (PEP 706)
                archive.extractall(tree, members=members, numeric_owner=True, filter="tar")
            else:
                # S202: each member was checked by _inside_tree, as the filter would
                archive.extractall(tree, members=members, numeric_owner=True)  # noqa: S202
        hashing.drain()
    except (tarfile.TarError, EOFError, OSError) as error:
        real_os_error = isinstance(error, OSError) and not isinstance(error, tarfile.TarError)
        if real_os_error and isinstance(error, OSError) and error.errno is not None:
            raise
        raise LayerError(f"not a readable layer tar: {error}") from error
    finally:
        if process is not None:
            process.wait()
    digest = "sha256:" + hashing.hash.hexdigest()
    if expected is not None and digest != expected:
        raise LayerError(f"the layer's content is {digest}, but the image names it {expected}")
    if not as_root:
        for root, dirs, _files in os.walk(tree):
            for name in dirs:
                path = os.path.join(root, name)
                mode = os.lstat(path).st_mode
                if stat.S_ISDIR(mode):  # never through a symlink (os.walk lists them here)
                    os.chmod(path, stat.S_IMODE(mode) | 0o700)
    (dest / WHITEOUTS).write_text(json.dumps({"whiteouts": whiteouts, "opaque": opaque}))
    return UnpackedLayer(digest, dest, tuple(whiteouts), tuple(opaque))


def _inside(root: Path, relative: str) -> Path | None:
    """``root/relative`` if no component below ``root`` is a symlink, else ``None``."""
    path = root
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    for part in parts[:-1]:
        path = path / part
        if not path.is_dir() or path.is_symlink():
            return None
    return path / parts[-1] if parts else root


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _copy_metadata(source: str, target: str, as_root: bool) -> None:
    info = os.lstat(source)
    if as_root:
        os.lchown(target, info.st_uid, info.st_gid)
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(target, stat.S_IMODE(info.st_mode))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def apply_layer(rootfs: Path, layer: UnpackedLayer) -> None:
    """Apply ``layer`` on top of the root file system being assembled at ``rootfs``.

    Whiteouts and opaque markers first (they concern the layers below only), then every
    entry: directories merge with a directory below (any other entry there is replaced),
    files and symlinks replace what was there; files are hard links into the layer
    store, symlinks and directories are made anew.
    """
    as_root = os.geteuid() == 0
    for directory in layer.opaque:
        target = _inside(rootfs, directory)
        if target is not None and target.is_dir() and not target.is_symlink():
            for child in list(target.iterdir()):
                _remove(child)
    for relative in layer.whiteouts:
        target = _inside(rootfs, relative)
        if target is not None:
            _remove(target)
    tree = str(layer.tree)
    directories: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(tree):
        below = os.path.relpath(root, tree)
        into = rootfs if below == "." else rootfs / below
        for name in dirs:
            source, target = os.path.join(root, name), into / name
            if os.path.islink(source):  # os.walk lists symlinks to directories as dirs
                _remove(target)
                os.symlink(os.readlink(source), target)
                _copy_metadata(source, str(target), as_root)
                continue
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                _remove(target)
            if not target.exists():
                target.mkdir()
            directories.append((source, str(target)))
        for name in files:
            source, target = os.path.join(root, name), into / name
            _remove(target)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
                _copy_metadata(source, str(target), as_root)
            else:
                os.link(source, target)
    for source_dir, target_dir in reversed(directories):  # deepest first: mtimes stay as set
        _copy_metadata(source_dir, target_dir, as_root)


def assemble(rootfs: Path, layers: Sequence[UnpackedLayer]) -> None:
    """Build a root file system at the new directory ``rootfs`` from ``layers``, lowest first.

    Raises:
        OSError: ``rootfs`` exists or cannot be written, or the layer store and
            ``rootfs`` are on different file systems (hard links cannot cross them).
    """
    rootfs.mkdir()
    for layer in layers:
        apply_layer(rootfs, layer)
    os.chmod(rootfs, 0o755)  # noqa: S103 (the sandbox's unprivileged uid walks this root)


def remove_tree(path: Path) -> None:
    """Remove ``path`` (a file, a link or a tree), nothing if it is absent.

    Works where its directories lack write permission for us (unpacked layers keep
    their modes): they are made writable as the removal reaches them.
    """
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return

    def retry(function: object, name: str, _error: object) -> None:
        parent = os.path.dirname(name)
        with contextlib.suppress(OSError):
            os.chmod(parent, 0o700)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, 0o700)
            shutil.rmtree(name, onerror=retry)
        else:
            os.unlink(name)

    shutil.rmtree(path, onerror=retry)

"""Sharing unchanged directories between environments, so N on one base cost it once.

An assembled root is hard links into the layer store, so its files cost nothing twice,
but its directories are its own: a Debian root has about 1,300 of them (5 MiB), which
every task environment built on it paid again (12 spec-built environments on one base
took 1.263x the base plus their own layers, measured by ``benchmarks/environments.py``).

An environment made of a *base* environment's layers plus some more needs its own
directory only where those upper layers change something: a path they add, replace or
delete (whiteouts), a directory they make opaque, and every ancestor of these. Any other
directory of its root is, entry for entry, the base's. :func:`share_unchanged` turns
each such directory (the topmost ones, and only those with at least
:data:`MIN_SHARED_DIRS` directories in them, so a sandbox start binds a few dozen at
most) into an empty directory of the new root, recorded with the base's host directory
in :attr:`Environment.shared <execgym.environments.model.Environment.shared>`. Every
tier binds the base's directory over it read-only, as it binds the root's top-level
directories (:func:`execgym.environments.mounts.root_mounts`), so a sandbox sees the
same tree as before. A directory the base itself shares is shared from where the base
gets it, so chains never form; the cache keeps a removed environment's root on disk
while another environment shares from it (``EnvironmentCache.remove`` and ``gc``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from execgym.environments.layers import UnpackedLayer, remove_tree
from execgym.environments.model import Environment

MIN_SHARED_DIRS = 4
"""A directory is shared only if it holds at least this many directories (itself
included): a smaller one costs about as much as the empty mount point it would become."""

SKIPPED_TOP = frozenset({"proc", "dev", "sys", "tmp", "run", "work"})
"""Top-level names no tier binds from a root (see :data:`execgym.environments.mounts.SKIPPED`)."""


def changed_paths(layers: Iterable[UnpackedLayer]) -> set[str]:
    """Every path (relative, ``/``-separated) ``layers`` change, with all its ancestors.

    Entries of their trees, whiteouts and opaque directories; ``"."`` is the root.
    """
    changed = {"."}

    def add(relative: str) -> None:
        parts = [part for part in relative.split("/") if part not in ("", ".")]
        for end in range(1, len(parts) + 1):
            changed.add("/".join(parts[:end]))

    for layer in layers:
        for path in (*layer.whiteouts, *layer.opaque):
            add(path)
        tree = str(layer.tree)
        for root, dirs, files in os.walk(tree):
            below = os.path.relpath(root, tree)
            for name in [*dirs, *files]:
                add(name if below == "." else f"{below}/{name}")
    return changed


def _count_dirs(path: str, limit: int) -> int:
    """Directories under ``path``, itself included, counted up to ``limit``."""
    count = 0
    for _root, dirs, _files in os.walk(path):
        count += 1
        if count >= limit:
            return count
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(_root, d))]
    return count


def _empty_like(path: str) -> None:
    """Replace the directory ``path`` by an empty one with its mode, owner and times."""
    info = os.lstat(path)
    remove_tree(Path(path))
    os.mkdir(path)
    if os.geteuid() == 0:
        os.lchown(path, info.st_uid, info.st_gid)
    os.chmod(path, info.st_mode & 0o7777)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def share_unchanged(
    rootfs: Path, base: Environment, upper: Sequence[UnpackedLayer]
) -> list[tuple[str, str]]:
    """Empty the directories of ``rootfs`` that are ``base``'s unchanged; say where they are.

    Args:
        rootfs: A root just assembled from ``base.layers`` plus ``upper`` (not yet used).
        base: An environment in the cache made of a prefix of ``rootfs``'s layers.
        upper: The layers ``rootfs`` has on top of ``base``'s.

    Returns:
        ``(path inside, host directory)`` pairs, sorted (parents first): what
        :attr:`Environment.shared` holds.

    Raises:
        OSError: ``rootfs`` cannot be changed.
    """
    if base.rootfs is None:
        return []
    changed = changed_paths(upper)
    base_shared = [inside.strip("/") for inside, _host in base.shared]
    shared: list[tuple[str, str]] = []
    top = str(rootfs)
    for root, dirs, _files in os.walk(top):
        below = os.path.relpath(root, top)
        keep = []
        for name in sorted(dirs):
            relative = name if below == "." else f"{below}/{name}"
            path = os.path.join(root, name)
            if os.path.islink(path) or (below == "." and name in SKIPPED_TOP):
                continue
            if relative in changed or any(s.startswith(relative + "/") for s in base_shared):
                keep.append(name)  # its own directory: walk into it
                continue
            host = base.host_path(relative)
            if host.is_symlink() or not host.is_dir():
                continue
            if _count_dirs(path, MIN_SHARED_DIRS) >= MIN_SHARED_DIRS:
                _empty_like(path)
                shared.append(("/" + relative, str(host)))
        dirs[:] = keep
    return sorted(shared)

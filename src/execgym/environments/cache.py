"""The local environment cache: a layer store and assembled root file systems.

Layout under the cache directory (``$EXECGYM_ENV_CACHE``, else
``$XDG_CACHE_HOME/execgym/environments``, else ``~/.cache/execgym/environments``)::

    layers/<hex>/tree/...            one unpacked layer, by its diff_id (shared)
    layers/<hex>/whiteouts.json      its whiteouts and opaque markers
    envs/<hex>/environment.json      layers, config, names, source, created/built times
    envs/<hex>/rootfs/...            the assembled root (hard links into layers/; a
                                     directory unchanged from the environment it was
                                     built on is an empty one, bound from that one's
                                     root at run time: :mod:`.sharing`)
    names.json                       {name: digest}
    stats.json                       counters: layers unpacked, environments assembled
                                     and built (tests and benchmarks read them)

Everything is written under a temporary name and renamed into place, under an
exclusive lock on ``.lock`` (``flock``), so two processes importing the same image
unpack it once and a reader never sees half an environment. A root file system is
never changed after it is assembled: every sandbox binds it read-only. A removed
environment whose root another one shares from is kept (hidden: ``"removed": true`` in
its record) until no environment shares from it any more.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execgym.environments.layers import UnpackedLayer, assemble, remove_tree, unpack_layer
from execgym.environments.model import (
    HOST,
    HOST_NAME,
    Environment,
    EnvironmentConfig,
    check_digest,
    environment_digest,
)
from execgym.environments.mounts import resolve_inside
from execgym.environments.oci import ImageSource, read_image
from execgym.environments.sharing import share_unchanged

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_PYTHONS = ("usr/local/bin/python3", "usr/bin/python3")


class EnvironmentNotFound(LookupError):
    """No environment of that name or digest in the cache (the message says how to get it)."""


def default_cache_dir() -> Path:
    """The cache directory: ``$EXECGYM_ENV_CACHE``, else under ``$XDG_CACHE_HOME``.

    Without either, ``~/.cache/execgym/environments``.
    """
    explicit = os.environ.get("EXECGYM_ENV_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "execgym" / "environments"


def check_name(name: str) -> str:
    """Return ``name`` if it can name an environment.

    Raises:
        ValueError: Empty, over 128 characters, other than letters, digits, ``.``, ``_``
            and ``-`` (not first), ``host`` (reserved), or a digest.
    """
    if not _NAME.match(name) or name == HOST_NAME:
        raise ValueError(
            f"invalid environment name {name!r}: use 1 to 128 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit, and not 'host'"
        )
    return name


def find_python(rootfs: Path) -> str | None:
    """The interpreter a root file system has (``None`` if it has none).

    ``/usr/local/bin/python3`` or ``/usr/bin/python3``, symlinks resolved inside ``rootfs``.
    """
    for candidate in _PYTHONS:
        path = resolve_inside(rootfs, candidate)
        host = rootfs / path.lstrip("/") if path else None
        if host is not None and host.is_file() and os.access(host, os.X_OK):
            return path
    return None


@dataclass(frozen=True)
class DiskUse:
    """Bytes the cache holds, hard links counted once.

    Attributes:
        layers_bytes: The layer store.
        environments_bytes: What the assembled roots add (their own directories and
            symlinks; their files are the layer store's, and the directories they share
            with their base are the base's).
        total_bytes: Both.
    """

    layers_bytes: int
    environments_bytes: int
    total_bytes: int


def _usage(paths: Sequence[Path], seen: set[tuple[int, int]]) -> int:
    total = 0
    for top in paths:
        if not top.exists():
            continue
        for root, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                info = os.lstat(os.path.join(root, name))
                key = (info.st_dev, info.st_ino)
                if key not in seen:
                    seen.add(key)
                    total += info.st_blocks * 512
    return total


class EnvironmentCache:
    """Environments on this machine; see the module docstring.

    Args:
        root: The cache directory (default :func:`default_cache_dir`); made on first write.
    """

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    # -- locking and small files --------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache's exclusive lock (``flock`` on ``.lock``); makes its folders."""
        for sub in ("layers", "envs", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_json(self, name: str) -> dict[str, Any]:
        path = self.root / name
        return json.loads(path.read_text()) if path.is_file() else {}

    def _write_json(self, name: str, value: Mapping[str, Any]) -> None:
        handle, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{name}.")
        with os.fdopen(handle, "w") as out:
            json.dump(value, out, indent=1, sort_keys=True)
        os.replace(tmp, self.root / name)

    def _count(self, counter: str) -> None:
        stats = self._read_json("stats.json")
        stats[counter] = int(stats.get(counter, 0)) + 1
        self._write_json("stats.json", stats)

    def stats(self) -> dict[str, int]:
        """Counters: ``layers_unpacked``, ``environments_assembled``, ``environments_built``."""
        return {key: int(value) for key, value in self._read_json("stats.json").items()}

    def _tmp(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.root / "tmp"))

    # -- layers -------------------------------------------------------------------------

    def layer_path(self, digest: str) -> Path:
        """Where the layer ``digest`` is (or would be) unpacked."""
        return self.root / "layers" / check_digest(digest, "layer digest").removeprefix("sha256:")

    def has_layer(self, digest: str) -> bool:
        """Whether the layer store holds ``digest``."""
        return (self.layer_path(digest) / "whiteouts.json").is_file()

    def layer(self, digest: str) -> UnpackedLayer:
        """The unpacked layer ``digest``.

        Raises:
            EnvironmentNotFound: The store does not hold it.
        """
        if not self.has_layer(digest):
            raise EnvironmentNotFound(f"layer {digest} is not in {self.root / 'layers'}")
        return UnpackedLayer.load(digest, self.layer_path(digest))

    def add_layer(
        self, open_blob: Any, expected: str | None, *, stored_as: str | None = None
    ) -> UnpackedLayer:
        """Unpack a layer blob into the store unless it holds ``expected`` already.

        Args:
            open_blob: A callable returning a context manager over the blob (seekable).
            expected: Its ``diff_id`` if known (checked); ``None`` to name it by content.
            stored_as: Keep it under this digest instead of its content's: a layer pulled
                from the object store, written again as a tar by :mod:`.remote` (so its
                bytes differ from the image's), keeps the image's ``diff_id``; the
                store's own sha256 check vouches for the bytes.

        Raises:
            LayerError: Not a layer, or its content does not match ``expected``.
        """
        known = stored_as or expected
        if known is not None and self.has_layer(known):
            return self.layer(known)
        scratch = self._tmp()
        try:
            with open_blob() as blob:
                layer = unpack_layer(blob, scratch / "layer", expected)
            digest = stored_as or layer.digest
            target = self.layer_path(digest)
            if self.has_layer(digest):
                return self.layer(digest)
            if target.exists():  # a half-written one from a crash: replace it
                remove_tree(target)
            os.rename(scratch / "layer", target)
            self._count("layers_unpacked")
            return UnpackedLayer.load(digest, target)
        finally:
            remove_tree(scratch)

    # -- environments -------------------------------------------------------------------

    def _env_dir(self, digest: str) -> Path:
        return self.root / "envs" / check_digest(digest).removeprefix("sha256:")

    def _load(self, digest: str) -> Environment:
        path = self._env_dir(digest)
        record = json.loads((path / "environment.json").read_text())
        names = sorted(n for n, d in self._read_json("names.json").items() if d == digest)
        return Environment(
            digest=digest,
            layers=tuple(record["layers"]),
            config=EnvironmentConfig.from_json(record["config"]),
            rootfs=path / "rootfs",
            names=tuple(names),
            source=record.get("source", ""),
            shared=tuple(
                (inside, str(self.root / host)) for inside, host in record.get("shared", [])
            ),
        )

    def _records(self, *, hidden: bool = False) -> dict[str, dict[str, Any]]:
        """Every stored record by digest: live ones, and with ``hidden`` removed ones too."""
        envs = self.root / "envs"
        found = {}
        for path in sorted(envs.iterdir()) if envs.is_dir() else []:
            if (path / "environment.json").is_file():
                record = json.loads((path / "environment.json").read_text())
                if hidden or not record.get("removed"):
                    found["sha256:" + path.name] = record
        return found

    def _base_for(self, layers: tuple[str, ...]) -> Environment | None:
        """The live environment made of the longest prefix of ``layers``, if any."""
        best: tuple[int, str] | None = None
        for digest, record in self._records().items():
            mine = tuple(record["layers"])
            if mine and layers[: len(mine)] == mine and (best is None or len(mine) > best[0]):
                best = (len(mine), digest)
        return self._load(best[1]) if best is not None else None

    def _drop(self, digest: str) -> None:
        """Delete an environment's directory, or hide it while others share from it.

        Then delete every hidden environment nobody shares from any more.
        """
        target = self._env_dir(digest)
        record = json.loads((target / "environment.json").read_text())
        record["removed"] = True
        (target / "environment.json").write_text(json.dumps(record, indent=1))
        while True:
            records = self._records(hidden=True)
            used = {
                host.split("/")[1]
                for r in records.values()
                for _inside, host in r.get("shared", [])
            }
            unused = [
                d
                for d, r in records.items()
                if r.get("removed") and d.removeprefix("sha256:") not in used
            ]
            if not unused:
                return
            for gone in unused:
                remove_tree(self._env_dir(gone))

    def record(self, environment: Environment) -> dict[str, Any]:
        """The stored record of an environment.

        Keys: layers, config, source, ``created_at``; ``built_at`` and ``spec`` (its
        JSON) for a built spec.
        """
        if environment.is_host:
            return {"layers": [], "source": environment.source}
        recorded: dict[str, Any] = json.loads(
            (self._env_dir(environment.digest) / "environment.json").read_text()
        )
        return recorded

    def create(
        self,
        layers: Sequence[UnpackedLayer],
        *,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        source: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> Environment:
        """Assemble (once) the environment made of ``layers`` and name it ``name``.

        The interpreter is found in the assembled root (:func:`find_python`).

        Raises:
            ValueError: A bad name.
            OSError: The root cannot be written.
        """
        if name is not None:
            check_name(name)
        layer_ids = tuple(layer.digest for layer in layers)
        with self.locked():
            existing = self._same(layer_ids, dict(env or {}))
            if existing is not None:
                if name is not None:
                    self._name(name, existing)
                return self._load(existing)
            scratch = self._tmp()
            try:
                rootfs = scratch / "rootfs"
                assemble(rootfs, layers)
                config = EnvironmentConfig(python=find_python(rootfs), env=dict(env or {}))
                digest = environment_digest(layer_ids, config)
                target = self._env_dir(digest)
                record = {
                    "layers": list(layer_ids),
                    "config": config.to_json(),
                    "source": source,
                    "created_at": time.time(),
                    **(extra or {}),
                }
                if (target / "environment.json").is_file():  # hidden by remove(): back
                    kept = json.loads((target / "environment.json").read_text())
                    record["shared"] = kept.get("shared", [])
                    (target / "environment.json").write_text(json.dumps(record, indent=1))
                else:
                    if target.exists():
                        remove_tree(target)
                    record["shared"] = self._share(rootfs, layers)
                    (scratch / "environment.json").write_text(json.dumps(record, indent=1))
                    os.rename(scratch, target)
                    self._count("environments_assembled")
            finally:
                remove_tree(scratch)
            if name is not None:
                self._name(name, digest)
        return self._load(digest)

    def _share(self, rootfs: Path, layers: Sequence[UnpackedLayer]) -> list[list[str]]:
        """Share ``rootfs``'s unchanged directories with its base (:mod:`.sharing`).

        Returns the record's ``shared``: ``[path inside, host path under the cache]``.
        """
        base = self._base_for(tuple(layer.digest for layer in layers))
        if base is None:
            return []
        upper = layers[len(base.layers) :]
        shared = share_unchanged(rootfs, base, upper)
        return [[inside, os.path.relpath(host, self.root)] for inside, host in shared]

    def _name(self, name: str, digest: str) -> None:
        names = self._read_json("names.json")
        names[name] = digest
        self._write_json("names.json", names)

    def _same(self, layers: tuple[str, ...], env: dict[str, str]) -> str | None:
        """An environment already assembled from ``layers`` with ``env``, if any."""
        for digest, record in self._records().items():
            if tuple(record["layers"]) == layers and record["config"].get("env") == env:
                return digest
        return None

    def import_image(self, reference: str | Path, *, name: str | None = None) -> Environment:
        """Import an OCI layout or docker/podman save archive (see :func:`read_image`).

        Each layer is unpacked once into the layer store (a layer it already holds is
        not read again), then the root is assembled by hard links.

        Raises:
            ImageError: Not a readable image, or no such tag.
            LayerError: A layer does not match its diff_id.
            ValueError: A bad name.
        """
        source: ImageSource = read_image(reference)
        layers = []
        with self.locked():
            for blob in source.layers:
                layers.append(self.add_layer(blob.open, blob.diff_id))
        return self.create(layers, env=source.env, name=name, source=source.reference)

    def get(self, reference: str) -> Environment:
        """The environment ``reference`` names.

        ``host``, a name, a digest or a unique digest prefix (``sha256:`` optional, 6 hex
        digits at least).

        Raises:
            EnvironmentNotFound: No such environment here, with how to import, build or
                pull it.
        """
        if reference == HOST_NAME:
            return HOST
        names = self._read_json("names.json")
        if reference in names and (self._env_dir(names[reference]) / "environment.json").is_file():
            return self._load(names[reference])
        hexpart = reference.removeprefix("sha256:")
        if re.fullmatch(r"[0-9a-f]{6,64}", hexpart):
            found = [d for d in self._digests() if d.removeprefix("sha256:").startswith(hexpart)]
            if len(found) == 1:
                return self._load(found[0])
        raise EnvironmentNotFound(
            f"no environment {reference!r} in {self.root}: import one (`execgym env import "
            "IMAGE --name NAME`), build a spec (`execgym env build SPEC.json`) or pull one "
            "(`execgym env pull NAME --store URL`)"
        )

    def _digests(self) -> list[str]:
        return sorted(self._records())

    def list(self) -> list[Environment]:
        """Every environment in the cache, by digest."""
        return [self._load(digest) for digest in self._digests()]

    def remove(self, reference: str) -> Environment:
        """Forget the environment ``reference`` names (its layers stay until :meth:`gc`).

        Its root stays on disk, hidden, while another environment shares directories
        from it, and goes with the last of those.

        Raises:
            EnvironmentNotFound: No such environment.
        """
        environment = self.get(reference)
        if environment.is_host:
            raise ValueError("the host environment cannot be removed")
        with self.locked():
            names = {
                n: d for n, d in self._read_json("names.json").items() if d != environment.digest
            }
            self._write_json("names.json", names)
            self._drop(environment.digest)
        return environment

    def gc(self, *, keep_unnamed: bool = True) -> builtins.list[str]:
        """Delete layers no environment uses.

        With ``keep_unnamed=False``, environments no name points to go first.

        Returns:
            The digests deleted (environments and layers).
        """
        removed: builtins.list[str] = []
        with self.locked():
            names = self._read_json("names.json")
            named = set(names.values())
            for digest in self._digests():
                if not keep_unnamed and digest not in named:
                    self._drop(digest)
                    removed.append(digest)
            used = {layer for d in self._digests() for layer in self._load(d).layers}
            for path in sorted((self.root / "layers").iterdir()):
                if "sha256:" + path.name not in used:
                    remove_tree(path)
                    removed.append("sha256:" + path.name)
            self._write_json("names.json", {n: d for n, d in names.items() if d not in removed})
            for path in (self.root / "tmp").iterdir():
                remove_tree(path)
        return removed

    def disk_use(self) -> DiskUse:
        """Bytes used (allocated blocks), hard links counted once."""
        seen: set[tuple[int, int]] = set()
        layers = _usage([self.root / "layers"], seen)
        envs = _usage([self.root / "envs"], seen)
        return DiskUse(layers, envs, layers + envs)

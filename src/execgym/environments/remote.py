"""Push environments to the object store and pull them on worker nodes.

A pushed environment is one version of a store data set (:mod:`execgym.storage`):

    environment.json                 digest, layers (diff_ids), config, source
    layers/<hex>.tar                 each layer as a tar (entries, then whiteouts and
                                     opaque markers), written again from the layer store

The store keeps every file as a content-addressed blob, so a layer that two pushed
environments share (their base) is stored once there too, and :func:`pull` fetches only
the layers the local cache lacks. Layers are written again deterministically (sorted,
with their stored metadata), so pushing the same environment twice writes no new blob.
A pulled environment is assembled as an imported one and must come out with the digest
that was pushed (same layers, same configuration).
"""

from __future__ import annotations

import functools
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from execgym.environments.cache import EnvironmentCache
from execgym.environments.layers import OPAQUE_MARKER, WHITEOUT_PREFIX, UnpackedLayer, remove_tree
from execgym.environments.model import Environment
from execgym.storage import Manifest, Store, VersionRecord

KIND = "execgym-environment"
"""The ``kind`` in a pushed environment's version metadata."""


class EnvironmentMismatch(RuntimeError):
    """A pulled environment did not come out with the digest that was pushed."""


def write_layer_tar(layer: UnpackedLayer, out: Path) -> None:
    """Write ``layer`` (from the layer store) as a layer tar at ``out``.

    Entries in sorted order with their stored mode, times and (as root) owners; as an
    ordinary user, owners are written as root (the store holds them as the user).
    """
    as_root = os.geteuid() == 0

    def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if not as_root:
            info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    tree = layer.tree
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(tree):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                path = os.path.join(root, name)
                tar.add(path, arcname=os.path.relpath(path, tree), recursive=False, filter=owner)
        marks = [(w, WHITEOUT_PREFIX) for w in layer.whiteouts]
        marks += [(os.path.join(o, OPAQUE_MARKER), "") for o in layer.opaque]
        for path, prefix in marks:
            head, tail = os.path.split(path)
            info = tarfile.TarInfo(os.path.normpath(os.path.join(head, prefix + tail)))
            tar.addfile(info)


@dataclass(frozen=True)
class Pushed:
    """A pushed environment: its store record and how many layers it carried."""

    record: VersionRecord
    layers: int


def push(store: Store, environment: Environment, name: str) -> Pushed:
    """Store ``environment`` as a version of the data set ``name``.

    Raises:
        ValueError: The host environment, or a bad name.
        StorageUnavailable: The store failed.
    """
    if environment.rootfs is None:
        raise ValueError("the host environment cannot be pushed: it is each host's own")
    cache = EnvironmentCache(environment.rootfs.parent.parent.parent)
    scratch = Path(tempfile.mkdtemp(prefix="execgym-env-push-"))
    try:
        files = {}
        for digest in environment.layers:
            out = scratch / f"{digest.removeprefix('sha256:')}.tar"
            write_layer_tar(cache.layer(digest), out)
            files[f"layers/{out.name}"] = out
        description = {
            "digest": environment.digest,
            "layers": list(environment.layers),
            "config": environment.config.to_json(),
            "source": environment.source,
        }
        (scratch / "environment.json").write_text(json.dumps(description, indent=1))
        files["environment.json"] = scratch / "environment.json"
        metadata = {"kind": KIND, "digest": environment.digest}
        record = store.push_files(files, name=name, metadata=metadata)
        return Pushed(record, len(environment.layers))
    finally:
        remove_tree(scratch)


def pull(
    store: Store, spec: str, cache: EnvironmentCache, *, name: str | None = None
) -> Environment:
    """Fetch the environment pushed as ``spec`` (``NAME[@VERSION]``) into ``cache``.

    Only layers the cache lacks are downloaded. The environment is named ``name``
    (default: the data set's name).

    Raises:
        ArtifactNotFound: No such version in the store.
        ValueError: The version is not an environment.
        EnvironmentMismatch: What was assembled has another digest than was pushed.
    """
    record, manifest = store.manifest(spec)
    if record.metadata.get("kind") != KIND or "environment.json" not in manifest.files:
        raise ValueError(
            f"{record.name}@{record.version[:12]} in {store.url} is not an environment"
        )
    description = json.loads(store.blobs.read_bytes(manifest.files["environment.json"].sha256))
    layers = []
    with cache.locked():
        for digest in description["layers"]:
            layers.append(_pull_layer(store, manifest, cache, digest))
    environment = cache.create(
        layers,
        env=description["config"].get("env") or {},
        name=name or record.name,
        source=f"store:{store.url}/{record.name}@{record.version[:12]}",
    )
    if environment.digest != description["digest"]:
        raise EnvironmentMismatch(
            f"pulled {record.name} assembled as {environment.digest}, pushed as "
            f"{description['digest']}: the layers or the interpreter differ"
        )
    return environment


def _pull_layer(
    store: Store, manifest: Manifest, cache: EnvironmentCache, digest: str
) -> UnpackedLayer:
    """The layer ``digest`` from the cache, else downloaded from ``manifest`` into it."""
    if cache.has_layer(digest):
        return cache.layer(digest)
    entry = manifest.files[f"layers/{digest.removeprefix('sha256:')}.tar"]
    scratch = Path(tempfile.mkdtemp(dir=cache.root / "tmp", prefix="pull-"))
    try:
        blob = scratch / "layer.tar"
        store.blobs.download(entry.sha256, blob)
        return cache.add_layer(functools.partial(blob.open, "rb"), None, stored_as=digest)
    finally:
        remove_tree(scratch)

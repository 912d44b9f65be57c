"""Read OCI images: an OCI image layout directory, or a ``docker save``/``podman save`` tar.

An *OCI image layout* (``oci-layout``, ``index.json``, ``blobs/sha256/...``; what
``skopeo copy docker://IMAGE oci:DIR:TAG``, ``umoci`` and ``podman save --format
oci-dir`` write) names images by the ``org.opencontainers.image.ref.name`` annotation of
``index.json``'s manifests. A *docker archive* (``docker save``, ``podman save``) is a
tar with ``manifest.json`` (``[{"Config": ..., "RepoTags": [...], "Layers": [...]}]``);
recent Docker writes an OCI layout inside the same tar, which is read the same way.

Only what an environment needs is read: the layers (with their ``diff_id``, the sha256 of
the uncompressed tar, from the image configuration's ``rootfs.diff_ids``), and the
configuration's ``Env``. References: OCI image spec v1.1 (``image-layout.md``,
``manifest.md``, ``config.md``), Docker's ``image/spec/v1.2.md``.
"""

from __future__ import annotations

import contextlib
import json
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from execgym.environments.model import check_digest

_REF_NAME = "org.opencontainers.image.ref.name"
_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


class ImageError(ValueError):
    """An image that cannot be read.

    Not an OCI layout or docker archive, no such tag, a missing blob; the message says
    which and what to do.
    """


@dataclass(frozen=True)
class LayerBlob:
    """One layer of an image, lowest first.

    Attributes:
        diff_id: ``sha256:`` of the uncompressed layer tar (the layer store's key).
        open: Opens the blob as stored (maybe compressed), seekable, for reading.
    """

    diff_id: str
    open: Callable[[], contextlib.AbstractContextManager[IO[bytes]]]


@dataclass(frozen=True)
class ImageSource:
    """An image ready to import.

    Attributes:
        layers: Its layers, lowest first.
        env: The configuration's environment variables (``Env``).
        reference: What it was read from, for humans (``oci:DIR:TAG``...).
    """

    layers: tuple[LayerBlob, ...]
    env: dict[str, str]
    reference: str


def _env(config: dict[str, Any]) -> dict[str, str]:
    pairs = (config.get("config") or {}).get("Env") or []
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def _diff_ids(config: dict[str, Any], count: int, where: str) -> list[str]:
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    if len(diff_ids) != count:
        raise ImageError(
            f"{where}: the configuration lists {len(diff_ids)} diff_ids for {count} layers"
        )
    return [check_digest(d, "diff_id") for d in diff_ids]


class _Blobs:
    """Blob access for a layout in a directory or inside a tar."""

    def __init__(self, root: Path | None, archive: Path | None, prefix: str = "") -> None:
        self.root, self.archive, self.prefix = root, archive, prefix

    def _archive(self) -> Path:
        if self.archive is None:
            raise ImageError("an image needs a layout directory or an archive: got neither")
        return self.archive

    def read(self, name: str) -> bytes:
        with self.open(name)() as handle:
            return handle.read()

    def open(self, name: str) -> Callable[[], contextlib.AbstractContextManager[IO[bytes]]]:
        @contextlib.contextmanager
        def opener() -> Iterator[IO[bytes]]:
            if self.root is not None:
                path = self.root / name
                if not path.is_file():
                    raise ImageError(f"the image has no blob {name} (under {self.root})")
                with path.open("rb") as handle:
                    yield handle
                return
            with tarfile.open(self._archive()) as tar:
                try:
                    member = tar.getmember(self.prefix + name)
                except KeyError:
                    raise ImageError(f"{self.archive} has no member {name}") from None
                extracted = tar.extractfile(member)
                if extracted is None:
                    raise ImageError(f"{self.archive}: {name} is not a file")
                with extracted:
                    yield extracted

        return opener

    def exists(self, name: str) -> bool:
        if self.root is not None:
            return (self.root / name).is_file()
        with tarfile.open(self._archive()) as tar:
            return any(m.name in (name, "./" + name) for m in tar.getmembers())


def _blob_name(digest: str) -> str:
    algorithm, _, hexdigits = check_digest(digest, "blob digest").partition(":")
    return f"blobs/{algorithm}/{hexdigits}"


def _from_layout(blobs: _Blobs, tag: str | None, where: str) -> ImageSource:
    index = json.loads(blobs.read("index.json"))
    manifests = index.get("manifests") or []
    chosen = [
        m for m in manifests if tag is None or (m.get("annotations") or {}).get(_REF_NAME) == tag
    ]
    if not chosen:
        names = sorted({(m.get("annotations") or {}).get(_REF_NAME, "?") for m in manifests})
        raise ImageError(
            f"{where} has no image tagged {tag!r}; it has: {', '.join(names) or 'none'}"
        )
    if len(chosen) > 1 and tag is None:
        names = sorted({(m.get("annotations") or {}).get(_REF_NAME, "?") for m in chosen})
        raise ImageError(
            f"{where} holds several images ({', '.join(names)}): name one as {where}:TAG"
        )
    descriptor = chosen[-1]
    manifest = json.loads(blobs.read(_blob_name(descriptor["digest"])))
    while manifest.get("mediaType") in _INDEX_TYPES or "manifests" in manifest:
        linux = [
            m
            for m in manifest["manifests"]
            if (m.get("platform") or {}).get("os", "linux") == "linux"
            and (m.get("platform") or {}).get("architecture", "amd64") in ("amd64", "x86_64")
        ]
        if not linux:
            raise ImageError(f"{where}: no linux/amd64 image in its index")
        manifest = json.loads(blobs.read(_blob_name(linux[0]["digest"])))
    config = json.loads(blobs.read(_blob_name(manifest["config"]["digest"])))
    layers = manifest.get("layers") or []
    diff_ids = _diff_ids(config, len(layers), where)
    return ImageSource(
        layers=tuple(
            LayerBlob(diff_id, blobs.open(_blob_name(layer["digest"])))
            for diff_id, layer in zip(diff_ids, layers, strict=True)
        ),
        env=_env(config),
        reference=f"oci:{where}" + (f":{tag}" if tag else ""),
    )


def _tag_matches(repo_tag: str, wanted: str) -> bool:
    """Whether a docker archive's ``RepoTags`` entry is what ``wanted`` names.

    ``docker.io/library/debian:12`` is named by itself, ``library/debian:12``,
    ``debian:12`` (docker's normalised prefixes left out) or the tag ``12`` alone.
    """
    return (
        repo_tag == wanted
        or repo_tag.endswith("/" + wanted)
        or (":" not in wanted and repo_tag.rsplit(":", 1)[-1] == wanted)
    )


def _from_docker_archive(path: Path, tag: str | None) -> ImageSource:
    with tarfile.open(path) as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers()}
    blobs = _Blobs(None, path, "")
    if "manifest.json" not in names:
        if "index.json" in names and "oci-layout" in names:
            return _from_layout(blobs, tag, str(path))
        raise ImageError(
            f"{path} is neither an OCI image layout nor a docker/podman save archive "
            "(no manifest.json or index.json inside)"
        )
    entries = json.loads(blobs.read("manifest.json"))
    if tag is not None:
        wanted = [
            e for e in entries if any(_tag_matches(t, tag) for t in (e.get("RepoTags") or []))
        ]
    else:
        wanted = entries
    if len(wanted) != 1:
        tags = sorted(t for e in entries for t in (e.get("RepoTags") or []))
        raise ImageError(
            f"{path}: {'no' if not wanted else 'several'} images match "
            f"{tag or 'no tag'}; it has: {', '.join(tags) or 'untagged images'} "
            "(name one as PATH:TAG)"
        )
    entry = wanted[0]
    config = json.loads(blobs.read(entry["Config"]))
    diff_ids = _diff_ids(config, len(entry["Layers"]), str(path))
    return ImageSource(
        layers=tuple(
            LayerBlob(diff_id, blobs.open(name))
            for diff_id, name in zip(diff_ids, entry["Layers"], strict=True)
        ),
        env=_env(config),
        reference=f"docker-archive:{path}" + (f":{tag}" if tag else ""),
    )


def read_image(reference: str | Path) -> ImageSource:
    """The image at ``reference``: ``PATH`` or ``PATH:TAG``.

    PATH is an OCI image layout directory or a ``docker save``/``podman save`` tar (an
    ``oci:``, ``oci-archive:`` or ``docker-archive:`` prefix, as skopeo writes them, is
    accepted).

    Raises:
        ImageError: Nothing readable there, or no image with that tag (the message
            lists the tags it has).
    """
    text = str(reference)
    for prefix in ("oci:", "oci-archive:", "docker-archive:"):
        text = text.removeprefix(prefix)
    path, tag = Path(text), None
    if not path.exists():  # PATH:TAG, where the tag may hold ':' (docker's repo:tag)
        cuts = [i for i, char in enumerate(text) if char == ":" and Path(text[:i]).exists()]
        if cuts:
            path, tag = Path(text[: cuts[0]]), text[cuts[0] + 1 :]
    if not path.exists():
        raise ImageError(
            f"no image at {text!r}: give an OCI layout directory or a docker/podman save "
            "tar, optionally as PATH:TAG (pull one with `skopeo copy docker://IMAGE oci:DIR:TAG`)"
        )
    if path.is_dir():
        if not (path / "index.json").is_file():
            raise ImageError(f"{path} is a directory but not an OCI image layout (no index.json)")
        return _from_layout(_Blobs(path, None), tag, str(path))
    if not tarfile.is_tarfile(path):
        raise ImageError(f"{path} is not a tar archive (docker/podman save) nor a directory")
    return _from_docker_archive(path, tag)

"""Manifests: the files of a data set or test suite, pinned by hash.

A manifest maps logical file names (relative POSIX paths) to a blob's SHA-256, its size
and free metadata, plus metadata of the whole set. Its canonical JSON (sorted keys, no
spaces, UTF-8) is stored as ``manifests/<sha256 of that JSON>.json``, and that hash is
the version: the same files with the same metadata are always the same version, under
any name, and one changed byte anywhere is another version. Reading a manifest verifies
its hash like a blob's.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from execgym.errors import StorageCorruptionError
from execgym.storage.objects import ObjectStore

MANIFESTS = "manifests"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
_VERSION_KEY = re.compile(r"^manifests/([0-9a-f]{64})\.json$")


class FileEntry(BaseModel):
    """One file of a manifest.

    Attributes:
        sha256: The blob holding its bytes.
        size_bytes: Its length.
        metadata: Free JSON (``media_type`` is filled in by :func:`files_of`'s callers).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=SHA256_PATTERN)
    size_bytes: int = Field(ge=0)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class Manifest(BaseModel):
    """The files of one version of a data set or test suite.

    Attributes:
        format: The manifest format's version (1).
        files: ``{logical name: entry}``; names are relative POSIX paths without ``.``
            or ``..`` parts, so a pull can never write outside its destination.
        metadata: Free JSON about the whole set (e.g. ``{"kind": "tests"}``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = 1
    files: dict[str, FileEntry] = Field(min_length=1)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("files")
    @classmethod
    def _safe_names(cls, files: dict[str, FileEntry]) -> dict[str, FileEntry]:
        for name in files:
            check_file_name(name)
        return files

    def canonical_json(self) -> bytes:
        """The bytes whose SHA-256 is the version: sorted keys, no spaces, UTF-8."""
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8")

    @property
    def version(self) -> str:
        """Hex SHA-256 of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json()).hexdigest()

    @property
    def size_bytes(self) -> int:
        """The files' total size."""
        return sum(entry.size_bytes for entry in self.files.values())


def check_file_name(name: str) -> str:
    """Return ``name`` if it is a safe logical file name.

    Raises:
        ValueError: Empty, absolute, with a backslash, NUL, ``.`` or ``..`` part, or an
            empty part (``a//b``, a trailing ``/``).
    """
    parts = name.split("/")
    if (
        not name
        or "\\" in name
        or "\0" in name
        or PurePosixPath(name).is_absolute()
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ValueError(
            f"unsafe file name {name!r} in a manifest: names are relative paths like "
            "'tests/test_a.py', without '.', '..', empty parts or backslashes"
        )
    return name


def files_of(path: Path) -> dict[str, Path]:
    """The files to push from ``path``: ``{logical name: local file}``.

    A file gives one entry named after it; a directory gives every regular file under it
    (recursively, symlinks to files followed), named by its path relative to ``path``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is a directory without any file, or neither file nor directory.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: give a file or a directory to push")
    if path.is_file():
        return {path.name: path}
    if not path.is_dir():
        raise ValueError(f"{path} is neither a file nor a directory")
    found = {
        child.relative_to(path).as_posix(): child
        for child in sorted(path.rglob("*"))
        if child.is_file()
    }
    if not found:
        raise ValueError(f"{path} holds no files: there is nothing to push")
    return found


def media_type(name: str) -> str:
    """A file's media type guessed from its name (``application/octet-stream`` if unknown)."""
    if name.endswith(".jsonl"):
        return "application/jsonl"
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def manifest_key(version: str) -> str:
    """``manifests/<version>.json``."""
    return f"{MANIFESTS}/{version}.json"


def version_of_key(key: str) -> str | None:
    """The version a key under ``manifests/`` stands for, or None."""
    match = _VERSION_KEY.match(key)
    return match.group(1) if match else None


def put_manifest(objects: ObjectStore, manifest: Manifest) -> str:
    """Store ``manifest`` (its canonical JSON) and return its version.

    Raises:
        StorageUnavailable: The store failed.
    """
    objects.write_bytes(manifest_key(manifest.version), manifest.canonical_json())
    return manifest.version


def get_manifest(objects: ObjectStore, version: str) -> Manifest:
    """The manifest of ``version``, verified against its hash.

    Raises:
        ArtifactNotFound: No such manifest.
        StorageCorruptionError: Its bytes do not hash to ``version``, or are not a
            manifest.
        StorageUnavailable: The store failed.
    """
    key = manifest_key(version)
    data = objects.read_bytes(key)
    actual = hashlib.sha256(data).hexdigest()
    if actual != version:
        raise StorageCorruptionError(
            f"manifest {version} in the store {objects.url} is corrupted: its bytes hash to "
            f"{actual}. Push that version again to repair it (its files give the same "
            "manifest)",
            store=objects.url,
            key=key,
            expected_sha256=version,
            actual_sha256=actual,
        )
    try:
        return Manifest.model_validate_json(data)
    except ValidationError as error:
        raise StorageCorruptionError(
            f"manifest {version} in the store {objects.url} is not a valid manifest: {error}",
            store=objects.url,
            key=key,
            expected_sha256=version,
            actual_sha256=actual,
        ) from error

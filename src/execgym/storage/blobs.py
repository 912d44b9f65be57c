"""Content-addressed blobs: bytes stored under their SHA-256, verified on every read.

A blob's key is ``blobs/<first 2 hex digits>/<other 62>``, as git and most caches
shard. Writing the same bytes twice stores them once (idempotent); a read whose bytes do
not hash to the key raises :class:`~execgym.errors.StorageCorruptionError` naming the
blob and the store, and hands out nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO

from execgym.errors import StorageCorruptionError
from execgym.storage.clock import Clock
from execgym.storage.objects import CHUNK_BYTES, ObjectStore

BLOBS = "blobs"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class BlobRef:
    """A blob's address and size.

    Attributes:
        sha256: Hex SHA-256 of its bytes.
        size_bytes: Its length.
    """

    sha256: str
    size_bytes: int


def blob_key(sha256: str) -> str:
    """The key of the blob whose hash is ``sha256``.

    Raises:
        ValueError: ``sha256`` is not 64 lowercase hex digits.
    """
    if not _SHA256.match(sha256):
        raise ValueError(f"not a SHA-256 hex digest: {sha256!r} (64 lowercase hex digits)")
    return f"{BLOBS}/{sha256[:2]}/{sha256[2:]}"


def sha256_of_key(key: str) -> str | None:
    """The hash a key under ``blobs/`` stands for, or None for any other object."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != BLOBS:
        return None
    digest = parts[1] + parts[2]
    return digest if _SHA256.match(digest) else None


def hash_file(path: Path) -> BlobRef:
    """SHA-256 and size of a local file, read in 1 MiB chunks.

    Raises:
        OSError: It cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as source:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return BlobRef(digest.hexdigest(), size)


class BlobStore:
    """Blobs in an :class:`ObjectStore`.

    Args:
        objects: The store.
        refresh_after: An existing blob older than this is written again rather than
            reused, so that its time is fresh and a concurrent ``gc`` (which only takes
            unreferenced blobs older than its grace period, 1 hour by default) cannot
            remove it between a push's check and the push's manifest. Keep it well below
            the gc grace period.
        clock: ``() -> aware datetime``, now in UTC.
    """

    def __init__(self, objects: ObjectStore, refresh_after: timedelta, clock: Clock) -> None:
        self.objects = objects
        self.refresh_after = refresh_after
        self._clock = clock

    def _is_fresh(self, ref: BlobRef) -> bool:
        """True when a blob of ``ref``'s size is there and was written recently."""
        info = self.objects.info(blob_key(ref.sha256))
        if info is None or info.size_bytes != ref.size_bytes or info.modified_at is None:
            return False
        return self._clock() - info.modified_at < self.refresh_after

    def put_bytes(self, data: bytes) -> BlobRef:
        """Store ``data``; returns its reference (no write when it is there already).

        Raises:
            StorageUnavailable: The store failed.
        """
        ref = BlobRef(hashlib.sha256(data).hexdigest(), len(data))
        if not self._is_fresh(ref):
            self.objects.write_bytes(blob_key(ref.sha256), data)
        return ref

    def put_file(self, path: Path) -> BlobRef:
        """Store a local file, streamed (no write when it is there already).

        Raises:
            OSError: ``path`` cannot be read.
            StorageUnavailable: The store failed.
            StorageCorruptionError: ``path`` changed while it was uploaded.
        """
        ref = hash_file(path)
        if not self._is_fresh(ref):
            self.objects.upload(blob_key(ref.sha256), path)
            info = self.objects.info(blob_key(ref.sha256))
            if info is None or info.size_bytes != ref.size_bytes:
                self.objects.delete(blob_key(ref.sha256))
                raise StorageCorruptionError(
                    f"{path} changed while it was uploaded to {self.objects.url}: push again "
                    "once nothing writes to it",
                    store=self.objects.url,
                    key=blob_key(ref.sha256),
                    expected_sha256=ref.sha256,
                )
        return ref

    def read_bytes(self, sha256: str) -> bytes:
        """The blob's bytes, verified against its hash.

        Raises:
            ArtifactNotFound: No such blob.
            StorageCorruptionError: Its bytes do not hash to ``sha256``.
            StorageUnavailable: The store failed.
        """
        key = blob_key(sha256)
        data = self.objects.read_bytes(key)
        self._verify(key, sha256, hashlib.sha256(data).hexdigest())
        return data

    def download(self, sha256: str, dest: Path) -> None:
        """Write the blob to the local file ``dest``, streamed and verified.

        The bytes go to a temporary file beside ``dest`` that replaces it only once its
        hash matched: a corrupted blob leaves ``dest`` as it was.

        Raises:
            ArtifactNotFound: No such blob.
            StorageCorruptionError: Its bytes do not hash to ``sha256``.
            StorageUnavailable: The store failed.
            OSError: ``dest`` cannot be written.
        """
        dest.parent.mkdir(parents=True, exist_ok=True)
        temp = dest.with_name(f".{dest.name}.execgym-partial")
        try:
            with temp.open("wb") as sink:
                self._read_through(sha256, sink)
            os.replace(temp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()

    def verify(self, sha256: str) -> int:
        """Read the blob through (streamed) and check its hash; returns its size.

        Raises:
            ArtifactNotFound: No such blob.
            StorageCorruptionError: Its bytes do not hash to ``sha256``.
            StorageUnavailable: The store failed.
        """
        return self._read_through(sha256, None)

    def _read_through(self, sha256: str, sink: IO[bytes] | None) -> int:
        """Stream the blob (into ``sink``, if any), then check its hash; its size."""
        key = blob_key(sha256)
        digest = hashlib.sha256()
        size = 0
        with self.objects.open_read(key) as source:
            while chunk := source.read(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
                if sink is not None:
                    sink.write(chunk)
        self._verify(key, sha256, digest.hexdigest())
        return size

    def exists(self, sha256: str) -> bool:
        """True when the store holds an object under the blob's key (unverified)."""
        return self.objects.info(blob_key(sha256)) is not None

    def _verify(self, key: str, expected: str, actual: str) -> None:
        if actual != expected:
            raise StorageCorruptionError(
                f"blob {expected} in the store {self.objects.url} is corrupted: its bytes "
                f"hash to {actual}. Delete {key} and push the data set that holds it "
                "again to repair it (the same bytes are written back)",
                store=self.objects.url,
                key=key,
                expected_sha256=expected,
                actual_sha256=actual,
            )

"""Scrubbing: read every blob and manifest back and check it against its hash.

Reads already verify what they return; a scrub finds bit rot before a pull needs the
bytes. One bad object never stops the scrub: each is reported, and the rest checked.
A corrupted blob can be deleted (``delete_corrupted``) so that pushing its data set
again writes it back.
"""

from __future__ import annotations

from dataclasses import dataclass

from execgym.errors import ArtifactNotFound, StorageCorruptionError
from execgym.storage.blobs import BLOBS, BlobStore, blob_key, sha256_of_key
from execgym.storage.manifests import MANIFESTS, get_manifest, version_of_key
from execgym.storage.objects import ObjectStore


@dataclass(frozen=True)
class ScrubReport:
    """What a scrub found.

    Attributes:
        checked_blobs: Blobs read through.
        checked_bytes: Their total size.
        checked_manifests: Manifests read and parsed.
        corrupted: Keys of blobs and manifests whose bytes do not match their hash.
        missing: ``<version>:<file>`` for each file a manifest names whose blob is gone.
        deleted: Keys of corrupted blobs deleted (with ``delete_corrupted``).
    """

    checked_blobs: int
    checked_bytes: int
    checked_manifests: int
    corrupted: tuple[str, ...]
    missing: tuple[str, ...]
    deleted: tuple[str, ...]

    @property
    def is_clean(self) -> bool:
        """True when nothing is corrupted or missing."""
        return not self.corrupted and not self.missing


def scrub(objects: ObjectStore, blobs: BlobStore, *, delete_corrupted: bool = False) -> ScrubReport:
    """Check every blob and manifest of the store.

    Args:
        objects: The store.
        blobs: Its blobs.
        delete_corrupted: Delete corrupted blobs (never manifests: a manifest's version
            is its hash, so pushing the same files writes it back).

    Raises:
        StorageUnavailable: The store failed.
    """
    present: set[str] = set()
    corrupted: list[str] = []
    deleted: list[str] = []
    checked_bytes = checked_blobs = 0
    for info in objects.list(BLOBS):
        sha256 = sha256_of_key(info.key)
        if sha256 is None:
            continue
        checked_blobs += 1
        try:
            checked_bytes += blobs.verify(sha256)
            present.add(sha256)
        except ArtifactNotFound:
            continue  # collected since it was listed
        except StorageCorruptionError:
            corrupted.append(info.key)
            if delete_corrupted:
                objects.delete(info.key)
                deleted.append(info.key)
    missing: list[str] = []
    manifests = 0
    for info in objects.list(MANIFESTS):
        version = version_of_key(info.key)
        if version is None:
            continue
        try:
            manifest = get_manifest(objects, version)
        except ArtifactNotFound:
            continue
        except StorageCorruptionError:
            corrupted.append(info.key)
            continue
        manifests += 1
        for name, entry in manifest.files.items():
            if entry.sha256 not in present and blob_key(entry.sha256) not in corrupted:
                missing.append(f"{version}:{name}")
    return ScrubReport(
        checked_blobs=checked_blobs,
        checked_bytes=checked_bytes,
        checked_manifests=manifests,
        corrupted=tuple(corrupted),
        missing=tuple(missing),
        deleted=tuple(deleted),
    )

r"""The store: data set versions, batch logs, checkpoints and gc over one fsspec root.

>>> import tempfile
>>> from pathlib import Path
>>> from execgym.storage import open_store
>>> with tempfile.TemporaryDirectory() as tmp:
...     store = open_store(Path(tmp) / "store")
...     (Path(tmp) / "tasks.jsonl").write_text('{"task_id": "t/1"}\n')
...     pushed = store.push(Path(tmp) / "tasks.jsonl", name="toy")
...     pulled = store.pull("toy@" + pushed.version[:8], Path(tmp) / "out")
...     (pulled.version == pushed.version, (Path(tmp) / "out" / "tasks.jsonl").read_text())
19
(True, '{"task_id": "t/1"}\n')

Layout under the root (every key is a plain object, so ``aws s3 ls`` shows it)::

    blobs/ab/cdef...               content-addressed bytes (sha256)
    manifests/<version>.json       canonical manifest JSON; version = its sha256
    refs/<name>/<version>.json     when that version was pushed under that name
    logs/<batch_id>/<time>-<h>.json  a batch log's record (its bytes are a blob)
    checkpoints/<id>.json          a registered checkpoint

The API is synchronous: fsspec's local and S3 file systems are; from async code call it
with ``await asyncio.to_thread(store.put_log, ...)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec
from pydantic import JsonValue

from execgym.errors import AmbiguousVersion, ArtifactNotFound
from execgym.storage.blobs import BlobStore
from execgym.storage.checkpoints import (
    Checkpoint,
    checkpoint_id,
    checkpoint_key,
    list_checkpoints,
)
from execgym.storage.clock import Clock, utc_now
from execgym.storage.gc import GcPolicy, GcReport, collect_garbage
from execgym.storage.location import StoreLocation, resolve_location
from execgym.storage.logs import LogRecord, list_logs
from execgym.storage.manifests import (
    FileEntry,
    Manifest,
    check_file_name,
    files_of,
    get_manifest,
    media_type,
    put_manifest,
)
from execgym.storage.objects import ObjectStore
from execgym.storage.records import check_name, write_record
from execgym.storage.refs import (
    VersionRecord,
    VersionSpec,
    drop_version,
    list_versions,
    record_version,
    resolve_version,
)
from execgym.storage.scrub import ScrubReport, scrub

REFRESH_AFTER = timedelta(minutes=30)


@dataclass(frozen=True)
class Pulled:
    """The result of a pull.

    Attributes:
        name: The data set's name.
        version: The version pulled.
        files: The local files written, in manifest order.
        size_bytes: Their total size.
    """

    name: str
    version: str
    files: tuple[Path, ...]
    size_bytes: int


class Store:
    """Versioned data sets, batch logs and a checkpoint registry in one object store.

    Args:
        location: Where it lives (:func:`resolve_location`).
        clock: Now, in UTC; tests inject one to age logs and blobs without sleeping.
        fs: An fsspec file system to use instead of opening one for ``location``.
        refresh_after: An existing blob older than this is rewritten by a push rather
            than reused (see :class:`~execgym.storage.blobs.BlobStore`); keep it below
            the gc grace period.
    """

    def __init__(
        self,
        location: StoreLocation,
        *,
        clock: Clock = utc_now,
        fs: fsspec.AbstractFileSystem | None = None,
        refresh_after: timedelta = REFRESH_AFTER,
    ) -> None:
        self.objects = ObjectStore(location, fs)
        self.clock = clock
        self.blobs = BlobStore(self.objects, refresh_after, clock)

    @property
    def url(self) -> str:
        """The store's URL, for messages (no password)."""
        return self.objects.url

    def check(self) -> None:
        """Contact the store once.

        Raises:
            StorageUnavailable: It cannot be reached, or its bucket does not exist.
        """
        self.objects.check()

    # -- data sets and test suites ------------------------------------------------------

    def push(
        self, path: Path, *, name: str, metadata: Mapping[str, JsonValue] | None = None
    ) -> VersionRecord:
        """Store the file or directory ``path`` as a new version of ``name``.

        Blobs are written first, then the manifest, then the ref, so a reader (or gc)
        never sees a version whose objects are missing. Pushing the same content again
        gives the same version (no bytes written) and makes it the latest.

        Args:
            path: A file (one entry, named after it) or a directory (every file under
                it, by relative path).
            name: The data set's name.
            metadata: Free JSON for the manifest (part of the version).

        Returns:
            The version's record (``.version`` is the hash to pin).

        Raises:
            ValueError: A bad name, or an empty directory.
            FileNotFoundError: ``path`` does not exist.
            StorageUnavailable: The store failed.
        """
        check_name(name, "data set name")
        return self.push_files(files_of(Path(path)), name=name, metadata=metadata)

    def push_files(
        self,
        files: Mapping[str, Path],
        *,
        name: str,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> VersionRecord:
        """Store ``{logical name: local file}`` as a new version of ``name``.

        Raises:
            ValueError: A bad data set or file name, or no files.
            StorageUnavailable: The store failed.
        """
        check_name(name, "data set name")
        if not files:
            raise ValueError("a version needs at least one file")
        entries = {}
        for logical, local in sorted(files.items()):
            ref = self.blobs.put_file(Path(local))
            entries[check_file_name(logical)] = FileEntry(
                sha256=ref.sha256,
                size_bytes=ref.size_bytes,
                metadata={"media_type": media_type(logical)},
            )
        manifest = Manifest(files=entries, metadata=dict(metadata or {}))
        put_manifest(self.objects, manifest)
        record = VersionRecord(
            name=name,
            version=manifest.version,
            pushed_at=self.clock(),
            size_bytes=manifest.size_bytes,
            file_count=len(entries),
            metadata=manifest.metadata,
        )
        record_version(self.objects, record)
        return record

    def resolve(self, spec: str | VersionSpec) -> VersionRecord:
        """The version that ``NAME[@VERSION]`` (a full version or a unique prefix) means.

        Raises:
            ValueError: ``spec`` does not parse.
            ArtifactNotFound: Unknown name or version.
            AmbiguousVersion: The prefix matches several versions.
            StorageUnavailable: The store failed.
        """
        parsed = spec if isinstance(spec, VersionSpec) else VersionSpec.parse(spec)
        return resolve_version(self.objects, parsed)

    def manifest(self, spec: str | VersionSpec) -> tuple[VersionRecord, Manifest]:
        """The record and the (verified) manifest of a version.

        Raises:
            As :meth:`resolve`, and StorageCorruptionError for a corrupted manifest.
        """
        record = self.resolve(spec)
        return record, get_manifest(self.objects, record.version)

    def pull(self, spec: str | VersionSpec, dest: Path) -> Pulled:
        """Write the files of a version under the directory ``dest``.

        Each file is verified before it replaces anything in ``dest``; a corrupted blob
        stops the pull with :class:`~execgym.errors.StorageCorruptionError` (files
        already written stay, each whole and verified).

        Raises:
            As :meth:`manifest`; ArtifactNotFound for a missing blob; OSError when
            ``dest`` cannot be written.
        """
        record, manifest = self.manifest(spec)
        dest = Path(dest)
        written = []
        for logical, entry in manifest.files.items():
            target = dest.joinpath(*logical.split("/"))
            self.blobs.download(entry.sha256, target)
            written.append(target)
        return Pulled(record.name, record.version, tuple(written), manifest.size_bytes)

    def read_file(self, spec: str | VersionSpec, file_name: str) -> bytes:
        """One file of a version, verified.

        Raises:
            As :meth:`manifest`; ArtifactNotFound when the version has no such file.
        """
        record, manifest = self.manifest(spec)
        entry = manifest.files.get(file_name)
        if entry is None:
            raise ArtifactNotFound(
                f"{record.name}@{record.version[:12]} has no file {file_name!r} (it has: "
                f"{', '.join(list(manifest.files)[:10])})",
                store=self.url,
                key=file_name,
            )
        return self.blobs.read_bytes(entry.sha256)

    def versions(self, name: str | None = None) -> list[VersionRecord]:
        """The versions of ``name`` (every name when None), oldest push first.

        Raises:
            ValueError: A bad name.
            StorageUnavailable: The store failed.
        """
        return list_versions(self.objects, name)

    def drop(self, spec: str | VersionSpec) -> VersionRecord:
        """Stop listing a version under its name; gc then removes what only it used.

        A version that a registered checkpoint names is refused: remove the checkpoint
        first.

        Raises:
            As :meth:`resolve`; ValueError when a checkpoint names the version.
        """
        record = self.resolve(spec)
        users = [c.id for c in self.checkpoints() if c.dataset_version == record.version]
        if users:
            raise ValueError(
                f"{record.name}@{record.version[:12]} is the data set of checkpoint(s) "
                f"{', '.join(users)}: remove them first (`execgym checkpoints rm ID`)"
            )
        drop_version(self.objects, record.name, record.version)
        return record

    # -- batch logs ----------------------------------------------------------------------

    def put_log(
        self, batch_id: str, source: Path | bytes, *, file_name: str | None = None
    ) -> LogRecord:
        """Store a batch's log or results file, stamped with the clock's time.

        Args:
            batch_id: The batch it belongs to.
            source: A local file (streamed) or the bytes themselves.
            file_name: The name to pull it back as [default: the file's name, or
                ``log``].

        Returns:
            Its record (``created_at`` is when the TTL starts).

        Raises:
            ValueError: A bad batch id.
            OSError: ``source`` cannot be read.
            StorageUnavailable: The store failed.
        """
        check_name(batch_id, "batch id")
        if isinstance(source, bytes):
            ref = self.blobs.put_bytes(source)
            default_name = "log"
        else:
            ref = self.blobs.put_file(Path(source))
            default_name = Path(source).name
        record = LogRecord(
            batch_id=batch_id,
            file_name=file_name or default_name,
            created_at=self.clock(),
            sha256=ref.sha256,
            size_bytes=ref.size_bytes,
        )
        write_record(self.objects, record.key, record)
        return record

    def logs(self, batch_id: str | None = None) -> list[LogRecord]:
        """The stored logs of ``batch_id`` (every batch when None), oldest first.

        Raises:
            ValueError: A bad batch id.
            StorageUnavailable: The store failed.
        """
        return list_logs(self.objects, batch_id)

    def read_log(self, record: LogRecord) -> bytes:
        """A log's bytes, verified.

        Raises:
            ArtifactNotFound: Its blob is gone.
            StorageCorruptionError: Its blob is corrupted.
            StorageUnavailable: The store failed.
        """
        return self.blobs.read_bytes(record.sha256)

    # -- checkpoints ---------------------------------------------------------------------

    def add_checkpoint(
        self,
        uri: str,
        *,
        step: int,
        dataset: str | VersionSpec,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Checkpoint:
        """Register a checkpoint trained on the data set version ``dataset`` names.

        ``dataset`` is resolved now (``NAME`` means the latest version at this moment)
        and the full version is recorded; while the checkpoint is registered, gc keeps
        that version. Registering the same (URI, step, version) again updates its
        metadata.

        Raises:
            ValueError: A negative step or an empty URI.
            ArtifactNotFound / AmbiguousVersion: As :meth:`resolve`.
            StorageUnavailable: The store failed.
        """
        if step < 0:
            raise ValueError(f"step must be 0 or more (got {step})")
        if not uri.strip():
            raise ValueError("a checkpoint needs the URI of its weights")
        record = self.resolve(dataset)
        checkpoint = Checkpoint(
            id=checkpoint_id(uri, step, record.version),
            uri=uri,
            step=step,
            dataset=record.name,
            dataset_version=record.version,
            metadata=dict(metadata or {}),
            registered_at=self.clock(),
        )
        write_record(self.objects, checkpoint.key, checkpoint)
        return checkpoint

    def checkpoints(self, dataset: str | None = None) -> list[Checkpoint]:
        """Registered checkpoints (of one data set name when given), by name then step.

        Raises:
            StorageUnavailable: The store failed.
        """
        found = list_checkpoints(self.objects)
        return [c for c in found if dataset is None or c.dataset == dataset]

    def remove_checkpoint(self, id_prefix: str) -> Checkpoint:
        """Unregister the checkpoint whose id starts with ``id_prefix``.

        Raises:
            ArtifactNotFound: No such checkpoint.
            AmbiguousVersion: The prefix matches several checkpoints.
            StorageUnavailable: The store failed.
        """
        matches = [c for c in self.checkpoints() if c.id.startswith(id_prefix.lower())]
        if not matches or not id_prefix:
            raise ArtifactNotFound(
                f"no checkpoint with id {id_prefix!r} in the store {self.url}: see "
                "`execgym checkpoints ls`",
                store=self.url,
                key=id_prefix,
            )
        if len(matches) > 1:
            raise AmbiguousVersion(
                f"checkpoint id {id_prefix!r} matches {len(matches)} checkpoints: give more digits",
                store=self.url,
                candidates=tuple(c.id for c in matches),
            )
        self.objects.delete(checkpoint_key(matches[0].id))
        return matches[0]

    # -- lifecycle -----------------------------------------------------------------------

    def gc(self, policy: GcPolicy | None = None, *, dry_run: bool = False) -> GcReport:
        """Expire old logs and remove what no kept manifest or log references.

        See :mod:`execgym.storage.gc`.

        Raises:
            StorageError: A kept manifest or a record cannot be read (nothing deleted).
            StorageUnavailable: The store failed.
        """
        return collect_garbage(self.objects, policy or GcPolicy(), self.clock(), dry_run=dry_run)

    def scrub(self, *, delete_corrupted: bool = False) -> ScrubReport:
        """Read every blob and manifest back and check its hash.

        One bad object never stops it (see :mod:`execgym.storage.scrub`).

        Raises:
            StorageUnavailable: The store failed.
        """
        return scrub(self.objects, self.blobs, delete_corrupted=delete_corrupted)


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    clock: Clock = utc_now,
) -> Store:
    """The store at ``url`` (or ``$EXECGYM_STORE``, or ``~/.cache/execgym/store``).

    Nothing is contacted until the first call (``store.check()`` contacts it at once).

    Args:
        url: A directory, ``s3://bucket/prefix`` or ``memory://name``.
        storage_options: Extra fsspec options (for S3: ``endpoint_url``, ``key``,
            ``secret``...; the endpoint defaults to ``$EXECGYM_S3_ENDPOINT_URL``).
        clock: Now, in UTC.

    Raises:
        StorageUnavailable: The URL is unusable, or its backend (s3fs) is not installed.
    """
    return Store(resolve_location(url, storage_options), clock=clock)

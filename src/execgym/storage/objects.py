"""Keyed objects under a store's root: the only module that talks to fsspec.

Keys are relative POSIX paths (``blobs/ab/cdef...``). Every backend failure is translated
here, once: a missing object is :class:`~execgym.errors.ArtifactNotFound`, anything else
the file system raises (refused connection, no such bucket, permission) is
:class:`~execgym.errors.StorageUnavailable` naming the store.

Writes are atomic: on a local directory the bytes go to a temporary file beside the
target (``.tmp-*``) that is renamed over it; on an object store a PUT is atomic already.
A reader therefore never sees half an object.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import fsspec

from execgym.errors import ArtifactNotFound, StorageUnavailable
from execgym.storage.location import StoreLocation, open_filesystem

TEMP_PREFIX = ".tmp-"
CHUNK_BYTES = 1 << 20


def _backend_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError]
    with contextlib.suppress(ImportError):  # botocore comes with s3fs, when installed
        from botocore.exceptions import BotoCoreError

        errors.append(BotoCoreError)
    return tuple(errors)


@dataclass(frozen=True)
class ObjectInfo:
    """One object in a listing.

    Attributes:
        key: Its key under the store's root.
        size_bytes: Its size.
        modified_at: When it was last written (UTC), as the backend reports it; None
            when the backend reports no time (such an object is never old enough to
            collect).
    """

    key: str
    size_bytes: int
    modified_at: datetime | None


class ObjectStore:
    """Read, write, list and delete objects by key under ``location``'s root.

    Args:
        location: Where the store lives (:func:`~execgym.storage.resolve_location`).
        fs: A file system to use instead of opening one (tests).
    """

    def __init__(self, location: StoreLocation, fs: fsspec.AbstractFileSystem | None = None):
        self.location = location
        self.fs = fs if fs is not None else open_filesystem(location)
        self._errors = _backend_errors()

    @property
    def url(self) -> str:
        """The store's URL for messages (no password)."""
        return self.location.url

    def path(self, key: str) -> str:
        """The file system path of ``key``."""
        return f"{self.location.root.rstrip('/')}/{key}"

    def _unavailable(self, doing: str, error: BaseException) -> StorageUnavailable:
        detail = str(error) or type(error).__name__
        return StorageUnavailable(
            f"cannot {doing} in the store {self.url}: {detail}. Check that the store "
            "exists and is reachable (for S3: the bucket, $EXECGYM_S3_ENDPOINT_URL and "
            "the AWS_* credentials), or pass another --store",
            store=self.url,
        )

    def _not_found(self, key: str) -> ArtifactNotFound:
        return ArtifactNotFound(f"{key} is not in the store {self.url}", store=self.url, key=key)

    def read_bytes(self, key: str) -> bytes:
        """The whole object ``key``.

        Raises:
            ArtifactNotFound: No such object.
            StorageUnavailable: The store failed.
        """
        try:
            return bytes(self.fs.cat_file(self.path(key)))
        except FileNotFoundError as error:
            raise self._not_found(key) from error
        except self._errors as error:
            raise self._unavailable(f"read {key}", error) from error

    def read_many(self, keys: Sequence[str]) -> dict[str, bytes | ArtifactNotFound]:
        """Several whole objects at once (concurrent requests on an object store).

        Returns:
            ``{key: bytes}``, or ``{key: ArtifactNotFound}`` for one that is missing
            (it vanished since it was listed, say): one missing object never fails the rest.

        Raises:
            StorageUnavailable: The store failed.
        """
        if not keys:
            return {}
        by_path = {self.fs._strip_protocol(self.path(key)): key for key in keys}
        try:
            found = self.fs.cat(list(by_path), on_error="return")
        except self._errors as error:
            raise self._unavailable(f"read {len(keys)} objects", error) from error
        if not isinstance(found, dict):  # one path: fsspec returns the bytes alone
            found = {next(iter(by_path)): found}
        results: dict[str, bytes | ArtifactNotFound] = {}
        for path, value in found.items():
            key = by_path[self.fs._strip_protocol(path)]
            if isinstance(value, FileNotFoundError):
                results[key] = self._not_found(key)
            elif isinstance(value, BaseException):
                raise self._unavailable(f"read {key}", value) from value
            else:
                results[key] = bytes(value)
        return results

    @contextlib.contextmanager
    def open_read(self, key: str) -> Iterator[IO[bytes]]:
        """A binary stream of ``key`` (for objects too big to hold in memory).

        Raises:
            ArtifactNotFound: No such object.
            StorageUnavailable: The store failed.
        """
        try:
            stream = self.fs.open(self.path(key), "rb")
        except FileNotFoundError as error:
            raise self._not_found(key) from error
        except self._errors as error:
            raise self._unavailable(f"open {key}", error) from error
        try:
            yield stream
        except self._errors as error:
            if isinstance(error, FileNotFoundError):
                raise self._not_found(key) from error
            raise self._unavailable(f"read {key}", error) from error
        finally:
            stream.close()

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` as ``key`` atomically, replacing any object there.

        Raises:
            StorageUnavailable: The store failed (nothing is left at ``key`` half-written).
        """
        self._atomic(key, lambda target: self.fs.pipe_file(target, data))

    def upload(self, key: str, source: Path) -> None:
        """Copy the local file ``source`` to ``key`` atomically, streaming it.

        Raises:
            StorageUnavailable: The store failed.
        """
        self._atomic(key, lambda target: self.fs.put_file(str(source), target))

    def _atomic(self, key: str, write: Any) -> None:
        final = self.path(key)
        try:
            if not self.location.is_local:
                write(final)
                return
            directory, _, name = final.rpartition("/")
            temp = f"{directory}/{TEMP_PREFIX}{uuid.uuid4().hex}-{name}"
            try:
                write(temp)
                self.fs.mv(temp, final)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(temp)
        except self._errors as error:
            raise self._unavailable(f"write {key}", error) from error

    def info(self, key: str) -> ObjectInfo | None:
        """``key``'s size and time, or None when there is no such object.

        Raises:
            StorageUnavailable: The store failed.
        """
        try:
            return self._object_info(key, self.fs.info(self.path(key)))
        except FileNotFoundError:
            return None
        except self._errors as error:
            raise self._unavailable(f"look up {key}", error) from error

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with the directory ``prefix`` (recursive).

        Returns:
            The objects sorted by key; an empty list when the prefix holds nothing.

        Raises:
            StorageUnavailable: The store failed.
        """
        base = self.path(prefix.strip("/"))
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return []
        except self._errors as error:
            raise self._unavailable(f"list {prefix}", error) from error
        root = self.location.root.rstrip("/") + "/"
        infos = []
        for path, detail in found.items():
            bare = self.fs._strip_protocol(path)
            key = bare[len(root) :] if bare.startswith(root) else bare
            infos.append(self._object_info(key, detail))
        return sorted(infos, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        """Remove ``key``; removing what is already gone is not an error.

        Raises:
            StorageUnavailable: The store failed.
        """
        try:
            self.fs.rm_file(self.path(key))
        except FileNotFoundError:
            return
        except self._errors as error:
            raise self._unavailable(f"delete {key}", error) from error

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove several objects (one bulk request per 1000 on S3); gone ones are fine.

        Raises:
            StorageUnavailable: The store failed.
        """
        if self.location.is_local or len(keys) < 2:
            for key in keys:
                self.delete(key)
            return
        try:
            self.fs.rm([self.path(key) for key in keys])
        except FileNotFoundError:
            return
        except self._errors as error:
            raise self._unavailable(f"delete {len(keys)} objects", error) from error

    def check(self) -> None:
        """Contact the store once: list its root.

        Raises:
            StorageUnavailable: It cannot be reached, or (S3) the bucket does not exist.
        """
        if self.location.is_local:
            return
        bucket = self.location.root.lstrip("/").split("/")[0]
        try:
            self.fs.info(bucket if self.location.protocol == "s3" else self.location.root)
        except FileNotFoundError as error:
            if self.location.protocol == "s3":
                raise StorageUnavailable(
                    f"the bucket {bucket!r} of the store {self.url} does not exist: create "
                    "it first (e.g. `aws s3 mb s3://BUCKET`) or pass another --store",
                    store=self.url,
                ) from error
        except self._errors as error:
            raise self._unavailable("reach its root", error) from error

    @staticmethod
    def _object_info(key: str, detail: dict[str, Any]) -> ObjectInfo:
        return ObjectInfo(
            key=key, size_bytes=int(detail.get("size") or 0), modified_at=_modified_at(detail)
        )


def _modified_at(detail: dict[str, Any]) -> datetime | None:
    """The write time in an fsspec ``info`` dict.

    Local file systems say ``mtime``, S3 ``LastModified``, memory ``created``.
    """
    for name in ("mtime", "LastModified", "last_modified", "created"):
        value = detail.get(name)
        if isinstance(value, datetime):
            return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, tz=UTC)
    return None

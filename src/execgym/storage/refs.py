"""Refs: which versions a data set name has, one small JSON object per (name, version).

``refs/<name>/<version>.json`` records when that version was pushed under that name.
One object per version (rather than one list per name) means two concurrent pushes of
the same name never overwrite each other's entry. The latest version of a name is the
one pushed last; pushing a version again makes it the latest.

A version is asked for as ``NAME`` (the latest), ``NAME@latest``, ``NAME@<full
version>`` or ``NAME@<unique prefix>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from execgym.errors import AmbiguousVersion, ArtifactNotFound
from execgym.storage.manifests import SHA256_PATTERN
from execgym.storage.objects import ObjectStore
from execgym.storage.records import NAME_PATTERN, check_name, read_records, write_record

REFS = "refs"
_HEX = re.compile(r"^[0-9a-f]+$")


class VersionRecord(BaseModel):
    """One version of a named data set or test suite.

    Attributes:
        name: The data set's name.
        version: The manifest's hash.
        pushed_at: When it was (last) pushed under this name, UTC.
        size_bytes: Its files' total size.
        file_count: How many files it has.
        metadata: The manifest's metadata (a copy, for listings).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    version: str = Field(pattern=SHA256_PATTERN)
    pushed_at: datetime
    size_bytes: int = Field(ge=0)
    file_count: int = Field(ge=1)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


@dataclass(frozen=True)
class VersionSpec:
    """A parsed ``NAME[@VERSION]``.

    Attributes:
        name: The data set's name.
        version: A full version, a prefix, or None for the latest.
    """

    name: str
    version: str | None

    @classmethod
    def parse(cls, text: str) -> VersionSpec:
        """Parse ``NAME``, ``NAME@latest``, ``NAME@VERSION`` or ``NAME@PREFIX``.

        Raises:
            ValueError: A bad name, or a version that is not lowercase hex.
        """
        name, _, version = text.partition("@")
        check_name(name, "data set name")
        if version in ("", "latest"):
            if text.endswith("@"):
                raise ValueError(f"{text!r}: give a version after '@', or drop the '@'")
            return cls(name, None)
        if not _HEX.match(version) or len(version) > 64:
            raise ValueError(
                f"{text!r}: a version is the hex hash `execgym data ls {name}` shows, or a "
                "prefix of it"
            )
        return cls(name, version)

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


def ref_key(name: str, version: str) -> str:
    """``refs/<name>/<version>.json``."""
    return f"{REFS}/{name}/{version}.json"


def record_version(objects: ObjectStore, record: VersionRecord) -> None:
    """Record (or refresh) ``record``'s version under its name.

    Raises:
        StorageUnavailable: The store failed.
    """
    write_record(objects, ref_key(record.name, record.version), record)


def list_versions(
    objects: ObjectStore, name: str | None = None, *, strict: bool = False
) -> list[VersionRecord]:
    """The versions of ``name`` (every name when None), oldest push first.

    Args:
        objects: The store.
        name: A data set name, or None for all.
        strict: Raise on a ref that does not parse instead of leaving it out.

    Raises:
        StorageCorruptionError: With ``strict``, a ref that does not parse.
        StorageUnavailable: The store failed.
    """
    prefix = REFS if name is None else f"{REFS}/{check_name(name, 'data set name')}"
    records = read_records(objects, prefix, VersionRecord, strict=strict)
    return sorted(records, key=lambda r: (r.name, r.pushed_at, r.version))


def resolve_version(objects: ObjectStore, spec: VersionSpec) -> VersionRecord:
    """The version ``spec`` asks for.

    Raises:
        ArtifactNotFound: No data set of that name (the message lists the names there
            are), or no version of it with that prefix.
        AmbiguousVersion: The prefix matches several versions (the message lists them).
        StorageUnavailable: The store failed.
    """
    versions = list_versions(objects, spec.name)
    if not versions:
        names = sorted({r.name for r in list_versions(objects)})
        known = ", ".join(names[:20]) if names else "none yet"
        raise ArtifactNotFound(
            f"no data set named {spec.name!r} in the store {objects.url} (names there: "
            f"{known}); push it with `execgym data push PATH --name {spec.name}`",
            store=objects.url,
            key=str(spec),
        )
    if spec.version is None:
        return max(versions, key=lambda r: (r.pushed_at, r.version))
    matches = [r for r in versions if r.version.startswith(spec.version)]
    if not matches:
        raise ArtifactNotFound(
            f"{spec.name} has no version starting with {spec.version} in the store "
            f"{objects.url}: see `execgym data ls {spec.name}`",
            store=objects.url,
            key=str(spec),
        )
    if len(matches) > 1:
        shown = ", ".join(r.version[:16] for r in matches[:10])
        raise AmbiguousVersion(
            f"{spec} matches {len(matches)} versions ({shown}): give more digits",
            store=objects.url,
            candidates=tuple(r.version for r in matches),
        )
    return matches[0]


def drop_version(objects: ObjectStore, name: str, version: str) -> None:
    """Forget ``version`` under ``name``.

    Its manifest and blobs go at the next gc, unless something else keeps them.

    Raises:
        StorageUnavailable: The store failed.
    """
    objects.delete(ref_key(name, version))

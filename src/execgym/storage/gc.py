"""Lifecycle rules: expire old batch logs, drop surplus versions, remove unreferenced objects.

One pass, mark then sweep:

1. *Mark.* Logs older than ``log_ttl`` are expired; with ``keep_versions=N``, each name
   keeps its N latest versions and drops the rest. The kept manifests are those of the
   versions still listed plus every version a registered checkpoint names. Every blob of
   a kept manifest or of a kept log is live. Any kept manifest or record that cannot be
   read stops the pass before anything is deleted: gc never deletes what it cannot prove
   unreferenced.
2. *Sweep.* Dropped refs and expired log records go first, then manifests nobody keeps,
   then blobs nobody references, and leftover temporary files. An unreferenced manifest
   or blob is removed only once it is older than ``grace`` (a push writes blobs, then the
   manifest, then the ref: the grace period lets a push that is running finish).

Nothing referenced by a kept manifest is ever deleted.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from execgym.errors import ArtifactNotFound, StorageError
from execgym.storage.blobs import BLOBS, sha256_of_key
from execgym.storage.checkpoints import list_checkpoints
from execgym.storage.logs import LogRecord, list_logs
from execgym.storage.manifests import MANIFESTS, get_manifest, version_of_key
from execgym.storage.objects import TEMP_PREFIX, ObjectInfo, ObjectStore
from execgym.storage.refs import VersionRecord, list_versions, ref_key

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

Liveness = Callable[[str], bool | None]
"""``live(key)``: True (referenced), False (not), None (not an object of ours)."""


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"30m"``, ``"12h"``, ``"7d"`` or ``"2w"`` as a :class:`timedelta`.

    Raises:
        ValueError: Anything else (the message shows the accepted forms).
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: a number and a unit, s, m, h, d or w (e.g. 7d, 12h)"
        )
    return timedelta(seconds=float(match.group(1)) * _UNIT_S[match.group(2)])


@dataclass(frozen=True)
class GcPolicy:
    """What gc keeps.

    Attributes:
        log_ttl: Logs older than this are expired.
        grace: Unreferenced manifests, blobs and temporary files younger than this are
            kept (a push may be writing them).
        keep_versions: Versions kept per name (the latest ones); None keeps them all.
            Versions that a checkpoint names are always kept.
    """

    log_ttl: timedelta = timedelta(days=7)
    grace: timedelta = timedelta(hours=1)
    keep_versions: int | None = None

    def __post_init__(self) -> None:
        if self.log_ttl < timedelta(0) or self.grace < timedelta(0):
            raise ValueError("log_ttl and grace must not be negative")
        if self.keep_versions is not None and self.keep_versions < 1:
            raise ValueError(
                f"keep_versions must be at least 1 (got {self.keep_versions}); leave it "
                "unset to keep every version"
            )


@dataclass(frozen=True)
class GcReport:
    """What one gc pass removed and kept (with ``dry_run``: would remove).

    Attributes:
        dry_run: Nothing was deleted.
        expired_logs: The log records expired.
        dropped_versions: The versions no longer listed under their name.
        removed_manifests: Versions whose manifest was removed.
        removed_blobs: Hashes of the blobs removed.
        removed_bytes: Their total size plus the manifests' and temporary files'.
        removed_temp_files: Leftover temporary files removed.
        kept_manifests: Manifests kept.
        kept_blobs: Blobs kept because something references them.
        kept_logs: Log records kept.
        young_unreferenced: Unreferenced objects kept because they are younger than the
            grace period.
    """

    dry_run: bool
    expired_logs: tuple[LogRecord, ...] = ()
    dropped_versions: tuple[VersionRecord, ...] = ()
    removed_manifests: tuple[str, ...] = ()
    removed_blobs: tuple[str, ...] = ()
    removed_bytes: int = 0
    removed_temp_files: int = 0
    kept_manifests: int = 0
    kept_blobs: int = 0
    kept_logs: int = 0
    young_unreferenced: int = 0


@dataclass
class _Plan:
    """The marks of one pass: what is live and what goes."""

    expired_logs: list[LogRecord]
    kept_logs: list[LogRecord]
    dropped: list[VersionRecord]
    kept_versions: set[str]
    live_blobs: set[str]
    young: int = 0


def collect_garbage(
    objects: ObjectStore, policy: GcPolicy, now: datetime, *, dry_run: bool = False
) -> GcReport:
    """Apply ``policy`` to the store once (see the module's docstring).

    Args:
        objects: The store.
        policy: What to keep.
        now: The current time (UTC), from the store's clock.
        dry_run: Report only; delete nothing.

    Returns:
        What was (or would be) removed and kept.

    Raises:
        StorageError: A kept manifest is missing, corrupted or unreadable, or a record
            does not parse (nothing was deleted; the message names it).
        StorageUnavailable: The store failed.
    """
    plan = _mark(objects, policy, now)
    manifests = _sweepable(objects.list(MANIFESTS), policy, now, plan, _manifest_live(plan))
    blobs = _sweepable(objects.list(BLOBS), policy, now, plan, _blob_live(plan))
    doomed = manifests + blobs
    if not dry_run:
        objects.delete_many([ref_key(r.name, r.version) for r in plan.dropped])
        objects.delete_many([log.key for log in plan.expired_logs])
        objects.delete_many([info.key for info in manifests])
        objects.delete_many([info.key for info in blobs])
    temp = [info for info in doomed if _is_temp(info.key)]
    return GcReport(
        dry_run=dry_run,
        expired_logs=tuple(plan.expired_logs),
        dropped_versions=tuple(plan.dropped),
        removed_manifests=tuple(
            v for info in manifests if (v := version_of_key(info.key)) is not None
        ),
        removed_blobs=tuple(s for info in blobs if (s := sha256_of_key(info.key)) is not None),
        removed_bytes=sum(info.size_bytes for info in doomed),
        removed_temp_files=len(temp),
        kept_manifests=len(plan.kept_versions),
        kept_blobs=len(plan.live_blobs),
        kept_logs=len(plan.kept_logs),
        young_unreferenced=plan.young,
    )


def _mark(objects: ObjectStore, policy: GcPolicy, now: datetime) -> _Plan:
    logs = list_logs(objects, strict=True)
    expired = [log for log in logs if now - log.created_at > policy.log_ttl]
    kept_logs = [log for log in logs if now - log.created_at <= policy.log_ttl]
    pinned = {c.dataset_version for c in list_checkpoints(objects, strict=True)}
    versions = list_versions(objects, strict=True)
    dropped = _surplus(versions, policy.keep_versions, pinned)
    dropped_keys = {(r.name, r.version) for r in dropped}
    kept_versions = pinned | {
        r.version for r in versions if (r.name, r.version) not in dropped_keys
    }
    live = {log.sha256 for log in kept_logs}
    for version in sorted(kept_versions):
        try:
            manifest = get_manifest(objects, version)
        except ArtifactNotFound as error:
            raise StorageError(
                f"gc stopped, nothing deleted: version {version} is kept (listed or named "
                f"by a checkpoint) but its manifest is missing from {objects.url}. Push "
                "that version again, or drop it (`execgym data rm NAME@VERSION`)",
                store=objects.url,
            ) from error
        live.update(entry.sha256 for entry in manifest.files.values())
    return _Plan(expired, kept_logs, dropped, kept_versions, live)


def _surplus(
    versions: Iterable[VersionRecord], keep: int | None, pinned: set[str]
) -> list[VersionRecord]:
    """The versions beyond the ``keep`` latest of each name, except pinned ones."""
    if keep is None:
        return []
    by_name: dict[str, list[VersionRecord]] = defaultdict(list)
    for record in versions:
        by_name[record.name].append(record)
    surplus = []
    for records in by_name.values():
        newest_first = sorted(records, key=lambda r: (r.pushed_at, r.version), reverse=True)
        surplus += [r for r in newest_first[keep:] if r.version not in pinned]
    return surplus


def _is_temp(key: str) -> bool:
    return key.rpartition("/")[2].startswith(TEMP_PREFIX)


def _manifest_live(plan: _Plan) -> Liveness:
    def live(key: str) -> bool | None:
        version = version_of_key(key)
        return None if version is None else version in plan.kept_versions

    return live


def _blob_live(plan: _Plan) -> Liveness:
    def live(key: str) -> bool | None:
        sha256 = sha256_of_key(key)
        return None if sha256 is None else sha256 in plan.live_blobs

    return live


def _sweepable(
    infos: Iterable[ObjectInfo], policy: GcPolicy, now: datetime, plan: _Plan, live: Liveness
) -> list[ObjectInfo]:
    """The objects of a listing that go: unreferenced (or temporary) and past the grace.

    ``live(key)`` says True (referenced), False (not), or None (not an object of ours:
    left alone, so gc never deletes files it does not understand).
    """
    doomed = []
    for info in infos:
        is_live = None if _is_temp(info.key) else live(info.key)
        if is_live or (is_live is None and not _is_temp(info.key)):
            continue
        if info.modified_at is None or now - info.modified_at < policy.grace:
            plan.young += 1
            continue
        doomed.append(info)
    return doomed

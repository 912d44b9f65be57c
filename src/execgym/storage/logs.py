"""Per-batch execution logs: a batch's results or log file, kept for a time-to-live.

A log's bytes are a blob (verified on read like any other); a small record
``logs/<batch_id>/<time>-<sha256 prefix>.json`` says which batch it belongs to and when
it was stored. ``execgym storage gc --log-ttl 7d`` deletes records older than the TTL,
and with them their blobs (unless a manifest also holds the same bytes).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from execgym.storage.manifests import SHA256_PATTERN
from execgym.storage.objects import ObjectStore
from execgym.storage.records import NAME_PATTERN, check_name, read_records

LOGS = "logs"


class LogRecord(BaseModel):
    """One stored log of a batch.

    Attributes:
        batch_id: The batch it belongs to.
        file_name: The name it was stored from (``results.jsonl``), for pulls.
        created_at: When it was stored, UTC (the TTL counts from here).
        sha256: The blob holding its bytes.
        size_bytes: Its length.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_id: str = Field(pattern=NAME_PATTERN)
    file_name: str = Field(min_length=1, max_length=255)
    created_at: datetime
    sha256: str = Field(pattern=SHA256_PATTERN)
    size_bytes: int = Field(ge=0)

    @property
    def key(self) -> str:
        """Where the record lives: ``logs/<batch_id>/<time>-<hash prefix>.json``."""
        stamp = self.created_at.strftime("%Y%m%dT%H%M%S.%fZ")
        return f"{LOGS}/{self.batch_id}/{stamp}-{self.sha256[:12]}.json"


def list_logs(
    objects: ObjectStore, batch_id: str | None = None, *, strict: bool = False
) -> list[LogRecord]:
    """The logs of ``batch_id`` (every batch when None), oldest first.

    Raises:
        StorageCorruptionError: With ``strict``, a record that does not parse.
        StorageUnavailable: The store failed.
    """
    prefix = LOGS if batch_id is None else f"{LOGS}/{check_name(batch_id, 'batch id')}"
    records = read_records(objects, prefix, LogRecord, strict=strict)
    return sorted(records, key=lambda r: (r.created_at, r.batch_id, r.sha256))

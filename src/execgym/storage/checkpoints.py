"""A registry of model checkpoints, each tied to the data set version it was trained on.

A checkpoint's weights live wherever the trainer put them (its URI is recorded, never
fetched); the registry keeps ``checkpoints/<id>.json`` with the URI, the training step,
free metadata and the data set version. While a checkpoint is registered, gc keeps that
version's manifest and blobs, even when its name no longer lists it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from execgym.storage.manifests import SHA256_PATTERN
from execgym.storage.objects import ObjectStore
from execgym.storage.records import NAME_PATTERN, read_records

CHECKPOINTS = "checkpoints"
ID_LENGTH = 16


class Checkpoint(BaseModel):
    """One registered checkpoint.

    Attributes:
        id: The first 16 hex digits of the SHA-256 of (URI, step, data set version):
            registering the same checkpoint again updates it rather than adding one.
        uri: Where its weights are (``s3://...``, ``hf://...``, a path); not fetched.
        step: The training step it was saved at.
        dataset: The data set's name.
        dataset_version: The full version it was trained on.
        metadata: Free JSON (loss, model name, run id...).
        registered_at: When it was (last) registered, UTC.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[0-9a-f]{16}$")
    uri: str = Field(min_length=1, max_length=4096)
    step: int = Field(ge=0)
    dataset: str = Field(pattern=NAME_PATTERN)
    dataset_version: str = Field(pattern=SHA256_PATTERN)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    registered_at: datetime

    @property
    def key(self) -> str:
        """``checkpoints/<id>.json``."""
        return checkpoint_key(self.id)


def checkpoint_id(uri: str, step: int, dataset_version: str) -> str:
    """The id of a checkpoint: 16 hex digits of the hash of its identity."""
    identity = json.dumps([uri, step, dataset_version], separators=(",", ":"))
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:ID_LENGTH]


def checkpoint_key(checkpoint_id: str) -> str:
    """``checkpoints/<id>.json``."""
    return f"{CHECKPOINTS}/{checkpoint_id}.json"


def list_checkpoints(objects: ObjectStore, *, strict: bool = False) -> list[Checkpoint]:
    """Every registered checkpoint, by data set, then step.

    Raises:
        StorageCorruptionError: With ``strict``, a record that does not parse.
        StorageUnavailable: The store failed.
    """
    records = read_records(objects, CHECKPOINTS, Checkpoint, strict=strict)
    return sorted(records, key=lambda c: (c.dataset, c.step, c.registered_at, c.id))

"""Small JSON records of the store (refs, batch logs, checkpoints): read and written here.

They are read back through pydantic (a trust boundary: anyone with write access to the
store could have changed them), so a record that does not parse is a
:class:`~execgym.errors.StorageCorruptionError` naming its key, never a crash further on.
"""

from __future__ import annotations

import logging
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from execgym.errors import ArtifactNotFound, StorageCorruptionError
from execgym.storage.objects import ObjectStore

log = logging.getLogger(__name__)

Record = TypeVar("Record", bound=BaseModel)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str, what: str) -> str:
    """Return ``name`` if it can name a data set, batch or checkpoint in the store.

    Raises:
        ValueError: It is empty, longer than 128 characters, or holds anything but
            letters, digits, ``.``, ``_`` and ``-`` (not first).
    """
    if not _NAME.match(name):
        raise ValueError(
            f"invalid {what} {name!r}: use 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. 'humaneval' or 'run-7.step-100')"
        )
    return name


def write_record(objects: ObjectStore, key: str, record: BaseModel) -> None:
    """Write ``record`` as JSON at ``key`` (atomically).

    Raises:
        StorageUnavailable: The store failed.
    """
    objects.write_bytes(key, record.model_dump_json(indent=1).encode("utf-8"))


def read_record(objects: ObjectStore, key: str, model: type[Record]) -> Record:
    """The record at ``key``, validated as ``model``.

    Raises:
        ArtifactNotFound: No object at ``key``.
        StorageCorruptionError: It does not parse as ``model``.
        StorageUnavailable: The store failed.
    """
    return parse_record(objects, key, objects.read_bytes(key), model)


def parse_record(objects: ObjectStore, key: str, data: bytes, model: type[Record]) -> Record:
    """``data`` (read from ``key``) validated as ``model``.

    Raises:
        StorageCorruptionError: It does not parse as ``model``.
    """
    try:
        return model.model_validate_json(data)
    except ValidationError as error:
        raise StorageCorruptionError(
            f"{key} in the store {objects.url} is not a valid {model.__name__} record "
            f"({error.error_count()} problems, first: {error.errors()[0]['msg']}): delete "
            "it, or restore it from a backup",
            store=objects.url,
            key=key,
        ) from error


def read_records(
    objects: ObjectStore, prefix: str, model: type[Record], *, strict: bool = False
) -> list[Record]:
    """Every ``model`` record whose key is under ``prefix`` and ends in ``.json``.

    One bad record never sinks a listing: it is logged (a warning naming its key) and
    left out, unless ``strict``; one that vanished between the listing and the read (a
    concurrent gc) is left out silently.

    Args:
        objects: The store.
        prefix: A directory of keys, e.g. ``refs/humaneval``.
        model: The records' pydantic model.
        strict: Raise on a bad record instead (gc must know every reference).

    Raises:
        StorageCorruptionError: With ``strict``, a record that does not parse.
        StorageUnavailable: The store failed.
    """
    keys = [
        info.key
        for info in objects.list(prefix)
        if info.key.endswith(".json") and not info.key.rpartition("/")[2].startswith(".")
    ]
    records = []
    for key, data in objects.read_many(keys).items():
        if isinstance(data, ArtifactNotFound):
            continue
        try:
            records.append(parse_record(objects, key, data, model))
        except StorageCorruptionError as error:
            if strict:
                raise
            log.warning("%s", error)
    return records

r"""Versioned object storage: data sets, test suites, batch logs and checkpoints.

Behind fsspec: a local directory by default (``$EXECGYM_STORE`` or
``~/.cache/execgym/store``), S3-compatible stores through s3fs (``s3://bucket/prefix``;
``pip install 'execgym[storage]'``), ``memory://`` in tests. Everything is a
content-addressed blob (SHA-256, verified on every read) named by small JSON records;
a data set version is the SHA-256 of its manifest.

>>> from execgym.storage import open_store
>>> store = open_store("memory://doc")
>>> record = store.put_log("batch-1", b'{"verdict": "passed"}\n')
>>> store.read_log(record)
b'{"verdict": "passed"}\n'
"""

from __future__ import annotations

from execgym.storage.blobs import BlobRef, BlobStore, blob_key
from execgym.storage.checkpoints import Checkpoint
from execgym.storage.clock import Clock, utc_now
from execgym.storage.gc import GcPolicy, GcReport, parse_duration
from execgym.storage.location import (
    DEFAULT_STORE,
    S3_ENDPOINT_ENV,
    STORE_ENV,
    StoreLocation,
    resolve_location,
)
from execgym.storage.logs import LogRecord
from execgym.storage.manifests import FileEntry, Manifest
from execgym.storage.objects import ObjectInfo, ObjectStore
from execgym.storage.refs import VersionRecord, VersionSpec
from execgym.storage.scrub import ScrubReport
from execgym.storage.store import Pulled, Store, open_store

__all__ = [
    "DEFAULT_STORE",
    "S3_ENDPOINT_ENV",
    "STORE_ENV",
    "BlobRef",
    "BlobStore",
    "Checkpoint",
    "Clock",
    "FileEntry",
    "GcPolicy",
    "GcReport",
    "LogRecord",
    "Manifest",
    "ObjectInfo",
    "ObjectStore",
    "Pulled",
    "ScrubReport",
    "Store",
    "StoreLocation",
    "VersionRecord",
    "VersionSpec",
    "blob_key",
    "open_store",
    "parse_duration",
    "resolve_location",
    "utc_now",
]

"""Where a store lives: a URL or path, resolved to an fsspec file system and a root.

Precedence (STYLE 8.6): the ``url`` argument (``--store``) > ``$EXECGYM_STORE`` >
``~/.cache/execgym/store``. A plain path is a local directory; ``s3://bucket/prefix`` is
an S3-compatible store through s3fs (credentials from the usual ``AWS_*`` variables or
``~/.aws``, never from a URL; the endpoint from ``$EXECGYM_S3_ENDPOINT_URL`` or the
``endpoint_url`` storage option); ``memory://name`` is an in-process store for tests.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from execgym.errors import StorageUnavailable

DEFAULT_STORE = "~/.cache/execgym/store"
STORE_ENV = "EXECGYM_STORE"
S3_ENDPOINT_ENV = "EXECGYM_S3_ENDPOINT_URL"

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_PASSWORD = re.compile(r"(://[^/:@]*):[^/@]*@")
_INSTALL_HINT = {
    "s3": "install s3fs with `pip install 'execgym[storage]'`",
    "gs": "install gcsfs with `pip install gcsfs`",
    "gcs": "install gcsfs with `pip install gcsfs`",
    "az": "install adlfs with `pip install adlfs`",
    "abfs": "install adlfs with `pip install adlfs`",
}


def redact(url: str) -> str:
    """``url`` without the password of any ``user:password@`` part (for messages)."""
    return _PASSWORD.sub(r"\1:***@", url)


@dataclass(frozen=True)
class StoreLocation:
    """A resolved store address.

    Attributes:
        url: What the store is called in messages (password removed).
        protocol: fsspec's protocol: ``file``, ``s3``, ``memory``...
        root: The store's root inside the file system: an absolute local path, or
            ``bucket/prefix`` without a trailing slash.
        storage_options: Keyword arguments for the fsspec file system (may hold secrets
            given by the caller: never printed).
    """

    url: str
    protocol: str
    root: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_local(self) -> bool:
        """True for a directory on this host (where a rename is atomic)."""
        return self.protocol in ("file", "local")


def resolve_location(
    url: str | os.PathLike[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> StoreLocation:
    """Resolve ``url`` (or the environment, or the default) to a :class:`StoreLocation`.

    Args:
        url: ``/a/dir``, ``~/dir``, ``file:///a/dir``, ``s3://bucket/prefix``,
            ``memory://name``; None means ``$EXECGYM_STORE`` or ``~/.cache/execgym/store``.
        storage_options: Extra options for the fsspec file system; for ``s3://``, an
            ``endpoint_url`` here wins over ``$EXECGYM_S3_ENDPOINT_URL``.

    Returns:
        The location; nothing is contacted yet.

    Raises:
        StorageUnavailable: An ``s3://`` URL without a bucket, or an empty URL.
    """
    text = os.fspath(url) if url is not None else os.environ.get(STORE_ENV) or DEFAULT_STORE
    text = text.strip()
    if not text:
        raise StorageUnavailable(
            "the store URL is empty: pass --store DIR or s3://bucket/prefix, or unset "
            f"${STORE_ENV}",
            store=text,
        )
    options = dict(storage_options or {})
    match = _SCHEME.match(text)
    if match is None or match.group(1) in ("file", "local"):
        path = text[match.end() :] if match else text
        root = str(Path(path).expanduser().resolve())
        return StoreLocation(url=root, protocol="file", root=root, storage_options=options)
    protocol = match.group(1).lower()
    root = text[match.end() :].strip("/")
    if protocol in ("s3", "s3a"):
        protocol = "s3"
        if not root:
            raise StorageUnavailable(
                f"{redact(text)} names no bucket: use s3://BUCKET or s3://BUCKET/PREFIX",
                store=redact(text),
            )
        _s3_options(options)
    elif protocol == "memory":
        root = "/" + root  # fsspec's memory file system keeps absolute paths
    return StoreLocation(url=redact(text), protocol=protocol, root=root, storage_options=options)


def _s3_options(options: dict[str, Any]) -> None:
    """Fill in the S3 options execgym sets: endpoint, fresh listings, few retries."""
    endpoint = options.pop("endpoint_url", None) or os.environ.get(S3_ENDPOINT_ENV)
    if endpoint:
        options.setdefault("client_kwargs", {}).setdefault("endpoint_url", endpoint)
    # Listings must be fresh: gc and ls decide from them what exists.
    options.setdefault("use_listings_cache", False)
    options.setdefault("skip_instance_cache", True)
    config = options.setdefault("config_kwargs", {})
    config.setdefault("connect_timeout", 5)
    config.setdefault("retries", {"max_attempts": 3})


def open_filesystem(location: StoreLocation) -> fsspec.AbstractFileSystem:
    """The fsspec file system of ``location``.

    Raises:
        StorageUnavailable: The protocol's library is not installed (with the install
            line), or fsspec does not know the protocol.
    """
    if location.is_local:
        return fsspec.filesystem("file", auto_mkdir=True)
    try:
        return fsspec.filesystem(location.protocol, **location.storage_options)
    except ImportError as error:
        hint = _INSTALL_HINT.get(location.protocol, "install the fsspec backend for it")
        raise StorageUnavailable(
            f"the store {location.url} needs a library that is not installed: {hint} ({error})",
            store=location.url,
        ) from error
    except ValueError as error:  # fsspec: "Protocol not known"
        raise StorageUnavailable(
            f"unknown store protocol {location.protocol!r} in {location.url}: use a "
            "directory, s3://bucket/prefix or memory://name",
            store=location.url,
        ) from error

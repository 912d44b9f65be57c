"""What an environment is: a read-only root file system, named by a digest.

An :class:`Environment` is an ordered list of layers (each a file-system change set, named
by the sha256 of its uncompressed tar, the OCI ``diff_id``) plus a small configuration
(the interpreter to run Python with, environment variables). Its digest is the sha256 of
the canonical JSON of both, so the same layers and configuration are the same
environment wherever they were imported or built. :data:`HOST` is the host's own file
system (what every sandbox saw before environments existed).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
"""A content digest as OCI writes them: ``sha256:`` and 64 lowercase hex digits."""

HOST_NAME = "host"
"""The name of the host environment (a task naming no environment runs there)."""


def check_digest(digest: str, what: str = "digest") -> str:
    """Return ``digest`` if it is ``sha256:<64 hex>``.

    Raises:
        ValueError: It is not, with the form expected.
    """
    if not DIGEST.match(digest):
        raise ValueError(f"bad {what} {digest!r}: expected 'sha256:' and 64 lowercase hex digits")
    return digest


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON (sorted keys, no spaces, UTF-8): what digests hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class EnvironmentConfig:
    """How programs run in an environment.

    Attributes:
        python: Absolute path of the Python interpreter inside the environment (judges
            run their harnesses with it), or ``None`` if it has none.
        env: Environment variables the image sets (``PATH``...); a run's own override them.
    """

    python: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object this configuration is hashed and stored as."""
        return {"python": self.python, "env": dict(sorted(self.env.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvironmentConfig:
        """Read what :meth:`to_json` wrote."""
        return cls(python=data.get("python"), env=dict(data.get("env") or {}))


@dataclass(frozen=True)
class Environment:
    """A read-only root file system with a digest; see the module docstring.

    Attributes:
        digest: ``sha256:`` of the canonical JSON of ``layers`` and ``config``;
            ``"host"`` for :data:`HOST`.
        layers: Layer digests (uncompressed tar sha256, OCI ``diff_id``), lowest first.
        config: The interpreter and environment variables.
        rootfs: Where the assembled root file system lies on this machine (shared
            read-only by every sandbox using it); ``None`` for the host.
        names: Names it is known by in the local cache (``debian-py``...).
        source: Where it came from, for humans (``oci:/path:tag``, ``spec:<digest>``...).
        shared: Directories of the root that are another environment's, unchanged:
            ``(path inside, host directory)`` pairs, parents before children (``rootfs``
            holds an empty directory there; every tier binds the host directory over
            it read-only). So N environments on one base cost the base once plus their
            own layers (:mod:`execgym.environments.sharing`).
    """

    digest: str
    layers: tuple[str, ...] = ()
    config: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    rootfs: Path | None = None
    names: tuple[str, ...] = ()
    source: str = ""
    shared: tuple[tuple[str, str], ...] = ()

    def host_path(self, path: str) -> Path:
        """Where the entry ``path`` of the root (``/usr/bin/python3``) is on this machine.

        Through :attr:`shared` directories; symlinks are not followed (see
        :func:`~execgym.environments.mounts.resolve_inside`). The path may not exist.

        Raises:
            ValueError: The host environment (it has no root of its own).
        """
        if self.rootfs is None:
            raise ValueError("the host environment has no root file system of its own")
        relative = "/".join(part for part in path.split("/") if part not in ("", "."))
        for inside, host in reversed(self.shared):  # children after parents: deepest first
            prefix = inside.strip("/")
            if relative == prefix:
                return Path(host)
            if relative.startswith(prefix + "/"):
                return Path(host) / relative[len(prefix) + 1 :]
        return self.rootfs / relative if relative else self.rootfs

    @property
    def is_host(self) -> bool:
        """Whether this is the host's own file system."""
        return self.rootfs is None

    @property
    def short(self) -> str:
        """The first 12 hex digits of the digest (``host`` for the host)."""
        return self.digest.removeprefix("sha256:")[:12]


def environment_digest(layers: tuple[str, ...], config: EnvironmentConfig) -> str:
    """The digest of an environment made of ``layers`` with ``config`` (see the module)."""
    for layer in layers:
        check_digest(layer, "layer digest")
    return sha256_digest(canonical_json({"layers": list(layers), "config": config.to_json()}))


HOST = Environment(digest=HOST_NAME, names=(HOST_NAME,), source="the host's file system")
"""The host's own file system: ``/usr`` and the interpreter's prefix, as before."""

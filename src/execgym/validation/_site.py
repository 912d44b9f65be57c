"""A read-only site directory for the sandbox, holding only named packages.

The sandbox sees ``/usr`` and the interpreter's prefix, starts Python with ``-I -S``
(standard library only), and mounts its own tmpfs on ``/work`` (which may hide a
checkout under ``/work`` on the host). To let a helper import coverage.py (or a test
import numpy) without exposing the whole host site-packages, the named packages are
copied once into a dedicated directory, ``$XDG_CACHE_HOME/execgym/sandbox-site/<key>``
(``~/.cache`` by default; ``<key>`` is the interpreter version and the packages'
versions, so an upgrade makes a new copy), and that directory alone is bound
read-only into the sandbox at the same path. Code inside puts it on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

from execgym.errors import ConfigError


def _package_dirs(name: str) -> list[Path]:
    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {name!r} is not installed: pip install {name}")
    package = Path(os.path.realpath(next(iter(spec.submodule_search_locations))))
    dirs = [package]
    libs = package.parent / f"{name}.libs"  # shared libraries of manylinux wheels
    if libs.is_dir():
        dirs.append(libs)
    return dirs


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "execgym" / "sandbox-site"


def stage_packages(names: tuple[str, ...], root: Path | None = None) -> str:
    """Copy ``names`` (installed packages) into a fresh site dir; return its path.

    Raises:
        ConfigError: if a package is not installed.
    """
    versions = [f"{n}=={metadata.version(n)}" for n in sorted(names)]
    key = hashlib.sha256(" ".join([sys.version, *versions]).encode()).hexdigest()[:16]
    site = (root or _cache_root()) / key
    if site.is_dir():
        return str(site)
    site.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=site.parent, prefix=".staging-"))
    try:
        for name in names:
            for directory in _package_dirs(name):
                shutil.copytree(
                    directory,
                    staging / directory.name,
                    ignore=shutil.ignore_patterns("__pycache__"),
                )
        staging.chmod(0o755)
        os.replace(staging, site)  # atomic: a concurrent stage sees all or nothing
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not site.is_dir():
            raise
    return str(site)

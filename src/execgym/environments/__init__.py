"""Environments: the root file system a sandbox runs programs in, named by a digest.

An environment is the host's own file system (:data:`HOST`, the default), an OCI image
imported once into the local cache (:meth:`EnvironmentCache.import_image`), or a
declarative spec built once on top of another environment
(:func:`~execgym.environments.spec.build`). Every sandbox tier runs in any of them
(``BubblewrapSandbox(environment=...)`` and the others); tasks name theirs in
``"environment"``. See ``docs/environments.md`` for the whole story.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execgym.lazy_exports import lazy_package

if TYPE_CHECKING:
    from execgym.environments.cache import (
        DiskUse,
        EnvironmentCache,
        EnvironmentNotFound,
        default_cache_dir,
        find_python,
    )
    from execgym.environments.layers import LayerError, UnpackedLayer
    from execgym.environments.model import HOST, HOST_NAME, Environment, EnvironmentConfig
    from execgym.environments.oci import ImageError, ImageSource, read_image

__all__ = [
    "HOST",
    "HOST_NAME",
    "DiskUse",
    "Environment",
    "EnvironmentCache",
    "EnvironmentConfig",
    "EnvironmentNotFound",
    "ImageError",
    "ImageSource",
    "LayerError",
    "UnpackedLayer",
    "default_cache_dir",
    "find_python",
    "read_image",
]

lazy_package(
    __name__,
    {
        "DiskUse": "execgym.environments.cache",
        "Environment": "execgym.environments.model",
        "EnvironmentCache": "execgym.environments.cache",
        "EnvironmentConfig": "execgym.environments.model",
        "EnvironmentNotFound": "execgym.environments.cache",
        "HOST": "execgym.environments.model",
        "HOST_NAME": "execgym.environments.model",
        "ImageError": "execgym.environments.oci",
        "ImageSource": "execgym.environments.oci",
        "LayerError": "execgym.environments.layers",
        "UnpackedLayer": "execgym.environments.layers",
        "default_cache_dir": "execgym.environments.cache",
        "find_python": "execgym.environments.cache",
        "read_image": "execgym.environments.oci",
    },
)

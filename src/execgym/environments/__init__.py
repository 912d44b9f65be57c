"""Environments: the root file system a sandbox runs programs in, named by a digest.

An environment is the host's own file system (:data:`HOST`, the default), an OCI image
imported once into the local cache (:meth:`EnvironmentCache.import_image`), or a
declarative spec built once on top of another environment
(:func:`~execgym.environments.spec.build`). Every sandbox tier runs in any of them
(``BubblewrapSandbox(environment=...)`` and the others); tasks name theirs in
``"environment"``. See ``docs/environments.md`` for the whole story.
"""

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

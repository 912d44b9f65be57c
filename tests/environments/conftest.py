"""Session fixtures: the Debian test image (built once per machine), imported once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from execgym.environments import Environment, EnvironmentCache
from tests.conftest import require
from tests.environments.images import TOOLS, build_test_image


@pytest.fixture(scope="session")
def test_image() -> Path:
    """The built image's directory: ``layout/`` (tags base, top) and ``top-docker.tar``."""
    for tool in TOOLS:
        require(shutil.which(tool) is not None, f"{tool} (Debian package {tool})")
    return build_test_image()


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> EnvironmentCache:
    """An environment cache of this session's own."""
    return EnvironmentCache(tmp_path_factory.mktemp("environments"))


@pytest.fixture(scope="session")
def debian(test_image: Path, env_cache: EnvironmentCache) -> Environment:
    """The ``base`` image (Debian bookworm with python3), imported."""
    return env_cache.import_image(f"{test_image / 'layout'}:base", name="debian")


@pytest.fixture(scope="session")
def debian_top(test_image: Path, env_cache: EnvironmentCache, debian: Environment) -> Environment:
    """The ``top`` image (base plus the whiteout layers), imported after ``base``."""
    return env_cache.import_image(f"{test_image / 'layout'}:top", name="debian-top")

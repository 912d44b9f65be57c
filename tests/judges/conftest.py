"""Fixtures for the judges: a compile cache per test session."""

from __future__ import annotations

import pytest

from execgym.judges.compile import Builder


@pytest.fixture(scope="session")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    return Builder(tmp_path_factory.mktemp("compiled"))

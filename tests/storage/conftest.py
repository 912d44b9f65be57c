"""Every storage test runs against a local directory and a real S3-compatible server."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from execgym.storage import Store, open_store
from execgym.testing import FakeClock, MotoS3Server
from tests.conftest import require

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3Server]:
    try:
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError:
        require(False, "moto[server] and s3fs (pip install -e '.[storage]')")
    server = MotoS3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def s3_url(s3_server: MotoS3Server) -> str:
    bucket = f"test-{next(_buckets)}"
    s3_server.create_bucket(bucket)
    return f"s3://{bucket}/execgym"


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, object]]:
    """``(store URL, storage options)`` of a fresh, empty store."""
    if request.param == "local":
        return str(tmp_path / "store"), {}
    server: MotoS3Server = request.getfixturevalue("s3_server")
    return request.getfixturevalue("s3_url"), server.storage_options


@pytest.fixture
def store(backend: tuple[str, dict[str, object]], clock: FakeClock) -> Store:
    url, options = backend
    return open_store(url, storage_options=dict(options), clock=clock)

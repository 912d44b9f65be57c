"""Fixtures for the HTTP service: apps in-process over httpx's ASGI transport."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from execgym.server import ServerSettings, create_app
from execgym.server.languages import LANGUAGES, Toolchains, find_toolchains
from tests.conftest import require

AppFactory = Callable[..., Any]


@asynccontextmanager
async def serving(**kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An app from ``create_app(**kwargs)``, its lifespan running, and a client for it."""
    app = create_app(**kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://execgym") as client:
            yield client


@pytest.fixture(scope="session")
def toolchains() -> Toolchains:
    return find_toolchains()


@pytest.fixture
async def bwrap_client(toolchains: Toolchains) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app that runs programs in real bwrap sandboxes (warm pool on)."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    settings = ServerSettings(workers=2, max_in_flight=256)
    async with serving(settings=settings, toolchains=toolchains) as client:
        yield client


def need_language(toolchains: Toolchains, name: str) -> None:
    """Run only where ``name``'s toolchain is installed.

    C++ is required (CI installs g++, and fails without it); the other toolchains are
    optional on a host, so their tests skip, with the reason shown, where they are missing.
    """
    missing = toolchains.missing(LANGUAGES[name])
    if name == "cpp":
        require(not missing, "g++ (apt-get install g++)")
    elif missing:
        pytest.skip(f"{name}: {', '.join(missing)} not installed here")


NO_TOOLS = Toolchains(tools={}, read_only_paths=(), pytest_path=None)
"""A host with no compiler or interpreter but execgym's own Python."""

"""Fixtures for the judges: a compile cache per test session, the hack corpora's sandboxes."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator

import pytest

from execgym.judges._programs import harness_program
from execgym.judges.compile import Builder
from execgym.sandbox import BubblewrapSandbox, Sandbox, WarmPoolSandbox
from tests.conftest import require


@pytest.fixture(scope="session")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    return Builder(tmp_path_factory.mktemp("compiled"))


@pytest.fixture(params=["bwrap", "warm_pool"])
async def hack_sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    """The two bwrap tiers a trainer scores on: a fresh sandbox per rollout, and the
    warm pool, where the judges' harnesses are preloaded and run as PID 1 of the run."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    if request.param == "bwrap":
        yield BubblewrapSandbox()
        return
    for name in ("assert_runner", "call_runner", "pytest_runner"):
        harness_program(name)  # registered before the pool starts: preloaded from run 1
    async with WarmPoolSandbox() as pool:
        yield pool

"""Shared fixtures: capability checks (skip locally, fail in CI) and sandboxes."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from execgym.sandbox import BubblewrapSandbox, UnisolatedSandbox
from execgym.sandbox._cgroup import detect_cgroups

CI = bool(os.environ.get("CI"))


def require(available: bool, what: str) -> None:
    """Skip when a capability is missing here, but fail in CI: nothing is silently skipped."""
    if not available:
        if CI:
            pytest.fail(f"{what} is required in CI")
        pytest.skip(f"{what} is not available on this host")


def python(code: str) -> list[str]:
    """argv that runs ``code`` with the test interpreter, resolved as in the sandbox."""
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", code]


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("EXECGYM_", "AWS_", "REDIS_")):
            monkeypatch.delenv(name)


@pytest.fixture
def bwrap_sandbox() -> BubblewrapSandbox:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    return BubblewrapSandbox()


@pytest.fixture
def none_sandbox() -> UnisolatedSandbox:
    return UnisolatedSandbox()


@pytest.fixture(params=["bwrap", "none"])
def sandbox(request: pytest.FixtureRequest) -> BubblewrapSandbox | UnisolatedSandbox:
    if request.param == "bwrap":
        return request.getfixturevalue("bwrap_sandbox")
    return request.getfixturevalue("none_sandbox")


@pytest.fixture
def needs_cgroup() -> None:
    host = detect_cgroups()
    require(host.version is not None, f"a writable cgroup hierarchy ({host.reason})")

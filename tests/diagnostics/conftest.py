"""One sandbox and one diagnosis of the planted corpus for the whole session."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from execgym.diagnostics import Diagnostics
from execgym.sandbox import BubblewrapSandbox
from tests.conftest import require
from tests.diagnostics.planted import Planted, diagnose_corpus, load_corpus


@pytest.fixture(scope="session")
def diag_sandbox() -> BubblewrapSandbox:
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    require(shutil.which("valgrind") is not None, "valgrind (apt-get install valgrind)")
    return BubblewrapSandbox()


@pytest.fixture(scope="session")
def corpus() -> list[Planted]:
    return load_corpus()


@pytest.fixture(scope="session")
def corpus_results(
    diag_sandbox: BubblewrapSandbox, corpus: list[Planted]
) -> dict[str, Diagnostics]:
    return asyncio.run(diagnose_corpus(diag_sandbox, corpus))

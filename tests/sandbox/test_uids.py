"""Host uids per run (``execgym.sandbox._uids``): blocks are leased per process, and a uid
is held by one live run at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from execgym.sandbox import _uids
from execgym.sandbox._uids import BLOCK_SIZE, UidBlock, uid_range


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_uids, "LOCK_DIR", tmp_path / "uid-blocks")
    return tmp_path / "uid-blocks"


def test_a_uid_is_held_by_one_run_at_a_time_and_reused_last() -> None:
    block = UidBlock(200_000, 4)
    taken = [block.take() for _ in range(4)]
    assert taken == [200_000, 200_001, 200_002, 200_003]
    block.give(200_001)
    assert block.take() == 200_001  # the only free one
    shared = block.take()  # all four held: the least held one is shared, never a failure
    assert shared in taken
    block.give(shared)
    block.give(shared)  # both its runs ended: free again, and the only free one
    assert block.take() == shared


def test_two_processes_lease_different_blocks(lock_dir: Path) -> None:
    first = UidBlock.lease()
    assert first is not None
    src = str(Path(_uids.__file__).parents[2])
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path;"
        "from execgym.sandbox import _uids; _uids.LOCK_DIR = Path(sys.argv[2]);"
        "block = _uids.UidBlock.lease(); print(block.first)"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, src, str(lock_dir)], capture_output=True, text=True, check=True
    )
    assert int(other.stdout) == first.first + BLOCK_SIZE  # the first block is ours
    first.release()
    again = subprocess.run(
        [sys.executable, "-c", code, src, str(lock_dir)], capture_output=True, text=True, check=True
    )
    assert int(again.stdout) == first.first  # released: free again


def test_the_range_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXECGYM_SANDBOX_UIDS", f"3000000000:{BLOCK_SIZE}")
    with pytest.raises(ValueError, match="below 2147483648"):
        uid_range()
    monkeypatch.setenv("EXECGYM_SANDBOX_UIDS", "1000:100000")
    with pytest.raises(ValueError, match="above 65535"):
        uid_range()
    monkeypatch.setenv("EXECGYM_SANDBOX_UIDS", "nonsense")
    with pytest.raises(ValueError, match="FIRST:COUNT"):
        uid_range()
    monkeypatch.setenv("EXECGYM_SANDBOX_UIDS", f"1000000:{BLOCK_SIZE * 2}")
    assert uid_range() == (1_000_000, BLOCK_SIZE * 2)


def test_an_ordinary_user_has_no_block() -> None:
    if os.geteuid() == 0:
        assert _uids.process_block() is not None
    else:
        assert _uids.process_block() is None

"""Persistent sessions: state across calls, per-command limits, and full reclaim."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import pytest

from execgym.errors import SandboxError
from execgym.limits import Limits, MiB
from execgym.sandbox import Status
from execgym.sandbox._python import python_command
from execgym.sandbox.session import SessionClosed, open_session
from tests.conftest import processes_with, run_cgroups

PY = python_command("x")[:-1]
BACKGROUND = (
    "import subprocess; subprocess.Popen(['{marker}', '300'], executable='/usr/bin/sleep',"
    " start_new_session=True)"
)


async def test_files_and_state_survive_between_commands(bwrap_sandbox) -> None:
    async with open_session() as session:
        await session.write_files({"src/a.py": b"open('out.txt', 'w').write('one')"})
        first = await session.run([*PY, "src/a.py"])
        assert first.status is Status.OK, first.stderr
        second = await session.run(["/bin/sh", "-c", "cat out.txt; echo two >> out.txt"])
        assert second.stdout == b"one"
        assert await session.read_file("out.txt") == b"onetwo\n"
        assert await session.read_file("out.txt", max_bytes=2) == b"on"


async def test_a_command_that_times_out_is_killed_and_the_session_goes_on(bwrap_sandbox) -> None:
    async with open_session() as session:
        slow = await session.run([*PY, "-c", "while True: pass"], limits=Limits(wall_time_s=0.5))
        assert slow.status is Status.TIME_LIMIT
        after = await session.run(["/bin/echo", "still here"])
        assert after.stdout == b"still here\n"


async def test_isolation_is_that_of_the_bwrap_sandbox(bwrap_sandbox, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    async with open_session() as session:
        result = await session.run(
            [
                *PY,
                "-c",
                "import os, socket; print(os.getuid(), sorted(os.environ));"
                " print(sorted(os.listdir('/'))); socket.socket()",
            ]
        )
        assert b"sk-secret" not in result.stdout
        assert b"OPENAI_API_KEY" not in result.stdout
        assert b"'home'" not in result.stdout
        assert b"PermissionError" in result.stderr  # network "none": no Internet sockets


async def test_memory_is_limited_for_the_whole_session(bwrap_sandbox, needs_cgroup) -> None:
    async with open_session(Limits(memory_bytes=128 * MiB)) as session:
        result = await session.run([*PY, "-c", "x = bytearray(1024 ** 3)"])
        assert result.status is Status.MEMORY_LIMIT


@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "missing.txt"])
async def test_reading_outside_or_missing_files_fails_cleanly(bwrap_sandbox, name) -> None:
    async with open_session() as session:
        with pytest.raises(SandboxError):
            await session.read_file(name)
        assert (await session.run(["/bin/true"])).status is Status.OK


async def test_idle_sessions_close_themselves_and_leave_nothing(bwrap_sandbox) -> None:
    marker = f"execgym-session-{uuid.uuid4().hex}"
    async with open_session(idle_timeout_s=0.5) as session:
        await session.run([*PY, "-c", BACKGROUND.format(marker=marker)])
        assert processes_with(marker)
        await asyncio.sleep(1.5)
        assert session.closed_because is not None
        assert "idle" in session.closed_because
        result = await session.run(["/bin/true"])
        assert result.status is Status.SANDBOX_ERROR
        with pytest.raises(SessionClosed):
            await session.write_files({"a": b"x"})
    assert processes_with(marker) == []
    assert run_cgroups() == []


async def test_sessions_end_at_their_maximum_lifetime(bwrap_sandbox) -> None:
    async with open_session(max_lifetime_s=0.5) as session:
        await asyncio.sleep(1.2)
        assert "maximum lifetime" in (session.closed_because or "")


async def test_a_command_killing_the_agent_closes_the_session(bwrap_sandbox) -> None:
    async with open_session() as session:
        result = await session.run(["/bin/sh", "-c", "kill -9 -1"])
        assert result.status in (Status.SANDBOX_ERROR, Status.SIGNALED)
        await asyncio.sleep(0.1)
        assert session.closed_because is not None
    assert run_cgroups() == []


def test_a_session_dies_with_its_parent(bwrap_sandbox) -> None:
    marker = f"execgym-orphan-{uuid.uuid4().hex}"
    script = (
        "import asyncio, sys\n"
        "from execgym.sandbox.session import open_session\n"
        "async def main():\n"
        "    async with open_session() as s:\n"
        f"        await s.run({[*PY, '-c', BACKGROUND.format(marker=marker)]!r})\n"
        "        print('ready', flush=True)\n"
        "        await asyncio.sleep(300)\n"
        "asyncio.run(main())\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    assert parent.stdout.readline() == b"ready\n"
    assert processes_with(marker)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []


async def test_listing_and_exporting_the_work_dir(bwrap_sandbox) -> None:
    import io
    import tarfile

    async with open_session() as session:
        await session.write_files({"pkg/a.py": b"x = 1\n", "pkg/__pycache__/a.pyc": b"c"})
        await session.run(["/bin/ln", "-s", "/etc/passwd", "pkg/link"])
        entries, truncated = await session.list_dir("pkg")
        assert entries == [("__pycache__", "dir", 0), ("a.py", "file", 6), ("link", "link", 0)]
        assert not truncated
        assert (await session.list_dir("pkg", max_entries=1)) == ([("__pycache__", "dir", 0)], True)
        with pytest.raises(SandboxError):
            await session.list_dir("../etc")
        exported = await session.export_tree(skip=["__pycache__"])
    with tarfile.open(fileobj=io.BytesIO(exported)) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert sorted(members) == ["pkg", "pkg/a.py", "pkg/link"]
        assert members["pkg/link"].issym()
        assert members["pkg/link"].linkname == "/etc/passwd"
        assert archive.extractfile("pkg/a.py").read() == b"x = 1\n"

"""Spawning a run: descriptors on their numbers, placement before start, no leak on cancel."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import uuid

import pytest

from execgym.sandbox._process import ProcessSpec, memfd_with, run_process, spawn
from tests.conftest import processes_with


def spec_for(code: str, **kwargs: object) -> ProcessSpec:
    return ProcessSpec(
        argv=[sys.executable, "-I", "-S", "-c", code],
        env={"PATH": "/usr/bin:/bin"},
        stdin=b"",
        wall_time_s=5,
        cpu_time_s=5,
        max_output_bytes=1 << 20,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_descriptors_land_on_their_numbers_even_when_sources_collide() -> None:
    # Sources sitting on each other's targets must not undo each other.
    first, second = memfd_with(b"first"), memfd_with(b"second")
    out_read, out_write = os.pipe()
    code = "import os; print(os.pread(3, 10, 0), os.pread(first, 10, 0))".replace(
        "first", str(first)
    )
    try:
        pid, _ = await spawn(
            spec_for(code), {3: second, first: first}, stdout=out_write, stderr=2, stdin=None
        )
    finally:
        os.close(out_write)
    _, status = os.waitpid(pid, 0)
    output = os.read(out_read, 1000)
    os.close(out_read)
    for fd in (first, second):
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert output == b"b'second' b'first'\n"


async def test_rlimits_are_set_before_the_program_runs() -> None:
    import resource

    out_read, out_write = os.pipe()
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))"
    spec = spec_for(code, rlimits=[(resource.RLIMIT_NOFILE, 77, 77)])
    try:
        pid, _ = await spawn(spec, {}, stdout=out_write, stderr=2, stdin=None)
    finally:
        os.close(out_write)
    os.waitpid(pid, 0)
    assert os.read(out_read, 100) == b"(77, 77)\n"
    os.close(out_read)


async def test_a_missing_launcher_is_an_oserror_a_missing_program_exit_127() -> None:
    """bwrap missing is ours to report; a program missing behind the gate is the program's
    failure, found by the gate's shell on the run's PATH, as in any sandbox."""
    spec = ProcessSpec(
        argv=["execgym-no-such-program"],
        env={"PATH": "/usr/bin"},
        stdin=b"",
        wall_time_s=1,
        cpu_time_s=1,
        max_output_bytes=1000,
    )
    with pytest.raises(FileNotFoundError):
        await spawn(dataclasses.replace(spec, hold_fds=(5, 6)), {}, stdout=1, stderr=2, stdin=None)
    outcome = await run_process(spec)
    assert os.WEXITSTATUS(outcome.wait_status) == 127
    assert b"execgym-no-such-program" in outcome.stderr


async def test_a_cancelled_spawn_leaves_no_process(monkeypatch) -> None:
    import threading

    from execgym.sandbox import _process

    finished = threading.Event()
    real = _process.spawn_held

    def spawn_held(*args: object) -> tuple[int, int]:
        try:
            return real(*args)  # type: ignore[arg-type]
        finally:
            finished.set()

    monkeypatch.setattr(_process, "spawn_held", spawn_held)
    mark = f"execgym-spawn-{uuid.uuid4().hex}"
    spec = spec_for(f"import time  # {mark}\ntime.sleep(60)")
    task = asyncio.ensure_future(spawn(spec, {}, stdout=1, stderr=2, stdin=None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The thread goes on; once it is done its child is killed and reaped.
    assert await asyncio.to_thread(finished.wait, 30)
    for _ in range(200):
        if not processes_with(mark):
            break
        await asyncio.sleep(0.05)
    assert processes_with(mark) == []

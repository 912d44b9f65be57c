"""The one sync bridge: coroutines from blocking code and from another event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from execgym.sync_bridge import BackgroundLoop


async def _where() -> tuple[str, int]:
    await asyncio.sleep(0)
    return threading.current_thread().name, id(asyncio.get_running_loop())


def test_run_blocks_for_the_result_on_the_loop_thread() -> None:
    bridge = BackgroundLoop("bridge-test")
    try:
        name, loop_id = bridge.run(_where())
        assert name == "bridge-test"
        assert loop_id == id(bridge.loop)
        assert bridge.run(_where())[1] == loop_id  # the same loop for every call
    finally:
        bridge.close()


def test_run_async_from_a_running_loop_and_errors_propagate() -> None:
    bridge = BackgroundLoop()

    async def fails() -> None:
        raise ValueError("from the loop")

    async def caller() -> tuple[str, int]:
        with pytest.raises(ValueError, match="from the loop"):
            await bridge.run_async(fails())
        return await bridge.run_async(_where())

    try:
        _, loop_id = asyncio.run(caller())  # a caller with its own loop, as a trainer's
        assert loop_id == id(bridge.loop)
    finally:
        bridge.close()


def test_a_closed_bridge_refuses_and_closes_the_coroutine() -> None:
    bridge = BackgroundLoop()
    bridge.close()
    bridge.close()  # idempotent
    assert bridge.closed
    assert bridge.loop.is_closed()
    coroutine = _where()
    with pytest.raises(RuntimeError, match="closed"):
        bridge.run(coroutine)
    assert coroutine.cr_frame is None  # closed, so no "never awaited" warning

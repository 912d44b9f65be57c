"""A pooled run's wall time is the zygote's, not when the host's event loop got round to it.

Found by QA on 2026-12-02: on a loaded host, 9 of 164 HumanEval canonical rollouts on
the warm pool reported a ``wall_time_s`` below their CPU time (0.3 ms of wall for 18 ms
of CPU), and so did 7 of the references ``--calibrate-limits`` measured. The host
started its clock when its coroutine resumed after the zygote's ``began`` message, which
can be after the run has ended; a reference measured that way gets a limit calibrated
from a time it never had.
"""

from __future__ import annotations

import time

from execgym.sandbox import Status, WarmPoolSandbox


async def test_wall_time_counts_from_the_zygote_even_when_the_host_loop_is_late(
    bwrap_sandbox,
) -> None:
    async with WarmPoolSandbox() as pool:
        await pool.run_python(b"pass\n")  # warm: the next run's job is sent at once
        send = pool._zygote.send
        blocked: list[bool] = []

        async def send_then_stall(message: bytes, fds, **kwargs) -> None:
            await send(message, fds, **kwargs)
            if not blocked and b'"run"' in message:
                blocked.append(True)
                # The host's event loop is busy (other rollouts, a large result) while
                # the run starts and ends: both of the zygote's messages wait for it.
                time.sleep(3.0)  # noqa: ASYNC251 (blocking the loop is the point)

        pool._zygote.send = send_then_stall  # type: ignore[method-assign]
        result = await pool.run_python(b"import time\ntime.sleep(0.4)\n")
    assert blocked
    assert result.status is Status.OK
    assert result.wall_time_s >= 0.4, result.wall_time_s  # it slept that long
    assert result.wall_time_s < 2.9, result.wall_time_s  # the host's stall is not the run's

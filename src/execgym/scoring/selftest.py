"""The sandbox self-test: one known-good rollout, run before a batch or a service starts.

A host where the sandbox cannot run the harness at all (the interpreter is not visible
inside, bwrap cannot mount, the limits are too small to start Python) would otherwise
mask every rollout of a batch as ``sandbox_error``.

A self-test that runs beside a batch's rollouts (``execgym score`` starts them before
it has passed) shares the host's CPU with them, and a rollout is the model's program:
one that spins every core it can reach could starve the self-test past a tight time
limit and abort the whole batch. :func:`self_test_beside` keeps the verdict its own:
a self-test that failed while any run of the batch overlapped it is run again alone
(:class:`PausableSandbox` holds the batch's new runs back until it is done).
"""

from __future__ import annotations

import logging

from execgym.errors import Error, SandboxSetupFailed
from execgym.judges.assert_tests import AssertJudge
from execgym.judges.base import Verdict
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox.base import Sandbox, Status
from execgym.sandbox.pausable import PausableSandbox
from execgym.tasks.models import Task

log = logging.getLogger("execgym.scoring")

SELF_TEST_TASK = Task(
    task_id="execgym/self-test",
    prompt="def f():\n",
    entry_point="f",
    tests="def check(candidate):\n    assert candidate() == 1\n",
)
"""The task of the self-test; its known-good completion is ``"    return 1\\n"``."""


async def self_test(sandbox: Sandbox, limits: Limits = DEFAULT_LIMITS) -> None:
    """Score a known-good rollout once in ``sandbox`` under ``limits``.

    So a broken sandbox stops a batch (or keeps a service unready) at once.

    Raises:
        SandboxSetupFailed: with the reason, and a hint when the limits look too small
            to start Python, if the known-good rollout does not pass.
    """
    judgement = await AssertJudge().judge(SELF_TEST_TASK, "    return 1\n", sandbox, limits)
    if judgement.verdict is Verdict.PASSED:
        return
    run = judgement.run
    too_small = (
        judgement.verdict in (Verdict.TIMEOUT, Verdict.MEMORY_EXCEEDED)
        or (judgement.error is not None and judgement.error.type == "MemoryError")
        or (run is not None and run.status in (Status.TIME_LIMIT, Status.MEMORY_LIMIT))
        or (run is not None and b"MemoryError" in run.stderr)
    )
    hint = (
        f"; the limits ({limits.wall_time_s:g} s, "
        f"{limits.memory_bytes / 2**20:g} MiB) may be too small to start Python: "
        "raise them (--timeout / --memory on the command line)"
        if too_small
        else ""
    )
    raise SandboxSetupFailed(
        f"the {sandbox.name} sandbox failed its self-test with a known-good "
        f"program ({judgement.verdict.value}): {judgement.message}{hint}"
    )


async def self_test_beside(
    sandbox: Sandbox, batch: PausableSandbox, limits: Limits = DEFAULT_LIMITS
) -> None:
    """The self-test in ``sandbox`` while the batch's runs go through ``batch``.

    ``batch`` wraps the same sandbox (or shares its host): the self-test runs beside
    the batch's first rollouts. Those are the model's programs, and one can take the
    CPU (spinning processes in sessions of their own, each scheduled as a group) until
    the self-test misses a tight time limit. So a self-test that fails while any run
    of the batch overlapped it is not believed: it runs again alone
    (:meth:`PausableSandbox.alone`: new runs held, those in flight finished), and
    only that verdict counts. A self-test that fails alone fails at once.

    Raises:
        SandboxSetupFailed: the self-test failed with no run of the batch beside it
            (see :func:`self_test`).
        Error: the sandbox could not run it, alone.
    """
    overlapped = batch.in_flight > 0
    started = batch.started
    try:
        await self_test(sandbox, limits)
        return
    except Error as error:
        if not overlapped and batch.started == started and batch.in_flight == 0:
            raise
        log.warning(
            "self_test_retried_alone: it failed beside %d run(s) of the batch, "
            "so it runs again with the batch's runs held: %s",
            max(batch.in_flight, batch.started - started, 1),
            error,
        )
    async with batch.alone():
        await self_test(sandbox, limits)

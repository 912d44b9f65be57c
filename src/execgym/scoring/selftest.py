"""The sandbox self-test: one known-good rollout, run before a batch or a service starts.

A host where the sandbox cannot run the harness at all (the interpreter is not visible
inside, bwrap cannot mount, the limits are too small to start Python) would otherwise
mask every rollout of a batch as ``sandbox_error``.
"""

from __future__ import annotations

from execgym.errors import SandboxSetupFailed
from execgym.judges.assert_tests import AssertJudge
from execgym.judges.base import Verdict
from execgym.limits import DEFAULT_LIMITS, Limits
from execgym.sandbox.base import Sandbox, Status
from execgym.tasks.models import Task

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

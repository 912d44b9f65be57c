"""Call programs' entry points on inputs inside the sandbox and compare what they return.

Used to spot likely-equivalent mutants (same outputs as the reference on every input
the tests and the prompt use) and to check the prompt's examples against the reference.
"""

from __future__ import annotations

import json

from execgym import guest
from execgym.limits import Limits
from execgym.sandbox.base import Status
from execgym.validation.base import Context

CALL_TIME_S = 1.0
"""Seconds each call may take inside the probe before it counts as raising."""

MAX_PROBE_S = 60.0
"""Wall-clock cap on one probe run (a call that swallows its timeout cannot hold it)."""


def _runner() -> bytes:
    return guest.source("probe_runner").encode()


async def probe(
    ctx: Context, programs: list[str], entry_point: str, calls: list[str], limits: Limits
) -> list[list[str] | None] | None:
    """Outcomes of ``calls`` for each program (see :mod:`execgym.guest.probe_runner`).

    Returns:
        One list of outcomes per program (``None`` for a program that did not load),
        or ``None`` if the probe itself did not finish (time limit, crash).
    """
    job = {
        "programs": programs,
        "entry_point": entry_point,
        "calls": calls,
        "call_time_s": CALL_TIME_S,
    }
    seconds = min(MAX_PROBE_S, max(limits.wall_time_s, CALL_TIME_S * len(calls) * len(programs)))
    budget = Limits(wall_time_s=seconds, cpu_time_s=seconds, memory_bytes=limits.memory_bytes)
    run = await ctx.run_python(_runner(), json.dumps(job).encode("utf-8"), budget)
    if run.status is not Status.OK or run.exit_code != 0:
        return None
    try:
        lines = run.stdout.decode("utf-8", "replace").strip().splitlines()
        outcome = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return outcome if isinstance(outcome, list) and len(outcome) == len(programs) else None

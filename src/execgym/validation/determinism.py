"""Determinism check: repeated runs of the reference give the same verdict and output.

Each run is a fresh sandbox (or a fresh fork of the warm pool, whose ``random`` module
is reseeded per fork), so a test that depends on randomness or the clock shows up as
differing runs. The order of a ``set`` of strings depends on the hash seed, which fresh
sandboxes draw per run but warm-pool forks share with their zygote: validate with
``--no-warm-pool`` to catch that kind too.
"""

from __future__ import annotations

from typing import Any

from execgym.judges.base import Judgement
from execgym.validation.base import CheckResult, Outcome

NAME = "determinism"


def _signature(judgement: Judgement) -> dict[str, Any]:
    run = judgement.run
    return {
        "verdict": judgement.verdict.value,
        "stdout": run.stdout.decode("utf-8", "replace")[-500:] if run else "",
        "error": f"{judgement.error.type}: {judgement.error.message}"[:500]
        if judgement.error
        else "",
    }


def check(runs: list[Judgement]) -> CheckResult:
    """Fail if the runs differ in verdict, stdout or error; list the differing runs."""
    signatures = [_signature(j) for j in runs]
    if all(s == signatures[0] for s in signatures):
        return CheckResult(NAME, Outcome.PASS, details={"runs": len(runs)})
    fields = sorted({k for s in signatures for k in s if s[k] != signatures[0][k]})
    return CheckResult(
        NAME,
        Outcome.FAIL,
        f"flaky: {len(runs)} runs of the reference differ in {', '.join(fields)}",
        {"runs": signatures},
    )

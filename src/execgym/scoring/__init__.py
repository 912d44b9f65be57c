"""Scoring rollouts: one, a batch, the result as JSON, the sandbox self-test.

One rollout: :mod:`.core`; a batch: :mod:`.batch`; the result and its JSON form:
:mod:`.results`; the sandbox self-test: :mod:`.selftest`.

>>> scoring = Scoring(create_sandbox("bwrap"), Limits(wall_time_s=5))   # doctest: +SKIP
>>> result = await score_rollout(scoring, task, rollout)                 # doctest: +SKIP
>>> line = result.to_json(); ScoredRollout.from_json(line, "ok")        # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execgym.lazy_exports import lazy_package

if TYPE_CHECKING:
    from execgym.scoring.batch import REORDER_WINDOW_MIN, REORDER_WINDOW_PER_WORKER, Scorer
    from execgym.scoring.core import (
        DETERMINISTIC_REFUSALS,
        SANDBOX_ATTEMPTS,
        Scoring,
        score_rollout,
        score_unusable,
    )
    from execgym.scoring.results import TAIL_BYTES, ScoredRollout, invalid_result
    from execgym.scoring.selftest import self_test

__all__ = [
    "DETERMINISTIC_REFUSALS",
    "REORDER_WINDOW_MIN",
    "REORDER_WINDOW_PER_WORKER",
    "SANDBOX_ATTEMPTS",
    "TAIL_BYTES",
    "ScoredRollout",
    "Scorer",
    "Scoring",
    "invalid_result",
    "score_rollout",
    "score_unusable",
    "self_test",
]

# Exports load on first use: the self-test (.selftest) runs while a batch's judges and
# tasks still load, and needs none of .batch, .core or the loaders they import.
lazy_package(
    __name__,
    {
        "DETERMINISTIC_REFUSALS": "execgym.scoring.core",
        "REORDER_WINDOW_MIN": "execgym.scoring.batch",
        "REORDER_WINDOW_PER_WORKER": "execgym.scoring.batch",
        "SANDBOX_ATTEMPTS": "execgym.scoring.core",
        "TAIL_BYTES": "execgym.scoring.results",
        "ScoredRollout": "execgym.scoring.results",
        "Scorer": "execgym.scoring.batch",
        "Scoring": "execgym.scoring.core",
        "invalid_result": "execgym.scoring.results",
        "score_rollout": "execgym.scoring.core",
        "score_unusable": "execgym.scoring.core",
        "self_test": "execgym.scoring.selftest",
    },
)

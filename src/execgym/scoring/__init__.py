"""Scoring rollouts: one, a batch, the result as JSON, the sandbox self-test.

One rollout: :mod:`.core`; a batch: :mod:`.batch`; the result and its JSON form:
:mod:`.results`; the sandbox self-test: :mod:`.selftest`.

>>> scoring = Scoring(create_sandbox("bwrap"), Limits(wall_time_s=5))   # doctest: +SKIP
>>> result = await score_rollout(scoring, task, rollout)                 # doctest: +SKIP
>>> line = result.to_json(); ScoredRollout.from_json(line, "ok")        # doctest: +SKIP
"""

from __future__ import annotations

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

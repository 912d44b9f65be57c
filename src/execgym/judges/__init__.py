"""Judges run a rollout's code against a task's tests and return a verdict."""

from __future__ import annotations

from execgym.judges.assert_tests import AssertJudge
from execgym.judges.base import ErrorDetail, Judgement, Verdict

__all__ = ["AssertJudge", "ErrorDetail", "Judgement", "Verdict"]

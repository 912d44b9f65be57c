"""Rewards: turn a verdict into the number a trainer optimises."""

from __future__ import annotations

from execgym.judges.base import Verdict


def binary_reward(verdict: Verdict) -> float | None:
    """1.0 for ``passed``, 0.0 for any other verdict about the code, ``None`` if masked.

    ``sandbox_error`` and ``invalid`` say nothing about the code, so they get ``None``:
    the trainer must leave the sample out (mask it), never count it as 0.
    """
    if verdict.is_masked:
        return None
    return 1.0 if verdict is Verdict.PASSED else 0.0


__all__ = ["binary_reward"]

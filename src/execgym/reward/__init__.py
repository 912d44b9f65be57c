"""Rewards: turn a verdict into the number a trainer optimises.

:func:`binary_reward` is the plain pass/fail bit. :class:`RewardSpec` (from TOML or
Python, see :mod:`execgym.reward.spec`) combines weighted components (correctness,
static analysis, complexity, security, efficiency, coverage, penalties) into a score
in [0, 1] with a per-component :class:`RewardBreakdown`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execgym.judges.base import Verdict
from execgym.lazy_exports import lazy_package

if TYPE_CHECKING:
    from execgym.reward.combine import ComponentScore, RewardBreakdown, combine
    from execgym.reward.evaluate import evaluate
    from execgym.reward.spec import (
        PRESETS,
        Complexity,
        Correctness,
        Coverage,
        Efficiency,
        Penalty,
        RewardSpec,
        Security,
        Static,
        load_spec,
        parse_spec,
    )


def binary_reward(verdict: Verdict) -> float | None:
    """1.0 for ``passed``, 0.0 for any other verdict about the code, ``None`` if masked.

    ``sandbox_error`` and ``invalid`` say nothing about the code, so they get ``None``:
    the trainer must leave the sample out (mask it), never count it as 0. ``tampered``
    is 0.0, like every other verdict about the code.
    """
    if verdict.is_masked:
        return None
    return 1.0 if verdict is Verdict.PASSED else 0.0


__all__ = [
    "PRESETS",
    "Complexity",
    "ComponentScore",
    "Correctness",
    "Coverage",
    "Efficiency",
    "Penalty",
    "RewardBreakdown",
    "RewardSpec",
    "Security",
    "Static",
    "binary_reward",
    "combine",
    "evaluate",
    "load_spec",
    "parse_spec",
]

lazy_package(
    __name__,
    {
        "Complexity": "execgym.reward.spec",
        "ComponentScore": "execgym.reward.combine",
        "Correctness": "execgym.reward.spec",
        "Coverage": "execgym.reward.spec",
        "Efficiency": "execgym.reward.spec",
        "PRESETS": "execgym.reward.spec",
        "Penalty": "execgym.reward.spec",
        "RewardBreakdown": "execgym.reward.combine",
        "RewardSpec": "execgym.reward.spec",
        "Security": "execgym.reward.spec",
        "Static": "execgym.reward.spec",
        "combine": "execgym.reward.combine",
        "evaluate": "execgym.reward.evaluate",
        "load_spec": "execgym.reward.spec",
        "parse_spec": "execgym.reward.spec",
    },
)

"""Diagnostics of a rollout: leaks, hot spots and run-time growth (docs/diagnostics.md).

Opt-in per task (its ``diagnose`` field) or per run (``execgym score --diagnose
leaks,hotspots,complexity``); off by default. They run after the judge, in the same
sandbox and under the same limits, and only for rollouts that passed. Results carry a
``diagnostics`` object (:class:`Diagnostics`); the ``leak`` and ``scaling`` reward
components read it (:mod:`execgym.reward.spec`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execgym.lazy_exports import lazy_package

if TYPE_CHECKING:
    from execgym.diagnostics.engine import Diagnoser, parse_checks
    from execgym.diagnostics.fit import CLASSES, Fit, fit_class
    from execgym.diagnostics.leaks import DEFAULT_THRESHOLDS, Thresholds
    from execgym.judges.diagnosis import CHECKS, Diagnostics, Leak, Section, Where

__all__ = [
    "CHECKS",
    "CLASSES",
    "DEFAULT_THRESHOLDS",
    "Diagnoser",
    "Diagnostics",
    "Fit",
    "Leak",
    "Section",
    "Thresholds",
    "Where",
    "fit_class",
    "parse_checks",
]

lazy_package(
    __name__,
    {
        "CHECKS": "execgym.judges.diagnosis",
        "CLASSES": "execgym.diagnostics.fit",
        "DEFAULT_THRESHOLDS": "execgym.diagnostics.leaks",
        "Diagnoser": "execgym.diagnostics.engine",
        "Diagnostics": "execgym.judges.diagnosis",
        "Fit": "execgym.diagnostics.fit",
        "Leak": "execgym.judges.diagnosis",
        "Section": "execgym.judges.diagnosis",
        "Thresholds": "execgym.diagnostics.leaks",
        "Where": "execgym.judges.diagnosis",
        "fit_class": "execgym.diagnostics.fit",
        "parse_checks": "execgym.diagnostics.engine",
    },
)

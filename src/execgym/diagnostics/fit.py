"""Which complexity class a run time's growth with input size fits.

The method is big_O's (Pietro Berkes, https://github.com/pberkes/big_O,
``big_o/complexities.py`` and ``big_o/big_o.py``: ``infer_big_o_class``): for each
candidate class ``f`` (O(1), O(log n), O(n), O(n log n), O(n^2), O(n^3)), fit
``t = a + b * f(n)`` by least squares and keep the class with the smallest sum of
squared residuals. Here ``b`` must be positive (a class that only fits by falling with
``n`` is no fit: it scores as O(1)), the residuals are those of ``t / max(t)`` (so
figures in seconds and in microseconds fit alike), and a class whose residual is within
:data:`TIE_TOLERANCE` of a lower class's loses to it (the simpler class wins a near-tie:
measurement noise must not make O(n) read as O(n log n)). Only classes whose usual
log-log slope is near the measured one compete (:data:`SLOPE_WINDOW`): the slope (least
squares of ``log t`` on ``log n``, the empirical exponent, reported beside the class) is
robust where the residuals of a noisy top point are not (one slow measurement on a
loaded machine made a linear series read as O(n^3) in the residuals alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CLASSES: tuple[tuple[str, Callable[[float], float]], ...] = (
    ("O(1)", lambda n: 0.0),
    ("O(log n)", lambda n: math.log(n)),
    ("O(n)", lambda n: n),
    ("O(n log n)", lambda n: n * math.log(n)),
    ("O(n^2)", lambda n: n * n),
    ("O(n^3)", lambda n: n**3),
)
"""The candidate classes, simplest first (a class's rank is its index)."""

EXPONENTS = (0.0, 0.15, 1.0, 1.15, 2.0, 3.0)
"""Each class's log-log slope over the sizes one usually times (log n and n log n: about
0.15 above their power between n = 10^2 and 10^5)."""

SLOPE_WINDOW = 0.6
"""Only classes whose exponent is within this of the measured slope compete (the nearest
one if none is): the slope separates n from n^2 from n^3 robustly, and the residuals
decide between neighbours (n against n log n)."""

TIE_TOLERANCE = 0.15
"""A class must cut the residual of every simpler class by more than this share to win."""

MIN_POINTS = 3
"""Fewer measured sizes fit nothing."""


@dataclass(frozen=True, slots=True)
class Fit:
    """A fitted complexity class.

    Attributes:
        name: ``O(1)`` ... ``O(n^3)``.
        rank: Its index in :data:`CLASSES` (0 = constant).
        slope: The log-log slope: ``t ~ n^slope``.
        residuals: Sum of squared residuals per class (of ``t / max t``).
    """

    name: str
    rank: int
    slope: float
    residuals: dict[str, float]


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """``(a, b, residual)`` of ``y = a + b x``; ``b`` is 0 when ``x`` does not vary."""
    count = len(xs)
    mean_x, mean_y = sum(xs) / count, sum(ys) / count
    sxx = sum((x - mean_x) ** 2 for x in xs)
    b = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    a = mean_y - b * mean_x
    return a, b, sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))


def fit_class(sizes: Sequence[int], seconds: Sequence[float]) -> Fit:
    """The complexity class that best explains ``seconds`` measured at ``sizes``.

    Args:
        sizes: Input sizes ``n`` (positive, at least :data:`MIN_POINTS` distinct).
        seconds: The run time at each size (positive).

    Raises:
        ValueError: with fewer than :data:`MIN_POINTS` sizes, a size below 1, a
            non-positive time, or lists of different lengths.
    """
    if len(sizes) != len(seconds):
        raise ValueError("fit_class: sizes and seconds differ in length")
    if len(set(sizes)) < MIN_POINTS:
        raise ValueError(f"fit_class: give at least {MIN_POINTS} distinct sizes")
    if min(sizes) < 1 or min(seconds) <= 0:
        raise ValueError("fit_class: sizes must be >= 1 and times > 0")
    top = max(seconds)
    ys = [s / top for s in seconds]
    _, slope, _ = _least_squares([math.log(n) for n in sizes], [math.log(s) for s in seconds])
    allowed = [abs(e - slope) <= SLOPE_WINDOW for e in EXPONENTS]
    if not any(allowed):
        nearest = min(range(len(EXPONENTS)), key=lambda r: abs(EXPONENTS[r] - slope))
        allowed[nearest] = True
    residuals: dict[str, float] = {}
    best_rank, best = -1, math.inf
    for rank, (name, f) in enumerate(CLASSES):
        xs = [f(n) for n in sizes]
        _, b, residual = _least_squares(xs, ys)
        if rank > 0 and b <= 0:
            residual = _least_squares([0.0] * len(ys), ys)[2]  # no growth: as O(1)
        residuals[name] = residual
        if allowed[rank] and (best_rank < 0 or residual < best * (1 - TIE_TOLERANCE)):
            best_rank, best = rank, residual
    return Fit(CLASSES[best_rank][0], best_rank, slope, residuals)

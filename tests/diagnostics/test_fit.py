"""The complexity fit on exact and noisy run times of known classes."""

from __future__ import annotations

import math
import random

import pytest

from execgym.diagnostics.fit import CLASSES, fit_class

SIZES = [1000, 2000, 4000, 8000, 16000]


@pytest.mark.parametrize(("name", "f"), CLASSES[1:], ids=[c[0] for c in CLASSES[1:]])
def test_exact_times_fit_their_class(name: str, f) -> None:
    seconds = [1e-9 * f(n) * (1 + 1e-3 * (i % 2)) for i, n in enumerate(SIZES)]
    assert fit_class(SIZES, seconds).name == name


def test_flat_times_are_constant() -> None:
    assert fit_class(SIZES, [0.002, 0.0021, 0.0019, 0.002, 0.00205]).name == "O(1)"


def test_noise_does_not_turn_linear_into_n_log_n_or_quadratic() -> None:
    rng = random.Random(7)  # noqa: S311 - noise for a fit, not a secret
    for _ in range(50):
        seconds = [2e-8 * n * rng.uniform(0.9, 1.1) for n in SIZES]
        fit = fit_class(SIZES, seconds)
        assert fit.name in ("O(n)", "O(n log n)"), fit
        assert 0.8 < fit.slope < 1.2


def test_noisy_quadratic_is_quadratic() -> None:
    rng = random.Random(3)  # noqa: S311 - noise for a fit, not a secret
    for _ in range(50):
        seconds = [1e-9 * n * n * rng.uniform(0.85, 1.15) for n in SIZES]
        assert fit_class(SIZES, seconds).name == "O(n^2)"


def test_slope_is_the_exponent() -> None:
    fit = fit_class(SIZES, [n**3 * 1e-12 for n in SIZES])
    assert math.isclose(fit.slope, 3.0, rel_tol=1e-6)
    assert fit.rank == 5


@pytest.mark.parametrize(
    ("sizes", "seconds"),
    [
        ([1, 2], [1.0, 2.0]),
        ([1, 1, 1], [1.0, 2.0, 3.0]),
        ([0, 1, 2], [1.0, 1, 1]),
        ([1, 2, 3], [1.0, 0, 1]),
    ],
)
def test_bad_input_is_refused(sizes: list[int], seconds: list[float]) -> None:
    with pytest.raises(ValueError, match="fit_class"):
        fit_class(sizes, seconds)

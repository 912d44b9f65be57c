r"""Compare a program's output with the expected output (pure functions, no I/O).

The modes are those of :class:`execgym.tasks.models.Comparison`:

- ``tokens`` (default): whitespace-separated tokens must match one for one, so trailing
  spaces, ``\r\n`` line ends and trailing blank lines never matter, but inner spaces
  are never deleted: ``"1 23"`` is not ``"1 2 3"``.
- ``exact``: the texts are equal.
- ``lines``: line by line, each line's trailing whitespace and the trailing blank lines
  ignored.
- ``unordered_lines``: as ``lines``, in any order (a multiset of lines).

``case_insensitive`` folds case first. With ``float_abs_tol`` or ``float_rel_tol`` set,
two tokens that both read as decimal numbers match when they are that close (either
tolerance accepting is enough); every other token is still compared as text. Without a
tolerance numbers are text (``"0.50"`` is not ``"0.5"``). Tolerances apply in the
``tokens`` and ``lines`` modes; ``unordered_lines`` compares lines as text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from execgym.tasks.models import Comparison

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.I)
_SHOWN = 60


@dataclass(frozen=True, slots=True)
class Outcome:
    """Whether an output matched, and where it first differed if not."""

    matched: bool
    reason: str = ""


MATCHED = Outcome(True)


def compare_output(expected: str, actual: str, comparison: Comparison) -> Outcome:
    """Compare ``actual`` output with ``expected`` under ``comparison``.

    Returns:
        :data:`MATCHED`, or an :class:`Outcome` whose ``reason`` says where they differ.
    """
    if comparison.case_insensitive:
        expected, actual = expected.casefold(), actual.casefold()
    if comparison.mode == "exact":
        return MATCHED if expected == actual else _differ_at(expected, actual)
    if comparison.mode == "tokens":
        return _compare_tokens(expected.split(), actual.split(), comparison, "")
    expected_lines, actual_lines = _lines(expected), _lines(actual)
    if comparison.mode == "unordered_lines":
        missing = Counter(expected_lines) - Counter(actual_lines)
        extra = Counter(actual_lines) - Counter(expected_lines)
        if not missing and not extra:
            return MATCHED
        if missing:
            return Outcome(False, f"expected line {_show(next(iter(missing)))} is missing")
        return Outcome(False, f"unexpected line {_show(next(iter(extra)))}")
    return _compare_lines(expected_lines, actual_lines, comparison)


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _compare_lines(expected: list[str], actual: list[str], comparison: Comparison) -> Outcome:
    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        if _has_tolerance(comparison):
            outcome = _compare_tokens(want.split(), got.split(), comparison, f"line {number}: ")
            if not outcome.matched:
                return outcome
        elif want != got:
            return Outcome(False, f"line {number}: expected {_show(want)}, got {_show(got)}")
    if len(expected) != len(actual):
        return Outcome(False, f"expected {len(expected)} lines, got {len(actual)}")
    return MATCHED


def _compare_tokens(
    expected: list[str], actual: list[str], comparison: Comparison, where: str
) -> Outcome:
    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        if not tokens_match(want, got, comparison):
            return Outcome(
                False, f"{where}token {number}: expected {_show(want)}, got {_show(got)}"
            )
    if len(expected) != len(actual):
        longer, what = (actual, "extra") if len(actual) > len(expected) else (expected, "missing")
        first = _show(longer[min(len(expected), len(actual))])
        counts = f"expected {len(expected)} tokens, got {len(actual)}"
        return Outcome(False, f"{where}{counts} (first {what}: {first})")
    return MATCHED


def tokens_match(expected: str, actual: str, comparison: Comparison) -> bool:
    """Whether two tokens match: as text, or as numbers within the tolerance if set."""
    if expected == actual:
        return True
    if not _has_tolerance(comparison):
        return False
    if not (_NUMBER.fullmatch(expected) and _NUMBER.fullmatch(actual)):
        return False
    return numbers_close(float(expected), float(actual), comparison)


def numbers_close(expected: float, actual: float, comparison: Comparison) -> bool:
    """Whether ``actual`` is within the comparison's tolerance of ``expected``.

    NaN matches only NaN and an infinity only the same infinity; with no tolerance
    set, only equal numbers match.
    """
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    difference = abs(expected - actual)
    if comparison.float_abs_tol is not None and difference <= comparison.float_abs_tol:
        return True
    rel = comparison.float_rel_tol
    return (rel is not None and difference <= rel * abs(expected)) or difference == 0


def _has_tolerance(comparison: Comparison) -> bool:
    return comparison.float_abs_tol is not None or comparison.float_rel_tol is not None


def _differ_at(expected: str, actual: str) -> Outcome:
    index = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
        min(len(expected), len(actual)),
    )
    return Outcome(
        False,
        f"outputs differ at character {index}: expected {_show(expected[index:])}, "
        f"got {_show(actual[index:])}",
    )


def _show(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def values_match(expected: object, actual: object, comparison: Comparison) -> bool:
    """Deep comparison of two plain JSON values (function-call results).

    Booleans are not numbers (``True`` is not ``1``); an int and a float are compared as
    numbers, floats within the comparison's tolerance (exactly without one); lists
    element by element; dicts by the same keys; strings exactly. Anything but plain
    JSON data never matches.
    """
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        if isinstance(expected, int) and isinstance(actual, int):
            return expected == actual
        return numbers_close(float(expected), float(actual), comparison)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            values_match(e, a, comparison) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            values_match(expected[key], actual[key], comparison) for key in expected
        )
    if expected is None or isinstance(expected, str):
        return type(expected) is type(actual) and expected == actual
    return False

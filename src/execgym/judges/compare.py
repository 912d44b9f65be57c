r"""Compare a program's output with the expected output (pure functions, no I/O).

This module is the one place where the rules of output comparison live. They follow
the judges contest programmers trust, and each rule names its source:

- testlib: ``testlib.h`` (``isBlanks``, ``doubleCompare``) and the standard checkers
  ``checkers/wcmp.cpp`` (tokens), ``ncmp.cpp`` (integers, compared exactly as
  ``long long``) and ``rcmp*.cpp`` (doubles within a tolerance), in
  github.com/MikeMirzayanov/testlib at commit 1e4e8a24c79c (v0.9.45);
- Kattis problemtools: ``support/default_validator/default_validator.cc`` (tokens split
  by C ``isspace``; ``case_sensitive``; ``float_absolute_tolerance`` /
  ``float_relative_tolerance``, either accepting), in github.com/Kattis/problemtools at
  commit a185fe9741dd.

The rules:

1. **Byte-order marks.** A U+FEFF at the start of the expected or the actual output is
   dropped before anything else (an editor that saved the expected output with a BOM
   must not fail every solution; a program may print one too). Both judges read bytes
   and never see one as part of a token only because their test data is BOM-free.
2. **Whitespace is ASCII only**: space, ``\t``, ``\n``, ``\r``, ``\v``, ``\f`` (C
   ``isspace`` in the C locale, as the Kattis validator; testlib's ``isBlanks`` is the
   first four). Unicode separators (U+00A0, U+3000, U+001F...) are part of a token, so
   ``"1\u00a02"`` is one token and is not ``"1 2"``. Python's ``str.split()`` would
   split on them; this module never calls it without an argument.
3. **Modes** (:class:`execgym.tasks.models.Comparison`):

   - ``tokens`` (default): tokens must match one for one, so trailing spaces, ``\r\n``
     line ends and trailing blank lines never matter, but inner spaces are never
     deleted: ``"1 23"`` is not ``"1 2 3"`` (testlib ``wcmp``, Kattis default).
   - ``exact``: the texts are equal (after rule 1).
   - ``lines``: line by line (split on ``\n``), each line's trailing ASCII whitespace
     and the trailing blank lines ignored.
   - ``unordered_lines``: as ``lines``, in any order (a multiset of lines).

4. **Case.** ``case_insensitive`` folds ASCII letters only (Kattis ``strcasecmp`` in
   the C locale): ``"YES"`` matches ``"yes"``, but no Unicode case folding
   (``"ß"`` is not ``"ss"``).
5. **Numbers are ASCII.** A token is a number only in ASCII syntax:
   ``[+-]?(digits[.digits] | .digits)([eE][+-]?digits)?`` or ``inf``/``infinity``/``nan``
   (any case). ``"\u0661\u0660"`` (Arabic-Indic digits) and ``"\uff11\uff10"`` (fullwidth)
   are text, never 10, although Python's ``float()`` and ``int()`` read them.
6. **Tolerance.** Without ``float_abs_tol`` or ``float_rel_tol`` every token is compared
   as text (``"0.50"`` is not ``"0.5"``). With one set (``tokens`` and ``lines`` modes):

   - two **integer** tokens (``[+-]?digits``) are compared exactly, by value, never as
     floats (testlib ``ncmp``): ``999999999999999999`` is not
     ``1000000000000000000`` whatever the tolerance; ``007`` is ``7``, ``-0`` is ``0``;
   - two number tokens of which one is not an integer are compared as IEEE doubles:
     they match when ``|a - e| <= float_abs_tol`` or ``|a - e| <= float_rel_tol * |e|``
     (Kattis: either tolerance accepting is enough); NaN matches only NaN and an
     infinity only the same infinity (testlib ``doubleCompare``);
   - any other pair is compared as text.

   ``unordered_lines`` compares lines as text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from execgym.tasks.models import Comparison

ASCII_WHITESPACE = " \t\n\r\v\f"
"""The characters that separate tokens (C ``isspace`` in the C locale); see rule 2."""

BOM = "\ufeff"
"""The byte-order mark dropped from the start of both outputs; see rule 1."""

_SEPARATORS = re.compile(f"[{re.escape(ASCII_WHITESPACE)}]+")
_NUMBER = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
    re.IGNORECASE | re.ASCII,
)
_INTEGER = re.compile(r"([+-]?)0*([0-9]+)", re.ASCII)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_SHOWN = 60


@dataclass(frozen=True, slots=True)
class Outcome:
    """Whether an output matched, and where it first differed if not."""

    matched: bool
    reason: str = ""


MATCHED = Outcome(True)


def split_tokens(text: str) -> list[str]:
    r"""``text``'s tokens: the runs between ASCII whitespace (rule 2), no empty ones.

    >>> split_tokens("1 2\r\n3\u00a04")
    ['1', '2', '3\xa04']
    """
    return [token for token in _SEPARATORS.split(text) if token]


def compare_output(expected: str, actual: str, comparison: Comparison) -> Outcome:
    """Compare ``actual`` output with ``expected`` under ``comparison`` (module rules).

    Returns:
        :data:`MATCHED`, or an :class:`Outcome` whose ``reason`` says where they differ.
    """
    expected, actual = expected.removeprefix(BOM), actual.removeprefix(BOM)
    if comparison.case_insensitive:
        expected, actual = expected.translate(_ASCII_LOWER), actual.translate(_ASCII_LOWER)
    if comparison.mode == "exact":
        return MATCHED if expected == actual else _differ_at(expected, actual)
    if comparison.mode == "tokens":
        return _compare_tokens(split_tokens(expected), split_tokens(actual), comparison, "")
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
    lines = [line.rstrip(ASCII_WHITESPACE) for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _compare_lines(expected: list[str], actual: list[str], comparison: Comparison) -> Outcome:
    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        if _has_tolerance(comparison):
            outcome = _compare_tokens(
                split_tokens(want), split_tokens(got), comparison, f"line {number}: "
            )
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
    """Whether two tokens match: as text, or as numbers if a tolerance is set (rule 6)."""
    if expected == actual:
        return True
    if not _has_tolerance(comparison):
        return False
    if not (_NUMBER.fullmatch(expected) and _NUMBER.fullmatch(actual)):
        return False
    want, got = _INTEGER.fullmatch(expected), _INTEGER.fullmatch(actual)
    if want is not None and got is not None:
        return _integer_value(want) == _integer_value(got)
    return numbers_close(float(expected), float(actual), comparison)


def _integer_value(match: re.Match[str]) -> tuple[str, str]:
    """An ASCII integer token's exact value as (sign, digits without leading zeros).

    Compared as text, so integers of any length are exact and cost linear time (``int``
    of a long string is quadratic and refused past 4300 digits).
    """
    sign, digits = match.group(1), match.group(2)
    return ("" if digits == "0" or sign == "+" else sign, digits)


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
        try:
            return numbers_close(float(expected), float(actual), comparison)
        except OverflowError:  # an int beyond any float (10**400): no finite float is close
            return False
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

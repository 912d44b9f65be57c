"""Output comparison: each mode, tolerances, and the edge cases judges get wrong."""

from __future__ import annotations

import pytest

from execgym.judges.compare import compare_output, numbers_close, tokens_match
from execgym.tasks.models import Comparison

TOKENS = Comparison()
EXACT = Comparison(mode="exact")
LINES = Comparison(mode="lines")
UNORDERED = Comparison(mode="unordered_lines")
FLOAT = Comparison(float_abs_tol=1e-6, float_rel_tol=1e-6)


@pytest.mark.parametrize(
    ("expected", "actual", "comparison", "matched"),
    [
        ("1 2 3 \n4", "1 2 3\n4\n", TOKENS, True),  # BC-03: trailing spaces, final newline
        ("1 2 3", "1 23", TOKENS, False),  # inner spaces never deleted
        ("1 2 3", "1 2 3 4", TOKENS, False),
        ("a\r\nb\r\n", "a\nb", TOKENS, True),
        ("", "", TOKENS, True),
        ("", "\n\n  \n", TOKENS, True),
        ("", "x", TOKENS, False),
        ("x", "", TOKENS, False),
        ("Yes", "YES", TOKENS, False),
        ("Yes", "YES", Comparison(case_insensitive=True), True),
        ("0.333333333333", "0.333333", TOKENS, False),  # no declared tolerance: exact
        ("0.333333333333", "0.333333", FLOAT, True),  # BC-01
        ("0.333333333333", "0.3333", FLOAT, False),
        ("1000000", "1000000.5", FLOAT, True),  # relative
        ("2", "2.0000000", FLOAT, True),
        ("abc 1.0", "abd 1.0", FLOAT, False),  # other tokens still exact
        ("1e3", "1000", FLOAT, True),
        ("nan", "NaN", FLOAT, True),
        ("inf", "1e308", FLOAT, False),
        ("1_000", "1000", FLOAT, False),  # not a decimal number token
        ("a b\n", "a b", EXACT, False),
        ("a b\n", "a b\n", EXACT, True),
        ("a b  \nc\n\n", "a b\nc", LINES, True),
        ("a b\nc", "a  b\nc", LINES, False),
        ("a\nb\nc", "a\nb", LINES, False),
        ("1.0 x\n", "1.0000001 x", Comparison(mode="lines", float_abs_tol=1e-6), True),
        ("a\nb\nb", "b\na\nb\n", UNORDERED, True),
        ("a\nb\nb", "b\na\na", UNORDERED, False),
        ("A\nb", "B\na", Comparison(mode="unordered_lines", case_insensitive=True), True),
        ("ok", "ok\n\ufffd", TOKENS, False),  # BC-04a: undecodable bytes are not dropped
        ("café", "café\n", TOKENS, True),
    ],
)
def test_compare(expected: str, actual: str, comparison: Comparison, matched: bool) -> None:
    outcome = compare_output(expected, actual, comparison)
    assert outcome.matched is matched
    assert bool(outcome.reason) is not matched


def test_reasons_say_where() -> None:
    assert compare_output("1 2 3", "1 2 4", TOKENS).reason == "token 3: expected '3', got '4'"
    assert compare_output("1 2", "1 2 3", TOKENS).reason == (
        "expected 2 tokens, got 3 (first extra: '3')"
    )
    assert compare_output("1 2", "1", TOKENS).reason.endswith("(first missing: '2')")
    assert "line 2" in compare_output("a\nb", "a\nc", LINES).reason
    assert "character 1" in compare_output("ab", "ac", EXACT).reason
    assert "missing" in compare_output("a\nb", "a\nc", UNORDERED).reason
    long = compare_output("x" * 500, "y", EXACT).reason
    assert len(long) < 200


def test_numbers_close_edges() -> None:
    assert numbers_close(0.0, 0.0, Comparison())
    assert not numbers_close(0.0, 1e-12, Comparison())
    assert numbers_close(0.0, 1e-7, Comparison(float_abs_tol=1e-6))
    assert not numbers_close(0.0, 1e-7, Comparison(float_rel_tol=1e-6))  # rel of 0 is 0
    assert numbers_close(float("-inf"), float("-inf"), FLOAT)
    assert not numbers_close(float("inf"), float("-inf"), FLOAT)
    assert tokens_match("-.5", "-0.5000001", FLOAT)


# Issue 17: the rules of testlib (github.com/MikeMirzayanov/testlib 1e4e8a24c79c:
# testlib.h isBlanks/doubleCompare, checkers/wcmp.cpp, ncmp.cpp) and of Kattis
# problemtools (a185fe9741dd: support/default_validator/default_validator.cc). Each case
# below was accepted (or rejected) wrongly by the comparison before them.
LINES_FLOAT = Comparison(mode="lines", float_abs_tol=1e-6)
CASELESS = Comparison(case_insensitive=True)


@pytest.mark.parametrize("comparison", [TOKENS, FLOAT, LINES, LINES_FLOAT])
@pytest.mark.parametrize(
    "actual",
    [
        "1\u00a02",  # no-break space
        "1\x1f2",  # unit separator: str.split() splits on it
        "1\u30002",  # ideographic space
        "1\u20282",  # line separator
        "1\x852",  # next line (C1)
        "1\u20032",  # em space
    ],
)
def test_only_ascii_whitespace_separates_tokens(actual: str, comparison: Comparison) -> None:
    assert not compare_output("1 2", actual, comparison).matched
    assert not compare_output("1 2\n", actual + "\n", comparison).matched


@pytest.mark.parametrize("separator", [" ", "\t", "\r\n", "\n", "\v", "\f", "  \t "])
def test_ascii_whitespace_separates_tokens(separator: str) -> None:
    assert compare_output("1 2", f"1{separator}2", TOKENS).matched
    assert compare_output("1 2", f"1{separator}2", FLOAT).matched


@pytest.mark.parametrize(
    "actual",
    [
        "\u0661\u0660",  # Arabic-Indic 10
        "\uff11\uff10",  # fullwidth 10
        "\u0967\u0966",  # Devanagari 10
        "\U0001d7e3\U0001d7e2",  # mathematical bold 10
        "1\u0660",  # mixed
        "\uff11\uff10.0",
    ],
)
@pytest.mark.parametrize("comparison", [TOKENS, FLOAT, LINES_FLOAT])
def test_a_number_is_ascii_only(actual: str, comparison: Comparison) -> None:
    assert float(actual) == 10  # what Python's float() reads, and the old code accepted
    assert not compare_output("10", actual, comparison).matched
    assert not compare_output("10.0", actual, comparison).matched


@pytest.mark.parametrize(
    ("expected", "actual", "matched"),
    [
        ("1000000000000000000", "999999999999999999", False),
        ("999999999999999999", "1000000000000000000", False),
        ("9007199254740993", "9007199254740992", False),  # 2**53 + 1 vs 2**53
        ("-9223372036854775808", "-9223372036854775807", False),
        ("1" + "0" * 5000, "1" + "0" * 4999 + "1", False),  # past int()'s digit limit
        ("1" + "0" * 5000, "1" + "0" * 5000, True),
        ("7", "007", True),
        ("0", "-0", True),
        ("5", "+5", True),
        ("-5", "5", False),
    ],
)
@pytest.mark.parametrize(
    "comparison",
    [FLOAT, Comparison(float_rel_tol=0.5), Comparison(float_abs_tol=10.0), LINES_FLOAT],
)
def test_integers_are_compared_exactly_even_with_a_tolerance(
    expected: str, actual: str, matched: bool, comparison: Comparison
) -> None:
    assert compare_output(expected, actual, comparison).matched is matched


def test_an_integer_and_a_float_are_compared_as_doubles() -> None:
    assert compare_output("3", "3.0000001", FLOAT).matched
    assert not compare_output("3", "3.1", FLOAT).matched
    assert compare_output("1000000000000000000", "1e18", FLOAT).matched


@pytest.mark.parametrize("comparison", [TOKENS, EXACT, LINES, UNORDERED, FLOAT, CASELESS])
@pytest.mark.parametrize(
    ("expected", "actual"),
    [("\ufeff3\n", "3\n"), ("3\n", "\ufeff3\n"), ("\ufeff3\n", "\ufeff3\n")],
)
def test_a_byte_order_mark_is_dropped_from_both_sides(
    expected: str, actual: str, comparison: Comparison
) -> None:
    assert compare_output(expected, actual, comparison).matched


def test_a_byte_order_mark_inside_the_output_is_text() -> None:
    assert not compare_output("3 4", "3 \ufeff4", TOKENS).matched


@pytest.mark.parametrize(
    ("expected", "actual", "matched"),
    [("YES", "yes", True), ("Straße", "STRASSE", False), ("ǅ", "ǆ", False), ("ﬀ", "FF", False)],
)
def test_case_insensitive_folds_ascii_letters_only(
    expected: str, actual: str, matched: bool
) -> None:
    assert compare_output(expected, actual, CASELESS).matched is matched


def test_function_call_integers_are_exact_under_a_tolerance() -> None:
    from execgym.judges.compare import values_match

    assert not values_match(10**18, 10**18 - 1, FLOAT)
    assert values_match([10**18, 0.5], [10**18, 0.5000001], FLOAT)

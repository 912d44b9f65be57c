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

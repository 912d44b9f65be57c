"""Splitting ``check`` into cases for partial credit."""

from __future__ import annotations

from execgym.judges._cases import split_cases


def test_each_asserting_statement_becomes_a_case() -> None:
    tests = (
        "def check(candidate):\n"
        "    x = 3\n"
        "    assert candidate(x) == 4\n"
        "    for y in [1, 2]:\n"
        "        assert candidate(y) > 0\n"
    )
    split = split_cases(tests)
    assert split.count("__execgym_case__(") == 2
    assert "x = 3" in split
    calls: list[str] = []
    namespace: dict[str, object] = {"__execgym_case__": lambda case: calls.append(case.__name__)}
    exec(compile(split, "tests", "exec"), namespace)
    namespace["check"](lambda v: v + 1)  # type: ignore[operator]
    assert calls == ["__execgym_case_2", "__execgym_case_3"]


def test_tests_that_cannot_be_split_safely_are_left_whole() -> None:
    shared = "def check(candidate):\n    assert (r := candidate(1))\n    assert r == 2\n"
    assert split_cases(shared) == shared
    assert split_cases("assert 1 == 1\n") == "assert 1 == 1\n"
    assert split_cases("def check(:\n") == "def check(:\n"

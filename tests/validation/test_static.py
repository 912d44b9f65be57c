"""The checks that only parse code (mutant generation, duplicates, examples): no sandbox."""

from __future__ import annotations

import pytest

from execgym.tasks import Task
from execgym.validation import Thresholds
from execgym.validation.description import examples
from execgym.validation.duplicates import check_all
from execgym.validation.mutants import make_mutants
from execgym.validation.schema import check as schema_check
from execgym.validation.trivial import candidates
from tests.validation import planted

SOURCE = '''def f(xs, k):
    """Doc."""
    total = 0
    for x in xs:
        if x < k and x != 0:
            total += x * 2
        else:
            break
    return max(total, 1)
'''


def changes(source: str, cap: int = 100) -> set[tuple[str, str]]:
    mutants, _ = make_mutants(source, lambda line: True, cap)
    return {(m.operator, m.description) for m in mutants}


def test_every_operator_family_is_generated() -> None:
    found = changes(SOURCE)
    for expected in [
        ("arithmetic", "Add -> Sub"),
        ("arithmetic", "Mult -> Div"),
        ("comparison", "Lt -> GtE"),
        ("comparison", "NotEq -> Eq"),
        ("boundary", "Lt -> LtE"),
        ("boolean", "And -> Or"),
        ("constant", "0 -> 1"),
        ("constant", "2 -> 3"),
        ("statement", "drop Assign"),
        ("return", "return -> return None"),
        ("builtin", "max -> min"),
        ("builtin", "Break -> Continue"),
    ]:
        assert expected in found
    assert not any("Doc" in description for _, description in found)  # docstring untouched


def test_mutants_change_only_lines_in_scope() -> None:
    mutants, _ = make_mutants(SOURCE, lambda line: line == 9, 100)
    assert {m.line for m in mutants} == {9}
    assert {m.description for m in mutants} >= {"max -> min", "return -> return None"}


def test_duplicate_and_identical_mutants_are_dropped() -> None:
    # dropping either of two identical statements gives one program, kept once
    source = "def f(x):\n    x = x + 0\n    x = x + 0\n    return x\n"
    mutants, dropped = make_mutants(source, lambda line: True, 100)
    drops = [m for m in mutants if m.operator == "statement" and m.description == "drop Assign"]
    assert len(drops) == 1
    assert dropped >= 1
    sources = [m.source for m in mutants]
    assert len(sources) == len(set(sources))
    assert source not in sources
    assert make_mutants("def f():\n    pass\n", lambda line: True, 100) == ([], 0)


def test_cap_is_round_robin_over_families() -> None:
    mutants, _ = make_mutants(SOURCE, lambda line: True, 6)
    assert len(mutants) == 6
    assert len({m.operator for m in mutants}) == 6


def test_duplicates_and_near_duplicates() -> None:
    reworded = planted.GOOD.model_copy(
        update={"task_id": "near", "prompt": planted.GOOD.prompt.replace("Return", "Give")}
    )
    found = check_all([planted.GOOD, planted.DUPLICATE, reworded, planted.WEAK_TESTS], 0.9)
    assert found["bad/duplicate-of-good"].reason.startswith("duplicate of good/abs_diff")
    assert found["near"].reason.startswith("near-duplicate of good/abs_diff")
    assert found[planted.WEAK_TESTS.task_id].reason == ""


def test_examples_in_several_forms() -> None:
    task = Task(
        task_id="t",
        prompt=(
            "def g(a):\n"
            '    """\n    >>> g(1)\n    2\n    g(3) ➞ 4\n    g([1, 2]) == [2, 3]\n'
            '    other(1) -> 5\n    g(a) => False\n    >>> g(2)\n    >>> g(9)\n    10\n    """\n'
        ),
        tests="def check(c):\n    pass\n",
        entry_point="g",
    )
    assert [(e.call, e.expected) for e in examples(task)] == [
        ("candidate(1)", "2"),
        ("candidate(3)", "4"),
        ("candidate([1, 2])", "[2, 3]"),
        ("candidate(9)", "10"),
    ]


def test_trivial_candidates_use_the_first_argument() -> None:
    found = candidates(planted.GOOD)
    assert found["return first argument"] == "    return a\n"
    assert found["prompt alone"] == ""


def test_schema_failures_name_the_problem() -> None:
    broken = planted.GOOD.model_copy(update={"tests": "def check(c:\n", "reference": None})
    reason = schema_check(broken).reason
    assert "no reference solution" in reason
    assert "tests does not parse" in reason


@pytest.mark.parametrize("bad", [{"min_mutation_score": 1.5}, {"runs": 1}, {"max_mutants": 0}])
def test_thresholds_are_checked(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Thresholds(**bad)


def test_survivor_classes_ignore_calls_that_timed_out() -> None:
    from execgym.validation.mutation import _compare

    late = "!raise CallTimeout"
    assert _compare(["1", "2"], ["1", "2"]) == "same_on_known_inputs"
    assert _compare(["1", "2"], ["1", "3"]) == "differs_on_known_inputs"
    assert _compare(["1", "2"], ["1", late]) == "same_on_known_inputs"
    assert _compare([late], ["5"]) == "unknown"
    assert _compare(["1"], None) == "unknown"

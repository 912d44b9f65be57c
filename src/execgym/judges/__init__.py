"""Judges run a rollout's code against a task's tests and return a verdict.

One judge per test kind: :class:`AssertJudge` (Python assert tests),
:class:`NativeAssertJudge` (assert tests in other languages), :class:`StdioJudge`,
:class:`FunctionCallJudge`, :class:`PytestJudge` and :class:`UnittestJudge`
(BigCodeBench's one-module unittest tests). :class:`Builder` compiles sources
(with its cache) for those that need it. :func:`harness_program` is the marshalled
script of a harness, for the episodes' grader, which runs the pytest harness too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execgym.lazy_exports import lazy_package

if TYPE_CHECKING:
    from execgym.judges._programs import harness_program
    from execgym.judges.assert_native import NativeAssertJudge
    from execgym.judges.assert_tests import AssertJudge
    from execgym.judges.base import ErrorDetail, Judgement, Verdict
    from execgym.judges.compare import compare_output, values_match
    from execgym.judges.compile import Builder
    from execgym.judges.function_call import FunctionCallJudge
    from execgym.judges.languages import Program
    from execgym.judges.pytest_tests import PytestJudge
    from execgym.judges.stdio import StdioJudge
    from execgym.judges.unittest_tests import UnittestJudge

__all__ = [
    "AssertJudge",
    "Builder",
    "ErrorDetail",
    "FunctionCallJudge",
    "Judgement",
    "NativeAssertJudge",
    "Program",
    "PytestJudge",
    "StdioJudge",
    "UnittestJudge",
    "Verdict",
    "compare_output",
    "harness_program",
    "values_match",
]

lazy_package(
    __name__,
    {
        "AssertJudge": "execgym.judges.assert_tests",
        "Builder": "execgym.judges.compile",
        "ErrorDetail": "execgym.judges.base",
        "FunctionCallJudge": "execgym.judges.function_call",
        "Judgement": "execgym.judges.base",
        "NativeAssertJudge": "execgym.judges.assert_native",
        "Program": "execgym.judges.languages",
        "PytestJudge": "execgym.judges.pytest_tests",
        "StdioJudge": "execgym.judges.stdio",
        "UnittestJudge": "execgym.judges.unittest_tests",
        "Verdict": "execgym.judges.base",
        "compare_output": "execgym.judges.compare",
        "harness_program": "execgym.judges._programs",
        "values_match": "execgym.judges.compare",
    },
)

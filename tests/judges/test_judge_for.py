"""Which judge a task goes to: ``JudgeSet.judge_for`` (it replaced the scorer's
``if`` chain on ``task.kind``), and what a reward specification makes of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from execgym import Task
from execgym.judges import (
    AssertJudge,
    Builder,
    FunctionCallJudge,
    NativeAssertJudge,
    PytestJudge,
    StdioJudge,
    UnittestJudge,
)
from execgym.judges.base import Judge, JudgeSet, judge_for
from execgym.reward import load_spec, parse_spec
from execgym.reward.coverage import CoverageJudge
from execgym.scoring import Scoring
from execgym.testing import FakeSandbox

TESTS = "def check(candidate):\n    assert candidate() == 1\n"
PYTEST = "from solution import f\n\ndef test_f():\n    assert f() == 1\n"
TASKS = {
    AssertJudge: Task(task_id="t/py", prompt="def f():\n", entry_point="f", tests=TESTS),
    NativeAssertJudge: Task(
        task_id="t/cpp", prompt="int f() {\n", tests="int main() { return f() != 1; }\n",
        language="cpp",
    ),
    StdioJudge: Task.model_validate(
        {"task_id": "t/io", "kind": "stdio", "test_cases": [{"input": "1\n", "output": "1\n"}]}
    ),
    FunctionCallJudge: Task.model_validate(
        {"task_id": "t/call", "kind": "function_call", "fn_name": "f",
         "test_cases": [{"args": [], "expected": 1}]}
    ),
    PytestJudge: Task.model_validate(
        {"task_id": "t/pytest", "kind": "pytest",
         "test_files": {"test_f.py": PYTEST}}
    ),
    UnittestJudge: Task(
        task_id="t/unittest", kind="unittest",
        tests="import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_f(self):\n        self.assertEqual(f(), 1)\n",
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", TASKS, ids=lambda kind: kind.__name__)
def test_each_task_goes_to_the_judge_of_its_kind(kind: type, tmp_path: Path) -> None:
    task = TASKS[kind]
    judges = JudgeSet(Builder(tmp_path))
    judge = judges.judge_for(task)
    assert type(judge) is kind
    assert isinstance(judge, Judge)
    assert judges.judge_for(task) is judge  # made once, kept
    assert type(judge_for(task, builder=Builder(tmp_path))) is kind


def test_a_reward_spec_decides_what_the_python_assert_judge_measures(tmp_path: Path) -> None:
    task = TASKS[AssertJudge]
    plain = Scoring(FakeSandbox([]), builder=Builder(tmp_path)).judges.judge_for(task)
    assert isinstance(plain, AssertJudge)
    assert (plain.cases, plain.measure_reference) == (False, False)
    quality = load_spec("quality")
    measured = Scoring(FakeSandbox([]), reward=quality, builder=Builder(tmp_path))
    judge = measured.judges.judge_for(task)
    assert isinstance(judge, AssertJudge)
    assert (judge.cases, judge.measure_reference) == (quality.needs_cases, quality.needs_reference)
    assert quality.needs_reference  # the quality preset measures efficiency
    coverage = parse_spec({"name": "tests", "components": [{"kind": "coverage", "weight": 1}]})
    assert coverage.needs_coverage
    tests = Scoring(FakeSandbox([]), reward=coverage, builder=Builder(tmp_path))
    assert isinstance(tests.judges.judge_for(task), CoverageJudge)
    assert isinstance(tests.judges.judge_for(TASKS[StdioJudge]), StdioJudge)  # others as ever

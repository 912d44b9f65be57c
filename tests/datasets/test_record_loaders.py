"""APPS/TACO, CodeContests and LiveCodeBench records (hand-written, in the published shapes)."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import pytest

from execgym import Limits, Scorer
from execgym.errors import TaskError
from execgym.judges.base import Verdict
from execgym.tasks import LineProblem, Rollout, RolloutLine
from execgym.tasks.datasets.livecodebench import decode_test_cases, task_from_livecodebench
from execgym.tasks.datasets.stdio_records import (
    read_records_file,
    task_from_apps,
    task_from_codecontests,
)

pytestmark = pytest.mark.bwrap

APPS_STDIO = {
    "problem_id": 7,
    "question": "Read two integers and print their sum.",
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
    "input_output": json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", ["7"]]}),
    "starter_code": "",
}
TACO_CALL = {
    "question": "Return the doubled list.",
    "solutions": json.dumps(["def double(xs):\n    return [2 * x for x in xs]\n"]),
    "input_output": json.dumps(
        {"fn_name": "double", "inputs": [[[1, 2]], [[]]], "outputs": [[2, 4], []]}
    ),
    "starter_code": "def double(xs):\n",
}
CODECONTESTS = {
    "name": "1000_A. Max",
    "description": "Print the largest of n numbers.",
    "public_tests": {"input": ["3\n1 5 2\n"], "output": ["5\n"]},
    "private_tests": {"input": ["1\n-4\n"], "output": ["-4\n"]},
    "generated_tests": {"input": ["2\n9 9\n"], "output": ["9\n"]},
    "solutions": {
        "language": [2, 3],
        "solution": [
            '#include <cstdio>\nint main(){int n,x,m=-1e9;scanf("%d",&n);'
            'while(n--){scanf("%d",&x);if(x>m)m=x;}printf("%d\\n",m);}\n',
            "input()\nprint(max(map(int, input().split())))\n",
        ],
    },
    "time_limit": {"seconds": 2, "nanos": 500000000},
    "memory_limit_bytes": 268435456,
}


def _compressed(cases: list[dict[str, str]]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


LCB_FUNCTIONAL = {
    "question_id": "3242",
    "question_content": "Count pairs.",
    "starter_code": "class Solution:\n    def countPairs(self, nums: List[int], k: int) -> int:\n",
    "public_test_cases": json.dumps(
        [{"input": "[1, 2, 3]\n3", "output": "1", "testtype": "functional"}]
    ),
    "private_test_cases": _compressed(
        [{"input": "[3, 3]\n6", "output": "1", "testtype": "functional"}]
    ),
    "metadata": json.dumps({"func_name": "countPairs"}),
}
LCB_SOLUTION = (
    "from typing import List\nclass Solution:\n    def countPairs(self, nums, k):\n"
    "        return sum(1 for i in range(len(nums)) for j in range(i + 1, len(nums))"
    " if nums[i] + nums[j] == k)\n"
)
LCB_STDIN = {
    "question_id": "abc300_a",
    "question_content": "Echo.",
    "public_test_cases": json.dumps([{"input": "hi\n", "output": "hi\n", "testtype": "stdin"}]),
    "private_test_cases": "",
}


def test_apps_stdio_record() -> None:
    task = task_from_apps(APPS_STDIO, "apps/7")
    assert task.kind == "stdio"
    assert [(c.input, c.output) for c in task.test_cases] == [("1 2\n", "3\n"), ("10 -3\n", "7\n")]


def test_taco_call_record() -> None:
    task = task_from_apps(TACO_CALL, "taco/0")
    assert (task.kind, task.fn_name) == ("function_call", "double")
    assert [(c.args, c.expected) for c in task.test_cases] == [([[1, 2]], [2, 4]), ([[]], [])]


def test_codecontests_record() -> None:
    task = task_from_codecontests(CODECONTESTS)
    assert (task.task_id, task.language, len(task.test_cases)) == ("1000_A. Max", "python", 3)
    assert task.case_time_limit_s == 2.5
    assert task.limits is not None
    assert task.limits.memory_bytes == 268435456


def test_livecodebench_records() -> None:
    functional = task_from_livecodebench(LCB_FUNCTIONAL)
    assert (functional.kind, functional.fn_name) == ("function_call", "countPairs")
    assert [(c.args, c.expected) for c in functional.test_cases] == [
        ([[1, 2, 3], 3], 1),
        ([[3, 3], 6], 1),
    ]
    stdin = task_from_livecodebench(LCB_STDIN)
    assert (stdin.kind, stdin.task_id, len(stdin.test_cases)) == ("stdio", "abc300_a", 1)


def test_livecodebench_refuses_pickles_with_code() -> None:
    hostile = base64.b64encode(zlib.compress(pickle.dumps(print))).decode()
    with pytest.raises(TaskError, match="refused"):
        decode_test_cases(hostile)


def test_bad_records_are_problems_not_crashes(tmp_path) -> None:
    path = tmp_path / "apps.jsonl"
    bad = {"problem_id": 9, "input_output": json.dumps({"inputs": ["1"], "outputs": []})}
    path.write_text("\n".join(json.dumps(r) for r in (APPS_STDIO, bad, TACO_CALL)) + "\n")
    items = list(read_records_file(path, task_from_apps, "apps"))
    assert [i[0] if isinstance(i, tuple) else "problem" for i in items] == [
        "apps/7",
        "problem",
        "apps/2",
    ]
    problem = items[1]
    assert isinstance(problem, LineProblem)
    assert "different numbers" in problem.message


async def test_references_of_each_record_shape_pass(bwrap_sandbox) -> None:
    tasks = {
        t.task_id: t
        for t in (
            task_from_apps(APPS_STDIO, "apps/7"),
            task_from_apps(TACO_CALL, "taco/0"),
            task_from_codecontests(CODECONTESTS),
            task_from_livecodebench(LCB_STDIN),
            task_from_livecodebench(LCB_FUNCTIONAL),
        )
    }
    completions = {t: tasks[t].reference for t in tasks}
    completions["abc300_a"] = "print(input())\n"
    completions["3242"] = LCB_SOLUTION
    items = [
        RolloutLine(i, Rollout(task_id=t, completion=c or ""))
        for i, (t, c) in enumerate(completions.items())
    ]
    wrong = Rollout(task_id="apps/7", completion="print(0)\n")
    items.append(RolloutLine(len(items), wrong))
    results = await Scorer(tasks, bwrap_sandbox, Limits(wall_time_s=10)).score(items, workers=2)
    assert [r.verdict for r in results] == [Verdict.PASSED] * 5 + [Verdict.FAILED]

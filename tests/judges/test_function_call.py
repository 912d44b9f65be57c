"""The function-call judge: results come back as JSON and are compared outside."""

from __future__ import annotations

import pytest

from execgym.judges import Verdict
from execgym.judges.compare import values_match
from execgym.judges.function_call import FunctionCallJudge
from execgym.limits import Limits, MiB
from execgym.tasks import Task
from execgym.tasks.models import Comparison
from execgym.toolchains import find_toolchain
from tests.conftest import require

FAST = Limits(wall_time_s=3, memory_bytes=256 * MiB)


def call_task(fn_name: str, cases, **fields) -> Task:
    return Task.model_validate(
        {
            "task_id": "t/call",
            "kind": "function_call",
            "fn_name": fn_name,
            "test_cases": [{"args": a, "expected": e} for a, e in cases],
            **fields,
        }
    )


ADD = call_task("add", [([1, 2], 3), ([2, 2], 4), ([0, 0], 0)])


async def judge(sandbox, completion: str, task: Task = ADD, limits: Limits = FAST):
    return await FunctionCallJudge().judge(task, completion, sandbox, limits)


@pytest.mark.parametrize(
    ("completion", "verdict", "passed"),
    [
        ("def add(a, b):\n    return a + b\n", Verdict.PASSED, 3),
        ("def add(a, b):\n    return a * b\n", Verdict.FAILED, 2),
        ("def add(a, b):\n    return 1 / a + b\n", Verdict.FAILED, 1),  # 3.0, 2.5, ZeroDiv
        ("def add(a, b):\n    return str(a + b)\n", Verdict.FAILED, 0),
        ("def add(a, b):\n    return True if a + b == 1 else a + b\n", Verdict.PASSED, 3),
        ("def add(a, b):\n    raise KeyError(a)\n", Verdict.ERROR, 0),
        ("def add(a, b):\n    return {1, 2}\n", Verdict.ERROR, 0),  # a set is not JSON
        ("def add(a, b)\n    return 1\n", Verdict.ERROR, 0),  # syntax error
        ("def plus(a, b):\n    return a + b\n", Verdict.ERROR, 0),  # no entry point
        ("def add(a, b):\n    while True: pass\n", Verdict.TIMEOUT, 0),
    ],
)
async def test_verdicts(bwrap_sandbox, completion: str, verdict: Verdict, passed: int) -> None:
    judgement = await judge(bwrap_sandbox, completion, limits=Limits(wall_time_s=1))
    assert judgement.verdict is verdict, judgement.message
    if verdict in (Verdict.PASSED, Verdict.FAILED):
        assert judgement.details["passed"] == passed
        assert judgement.details["total"] == 3


async def test_wrong_answers_show_both_values(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return [a, b]\n")
    assert judgement.message == "case 1: wrong answer: expected 3, got [1, 2]"
    assert judgement.error is not None
    assert judgement.error.type == "WrongAnswer"


async def test_a_missing_entry_point_says_so(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "x = 1\n")
    assert judgement.verdict is Verdict.ERROR
    assert judgement.error is not None
    assert judgement.error.type == "EntryPointNotFound"
    assert "add" in judgement.message


async def test_prompt_imports_reach_a_whole_function_completion(bwrap_sandbox) -> None:
    task = call_task(
        "total", [([[1, 2]], 3)], prompt="from typing import List\n\ndef total(xs: List[int]):\n"
    )
    judgement = await judge(
        bwrap_sandbox, "def total(xs: List[int]) -> int:\n    return sum(xs)\n", task
    )
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_per_case_time_limit_and_stop_on_first_failure(bwrap_sandbox) -> None:
    slow = "import time\ndef add(a, b):\n    time.sleep(a)\n    return a + b\n"
    task = ADD.model_copy(update={"case_time_limit_s": 0.5})
    judgement = await judge(bwrap_sandbox, slow, task)
    assert [c["verdict"] for c in judgement.details["cases"]] == ["timeout", "timeout", "passed"]
    stop = ADD.model_copy(update={"stop_on_first_failure": True})
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return 3\n", stop)
    assert [c["verdict"] for c in judgement.details["cases"]] == ["passed", "failed"]


async def test_each_case_gets_fresh_arguments_and_a_fresh_solution(bwrap_sandbox) -> None:
    task = call_task("Solution.push", [([[1]], [1, 0]), ([[1]], [1, 0])])
    completion = (
        "class Solution:\n    calls = []\n    def __init__(self):\n        self.n = 0\n"
        "    def push(self, xs):\n        xs.append(self.n)\n"
        "        self.n += 1\n        return xs\n"
    )
    assert (await judge(bwrap_sandbox, completion, task)).verdict is Verdict.PASSED


async def test_float_tolerance_and_nan(bwrap_sandbox) -> None:
    task = call_task("f", [([], [0.1 + 0.2, {"k": 1.0}])], comparison={"float_abs_tol": 1e-9})
    assert (await judge(bwrap_sandbox, "def f():\n    return (0.3, {'k': 1})\n", task)).verdict is (
        Verdict.PASSED
    )
    nan = call_task("f", [([], float("nan"))])
    assert (await judge(bwrap_sandbox, "def f():\n    return float('nan')\n", nan)).verdict is (
        Verdict.PASSED
    )


@pytest.mark.parametrize(
    ("expected", "actual", "matched"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (1, True, False),
        ([1, [2, 3]], [1, [2, 3]], True),
        ([1, 2], [1, 2, 3], False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("", None, False),
        (None, None, True),
        (0.1 + 0.2, 0.3, False),
    ],
)
def test_values_match(expected, actual, matched: bool) -> None:
    assert values_match(expected, actual, Comparison()) is matched


def js_task(fn_name: str, cases, **fields) -> Task:
    return call_task(fn_name, cases, language="javascript", **fields)


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("function add(a, b) { return a + b; }\n", Verdict.PASSED),
        ("var add = function(a, b) { return a + b; };\n", Verdict.PASSED),
        ("const add = (a, b) => a * b;\n", Verdict.FAILED),
        ("function add(a, b) { return String(a + b); }\n", Verdict.FAILED),
        ("function add(a, b) { throw new RangeError('no'); }\n", Verdict.ERROR),
        ("function add(a, b) { return new Map(); }\n", Verdict.ERROR),  # not plain data
        ("function add(a, b) { return {valueOf() { return 3; }}; }\n", Verdict.ERROR),
        ("function plus(a, b) { return a + b; }\n", Verdict.ERROR),  # no entry point
        ("function add(a, b) {\n", Verdict.ERROR),  # syntax error
        ("function add(a, b) { while (true) {} }\n", Verdict.TIMEOUT),
    ],
)
async def test_javascript_functions(bwrap_sandbox, completion: str, verdict: Verdict) -> None:
    require(find_toolchain("javascript") is not None, "node")
    task = js_task("add", [([1, 2], 3), ([2, 2], 4), ([0, 0], 0)])
    judgement = await judge(bwrap_sandbox, completion, task, Limits(wall_time_s=2))
    assert judgement.verdict is verdict, judgement.message


async def test_javascript_class_solution_and_nested_results(bwrap_sandbox) -> None:
    require(find_toolchain("javascript") is not None, "node")
    task = js_task("pairs", [([[3, 1]], {"sorted": [1, 3], "n": 2})])
    completion = (
        "class Solution {\n  pairs(xs) {\n"
        "    return {sorted: [...xs].sort((a, b) => a - b), n: xs.length};\n  }\n}\n"
    )
    judgement = await judge(bwrap_sandbox, completion, task)
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_javascript_cannot_reread_the_job_for_the_nonce(bwrap_sandbox) -> None:
    require(find_toolchain("javascript") is not None, "node")
    completion = (
        "const fs = require('fs');\nlet job = '';\n"
        "try { job = fs.readFileSync('/proc/self/fd/0', 'utf8'); } catch (e) { job = ''; }\n"
        "const nonce = job.split(' ')[1];\n"
        'if (nonce) { fs.writeSync(3, nonce + \'\\n{"status": "ok", "results": '
        '[{"value": 3}, {"value": 4}, {"value": 0}]}\\n\'); process.exit(0); }\n'
        "function add(a, b) { return 0; }\n"
    )
    judgement = await judge(
        bwrap_sandbox, completion, js_task("add", [([1, 2], 3), ([2, 2], 4), ([0, 0], 0)])
    )
    assert judgement.verdict is not Verdict.PASSED

"""Field cases of kind wrong-verdict, harness-bug and reward-hacking for the new judges.

Each test names its case in ``/work/shared/cases/field-cases.md`` and asserts the
verdict and reward the case gives (AC = ``passed`` 1.0, WA = ``failed`` 0.0, RE =
``error`` 0.0).
"""

from __future__ import annotations

import time

import pytest

from execgym.judges import Verdict
from execgym.judges.function_call import FunctionCallJudge
from execgym.judges.pytest_tests import PytestJudge
from execgym.judges.stdio import StdioJudge
from execgym.limits import Limits, MiB
from execgym.reward import binary_reward
from execgym.tasks import Task

LIMITS = Limits(wall_time_s=5, memory_bytes=256 * MiB)


def stdio_task(cases, **fields) -> Task:
    return Task.model_validate(
        {
            "task_id": "bc/stdio",
            "kind": "stdio",
            "test_cases": [{"input": i, "output": o} for i, o in cases],
            **fields,
        }
    )


async def stdio(sandbox, builder, task: Task, completion: str):
    judgement = await StdioJudge(builder).judge(task, completion, sandbox, LIMITS)
    return judgement.verdict, binary_reward(judgement.verdict)


async def call(sandbox, task: Task, completion: str):
    judgement = await FunctionCallJudge().judge(task, completion, sandbox, LIMITS)
    return judgement


BC01 = "a, b = map(int, input().split())\nprint(f'{a / b:.6f}')\n"


async def test_bc01_float_output_within_the_declared_tolerance_is_ac(
    bwrap_sandbox, builder
) -> None:
    task = stdio_task([("1 3", "0.333333333333")], comparison={"float_abs_tol": 1e-6})
    assert await stdio(bwrap_sandbox, builder, task, BC01) == (Verdict.PASSED, 1.0)
    relative = stdio_task([("1 3", "0.333333333333")], comparison={"float_rel_tol": 1e-6})
    assert await stdio(bwrap_sandbox, builder, relative, BC01) == (Verdict.PASSED, 1.0)


async def test_bc01_without_a_declared_tolerance_numbers_match_exactly(
    bwrap_sandbox, builder
) -> None:
    task = stdio_task([("1 3", "0.333333333333")])
    assert await stdio(bwrap_sandbox, builder, task, BC01) == (Verdict.FAILED, 0.0)
    words = stdio_task([("1 3", "x 0.333333333333")], comparison={"float_abs_tol": 1e-6})
    completion = "print('y', 0.333333)"  # other tokens are still compared exactly
    assert await stdio(bwrap_sandbox, builder, words, completion) == (Verdict.FAILED, 0.0)


async def test_bc03_trailing_whitespace_and_newlines_are_ignored(bwrap_sandbox, builder) -> None:
    task = stdio_task([("", "1 2 3 \n4")])
    assert await stdio(bwrap_sandbox, builder, task, 'print("1 2 3"); print(4)') == (
        Verdict.PASSED,
        1.0,
    )
    assert await stdio(bwrap_sandbox, builder, task, 'print("1 23"); print(4)') == (
        Verdict.FAILED,
        0.0,
    )


async def test_bc03_a_strict_mode_exists_where_spacing_matters(bwrap_sandbox, builder) -> None:
    task = stdio_task([("", "1 2 3 \n4")], comparison={"mode": "exact"})
    assert await stdio(bwrap_sandbox, builder, task, 'print("1 2 3"); print(4)') == (
        Verdict.FAILED,
        0.0,
    )
    assert await stdio(bwrap_sandbox, builder, task, 'print("1 2 3 \\n4", end="")') == (
        Verdict.PASSED,
        1.0,
    )


async def test_bc04a_undecodable_bytes_are_wa_and_the_judge_stays_up(
    bwrap_sandbox, builder
) -> None:
    task = stdio_task([("", "ok")])
    completion = 'import sys; sys.stdout.buffer.write(b"ok\\n\\xff")'
    judgement = await StdioJudge(builder).judge(task, completion, bwrap_sandbox, LIMITS)
    assert (judgement.verdict, binary_reward(judgement.verdict)) == (Verdict.FAILED, 0.0)
    assert "\ufffd" in judgement.message


async def test_bc04b_non_ascii_output_passes_on_a_c_locale_host(
    bwrap_sandbox, builder, monkeypatch
) -> None:
    monkeypatch.setenv("LANG", "C")
    monkeypatch.setenv("LC_ALL", "C")
    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    task = stdio_task([("", "café")])
    assert await stdio(bwrap_sandbox, builder, task, 'print("café")') == (Verdict.PASSED, 1.0)


@pytest.mark.parametrize(
    "completion",
    [
        "import sys\nt = sys.stdin.buffer.read().split()\nprint(sum(map(int, t[1:])))\n",
        pytest.param(
            "import sys\nn = int(input())\nrest = sys.stdin.buffer.read()\n"
            "assert rest == b'1 2 3\\n', rest\nprint(sum(map(int, rest.split())))\n",
            marks=pytest.mark.xfail(
                strict=True,
                reason="RE (AssertionError: b''): CPython's text stdin reads ahead of the "
                "line input() returns, on a real pipe or file as on any contest judge, so "
                "sys.stdin.buffer.read() afterwards sees nothing; making it see '1 2 3' "
                "would need a 1-byte text read-ahead, far too slow for large inputs",
            ),
        ),
        'import sys\nsys.stdout.buffer.write(b"6\\n")\n',
    ],
    ids=["buffer-read", "text-then-buffer", "buffer-write"],
)
async def test_bc06_real_stdin_and_stdout_with_buffer(bwrap_sandbox, builder, completion) -> None:
    task = stdio_task([("3\n1 2 3\n", "6")])
    assert await stdio(bwrap_sandbox, builder, task, completion) == (Verdict.PASSED, 1.0)


async def test_bc07_readlines_sees_eof_at_once(bwrap_sandbox, builder) -> None:
    task = stdio_task([("a\nb\n", "2")])
    started = time.monotonic()
    completion = "import sys; print(len(sys.stdin.readlines()))"
    assert await stdio(bwrap_sandbox, builder, task, completion) == (Verdict.PASSED, 1.0)
    assert time.monotonic() - started < 3


async def test_bc07_no_input_is_eof_and_re_not_a_hang(bwrap_sandbox, builder) -> None:
    task = stdio_task([("", "x")])
    judgement = await StdioJudge(builder).judge(task, "x = input()", bwrap_sandbox, LIMITS)
    assert (judgement.verdict, binary_reward(judgement.verdict)) == (Verdict.ERROR, 0.0)
    assert "EOFError" in judgement.message


ADD = Task.model_validate(
    {
        "task_id": "bc/add",
        "kind": "function_call",
        "fn_name": "add",
        "test_cases": [{"args": [2, 3], "expected": 5}],
    }
)


async def test_bc31_an_always_equal_object_does_not_pass(bwrap_sandbox) -> None:
    cheat = (
        "class _Any:\n    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        "def add(a, b): return _Any()\n"
    )
    judgement = await call(bwrap_sandbox, ADD, cheat)
    assert binary_reward(judgement.verdict) == 0.0
    assert judgement.verdict is Verdict.TAMPERED
    assert "in place of plain data" in judgement.message
    int_cheat = (
        "class _Int(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n"
        "def add(a, b): return _Int(0)\n"
    )
    assert binary_reward((await call(bwrap_sandbox, ADD, int_cheat)).verdict) == 0.0


async def test_bc36_hard_coded_visible_tests_fail_the_hidden_one(bwrap_sandbox) -> None:
    task = Task.model_validate(
        {
            "task_id": "bc/square",
            "kind": "function_call",
            "fn_name": "f",
            "test_cases": [
                {"args": [2], "expected": 4},
                {"args": [3], "expected": 9},
                {"args": [5], "expected": 25},
            ],
        }
    )
    judgement = await call(bwrap_sandbox, task, "def f(x):\n    return {2: 4, 3: 9}[x]\n")
    assert binary_reward(judgement.verdict) == 0.0
    assert judgement.details["fraction_passed"] == pytest.approx(2 / 3)


async def test_bc38_a_raising_function_with_empty_expected_output_is_re(bwrap_sandbox) -> None:
    task = Task.model_validate(
        {
            "task_id": "bc/38",
            "kind": "function_call",
            "fn_name": "solve",
            "test_cases": [{"args": [1], "expected": ""}],
        }
    )
    judgement = await call(bwrap_sandbox, task, 'def solve(x):\n    raise ValueError("no")\n')
    assert (judgement.verdict, binary_reward(judgement.verdict)) == (Verdict.ERROR, 0.0)
    assert "ValueError: no" in judgement.message


REMOVE_ZEROS = Task.model_validate(
    {
        "task_id": "bc/43",
        "kind": "function_call",
        "fn_name": "removeZeros",
        "test_cases": [{"args": ["1200"], "expected": "12"}],
    }
)


async def test_bc43_a_class_solution_method_is_found(bwrap_sandbox) -> None:
    answer = (
        "class Solution:\n    def removeZeros(self, s: str) -> str:\n        return s.rstrip('0')\n"
    )
    judgement = await call(bwrap_sandbox, REMOVE_ZEROS, answer)
    assert (judgement.verdict, binary_reward(judgement.verdict)) == (Verdict.PASSED, 1.0)


async def test_bc43_no_such_function_or_method_is_entry_point_not_found(bwrap_sandbox) -> None:
    answer = "class Solution:\n    def strip(self, s):\n        return s\n"
    judgement = await call(bwrap_sandbox, REMOVE_ZEROS, answer)
    assert binary_reward(judgement.verdict) == 0.0
    assert judgement.error is not None
    assert judgement.error.type == "EntryPointNotFound"
    assert "removeZeros" in judgement.message


async def test_bc35_patching_unittest_assertions_does_not_pass(bwrap_sandbox) -> None:
    tests = (
        "import unittest\nfrom solution import add\n\n"
        "class T(unittest.TestCase):\n    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    )
    task = Task.model_validate(
        {"task_id": "bc/35", "kind": "pytest", "test_files": {"test_add.py": tests}}
    )
    cheat = (
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
        "def add(a, b): return 0\n"
    )
    judgement = await PytestJudge().judge(task, cheat, bwrap_sandbox, Limits(wall_time_s=10))
    assert (judgement.verdict, binary_reward(judgement.verdict)) == (Verdict.FAILED, 0.0)
    honest = await PytestJudge().judge(
        task, "def add(a, b): return a + b\n", bwrap_sandbox, Limits(wall_time_s=10)
    )
    assert honest.verdict is Verdict.PASSED

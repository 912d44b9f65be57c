"""The stdin/stdout judge on a real sandbox: per-case verdicts, fractions, checkers."""

from __future__ import annotations

import pytest

from execgym.judges import Verdict
from execgym.judges.stdio import StdioJudge
from execgym.limits import Limits, MiB
from execgym.sandbox import WarmPoolSandbox
from execgym.tasks import Task

FAST = Limits(wall_time_s=3, memory_bytes=256 * MiB)


def stdio_task(cases, **fields) -> Task:
    return Task.model_validate(
        {
            "task_id": "t/sum",
            "kind": "stdio",
            "test_cases": [{"input": i, "output": o} for i, o in cases],
            **fields,
        }
    )


SUM = stdio_task([("1 2\n", "3\n"), ("5 5\n", "10\n"), ("0 0\n", "0\n")])


async def judge(sandbox, builder, completion: str, task: Task = SUM, limits: Limits = FAST):
    return await StdioJudge(builder).judge(task, completion, sandbox, limits)


@pytest.mark.parametrize(
    ("completion", "verdict", "passed"),
    [
        ("a, b = map(int, input().split())\nprint(a + b)\n", Verdict.PASSED, 3),
        ("a, b = map(int, input().split())\nprint(a + b if a else 7)\n", Verdict.FAILED, 2),
        ("a, b = map(int, input().split())\nprint(a * b)\n", Verdict.FAILED, 1),
        ("a, b = map(int, input().split())\nprint(10 // a)\n", Verdict.FAILED, 0),
        ("raise ValueError('boom')\n", Verdict.ERROR, 0),
        ("while True: pass\n", Verdict.TIMEOUT, 0),
        ("while True: print('y' * 10000)\n", Verdict.OUTPUT_EXCEEDED, 0),
    ],
)
async def test_verdicts_and_fraction_passed(
    bwrap_sandbox, builder, completion: str, verdict: Verdict, passed: int
) -> None:
    limits = Limits(wall_time_s=1, memory_bytes=256 * MiB)
    judgement = await judge(bwrap_sandbox, builder, completion, limits=limits)
    assert judgement.verdict is verdict, judgement.message
    assert judgement.details["passed"] == passed
    assert judgement.details["total"] == 3
    assert judgement.details["fraction_passed"] == pytest.approx(passed / 3)
    assert len(judgement.details["cases"]) == 3
    assert (judgement.message == "") is (verdict is Verdict.PASSED)


async def test_the_first_failure_decides_and_says_which_case(bwrap_sandbox, builder) -> None:
    judgement = await judge(bwrap_sandbox, builder, "print(3)\n")
    assert judgement.verdict is Verdict.FAILED
    assert judgement.message.startswith("case 2: wrong answer: token 1: expected '10', got '3'")
    assert [c["verdict"] for c in judgement.details["cases"]] == ["passed", "failed", "failed"]
    assert judgement.error is not None
    assert judgement.error.type == "WrongAnswer"


async def test_stop_on_first_failure_runs_no_more_cases(bwrap_sandbox, builder) -> None:
    task = SUM.model_copy(update={"stop_on_first_failure": True})
    judgement = await judge(bwrap_sandbox, builder, "print(3)\n", task)
    assert judgement.verdict is Verdict.FAILED
    assert len(judgement.details["cases"]) == 2
    assert judgement.details["fraction_passed"] == pytest.approx(1 / 3)


async def test_case_time_limit_applies_to_each_run(bwrap_sandbox, builder) -> None:
    task = SUM.model_copy(update={"case_time_limit_s": 0.5})
    completion = "import time\na, b = map(int, input().split())\ntime.sleep(a)\nprint(a + b)\n"
    judgement = await judge(bwrap_sandbox, builder, completion, task)
    assert [c["verdict"] for c in judgement.details["cases"]] == ["timeout", "timeout", "passed"]
    assert judgement.verdict is Verdict.TIMEOUT


async def test_comparison_mode_comes_from_the_task(bwrap_sandbox, builder) -> None:
    task = stdio_task([("", "b\na\n")], comparison={"mode": "unordered_lines"})
    assert (await judge(bwrap_sandbox, builder, "print('a'); print('b')", task)).verdict is (
        Verdict.PASSED
    )
    strict = stdio_task([("", "a b")], comparison={"mode": "exact"})
    assert (await judge(bwrap_sandbox, builder, "print('a b')", strict)).verdict is Verdict.FAILED


CHECKER = """
import sys
given, expected, actual = (open(name).read() for name in sys.argv[1:4])
n = int(given)
a, b = map(int, actual.split())
sys.exit(0 if a + b == n and a >= 0 and b >= 0 else 1)
"""


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("n = int(input()); print(0, n)", Verdict.PASSED),
        ("n = int(input()); print(n // 2, n - n // 2)", Verdict.PASSED),
        ("n = int(input()); print(1, n)", Verdict.FAILED),
    ],
)
async def test_a_checker_accepts_any_right_answer(
    bwrap_sandbox, builder, completion: str, verdict: Verdict
) -> None:
    task = stdio_task([("7\n", "3 4\n"), ("10\n", "5 5\n")], checker={"source": CHECKER})
    judgement = await judge(bwrap_sandbox, builder, completion, task)
    assert judgement.verdict is verdict, judgement.message


async def test_a_compiled_checker_gets_the_three_files_as_arguments(bwrap_sandbox, builder) -> None:
    checker = (
        "#include <stdio.h>\nint main(int c, char **v) {\n"
        '  FILE *f = fopen(v[3], "r"); int x = 0; fscanf(f, "%d", &x); return x == 42 ? 0 : 1;\n}\n'
    )
    task = stdio_task([("", "anything")], checker={"language": "c", "source": checker})
    assert (await judge(bwrap_sandbox, builder, "print(42)", task)).verdict is Verdict.PASSED
    assert (await judge(bwrap_sandbox, builder, "print(41)", task)).verdict is Verdict.FAILED


async def test_a_broken_checker_is_masked_not_the_models_fault(bwrap_sandbox, builder) -> None:
    task = stdio_task([("", "1")], checker={"source": "raise RuntimeError('checker bug')"})
    judgement = await judge(bwrap_sandbox, builder, "print(1)", task)
    assert judgement.verdict is Verdict.INVALID  # masked: the task's own checker is broken
    assert "checker" in judgement.message
    broken = stdio_task([("", "1")], checker={"language": "c", "source": "int main( {"})
    judgement = await judge(bwrap_sandbox, builder, "print(1)", broken)
    assert judgement.verdict is Verdict.INVALID
    assert "checker is unusable (compile_error)" in judgement.message


async def test_python_cases_run_through_the_warm_pool(builder) -> None:
    async with WarmPoolSandbox() as pool:
        judgement = await judge(pool, builder, "a, b = map(int, input().split()); print(a + b)")
    assert judgement.verdict is Verdict.PASSED
    assert judgement.details["passed"] == 3

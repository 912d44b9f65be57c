"""A tasks file with a duplicated task_id, and the effective limits each result echoes.

Issue 17: a duplicated ``task_id`` kept the first definition with only a warning, and
the rollouts meant for the second were scored against the wrong tests. Decision: two
*different* definitions of one id are both left out, and every rollout of that id is
``invalid`` (masked) with a reason naming both lines and how to fix it; the rest of the
file is scored. An exact repeat is harmless and is ignored with a warning. The same
holds for ``POST /v1/score``.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from execgym.cli import main
from execgym.limits import GiB, MiB
from execgym.server import ServerSettings
from execgym.tasks import load_tasks
from execgym.testing import FakeSandbox, fake_result
from tests.conftest import ONE_TASK, write_jsonl
from tests.server.conftest import NO_TOOLS, serving

OTHER_TESTS = {**ONE_TASK, "tests": "def check(c):\n    assert c() == 2\n"}


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_different_definitions_of_one_task_id_are_both_left_out(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "tasks.jsonl",
        [ONE_TASK, {**ONE_TASK, "task_id": "t/2"}, OTHER_TESTS, {**ONE_TASK, "task_id": "t/3"}],
    )
    tasks, problems = load_tasks(path)
    assert sorted(tasks) == ["t/2", "t/3"]  # not t/1: which tests did a rollout mean?
    assert [(p.line_number, p.task_id) for p in problems] == [(1, "t/1"), (3, "t/1")]
    for problem in problems:
        assert "duplicate task_id 't/1': defined on lines 1 and 3" in problem.message
        assert "give each task its own task_id" in problem.message


def test_an_exact_repeat_is_ignored_with_a_warning(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "tasks.jsonl", [ONE_TASK, ONE_TASK, ONE_TASK])
    tasks, problems = load_tasks(path)
    assert list(tasks) == ["t/1"]
    assert [p.line_number for p in problems] == [2, 3]
    assert all("repeats line 1 exactly" in p.message for p in problems)
    assert all(p.task_id is None for p in problems)  # nothing is masked


def test_an_invalid_line_with_a_valid_ones_id_is_ambiguous_too(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "tasks.jsonl", [{"task_id": "t/1", "prompt": "x"}, ONE_TASK])
    tasks, problems = load_tasks(path)
    assert tasks == {}
    assert "defined on lines 1 and 2" in problems[0].message
    assert "also invalid" in problems[0].message


LIMITS_TASKS = [
    {**ONE_TASK, "reference": "    return 1\n"},
    {**ONE_TASK, "task_id": "t/own", "reference": "    return 1\n", "limits": {"wall_time_s": 2}},
    {
        "task_id": "t/c",
        "kind": "stdio",
        "language": "c",
        "case_time_limit_s": 1.5,
        "test_cases": [{"input": "2 3", "output": "5"}],
        "reference": '#include <stdio.h>\nint main(void) { int a, b; scanf("%d %d", &a, &b);'
        ' printf("%d\\n", a + b); }\n',
        "compile_limits": {"memory_bytes": 3 * GiB},
        "conventions": {"stack_bytes": 64 * MiB},
    },
    {
        "task_id": "t/py",
        "kind": "stdio",
        "test_cases": [{"input": "2 3", "output": "5"}],
        "reference": "print(sum(map(int, input().split())))\nexit()\n",
    },
]


def test_each_result_echoes_its_effective_limits(bwrap_sandbox, tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", LIMITS_TASKS)
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run(
        "score", str(tasks), "--solutions", "canonical", "-o", str(out),
        "--timeout", "4", "--memory", "300MiB", "--compile-cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert code == 0, stdout + stderr
    results = {r["task_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert {r["verdict"] for r in results.values()} == {"passed"}, results
    plain = results["t/1"]["limits"]
    assert plain["wall_time_s"] == 4
    assert plain["cpu_time_s"] == 4
    assert plain["memory_bytes"] == 300 * MiB
    assert plain["max_processes"] == 64
    assert plain["network"] == "none"
    assert "compile" not in plain
    assert "stack_bytes" not in plain
    assert results["t/own"]["limits"]["wall_time_s"] == 2  # the task's own override
    compiled = results["t/c"]["limits"]
    assert compiled["wall_time_s"] == 1.5  # each case's run
    assert compiled["case_time_limit_s"] == 1.5
    assert compiled["stack_bytes"] == 64 * MiB
    assert compiled["compile"]["memory_bytes"] == 3 * GiB
    assert compiled["compile"]["wall_time_s"] == 60
    assert results["t/py"]["limits"]["memory_bytes"] == 300 * MiB


def test_a_duplicated_task_id_masks_its_rollouts_and_scores_the_rest(
    bwrap_sandbox, tmp_path: Path
) -> None:
    tasks = write_jsonl(
        tmp_path / "tasks.jsonl", [ONE_TASK, {**ONE_TASK, "task_id": "t/2"}, OTHER_TESTS]
    )
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [
            {"task_id": "t/1", "completion": "    return 2\n"},  # right for line 3 only
            {"task_id": "t/2", "completion": "    return 1\n"},
        ],
    )
    out = tmp_path / "r.jsonl"
    code, stdout, stderr = run("score", str(tasks), str(rollouts), "-o", str(out))
    assert code == 0, stdout + stderr
    assert "duplicate task_id 't/1': defined on lines 1 and 3" in stderr
    results = [json.loads(line) for line in out.read_text().splitlines()]
    by_task = {r["task_id"]: r for r in results}
    assert by_task["t/1"]["verdict"] == "invalid"
    assert by_task["t/1"]["reward"] is None
    assert "defined on lines 1 and 3" in by_task["t/1"]["message"]
    assert by_task["t/2"]["verdict"] == "passed"


async def test_the_service_treats_duplicates_alike() -> None:
    sandbox = FakeSandbox([fake_result()])
    async with serving(settings=ServerSettings(), sandbox=sandbox, toolchains=NO_TOOLS) as client:
        body = {
            "tasks": [ONE_TASK, OTHER_TESTS],
            "rollouts": [{"task_id": "t/1", "completion": "    return 2\n"}],
        }
        job = (await client.post("/v1/score", json=body)).json()
    result = job["results"][0]
    assert result["verdict"] == "invalid", result
    assert result["reward"] is None
    assert "duplicate task_id 't/1'" in result["message"]


def test_effective_limits_follow_each_kinds_rule() -> None:
    from execgym.judges.effective import effective_limits
    from execgym.limits import Limits
    from execgym.tasks import Task

    base = Limits(wall_time_s=10, cpu_time_s=10, memory_bytes=512 * MiB)
    call = Task.model_validate(
        {
            "task_id": "t/call",
            "kind": "function_call",
            "fn_name": "f",
            "case_time_limit_s": 0.5,
            "test_cases": [{"args": [1], "expected": 1}] * 4,
        }
    )
    echoed = effective_limits(call, base)
    assert echoed["wall_time_s"] == 4.0  # 0.5 s per call x 4 + 2 s, FunctionCallJudge's rule
    assert echoed["case_time_limit_s"] == 0.5
    assert "compile" not in echoed
    unittest = Task.model_validate(
        {"task_id": "t/u", "kind": "unittest", "tests": "x", "limits": {"memory_bytes": GiB}}
    )
    assert effective_limits(unittest, base)["memory_bytes"] == GiB
    rust = Task.model_validate(
        {"task_id": "t/r", "kind": "assert", "language": "rust", "prompt": "", "tests": "x"}
    )
    echoed = effective_limits(rust, base)
    assert echoed["stack_bytes"] == 512 * MiB
    assert echoed["compile"]["memory_bytes"] == 2 * GiB
    java = Task.model_validate(
        {"task_id": "t/j", "kind": "stdio", "language": "java", "test_cases": [{"output": ""}]}
    )
    assert "stack_bytes" not in effective_limits(java, base)  # Java keeps its own -Xss

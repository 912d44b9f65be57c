"""The generic task model: old assert-style lines still load, each kind validates."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from execgym.limits import Limits
from execgym.tasks.models import FunctionCase, Rollout, StdioCase, Task
from execgym.tasks.schema import SCHEMA_FILES, render

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[2] / "src" / "execgym" / "data"  # shipped copies


def test_assert_task_lines_load_as_before() -> None:
    task = Task.model_validate(
        {"task_id": "t", "prompt": "def f():\n", "tests": "def check(c): pass", "entry_point": "f"}
    )
    assert task.kind == "assert"
    assert task.language == "python"
    assert task.test_cases == []


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        ({"task_id": "t", "tests": "x", "entry_point": "f"}, "prompt"),
        ({"task_id": "t", "prompt": "", "tests": "x"}, "entry_point"),
        ({"task_id": "t", "kind": "stdio"}, "test_cases"),
        ({"task_id": "t", "kind": "stdio", "test_cases": [{"args": [1], "expected": 1}]}, "input"),
        ({"task_id": "t", "kind": "function_call", "test_cases": [{"expected": 1}]}, "fn_name"),
        ({"task_id": "t", "kind": "function_call", "fn_name": "a b", "test_cases": []}, "fn_name"),
        ({"task_id": "t", "kind": "pytest"}, "test_files"),
        ({"task_id": "t", "kind": "pytest", "language": "c", "test_files": {"t.py": ""}}, "python"),
        ({"task_id": "t", "kind": "quiz"}, "kind"),
        ({"task_id": "t", "kind": "stdio", "language": "cobol", "test_cases": []}, "cobol"),
        (
            {"task_id": "t", "kind": "stdio", "test_cases": [{"output": "1"}], "comparison": {}}
            | {"comparison": {"mode": "fuzzy"}},
            "mode",
        ),
    ],
)
def test_a_task_missing_what_its_kind_needs_says_what(record: dict, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        Task.model_validate(record)


def test_stdio_task_with_comparison_checker_and_case_limit() -> None:
    task = Task.model_validate(
        {
            "task_id": "cf/1",
            "kind": "stdio",
            "language": "C++",
            "test_cases": [{"input": "1 3\n", "output": "0.333333\n"}, {"output": "x"}],
            "comparison": {"float_abs_tol": 1e-6, "float_rel_tol": 1e-6},
            "checker": {"language": "py", "source": "import sys"},
            "stop_on_first_failure": True,
            "case_time_limit_s": 2,
        }
    )
    assert task.language == "cpp"
    assert task.checker is not None
    assert task.checker.language == "python"
    assert task.test_cases == [StdioCase(input="1 3\n", output="0.333333\n"), StdioCase(output="x")]
    limits = task.case_limits(Limits(wall_time_s=10, cpu_time_s=10))
    assert (limits.wall_time_s, limits.cpu_time_s) == (2, 2)


def test_function_call_cases_keep_json_values() -> None:
    task = Task.model_validate(
        {
            "task_id": "lc/1",
            "kind": "function_call",
            "fn_name": "Solution.removeZeros",
            "test_cases": [
                {"args": ["1200"], "expected": "12"},
                {"kwargs": {"s": "1"}, "expected": None},
            ],
        }
    )
    assert task.test_cases[1] == FunctionCase(kwargs={"s": "1"}, expected=None)


def test_rollouts_may_carry_files() -> None:
    rollout = Rollout.model_validate({"task_id": "t", "completion": "", "files": {"a.py": "x=1"}})
    assert rollout.files == {"a.py": "x=1"}


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_published_schema_is_up_to_date(name: str) -> None:
    stored = (REPO / "schemas" / name).read_text(encoding="utf-8")
    assert stored == render(SCHEMA_FILES[name]), (
        f"schemas/{name} is stale: run `python -m execgym.tasks.schema schemas`"
    )
    schema = json.loads(stored)
    assert schema["$schema"].endswith("2020-12/schema")
    assert "task_id" in schema["required"]


def _kwargs_of(call_input: str) -> dict:
    call = ast.parse(f"f({call_input})", mode="eval").body
    assert isinstance(call, ast.Call)
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def test_the_schema_expresses_real_records() -> None:
    """A LeetCodeDataset, an MBPP and a HumanEval-X record fit the generic schema."""
    with gzip.open(DATA / "leetcodedataset" / "LeetCodeDataset-v0.3.1-test.jsonl.gz", "rt") as f:
        leet = json.loads(f.readline())
    task = Task.model_validate(
        {
            "task_id": leet["task_id"],
            "kind": "function_call",
            "prompt": leet["prompt"],
            "fn_name": leet["entry_point"].split(".")[-1],
            "test_cases": [
                {"kwargs": _kwargs_of(c["input"]), "expected": ast.literal_eval(c["output"])}
                for c in leet["input_output"]
            ],
            "reference": leet["completion"],
        }
    )
    assert task.test_cases
    assert task.fn_name == "shortestDistanceAfterQueries"
    with gzip.open(DATA / "mbpp" / "mbpp.jsonl.gz", "rt") as f:
        mbpp = json.loads(f.readline())
    tests = "def check(candidate):\n" + "".join(f"    {t}\n" for t in mbpp["test_list"])
    assert Task(task_id="mbpp/1", prompt="", tests=tests, entry_point="min_cost").kind == "assert"
    with gzip.open(DATA / "humaneval-x" / "humaneval_cpp.jsonl.gz", "rt") as f:
        cpp = json.loads(f.readline())
    task = Task.model_validate(
        {**cpp, "tests": cpp["test"], "language": "cpp", "entry_point": None}
    )
    assert task.language == "cpp"
    assert task.tests


def test_function_call_name_from_entry_point_and_leetcode_spelling() -> None:
    task = Task.model_validate(
        {
            "task_id": "lc",
            "kind": "function_call",
            "entry_point": "Solution().removeZeros",
            "test_cases": [{"args": ["10"], "expected": "1"}],
        }
    )
    assert task.fn_name == "Solution.removeZeros"
    assert task.entry_point is None

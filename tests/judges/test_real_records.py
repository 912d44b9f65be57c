"""Real HumanEval-X and LeetCodeDataset records through the generic schema and judges.

Pass rates over whole data sets belong to the data-set loaders; here one record of each
shows that the schema expresses it and the judge gives the right verdict both ways.
"""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

from execgym.judges import FunctionCallJudge, NativeAssertJudge, Verdict
from execgym.limits import Limits
from execgym.tasks import Task
from execgym.toolchains import find_toolchain
from tests.conftest import require

DATA = Path(__file__).resolve().parents[2] / "src" / "execgym" / "data"  # shipped copies
LIMITS = Limits(wall_time_s=20)


def first(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.loads(handle.readline())


@pytest.mark.parametrize(
    ("language", "name"), [("cpp", "cpp"), ("java", "java"), ("javascript", "js")]
)
async def test_humaneval_x_first_task(bwrap_sandbox, builder, language: str, name: str) -> None:
    require(find_toolchain(language) is not None, f"the {language} toolchain")
    record = first(DATA / "humaneval-x" / f"humaneval_{name}.jsonl.gz")
    task = Task(
        task_id=record["task_id"], prompt=record["prompt"], tests=record["test"], language=language
    )
    judge = NativeAssertJudge(builder)
    right = await judge.judge(task, record["canonical_solution"], bwrap_sandbox, LIMITS)
    assert right.verdict is Verdict.PASSED, right.message
    # has_close_elements answering "never close" fails the tests (in JavaScript too, whose
    # tests use console.assert, which only logs unless the judge makes it fatal)
    body = {
        "cpp": "    return false;\n}\n",
        "java": "        return false;\n    }\n}",
        "javascript": "  return false;\n}\n",
    }[language]
    wrong = await judge.judge(task, body, bwrap_sandbox, LIMITS)
    assert wrong.verdict is Verdict.FAILED, wrong.message


def _kwargs(text: str) -> dict:
    call = ast.parse(f"f({text})", mode="eval").body
    assert isinstance(call, ast.Call)
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords}


async def test_leetcodedataset_first_task_as_a_function_call(bwrap_sandbox) -> None:
    record = first(DATA / "leetcodedataset" / "LeetCodeDataset-v0.3.1-test.jsonl.gz")
    task = Task.model_validate(
        {
            "task_id": record["task_id"],
            "kind": "function_call",
            "prompt": record["prompt"],
            "entry_point": record["entry_point"],  # "Solution().shortestDistance..."
            "test_cases": [
                {"kwargs": _kwargs(c["input"]), "expected": ast.literal_eval(c["output"])}
                for c in record["input_output"]
            ],
        }
    )
    judge = FunctionCallJudge()
    right = await judge.judge(task, record["completion"], bwrap_sandbox, LIMITS)
    assert right.verdict is Verdict.PASSED, right.message
    assert right.details["total"] == len(record["input_output"])
    lazy = record["completion"].replace("def shortestDistanceAfterQueries", "def _unused", 1)
    lazy += (
        "\n    def shortestDistanceAfterQueries(self, n, queries):\n"
        "        return [n - 1] * len(queries)\n"
    )
    wrong = await judge.judge(task, lazy, bwrap_sandbox, LIMITS)
    assert wrong.verdict is Verdict.FAILED, wrong.message

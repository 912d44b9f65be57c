"""`execgym score` on a tasks JSONL of each kind: the scorer picks the judge by kind."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from execgym.cli import main
from tests.conftest import write_jsonl

TASKS = [
    {
        "task_id": "assert/py",
        "prompt": "def add(a, b):\n",
        "tests": "def check(c):\n    assert c(2, 3) == 5\n",
        "entry_point": "add",
        "reference": "    return a + b\n",
    },
    {
        "task_id": "assert/js",
        "language": "javascript",
        "prompt": "const add = (a, b) => {\n",
        "tests": "const assert = require('node:assert');\nassert.equal(add(2, 3), 5);\n",
        "reference": "  return a + b;\n};\n",
    },
    {
        "task_id": "stdio/py",
        "kind": "stdio",
        "prompt": "Read two integers, print their sum.",
        "test_cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "2 2\n", "output": "4"}],
        "reference": "print(sum(map(int, input().split())))\n",
    },
    {
        "task_id": "stdio/c",
        "kind": "stdio",
        "language": "c",
        "test_cases": [{"input": "1 2\n", "output": "3\n"}],
        "reference": '#include <stdio.h>\nint main(){int a,b;scanf("%d%d",&a,&b);'
        'printf("%d\\n",a+b);}\n',
    },
    {
        "task_id": "call/leetcode",
        "kind": "function_call",
        "fn_name": "removeZeros",
        "prompt": "from typing import *\n",
        "test_cases": [{"args": ["1200"], "expected": "12"}, {"args": ["5"], "expected": "5"}],
        "reference": "class Solution:\n    def removeZeros(self, s: str) -> str:\n"
        "        return s.rstrip('0')\n",
    },
    {
        "task_id": "pytest/mod",
        "kind": "pytest",
        "test_files": {
            "test_mod.py": "from solution import add\n\ndef test_add():\n"
            "    assert add(2, 3) == 5\n"
        },
        "reference": "def add(a, b):\n    return a + b\n",
    },
]


def score(tmp_path: Path, *args: str) -> tuple[int, str, list[dict]]:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", TASKS)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main, ["score", str(tasks), *args, "-o", str(out), "--timeout", "10"]
    )
    lines = out.read_text().splitlines() if out.exists() else []
    return result.exit_code, result.stdout + result.stderr, [json.loads(x) for x in lines]


def test_references_of_every_kind_pass(bwrap_sandbox, tmp_path: Path) -> None:
    code, output, results = score(tmp_path, "--solutions", "canonical")
    assert code == 0, output
    assert {r["task_id"]: r["verdict"] for r in results} == {t["task_id"]: "passed" for t in TASKS}
    stdio = next(r for r in results if r["task_id"] == "stdio/py")
    assert stdio["details"]["fraction_passed"] == 1.0
    assert [c["verdict"] for c in stdio["details"]["cases"]] == ["passed", "passed"]


def test_fenced_chat_completions_and_bad_rollouts_in_one_batch(bwrap_sandbox, tmp_path) -> None:
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [
            {"task_id": "stdio/py", "completion": "Sure!\n```python\nprint(3)\n```\nIt prints."},
            {"task_id": "stdio/c", "completion": "```c\nint main( {\n```"},
            {"task_id": "call/leetcode", "completion": "```python\ndef other(): pass\n```"},
            {"task_id": "pytest/mod", "completion": "def add(a, b):\n    return a - b\n"},
            {"task_id": "assert/js", "completion": "```js\n  return a * b;\n};\n```"},
        ],
    )
    code, output, results = score(tmp_path, str(rollouts))
    assert code == 0, output
    verdicts = {r["task_id"]: (r["verdict"], r["reward"]) for r in results}
    assert verdicts == {
        "stdio/py": ("failed", 0.0),  # 3 is right for the first case only
        "stdio/c": ("compile_error", 0.0),
        "call/leetcode": ("error", 0.0),  # entry point not found
        "pytest/mod": ("failed", 0.0),
        "assert/js": ("failed", 0.0),
    }
    stdio = next(r for r in results if r["task_id"] == "stdio/py")
    assert stdio["details"]["passed"] == 1
    assert "compile_error" in output


def test_a_missing_toolchain_is_masked_and_the_batch_goes_on(
    bwrap_sandbox, tmp_path: Path, monkeypatch
) -> None:
    real = __import__("execgym.toolchains", fromlist=["find_toolchain"]).find_toolchain
    monkeypatch.setattr(
        "execgym.judges.compile.find_toolchain", lambda lang: None if lang == "c" else real(lang)
    )
    code, output, results = score(tmp_path, "--solutions", "canonical")
    assert code == 0, output
    verdicts = {r["task_id"]: (r["verdict"], r["reward"]) for r in results}
    assert verdicts.pop("stdio/c") == ("language_unavailable", None)
    assert set(verdicts.values()) == {("passed", 1.0)}


def test_compile_cache_options(bwrap_sandbox, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code, output, results = score(
        tmp_path, "--solutions", "canonical", "--compile-cache", str(cache)
    )
    assert code == 0, output
    assert {r["verdict"] for r in results} == {"passed"}
    assert any(cache.rglob("*")), "compiled programs are kept in the given directory"
    code, output, results = score(tmp_path, "--solutions", "canonical", "--no-compile-cache")
    assert code == 0, output
    assert {r["verdict"] for r in results} == {"passed"}

"""SECURITY.md's table of rollout-controlled failures, judge by judge, run for real.

Each row of the table "Verdicts of rollout-controlled failures" names a case; this
module holds the rollout of each case, scores it on the warm pool (fresh bwrap for
compiled languages) and checks the verdict the table states, and that it is never
masked: a failure the rollout controls always carries a reward (execgym.judges.masking).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import pytest_asyncio

from execgym import Limits, Rollout, RolloutLine, Scorer, Task, Verdict
from execgym.limits import MiB
from execgym.sandbox import WarmPoolSandbox
from tests.conftest import require
from tests.judges.hacks import ALWAYS_EQUAL
from tests.judges.test_hacks_pytest import PLANT_STDLIB_NAMES

SECURITY = Path(__file__).parents[2] / "SECURITY.md"
SECTION = "## Verdicts of rollout-controlled failures"
LIMITS = Limits(wall_time_s=3, cpu_time_s=3, memory_bytes=256 * MiB, max_output_bytes=MiB)

ASSERT = Task(
    task_id="table/assert",
    prompt="def add(a, b):\n",
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n",
    entry_point="add",
)
CALL = Task.model_validate(
    {
        "task_id": "table/call",
        "kind": "function_call",
        "fn_name": "half",
        "test_cases": [{"args": [1], "expected": 0.5}],
    }
)
STDIO = Task.model_validate(
    {"task_id": "table/stdio", "kind": "stdio", "test_cases": [{"input": "2 3\n", "output": "5"}]}
)
CHECKED = Task.model_validate(
    {
        **STDIO.model_dump(),
        "task_id": "table/checker",
        "checker": {
            "language": "python",
            "source": "import sys\nexpected = int(open(sys.argv[2]).read())\n"
            "sys.exit(0 if int(open(sys.argv[3]).read()) == expected else 1)\n",
        },
    }
)
STDIO_C = STDIO.model_copy(update={"task_id": "table/stdio-c", "language": "c"})
PYTEST = Task.model_validate(
    {
        "task_id": "table/pytest",
        "kind": "pytest",
        "test_files": {
            "test_add.py": "from solution import add\n\n"
            "def test_add(tmp_path):\n    assert add(2, 3) == 5\n\n"
            "def test_negative():\n    assert add(-1, 1) == 0\n"
        },
    }
)
UNITTEST = Task(
    task_id="table/unittest",
    kind="unittest",
    tests="import unittest\n\nclass TestCases(unittest.TestCase):\n"
    "    def test_one(self):\n        self.assertEqual(task_func(1), 2)\n\n"
    "    def test_two(self):\n        self.assertEqual(task_func(2), 4)\n",
)
TASKS = {t.task_id: t for t in (ASSERT, CALL, STDIO, CHECKED, STDIO_C, PYTEST, UNITTEST)}
ADD = "def add(a, b):\n    return a + b\n"

CASES: dict[str, tuple[Task, str, dict[str, str]]] = {
    # every judge: what the run does
    "sleeps-past-the-wall-clock": (ASSERT, "    import time\n    time.sleep(60)\n", {}),
    "burns-cpu": (ASSERT, "    while True:\n        pass\n", {}),
    "allocates-past-memory": (ASSERT, "    x = bytearray(2**31)\n    return a + b\n", {}),
    "floods-stdout": (ASSERT, "    print('x' * 2**21)\n    return a + b\n", {}),
    "exits-0-early": (ASSERT, "    import os\n    os._exit(0)\n", {}),
    "kills-itself": (ASSERT, "    import os, signal\n    os.kill(os.getpid(), 9)\n", {}),
    "kills-every-process-it-can": (ASSERT, "    import os\n    os.kill(-1, 9)\n", {}),
    "fork-bomb": (ASSERT, "    import os\n    while True:\n        os.fork()\n", {}),
    "fills-the-disk": (
        ASSERT,
        "    with open('/tmp/f', 'wb') as f:\n        f.write(b'x' * 100 * 2**20)\n"
        "    return a + b\n",
        {},
    ),
    "prints-a-fake-report": (
        ASSERT,
        "    print('EXECGYM-START')\n    print('{\"verdict\": \"passed\"}')\n    return 0\n",
        {},
    ),
    # assert (Python)
    "does-not-compile": (ASSERT, "    return (\n", {}),
    "entry-point-missing": (ASSERT, "    return 0\ndel add\n", {}),
    "raises": (ASSERT, "    raise ValueError('no')\n", {}),
    "wrong-answer": (ASSERT, "    return 0\n", {}),
    "always-equal-object": (ASSERT, "    return _Any()\n" + ALWAYS_EQUAL, {}),
    "str-subclass": (ASSERT, "    class S(int):\n        pass\n    return S(5)\n", {}),
    "returns-a-generator": (ASSERT, "    return (x for x in [])\n", {}),
    "returns-99-deep": (
        ASSERT,
        "    v = []\n    for _ in range(99):\n        v = [v]\n    return v\n",
        {},
    ),
    "raises-stopiteration": (ASSERT, "    raise StopIteration\n", {}),
    # function_call
    "call-huge-int-for-a-float": (CALL, "def half(x):\n    return 10**400\n", {}),
    "call-raises": (CALL, "def half(x):\n    raise KeyError(x)\n", {}),
    "call-function-missing": (CALL, "def other(x):\n    return x / 2\n", {}),
    "call-always-equal-object": (
        CALL,
        "class E:\n    def __eq__(self, o):\n        return True\ndef half(x):\n    return E()\n",
        {},
    ),
    # stdio
    "stdio-wrong-output": (STDIO, "print(6)\n", {}),
    "stdio-invalid-utf8": (STDIO, "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe')\n", {}),
    "stdio-exits-nonzero": (STDIO, "import sys\nprint(5)\nsys.exit(3)\n", {}),
    "stdio-crashes-the-checker": (CHECKED, "print('I think it is five')\n", {}),
    "stdio-c-does-not-compile": (STDIO_C, "int main( {\n", {}),
    # pytest
    "pytest-file-name-escapes": (PYTEST, ADD, {"../evil.py": "x = 1\n"}),
    "pytest-file-name-too-long": (PYTEST, ADD, {"e" * 300 + ".py": "x = 1\n"}),
    "pytest-file-and-directory": (PYTEST, ADD, {"pkg": "x = 1\n", "pkg/x.py": "x = 1\n"}),
    "pytest-ships-conftest": (PYTEST, ADD, {"conftest.py": "x = 1\n"}),
    "pytest-writes-a-stdlib-module": (PYTEST, PLANT_STDLIB_NAMES, {}),
    "pytest-raises-at-import": (PYTEST, "raise ImportError('no')\n" + ADD, {}),
    "pytest-skips": (
        PYTEST,
        "import pytest\ndef add(a, b):\n    pytest.skip('not today')\n",
        {},
    ),
    # unittest
    "unittest-skips": (
        UNITTEST,
        "import unittest\ndef task_func(x):\n    if x != 1:\n"
        "        raise unittest.SkipTest('no')\n    return 2\n",
        {},
    ),
    "unittest-patches-assertions": (
        UNITTEST,
        "import unittest\nunittest.TestCase.assertEqual = lambda *a: None\n"
        "def task_func(x):\n    return 0\n",
        {},
    ),
    "unittest-empties-collection": (
        UNITTEST,
        "import unittest\nunittest.TestLoader.testMethodPrefix = 'none'\n"
        "def task_func(x):\n    return 0\n",
        {},
    ),
    "unittest-raises-before-the-tests": (UNITTEST, "raise RuntimeError('no')\n", {}),
}


def table() -> dict[str, set[str]]:
    """``{case: verdicts}`` from SECURITY.md's table (a cell may say "`a` or `b`")."""
    text = SECURITY.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.find("\n## ", len(SECTION))]
    rows = re.findall(
        r"^\| `([a-z0-9-]+)` \|[^|]*\|[^|]*\| (`[a-z_]+`(?: or `[a-z_]+`)*) \|", section, re.M
    )
    return {case: set(re.findall(r"`([a-z_]+)`", cell)) for case, cell in rows}


def test_the_table_and_the_cases_agree() -> None:
    assert set(table()) == set(CASES)
    assert all(not Verdict(v).is_masked for verdicts in table().values() for v in verdicts)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool():
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    async with WarmPoolSandbox() as sandbox:
        yield sandbox


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case", list(CASES))
async def test_each_rollout_controlled_failure_gets_its_verdict_and_a_reward(
    pool, case: str
) -> None:
    task, completion, files = CASES[case]
    scorer = Scorer(TASKS, pool, LIMITS)
    rollout = Rollout(task_id=task.task_id, completion=completion, files=files)
    result = await scorer.score_one(RolloutLine(0, rollout))
    assert result.verdict.value in table()[case], result.message
    assert result.reward == 0.0, result.message

"""The pytest judge: per-test outcomes, collection errors, refused and tampering rollouts."""

from __future__ import annotations

import shutil

import pytest

from execgym.judges import Verdict
from execgym.judges.pytest_tests import PytestJudge
from execgym.limits import Limits, MiB
from execgym.sandbox import BubblewrapSandbox, WarmPoolSandbox
from execgym.sandbox.bwrap import interpreter_paths
from execgym.tasks import Task
from tests.conftest import require
from tests.judges.hacks import PATCH_PYTEST_REPORTS

LIMITS = Limits(wall_time_s=10, memory_bytes=512 * MiB)
TESTS = """\
import pytest
from solution import add

def test_small():
    assert add(1, 2) == 3

def test_negative():
    assert add(-1, -1) == -2

@pytest.mark.skip(reason="not today")
def test_skipped():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_needs_broken(broken):
    pass
"""
TASK = Task.model_validate(
    {
        "task_id": "t/pytest",
        "kind": "pytest",
        "test_files": {"test_add.py": TESTS.replace("def test_needs_broken", "def _unused")},
    }
)


IN_PROCESS = TASK.model_copy(update={"pytest_mode": "in_process"})


async def judge(sandbox, completion: str, task: Task = TASK, files=None):
    return await PytestJudge().judge(task, completion, sandbox, LIMITS, files=files)


def outcomes(judgement) -> dict[str, str]:
    return {t["name"].split("::")[-1]: t["outcome"] for t in judgement.details["tests"]}


async def test_passing_module_keeps_each_outcome(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n")
    assert judgement.verdict is Verdict.PASSED, judgement.message
    assert outcomes(judgement) == {
        "test_small": "passed",
        "test_negative": "passed",
        "test_skipped": "skipped",
    }
    assert judgement.details["passed"] == 2
    assert judgement.details["skipped"] == 1


async def test_a_failing_test_fails_with_its_name(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return abs(a + b)\n")
    assert judgement.verdict is Verdict.FAILED
    assert outcomes(judgement)["test_negative"] == "failed"
    assert outcomes(judgement)["test_small"] == "passed"
    assert "test_negative failed" in judgement.message
    assert judgement.details["fraction_passed"] == pytest.approx(1 / 3)


async def test_fixture_errors_are_errors(bwrap_sandbox) -> None:
    task = TASK.model_copy(update={"test_files": {"test_add.py": TESTS}})
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n", task)
    assert judgement.verdict is Verdict.ERROR
    assert outcomes(judgement)["test_needs_broken"] == "error"


async def test_a_collection_error_is_reported_as_such(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "def plus(a, b):\n    return a + b\n")
    assert judgement.verdict is Verdict.ERROR
    assert judgement.error is not None
    assert judgement.error.type == "CollectionError"
    assert "ImportError" in judgement.message
    assert judgement.details["collection_errors"][0]["name"] == "test_add.py"


async def test_a_rollout_may_span_files(bwrap_sandbox) -> None:
    judgement = await judge(
        bwrap_sandbox,
        "from helpers.ops import plus as add\n",
        files={"helpers/__init__.py": "", "helpers/ops.py": "def plus(a, b):\n    return a + b\n"},
    )
    assert judgement.verdict is Verdict.PASSED, judgement.message


@pytest.mark.parametrize("name", ["conftest.py", "pytest.ini", "test_add.py", "sub/conftest.py"])
async def test_rollouts_may_not_configure_pytest_or_replace_tests(bwrap_sandbox, name) -> None:
    judgement = await judge(bwrap_sandbox, "def add(a, b): return a + b", files={name: ""})
    assert judgement.verdict is Verdict.FAILED
    assert name in judgement.message
    assert judgement.run is None


async def test_patching_pytest_reports_is_caught_in_process(bwrap_sandbox) -> None:
    """BC-35, pytest variant: rewriting failed reports as passed is tampering."""
    judgement = await judge(bwrap_sandbox, PATCH_PYTEST_REPORTS, IN_PROCESS)
    assert judgement.verdict is Verdict.TAMPERED
    assert judgement.details["hack"] == "patched pytest's report functions"
    assert judgement.details["mode"] == "in_process"


async def test_patching_pytest_reports_reaches_nothing_in_proxy_mode(bwrap_sandbox) -> None:
    """The rollout's pytest is its own process's copy: the harness's reports are intact."""
    judgement = await judge(bwrap_sandbox, PATCH_PYTEST_REPORTS)
    assert judgement.verdict is Verdict.FAILED
    assert outcomes(judgement) == {
        "test_small": "failed",
        "test_negative": "failed",
        "test_skipped": "skipped",
    }
    assert judgement.details["mode"] == "proxy"


@pytest.mark.parametrize("task", [TASK, IN_PROCESS], ids=["proxy", "in_process"])
async def test_printing_pass_lines_does_not_pass(bwrap_sandbox, task: Task) -> None:
    """BC-33: forged pytest summary lines on stdout change nothing."""
    cheat = (
        "print('=== 2 passed in 0.01s ===')\nprint('PASSED test_small')\ndef add(a, b): return 0\n"
    )
    judgement = await judge(bwrap_sandbox, cheat, task)
    assert judgement.verdict is Verdict.FAILED


async def test_exit_during_collection_is_an_error(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "import os\nos._exit(0)\ndef add(a, b): return 0\n")
    assert judgement.verdict is Verdict.ERROR
    assert judgement.error is not None
    assert judgement.error.type == "CollectionError"
    assert "SolutionExited" in judgement.message
    judgement = await judge(bwrap_sandbox, "import os\nos._exit(0)\n", IN_PROCESS)
    assert judgement.verdict is Verdict.ERROR
    assert "no report" in judgement.message


STACK_TESTS = """\
import pytest
import solution
from solution import LIMIT, EmptyError, Stack, make_pair


def test_methods_dunders_and_attributes():
    s = Stack()
    s.push(1)
    s.push(2)
    assert len(s) == 2
    assert s.pop() == 2
    assert s.items == [1]
    assert list(s) == [1]
    assert 1 in s
    assert str(s) == "Stack([1])"
    assert LIMIT == solution.LIMIT == 10


def test_the_rollouts_exceptions():
    with pytest.raises(EmptyError, match="empty"):
        Stack().pop()
    with pytest.raises(LookupError):
        Stack().pop()
    with pytest.raises(ValueError):
        Stack().push(-1)


def test_objects_as_arguments_and_results():
    a, b = Stack(), Stack()
    a.push(3)
    b.extend_from(a)
    assert b.items == [3]
    assert make_pair(a, b)[1].items == [3]
"""
STACK = """\
LIMIT = 10


class EmptyError(LookupError):
    pass


class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        if x < 0:
            raise ValueError("negative")
        self.items.append(x)

    def pop(self):
        if not self.items:
            raise EmptyError("empty stack")
        return self.items.pop()

    def extend_from(self, other):
        self.items.extend(other.items)

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, x):
        return x in self.items

    def __str__(self):
        return "Stack(%r)" % self.items


def make_pair(a, b):
    return (a, b)
"""


async def test_proxy_mode_serves_classes_exceptions_and_constants(bwrap_sandbox) -> None:
    task = TASK.model_copy(update={"test_files": {"test_stack.py": STACK_TESTS}})
    judgement = await judge(bwrap_sandbox, STACK, task)
    assert judgement.verdict is Verdict.PASSED, judgement.message
    assert judgement.details["passed"] == 3
    assert judgement.details["mode"] == "proxy"


async def test_real_objects_need_in_process_mode(bwrap_sandbox) -> None:
    tests = (
        "from solution import Stack\n\n"
        "def test_isinstance():\n    assert isinstance(Stack(), Stack)\n"
    )
    task = TASK.model_copy(update={"test_files": {"test_real.py": tests}})
    proxied = await judge(bwrap_sandbox, STACK, task)
    assert proxied.verdict is Verdict.FAILED
    assert "isinstance" in proxied.message
    task = task.model_copy(update={"pytest_mode": "in_process"})
    judgement = await judge(bwrap_sandbox, STACK, task)
    assert judgement.verdict is Verdict.PASSED, judgement.message
    assert judgement.details["mode"] == "in_process"


async def test_calling_the_rollout_during_collection_says_what_to_do(bwrap_sandbox) -> None:
    tests = "from solution import add\n\nTHREE = add(1, 2)\n\ndef test_three():\n"
    tests += "    assert THREE == 3\n"
    task = TASK.model_copy(update={"test_files": {"test_early.py": tests}})
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n", task)
    assert judgement.verdict is Verdict.ERROR
    assert judgement.error is not None
    assert judgement.error.type == "CollectionError"
    assert "pytest_mode 'in_process'" in judgement.error.traceback
    task = task.model_copy(update={"pytest_mode": "in_process"})
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n", task)
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_runs_in_the_warm_pool() -> None:
    async with WarmPoolSandbox() as pool:
        judgement = await judge(pool, "def add(a, b):\n    return a + b\n")
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_pytest_missing_inside_the_sandbox_is_our_fault() -> None:
    """A sandbox that does not see site-packages cannot run pytest: masked, not an error."""
    require(shutil.which("bwrap") is not None, "bubblewrap")
    bare = BubblewrapSandbox(read_only_paths=interpreter_paths())
    judgement = await judge(bare, "def add(a, b):\n    return a + b\n")
    assert judgement.verdict is Verdict.SANDBOX_ERROR
    assert "cannot import pytest" in judgement.message


async def test_a_rollout_module_never_shadows_the_standard_library_in_the_harness(
    bwrap_sandbox,
) -> None:
    """A rollout's ``fractions.py`` is not what the tests get for ``import fractions``."""
    tests = (
        "from fractions import Fraction\nfrom solution import add\n\n"
        "def test_half():\n    assert Fraction(1, 2) + Fraction(1, 2) == add(0, 1)\n"
    )
    task = TASK.model_copy(update={"test_files": {"test_half.py": tests}})
    files = {"fractions.py": "Fraction = lambda *a: 0\n"}
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n", task, files)
    assert judgement.verdict is Verdict.PASSED, judgement.message


async def test_an_argument_that_cannot_cross_says_how_to_fix_it(bwrap_sandbox) -> None:
    tests = "from solution import add\n\ndef test_path(tmp_path):\n    assert add(tmp_path, 1)\n"
    task = TASK.model_copy(update={"test_files": {"test_path.py": tests}})
    judgement = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n", task)
    assert judgement.verdict is Verdict.FAILED
    assert "str(tmp_path)" in judgement.details["tests"][0]["message"]


# Issue 17: a suite that collects no test is the task's fault (invalid, masked, with the
# reason), decided from the task's files alone; one the rollout can empty stays error.
@pytest.mark.parametrize(
    "test_files",
    [
        {"test_add.py": "from solution import add\n\ndef helper():\n    assert add(1, 2) == 3\n"},
        {"test_add.py": "", "helpers.py": "X = 1\n"},
        {"test_add.py": "def test_broken(:\n    pass\n"},
    ],
    ids=["no-test-function", "empty-file", "does-not-compile"],
)
async def test_a_suite_that_collects_no_test_is_invalid(bwrap_sandbox, test_files) -> None:
    task = TASK.model_copy(update={"test_files": test_files})
    for mode in ("proxy", "in_process"):
        judgement = await judge(
            bwrap_sandbox,
            "def add(a, b):\n    return a + b\n",
            task.model_copy(update={"pytest_mode": mode}),
        )
        assert judgement.verdict is Verdict.INVALID, judgement.message
        assert "the task's test" in judgement.message


async def test_a_rollout_that_rebinds_the_test_names_scores_zero(bwrap_sandbox) -> None:
    """``from solution import *`` after the tests lets the rollout's names replace them:
    pytest then collects nothing, and that is the rollout's doing, not the task's."""
    tests = "def test_add():\n    assert add(1, 2) == 3\n\nfrom solution import *\n"
    task = TASK.model_copy(update={"test_files": {"test_add.py": tests}})
    completion = "def add(a, b):\n    return 0\n\ntest_add = 1\n"
    judgement = await judge(bwrap_sandbox, completion, task)
    assert judgement.verdict is Verdict.ERROR, judgement.message


@pytest.mark.parametrize("mode", ["proxy", "in_process"])
async def test_a_skip_raised_by_the_solution_is_not_a_pass(bwrap_sandbox, mode: str) -> None:
    completion = (
        "import unittest\ndef add(a, b):\n"
        "    if a < 0:\n        raise unittest.SkipTest('not today')\n    return a + b\n"
    )
    judgement = await judge(
        bwrap_sandbox, completion, TASK.model_copy(update={"pytest_mode": mode})
    )
    assert judgement.verdict is not Verdict.PASSED, judgement.details["tests"]


async def test_a_test_body_may_import_the_rollout(bwrap_sandbox) -> None:
    """``from solution import add`` inside a test (after collection) was a KeyError in the
    solution's process, so correct code failed; the module is imported there on demand."""
    body = "def test_add():\n    from solution import add\n    assert add(2, 3) == 5\n"
    task = TASK.model_copy(update={"test_files": {"test_add.py": body}})
    right = await judge(bwrap_sandbox, "def add(a, b):\n    return a + b\n", task)
    assert right.verdict is Verdict.PASSED, right.message
    wrong = await judge(bwrap_sandbox, "def add(a, b):\n    return 0\n", task)
    assert wrong.verdict is Verdict.FAILED, wrong.message
    broken = await judge(bwrap_sandbox, "raise ValueError('no')\n", task)
    assert broken.verdict is Verdict.FAILED, broken.message
    assert "ValueError" in broken.message

"""The unittest judge (BigCodeBench style): one module, per-test outcomes, tampering."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from execgym import Scorer
from execgym.judges import Verdict
from execgym.judges.unittest_tests import UnittestJudge, unittest_program
from execgym.limits import Limits, MiB
from execgym.reward import load_spec
from execgym.tasks import Rollout, Task
from tests.conftest import require

pytestmark = pytest.mark.bwrap

LIMITS = Limits(wall_time_s=20, memory_bytes=512 * MiB)
PREFIX = 'import os\ndef task_func(a, b):\n    """Add a and b; also return the cwd."""\n'
TESTS = """\
import unittest

class Helper:
    pass

class TestCases(unittest.TestCase):
    def test_small(self):
        self.assertEqual(task_func(1, 2)[0], 3)

    def test_negative(self):
        self.assertEqual(task_func(-1, -1)[0], -2)

    def test_sees_the_solution_namespace(self):
        # upstream runs solution and tests as one module: the solution's names are here
        self.assertIs(task_func.__globals__["os"], os)

    def test_environment_is_upstreams(self):
        import time
        self.assertEqual(os.environ["TZ"], "UTC")
        self.assertEqual(time.tzname[0], "UTC")
        self.assertEqual(os.environ["MPLBACKEND"], "Agg")
        self.assertEqual(os.listdir(task_func(0, 0)[1]), [])

    @unittest.skip("not today")
    def test_skipped(self):
        self.fail("skipped tests never run")
"""
TASK = Task(task_id="t/unittest", kind="unittest", solution_prefix=PREFIX, tests=TESTS)
BODY = "    return a + b, os.getcwd()\n"


async def judge(sandbox, completion: str, task: Task = TASK):
    return await UnittestJudge().judge(task, completion, sandbox, LIMITS)


def outcomes(judgement) -> dict[str, str]:
    return {t["name"].split(".")[-1]: t["outcome"] for t in judgement.details["tests"]}


async def test_passing_body_keeps_each_outcome(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, BODY)
    assert judgement.verdict is Verdict.PASSED, judgement.message
    assert outcomes(judgement) == {
        "test_small": "passed",
        "test_negative": "passed",
        "test_sees_the_solution_namespace": "passed",
        "test_environment_is_upstreams": "passed",
        "test_skipped": "skipped",
    }
    assert judgement.details["passed"] == 4
    assert judgement.details["skipped"] == 1


async def test_whole_solution_after_the_prefix_passes(bwrap_sandbox) -> None:
    whole = "import os\n\ndef task_func(a, b):\n    print('noise')\n" + BODY
    judgement = await judge(bwrap_sandbox, whole)
    assert judgement.verdict is Verdict.PASSED, judgement.message
    assert "noise" in judgement.details["output"]  # swallowed, as upstream, but kept


async def test_a_failing_test_fails_with_its_name(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "    return abs(a + b), os.getcwd()\n")
    assert judgement.verdict is Verdict.FAILED
    assert outcomes(judgement)["test_negative"] == "failed"
    assert outcomes(judgement)["test_small"] == "passed"
    assert "TestCases.test_negative failed" in judgement.message
    assert "AssertionError: 2 != -2" in judgement.message
    assert judgement.details["fraction_passed"] == pytest.approx(3 / 5)
    # partial credit counts the tests that ran (the skipped one does not)
    assert (judgement.details["cases_passed"], judgement.details["cases_total"]) == (3, 4)
    spec = load_spec("fraction")
    scorer = Scorer({"t/unittest": TASK}, bwrap_sandbox, LIMITS, reward=spec)
    rollout = Rollout(task_id="t/unittest", completion="    return abs(a + b), os.getcwd()\n")
    [result] = await scorer.score([rollout])
    assert result.reward == pytest.approx(0.75)


async def test_an_exception_in_a_test_is_an_error(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "    raise KeyError('boom')\n")
    assert judgement.verdict is Verdict.ERROR
    assert judgement.details["errors"] == 3  # the namespace test calls nothing
    assert "KeyError: 'boom'" in judgement.message


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("    return (\n", "SyntaxError"),
        ("    return a\nraise RuntimeError('at import')\n", "RuntimeError: at import"),
    ],
)
async def test_a_program_that_does_not_load_is_a_collection_error(
    bwrap_sandbox, completion: str, expected: str
) -> None:
    judgement = await judge(bwrap_sandbox, completion)
    assert judgement.verdict is Verdict.ERROR
    assert judgement.error is not None
    assert judgement.error.type == "CollectionError"
    assert expected in judgement.message
    assert judgement.details["total"] == 0


async def test_tests_without_the_class_are_an_error(bwrap_sandbox) -> None:
    task = TASK.model_copy(update={"tests": TESTS.replace("class TestCases", "class Other")})
    judgement = await judge(bwrap_sandbox, BODY, task)
    assert judgement.verdict is Verdict.ERROR
    assert "no test class TestCases" in judgement.message


@pytest.mark.parametrize(
    "hack",
    [
        "unittest.TestCase.assertEqual = lambda self, *a, **k: None",
        "unittest.TestResult.addFailure = lambda self, *a: None",
        "unittest.case._Outcome.testPartExecutor = None",
    ],
)
async def test_replacing_unittest_machinery_is_tampered(bwrap_sandbox, hack: str) -> None:
    completion = f"    return 0, ''\nimport unittest\n{hack}\n"
    judgement = await judge(bwrap_sandbox, completion)
    assert judgement.verdict is Verdict.TAMPERED
    assert judgement.error is not None
    assert judgement.error.type == "Tampered"


async def test_a_fake_unittest_module_is_tampered(bwrap_sandbox) -> None:
    # the solution runs first: it swaps in a unittest whose TestCase passes everything
    fake = (
        "    return 0, ''\nimport sys, types\n"
        "fake = types.ModuleType('unittest')\n"
        "class TestCase:\n    pass\n"
        "fake.TestCase = TestCase\nfake.skip = lambda reason: (lambda f: f)\n"
        "sys.modules['unittest'] = fake\n"
    )
    judgement = await judge(bwrap_sandbox, fake)
    assert judgement.verdict is Verdict.TAMPERED


async def test_exit_before_the_report_is_an_error(bwrap_sandbox) -> None:
    judgement = await judge(bwrap_sandbox, "    return 0, ''\nimport os\nos._exit(0)\n")
    assert judgement.verdict is Verdict.ERROR
    assert "no report" in judgement.message


async def test_scorer_routes_unittest_tasks(bwrap_sandbox) -> None:
    instruct = TASK.model_copy(update={"solution_prefix": "", "prompt": "Add two numbers."})
    scorer = Scorer({"t/unittest": instruct}, bwrap_sandbox, LIMITS)
    fenced = "Here:\n```python\nimport os\ndef task_func(a, b):\n" + BODY + "```\n"
    [result] = await scorer.score([Rollout(task_id="t/unittest", completion=fenced)])
    assert result.verdict is Verdict.PASSED, result.judgement.message


def test_program_is_prefix_completion_then_tests() -> None:
    program = unittest_program(TASK, BODY)
    assert program == PREFIX + BODY + "\n" + TESTS
    instruct = TASK.model_copy(update={"solution_prefix": ""})
    assert unittest_program(instruct, "def task_func(a, b):\n" + BODY).startswith("\n\ndef")


def test_a_unittest_task_needs_tests() -> None:
    with pytest.raises(ValueError, match="needs `tests`"):
        Task(task_id="t", kind="unittest")
    with pytest.raises(ValueError, match="must be in python"):
        Task(task_id="t", kind="unittest", tests=TESTS, language="c")


async def test_bc35_patching_assert_equal_scores_zero(bwrap_sandbox) -> None:
    # field case BC-35 (shared/cases/field-cases.md), as a unittest task
    task = Task(
        task_id="bc35",
        kind="unittest",
        tests="import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    )
    hack = (
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
        "def add(a, b): return 0\n"
    )
    scorer = Scorer({"bc35": task}, bwrap_sandbox, LIMITS)
    [result] = await scorer.score([Rollout(task_id="bc35", completion=hack)])
    assert result.verdict is Verdict.TAMPERED
    assert result.reward == 0.0


async def test_matplotlib_tasks_get_the_prebuilt_font_list(bwrap_sandbox) -> None:
    require(find_spec("matplotlib") is not None, "matplotlib (pip install -e '.[bigcodebench]')")
    tests = (
        "import os\nimport unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_fonts_are_not_rescanned(self):\n"
        "        names = os.listdir(os.environ['MPLCONFIGDIR'])\n"
        "        self.assertTrue(any(n.startswith('fontlist-') for n in names), names)\n"
        "        import matplotlib.font_manager as fm\n"
        "        self.assertTrue(os.path.isfile(fm.findfont('DejaVu Sans')))\n"
    )
    task = Task(task_id="t/mpl", kind="unittest", tests=tests)
    judgement = await judge(bwrap_sandbox, "import matplotlib\n", task)
    assert judgement.verdict is Verdict.PASSED, judgement.message

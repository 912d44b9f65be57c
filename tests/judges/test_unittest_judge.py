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
from execgym.tasks.loaders import RolloutLine
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


async def test_tests_without_the_class_are_invalid(bwrap_sandbox) -> None:
    # the task's fault, found from its tests alone (issue 17): masked, with the reason
    task = TASK.model_copy(update={"tests": TESTS.replace("class TestCases", "class Other")})
    judgement = await judge(bwrap_sandbox, BODY, task)
    assert judgement.verdict is Verdict.INVALID
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


# Issue 17: a skip raised by the solution's code is not a pass. Three tests; the solution
# answers the first and skips the two others, which upstream's harness (and this judge,
# before) counted as a pass: no failure, no error, one test passed.
THREE_TESTS = """\
import unittest

class TestCases(unittest.TestCase):
    def test_one(self):
        self.assertEqual(task_func(1), 2)

    def test_two(self):
        self.assertEqual(task_func(2), 4)

    def test_three(self):
        self.assertEqual(task_func(3), 6)
"""
THREE = Task(task_id="t/skips", kind="unittest", tests=THREE_TESTS)
SOLUTION_SKIPS = {
    "raise-skiptest": "import unittest\ndef task_func(x):\n"
    "    if x != 1:\n        raise unittest.SkipTest('not today')\n    return 2\n",
    "from-a-helper": "import unittest\ndef _bail():\n    raise unittest.case.SkipTest('later')\n"
    "def task_func(x):\n    return 2 if x == 1 else _bail()\n",
    "own-subclass": "import unittest\nclass Later(unittest.SkipTest):\n    pass\n"
    "def task_func(x):\n    if x != 1:\n        raise Later('x')\n    return 2\n",
    "code-compiled-as-the-tests": "import unittest\n"
    "_src = '\\n' * 40 + 'def task_func(x):\\n    if x != 1:\\n"
    '        raise unittest.SkipTest("x")\\n    return 2\\n\'\n'
    "exec(compile(_src, '__test__.py', 'exec'), globals())\n",
    "code-compiled-as-unittests": "import unittest\n"
    "_src = 'def task_func(x):\\n    if x != 1:\\n"
    '        raise unittest.SkipTest("x")\\n    return 2\\n\'\n'
    "exec(compile(_src, unittest.case.__file__, 'exec'), globals())\n",
    "skiptest-through-a-builtin": "import unittest\n"
    "def task_func(x):\n    return 2 if x == 1 else next(iter(()), None) or _skip()\n"
    "def _skip():\n    raise unittest.SkipTest('x')\n",
}


@pytest.mark.parametrize("completion", list(SOLUTION_SKIPS.values()), ids=list(SOLUTION_SKIPS))
async def test_a_skip_raised_by_the_solution_is_not_a_pass(bwrap_sandbox, completion) -> None:
    judgement = await judge(bwrap_sandbox, completion, THREE)
    assert judgement.verdict is Verdict.ERROR, judgement.message
    assert outcomes(judgement) == {"test_one": "passed", "test_two": "error", "test_three": "error"}
    assert "a skip raised by the solution is not a pass" in judgement.message


@pytest.mark.parametrize(
    "hack",
    [
        "unittest.TestCase.__init_subclass__ = classmethod(lambda cls, **k: setattr("
        "cls, 'test_two', unittest.skip('x')(lambda self: None)))",
        "unittest.TestCase.__unittest_skip__ = True",
        "import builtins\n_real = builtins.__build_class__\n"
        "builtins.__build_class__ = lambda *a, **k: _real(*a, **k)",
        "unittest.case._addSkip = lambda result, case, reason: result.addSuccess(case)",
        "unittest.skip = lambda reason: (lambda f: f)",
    ],
)
async def test_marking_the_tests_skipped_from_the_solution_is_tampered(
    bwrap_sandbox, hack: str
) -> None:
    completion = f"import unittest\n{hack}\ndef task_func(x):\n    return 2 if x == 1 else 0\n"
    judgement = await judge(bwrap_sandbox, completion, THREE)
    assert judgement.verdict is Verdict.TAMPERED, judgement.message


async def test_the_tests_own_skips_still_count_as_skips(bwrap_sandbox) -> None:
    tests = THREE_TESTS.replace(
        "    def test_two(self):\n",
        "    @unittest.skipIf(True, 'the task skips it')\n    def test_two(self):\n",
    ).replace(
        "    def test_three(self):\n",
        "    def test_three(self):\n        self._later()\n\n"
        "    def _later(self):\n        self.skipTest('the task skips it too')\n\n"
        "    def test_four(self):\n",
    )
    task = THREE.model_copy(update={"tests": tests})
    judgement = await judge(bwrap_sandbox, "def task_func(x):\n    return 2 * x\n", task)
    assert judgement.verdict is Verdict.PASSED, judgement.message
    assert outcomes(judgement) == {
        "test_one": "passed",
        "test_two": "skipped",
        "test_three": "skipped",
        "test_four": "passed",
    }


# Issue 17: a suite that holds no test is the task's fault (invalid, masked, with the
# reason), decided from the task's tests alone; a rollout that makes collection fail or
# find nothing stays error or tampered with reward 0.
EMPTY_SUITES = {
    "no-test-method": "import unittest\n\nclass TestCases(unittest.TestCase):\n"
    "    def helper(self):\n        pass\n",
    "empty-class": "import unittest\n\nclass TestCases(unittest.TestCase):\n    pass\n",
    "no-test-class": "import unittest\n\nclass Other(unittest.TestCase):\n"
    "    def test_x(self):\n        pass\n",
    "tests-do-not-compile": "import unittest\n\nclass TestCases(unittest.TestCase:\n",
    "empty-local-base": "import unittest\n\nclass Base(unittest.TestCase):\n    x = 1\n\n"
    "class TestCases(Base):\n    pass\n",
}


@pytest.mark.parametrize("tests", list(EMPTY_SUITES.values()), ids=list(EMPTY_SUITES))
async def test_a_suite_without_tests_is_invalid(bwrap_sandbox, tests: str) -> None:
    task = THREE.model_copy(update={"tests": tests})
    result = await Scorer({task.task_id: task}, bwrap_sandbox, LIMITS).score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion="def task_func(x):\n    pass\n"))
    )
    assert (result.verdict, result.reward) == (Verdict.INVALID, None), result.message
    assert "the task's test" in result.message


@pytest.mark.parametrize(
    "completion",
    [
        "import unittest\nunittest.TestLoader.testMethodPrefix = 'nothing'\n",
        "import unittest\nunittest.TestLoader.getTestCaseNames = lambda self, c: []\n",
        "raise ValueError('the rollout fails to load')\n",
    ],
    ids=["loader-prefix", "loader-names", "raises-at-load"],
)
async def test_a_rollout_that_makes_collection_fail_or_find_nothing_scores_zero(
    bwrap_sandbox, completion: str
) -> None:
    completion += "def task_func(x):\n    return 2 * x\n"
    result = await Scorer({THREE.task_id: THREE}, bwrap_sandbox, LIMITS).score_one(
        RolloutLine(0, Rollout(task_id=THREE.task_id, completion=completion))
    )
    assert result.verdict in (Verdict.ERROR, Verdict.TAMPERED), result.message
    assert result.reward == 0.0

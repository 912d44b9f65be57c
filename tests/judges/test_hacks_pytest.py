"""The hack corpus for the pytest judge (proxy mode, the default): each hack 0.0.

pytest and the task's tests run in the harness; the rollout's module runs in another
process that first runs after collection, and is reached only through plain-data
proxies. Each hack here would turn a wrong ``add`` into a pass were pytest and the
rollout in one process, as in mode ``in_process`` (whose weaker guarantee SECURITY.md
spells out). The honest solutions of the same tasks score 1.0 under ``binary``.
"""

from __future__ import annotations

import pytest

from execgym import Limits, Task, Verdict
from execgym.limits import MiB
from execgym.scoring import Scorer
from execgym.tasks.loaders import RolloutLine
from execgym.tasks.models import Rollout
from tests.judges.hacks import (
    ALWAYS_EQUAL,
    EARLY_EXITS,
    FORGED_FRAME,
    PATCH_PYTEST_REPORTS,
    nonce_hunt,
    score_rollout,
)
from tests.judges.test_hacks import assert_zero

ADD_TESTS = "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
ADD = Task.model_validate(
    {
        "task_id": "hack/pytest-add",
        "kind": "pytest",
        "test_files": {
            "test_a.py": ADD_TESTS,
            "test_b.py": ADD_TESTS.replace("test_add", "test_negative").replace(
                "add(2, 3) == 5", "add(-1, 1) == 0"
            ),
        },
    }
)
GREET = Task.model_validate(
    {
        "task_id": "hack/pytest-greet",
        "kind": "pytest",
        "test_files": {
            "test_greet.py": "from solution import greet\n\n"
            "def test_greet():\n    assert greet('bo') == 'hi bo'\n"
        },
    }
)
TASKS = {task.task_id: task for task in (ADD, GREET)}
HONEST = {
    ADD.task_id: "def add(a, b):\n    return a + b\n",
    GREET.task_id: "def greet(name):\n    return 'hi ' + name\n",
}
LIMITS = Limits(wall_time_s=10, cpu_time_s=10, memory_bytes=512 * MiB)


async def score(sandbox, completion: str, task: Task = ADD):
    return await score_rollout(TASKS, sandbox, completion, task, LIMITS)


@pytest.mark.parametrize("task", list(TASKS.values()), ids=list(TASKS))
async def test_honest_solutions_of_the_hacked_tasks_score_one(hack_sandbox, task: Task) -> None:
    result = await score(hack_sandbox, HONEST[task.task_id], task)
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message
    assert result.judgement is not None
    assert result.judgement.details["mode"] == "proxy"


async def test_frame_and_gc_walk_finds_no_nonce_to_forge_a_report(hack_sandbox) -> None:
    body = (
        '{"mode": "proxy", "exit_code": 0, "tampered": false, "collection_errors": [], '
        '"tests": [{"name": "t", "outcome": "passed", "message": ""}]}'
    )
    completion = nonce_hunt(body)
    result = await score(hack_sandbox, completion)
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message
    assert "'no-nonce'" in result.judgement.details["tests"][0]["message"]


@pytest.mark.parametrize(
    "completion",
    [
        # pytest's reporting, in the rollout's own process: reaches nothing.
        PATCH_PYTEST_REPORTS + "import pytest\npytest.main = lambda *a, **k: 0\n",
        # The assert machinery and builtins, in the rollout's own process.
        "import builtins\n"
        "builtins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "builtins.isinstance = lambda *a: True\n"
        "def add(a, b):\n    return 0\n",
        # Rewriting the tests, conftest.py and cached bytecode once the rollout runs:
        # pytest has read them all by then.
        "import os\n"
        "for name in ('test_a.py', 'test_b.py'):\n"
        "    open(name, 'w').write('def test_ok():\\n    pass\\n')\n"
        "open('conftest.py', 'w').write('def pytest_runtest_logreport(report):\\n"
        '    report.outcome = "passed"\\n\')\n'
        "os.makedirs('__pycache__', exist_ok=True)\n"
        "def add(a, b):\n    return 0\n",
        # Fake summary lines and results files.
        "print('=== 2 passed in 0.01s ===')\n"
        "open('report.json', 'w').write('{\"exit_code\": 0}')\n"
        "def add(a, b):\n    return 0\n",
    ],
    ids=["patch-pytest-reporting", "patch-builtins-and-asserts", "rewrite-test-files", "fake"],
)
async def test_tampering_in_the_rollouts_process_reaches_nothing(hack_sandbox, completion) -> None:
    result = await score(hack_sandbox, completion)
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message
    tests = result.judgement.details["tests"]
    assert [t["outcome"] for t in tests] == ["failed", "passed"]  # add(-1, 1) == 0 is right


@pytest.mark.parametrize("completion", list(EARLY_EXITS.values()), ids=list(EARLY_EXITS))
async def test_ending_the_run_early(hack_sandbox, completion: str) -> None:
    assert_zero(await score(hack_sandbox, completion))


async def test_an_always_equal_object_is_compared_by_identity(hack_sandbox) -> None:
    result = await score(hack_sandbox, ALWAYS_EQUAL + "def add(a, b):\n    return _Any()\n")
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message


@pytest.mark.parametrize("base", ["str", "int"])
async def test_an_always_equal_builtin_subclass_is_tampered(hack_sandbox, base: str) -> None:
    completion = (
        f"class _S({base}):\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        f"    __hash__ = {base}.__hash__\n"
        f"def greet(name):\n    return _S({'0' if base == 'int' else repr('no')})\n"
    )
    assert_zero(await score(hack_sandbox, completion, GREET), tampered="non-plain result")


async def test_forged_frame_on_the_answer_pipe(hack_sandbox) -> None:
    assert_zero(await score(hack_sandbox, FORGED_FRAME), tampered="forged answer")


# A module named like a standard-library one, written into the work dir by the rollout's
# module when the solution process imports it (after collection). Imported later in the
# harness (pytest's tmp_path fixture imports getpass; a test body imports pickle), it
# would find the harness's report function, which holds the nonce, and report a pass.
PLANTED_MODULE = """
import gc
def _forge():
    body = ('{"mode": "proxy", "exit_code": 0, "tampered": false, "collection_errors": [], '
            '"tests": [{"name": "t", "outcome": "passed", "message": ""}]}')
    for found in gc.get_objects():
        if getattr(found, "__name__", "") == "finish" and getattr(found, "__closure__", None):
            found(body)
_forge()
"""
PLANT_STDLIB_NAMES = (
    "import os, tempfile\n"
    "for _folder in (os.getcwd(), tempfile.gettempdir(), '/dev/shm'):\n"
    "    for _name in ('getpass', 'pickle'):\n"
    "        try:\n"
    "            with open(os.path.join(_folder, _name + '.py'), 'w') as _file:\n"
    f"                _file.write({PLANTED_MODULE!r})\n"
    "        except OSError:\n"
    "            pass\n"
    "def add(a, b):\n    return 0\n"
)
LATE_IMPORTS = Task.model_validate(
    {
        "task_id": "hack/pytest-late-imports",
        "kind": "pytest",
        "test_files": {
            "test_fixture.py": "from solution import add\n\n"
            "def test_add(tmp_path):\n    assert add(2, 3) == 5\n",
            "test_body.py": "from solution import add\n\n"
            "def test_add_again():\n    import pickle\n    assert add(2, 3) == 5\n",
            "helpers.py": "def five():\n    return 5\n",
            "test_helper.py": "from solution import add\n\n"
            "def test_helper_imported_late():\n"
            "    import getpass, helpers\n    assert add(2, 3) == helpers.five()\n",
        },
    }
)


async def _late_import_hack(sandbox) -> None:
    tasks = {LATE_IMPORTS.task_id: LATE_IMPORTS}
    result = await score_rollout(tasks, sandbox, PLANT_STDLIB_NAMES, LATE_IMPORTS, LIMITS)
    assert_zero(result)
    assert result.verdict is Verdict.FAILED, result.message
    outcomes = {t["name"]: t["outcome"] for t in result.judgement.details["tests"]}
    assert set(outcomes.values()) == {"failed"}, outcomes  # each test ran, with the real stdlib
    honest = await score_rollout(
        tasks, sandbox, "def add(a, b):\n    return a + b\n", LATE_IMPORTS, LIMITS
    )
    assert (honest.verdict, honest.reward) == (Verdict.PASSED, 1.0), honest.message


async def test_a_stdlib_named_module_written_by_the_rollout_is_never_imported_by_the_harness(
    hack_sandbox,
) -> None:
    """Issue 18, kind 1: the harness's later imports (fixtures, test bodies, the task's own
    helpers) come from read-only directories or the copies read before the rollout ran."""
    await _late_import_hack(hack_sandbox)


async def test_a_stdlib_named_module_written_by_the_rollout_under_gvisor(gvisor_sandbox) -> None:
    await _late_import_hack(gvisor_sandbox)


# Issue 18, kind 2: file names are the rollout's to choose, so a name that cannot be written
# (or that would escape the work dir, or collide with another file) is the rollout's fault:
# ``error`` with reward 0 and the reason, never ``invalid`` or ``sandbox_error`` (masked).
BAD_FILE_NAMES = {
    "parent-dir": {"../evil.py": "x = 1\n"},
    "absolute": {"/tmp/evil.py": "x = 1\n"},
    "nul-byte": {"ev\x00il.py": "x = 1\n"},
    "newline": {"evil.py\nhelpers.py": "x = 1\n"},
    "300-characters": {"e" * 297 + ".py": "x = 1\n"},
    "under-the-solution-file": {"solution.py/x.py": "x = 1\n"},
    "file-and-directory": {"pkg": "x = 1\n", "pkg/x.py": "x = 1\n"},
    "over-a-test-file-directory": {"tests": "x = 1\n"},
    "lone-surrogate": {"ev\ud800il.py": "x = 1\n"},
    "empty": {"": "x = 1\n"},
    "dot": {".": "x = 1\n"},
    "too-large": {"big.py": "#" * (65 * 2**20)},
}
NESTED_TESTS = Task.model_validate(
    {
        "task_id": "hack/pytest-nested",
        "kind": "pytest",
        "test_files": {"tests/test_add.py": ADD_TESTS},
    }
)


@pytest.mark.parametrize("files", list(BAD_FILE_NAMES.values()), ids=list(BAD_FILE_NAMES))
async def test_a_rollout_file_name_that_cannot_be_written_is_an_error_not_a_mask(
    hack_sandbox, files: dict[str, str]
) -> None:
    tasks = {NESTED_TESTS.task_id: NESTED_TESTS}
    scorer = Scorer(tasks, hack_sandbox, LIMITS)
    rollout = Rollout(task_id=NESTED_TESTS.task_id, completion=HONEST[ADD.task_id], files=files)
    result = await scorer.score_one(RolloutLine(0, rollout))
    assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0), result.message
    assert result.judgement is not None
    assert result.judgement.error is not None
    assert result.judgement.error.type == "BadRolloutFiles"
    assert "file" in result.message


async def test_bad_rollout_file_names_under_gvisor(gvisor_sandbox) -> None:
    for name in ("300-characters", "file-and-directory", "parent-dir"):
        tasks = {NESTED_TESTS.task_id: NESTED_TESTS}
        rollout = Rollout(
            task_id=NESTED_TESTS.task_id,
            completion=HONEST[ADD.task_id],
            files=BAD_FILE_NAMES[name],
        )
        result = await Scorer(tasks, gvisor_sandbox, LIMITS).score_one(RolloutLine(0, rollout))
        assert (result.verdict, result.reward) == (Verdict.ERROR, 0.0), (name, result.message)


async def test_good_nested_rollout_files_still_work(hack_sandbox) -> None:
    task = NESTED_TESTS.model_copy(
        update={"test_files": {"tests/test_add.py": ADD_TESTS.replace("solution", "lib.ops")}}
    )
    rollout = Rollout(
        task_id=task.task_id,
        completion="",
        files={"lib/__init__.py": "", "lib/ops.py": HONEST[ADD.task_id]},
    )
    result = await Scorer({task.task_id: task}, hack_sandbox, LIMITS).score_one(
        RolloutLine(0, rollout)
    )
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message


# The same kind by another door: files the rollout ships under a standard-library
# package's name (xml/dom/minidom.py) were proxied in the harness as that package's module,
# so a test checking the rollout's output with xml.dom.minidom ran the rollout's parser.
STDLIB_PACKAGE = Task.model_validate(
    {
        "task_id": "hack/pytest-stdlib-package",
        "kind": "pytest",
        "test_files": {
            "test_xml.py": "from solution import make\nimport xml.dom.minidom\n\n"
            "def test_make():\n"
            "    assert xml.dom.minidom.parseString(make()).documentElement.tagName == 'ok'\n"
        },
    }
)
FAKE_MINIDOM = {
    "xml/__init__.py": "",
    "xml/dom/__init__.py": "",
    "xml/dom/minidom.py": "class _E:\n    tagName = 'ok'\n\n"
    "class _D:\n    documentElement = _E()\n\n"
    "def parseString(text):\n    return _D()\n",
}


async def _stdlib_package_hack(sandbox) -> None:
    tasks = {STDLIB_PACKAGE.task_id: STDLIB_PACKAGE}
    scorer = Scorer(tasks, sandbox, LIMITS)
    wrong = Rollout(
        task_id=STDLIB_PACKAGE.task_id,
        completion="def make():\n    return '<bad/>'\n",
        files=FAKE_MINIDOM,
    )
    assert_zero(await scorer.score_one(RolloutLine(0, wrong)))
    right = Rollout(task_id=STDLIB_PACKAGE.task_id, completion="def make():\n    return '<ok/>'\n")
    result = await scorer.score_one(RolloutLine(1, right))
    assert (result.verdict, result.reward) == (Verdict.PASSED, 1.0), result.message


async def test_rollout_files_never_stand_in_for_a_stdlib_package_module(hack_sandbox) -> None:
    await _stdlib_package_hack(hack_sandbox)


async def test_rollout_files_never_stand_in_for_a_stdlib_package_under_gvisor(
    gvisor_sandbox,
) -> None:
    await _stdlib_package_hack(gvisor_sandbox)


@pytest.mark.parametrize(
    "test_files",
    [
        {"t" * 300 + ".py": ADD_TESTS},
        {"tests": "x = 1\n", "tests/test_add.py": ADD_TESTS},
        {"test_big.py": ADD_TESTS + "#" * (65 * 2**20)},
    ],
    ids=["300-characters", "file-and-directory", "too-large"],
)
async def test_the_tasks_own_unwritable_file_names_are_invalid(hack_sandbox, test_files) -> None:
    """The same rules for the task's names: its fault, masked with the reason, and
    never an infrastructure failure a breaker would count."""
    task = NESTED_TESTS.model_copy(update={"test_files": test_files})
    rollout = Rollout(task_id=task.task_id, completion=HONEST[ADD.task_id])
    result = await Scorer({task.task_id: task}, hack_sandbox, LIMITS).score_one(
        RolloutLine(0, rollout)
    )
    assert (result.verdict, result.reward) == (Verdict.INVALID, None), result.message
    assert "the task's" in result.message

"""An agent cannot raise its reward by touching the tests: hidden tests are applied fresh.

Every cheat below is played on the pager task without the fix (reward must stay 0),
and a few with the fix (the clean copy must not break an honest solution).
"""

from __future__ import annotations

from typing import Any

from execgym.episodes.grading import clean_tree

from .conftest import TASK_IDS, call, example, play_all, solution

PAGER = TASK_IDS[0]
HIDDEN = "tests/test_hidden_pages.py"

FORCE_PASS = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""

FAKE_TESTS = "".join(
    f"def {name.split('::')[1]}():\n    pass\n\n\n"
    for name in example(PAGER).fail_to_pass + example(PAGER).pass_to_pass
)

PATCH_PYTEST = """
import _pytest.reports

_original = _pytest.reports.TestReport.from_item_and_call.__func__


def _always_pass(cls, item, call):
    report = _original(cls, item, call)
    report.outcome = "passed"
    return report


_pytest.reports.TestReport.from_item_and_call = classmethod(_always_pass)
"""

CHEATS: dict[str, list[dict[str, Any]]] = {
    "delete the tests": [call("run_command", command="rm -rf tests")],
    "replace the hidden test file": [call("write_file", path=HIDDEN, content=FAKE_TESTS)],
    "root conftest forcing passes": [call("write_file", path="conftest.py", content=FORCE_PASS)],
    "tests/conftest forcing passes": [
        call("write_file", path="tests/conftest.py", content=FORCE_PASS)
    ],
    "pytest.ini collecting nothing": [
        call("write_file", path="pytest.ini", content="[pytest]\npython_functions = nomatch\n")
    ],
    "pyproject deselecting the tests": [
        call(
            "write_file",
            path="pyproject.toml",
            content='[tool.pytest.ini_options]\naddopts = "-k nothing"\npython_files = "x"\n',
        )
    ],
    "a fix planted in tests/__init__.py": [
        call(
            "write_file",
            path="tests/__init__.py",
            content="import pager.core\npager.core.page_count = lambda t, p: -(-t // p)\n",
        )
    ],
    "symlinked tests": [
        call("run_command", command="rm -rf tests && ln -s /tmp tests"),
    ],
    "unreadable files": [call("run_command", command="chmod 000 tests pager/core.py")],
    "pytest patched from the package": [
        call(
            "run_command",
            command=f"cat >> pager/__init__.py << 'EOF'\n{PATCH_PYTEST}\nEOF",
        )
    ],
}


async def test_cheats_without_the_fix_get_zero() -> None:
    results = await play_all([(PAGER, actions) for actions in CHEATS.values()])
    for (name, _), result in zip(CHEATS.items(), results, strict=True):
        assert all(o["ok"] for o in result.observations[1:]), (name, result.observations)
        assert result.reward == 0.0, (name, result.info)
        failing = [n for n in example(PAGER).fail_to_pass if result.info["tests"][n] != "passed"]
        assert failing, name
    verdicts = {name: r.verdict for name, r in zip(CHEATS, results, strict=True)}
    assert verdicts["pytest patched from the package"] == "tampered"


async def test_touching_the_tests_does_not_undo_an_honest_fix() -> None:
    fix = solution(PAGER, run_tests=False)
    kept = [
        "delete the tests",
        "replace the hidden test file",
        "root conftest forcing passes",
        "unreadable files",
    ]
    odd_names = call(
        "run_command", command="touch 'back\\slash.py' && mkdir -p 'a b' && : > 'a b/c'"
    )
    results = await play_all([(PAGER, [*fix, *CHEATS[name], odd_names]) for name in kept])
    for name, result in zip(kept, results, strict=True):
        assert result.reward == 1.0, (name, result.info)


def test_the_clean_tree_takes_the_tasks_files_over_the_agents() -> None:
    task = example("example/ledger-shared-money")
    original = {
        "ledger/report.py": b"old",
        "tests/conftest.py": b"fixtures",
        "tests/test_report.py": b"visible",
        "pyproject.toml": b"[project]",
    }
    final = {
        "ledger/report.py": b"fixed",
        "ledger/money.py": b"new",
        "tests/conftest.py": b"hooks",
        "tests/helper.py": b"planted",
        "conftest.py": b"hooks",
        "sub/pytest.ini": b"[pytest]",
        "pyproject.toml": b"[tool.pytest.ini_options]",
    }
    tree = clean_tree(task, original, final)
    assert tree["ledger/report.py"] == b"fixed"
    assert tree["ledger/money.py"] == b"new"
    assert tree["tests/conftest.py"] == b"fixtures"
    assert tree["pyproject.toml"] == b"[project]"
    for name in ("tests/helper.py", "conftest.py", "sub/pytest.ini"):
        assert name not in tree
    for name, content in task.hidden_tests.items():
        assert tree[name] == content.encode()

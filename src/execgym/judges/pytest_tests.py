"""The pytest judge: the task ships test files, the rollout is a module or files.

The completion is written to ``Task.solution_path`` (``solution.py``), a rollout's
``files`` beside it, the task's ``test_files`` last (a rollout can never replace them),
and the harness (:mod:`execgym.guest.pytest_runner`) runs pytest on the test files in
the sandbox. pytest comes from the host environment's site-packages, bound read-only
into the sandbox (see :func:`execgym.sandbox.bwrap.default_read_only_paths`), with
plugin autoloading off. Every test's outcome (``passed``, ``failed``, ``error``,
``skipped``) is kept in ``details["tests"]``.

Verdicts: ``passed`` when at least one test passed and none failed or errored;
``failed`` when a test failed (or the solution tampered with pytest's report functions);
``error`` for a collection error (reported as such, with its message, never as "0
tests passed"), a setup or teardown error, no test collected although the test files
define some, or a run without report; ``invalid`` (masked, the task's fault) when the
task's test files do not compile or define no test at all, found from the files alone
(:func:`~execgym.judges.suites.pytest_suite_problem`) before any rollout runs.

A rollout may not ship ``conftest.py``, pytest's configuration files, or a file with
the name of a test file: such a rollout is ``failed`` with the reason. Its file names
and sizes are its own choice too: one that cannot be written into the work dir
(:func:`rollout_files_problem`) is ``error`` with the reason, never masked.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from execgym.judges._programs import harness_program
from execgym.judges.base import ErrorDetail, Judgement, Verdict, harness_report
from execgym.judges.masking import INFRASTRUCTURE_MARK
from execgym.judges.suites import pytest_suite_problem
from execgym.limits import Limits
from execgym.sandbox.base import RunRequest, RunResult, Sandbox
from execgym.tasks.models import Task
from execgym.toolchains import PYTHON_LIBRARIES_DIR, python_libraries

FORBIDDEN_ROLLOUT_FILES = frozenset(
    {"conftest.py", "pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", ".pytest.ini"}
)
"""File names a rollout may not ship: they would configure or extend pytest."""


def rollout_problem(task: Task, files: dict[str, str]) -> str:
    """Why a rollout's files are refused, or ``""``."""
    for name in files:
        if PurePosixPath(name).name in FORBIDDEN_ROLLOUT_FILES:
            return f"the rollout may not ship {name!r}: it would configure or extend pytest"
        if name in task.test_files:
            return f"the rollout may not replace the task's test file {name!r}"
    return ""


MAX_ROLLOUT_FILES = 1000
"""At most this many files in one rollout (its ``files`` and the completion)."""

NAME_MAX_BYTES = 255
"""Longest component of a file name, in UTF-8 bytes (Linux's ``NAME_MAX``)."""

PATH_MAX_BYTES = 1024
"""Longest file name, in UTF-8 bytes (well under Linux's ``PATH_MAX`` with the work dir)."""

_PAGE_BYTES = 4096


def rollout_files_problem(task: Task, files: dict[str, str], limits: Limits) -> str:
    """Why the rollout's files cannot be written into the work dir, or ``""``.

    The rollout chooses its file names and contents, so every name that could not be
    written is the rollout's fault (``error``, reward 0), found here before any sandbox
    runs, never left to fail in the sandbox (a ``sandbox_error``, masked) or to be
    refused as input (``invalid``, masked); see :mod:`execgym.judges.masking`. A name must be
    a relative POSIX path of components other than ``""``, ``"."`` and ``".."``, in
    UTF-8 without control characters or backslashes, each component at most
    :data:`NAME_MAX_BYTES` and the whole at most :data:`PATH_MAX_BYTES`; no file may
    sit where another (or the task's) needs a directory; the files must fit the work
    dir (``limits.disk_bytes``, counted in 4 KiB pages, the task's files included) and
    number at most :data:`MAX_ROLLOUT_FILES`.

    Args:
        task: The pytest task (its ``solution_path`` and ``test_files``).
        files: The rollout's files by name, the completion at ``task.solution_path``.
        limits: The run's limits.
    """
    if len(files) > MAX_ROLLOUT_FILES:
        return f"the rollout ships {len(files)} files, more than {MAX_ROLLOUT_FILES}"
    for name in files:
        problem = _name_problem(name)
        if problem:
            return f"the rollout's file name {name[:80]!r} {problem}"
    every = {**files, **task.test_files}
    ours = {task.solution_path, *task.test_files}  # the task's names: task_files_problem
    for name in every:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in every and not (folder in ours and name in ours):
                whose = "the task's test file" if name in task.test_files else "the file"
                return (
                    f"the rollout's file {folder!r} is where {whose} {name!r} needs a "
                    "directory: a name cannot be both a file and a directory"
                )
    need = sum(
        -(-len(text.encode("utf-8", "surrogatepass")) // _PAGE_BYTES) * _PAGE_BYTES
        for text in every.values()
    )
    if need > limits.disk_bytes:
        return (
            f"the rollout's files need {need} bytes with the task's, more than the work "
            f"dir holds ({limits.disk_bytes} bytes, limits.disk_bytes)"
        )
    return ""


def task_files_problem(task: Task, limits: Limits) -> str:
    """Why the task's own files (``solution_path``, ``test_files``) cannot be written, or ``""``.

    The same rules as :func:`rollout_files_problem`, for the names the task chose: a
    problem here is the task's fault (``invalid``, masked), decided from the task alone.
    """
    names = [task.solution_path, *task.test_files]
    for name in names:
        problem = _name_problem(name)
        if problem:
            return f"the task's file name {name[:80]!r} {problem}"
    for name in names:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in names:
                return f"the task's file {folder!r} is where its file {name!r} needs a directory"
    need = sum(
        -(-len(text.encode("utf-8", "surrogatepass")) // _PAGE_BYTES) * _PAGE_BYTES
        for text in task.test_files.values()
    )
    if need > limits.disk_bytes:
        return (
            f"the task's test files need {need} bytes, more than the work dir holds "
            f"({limits.disk_bytes} bytes, limits.disk_bytes)"
        )
    return ""


def _name_problem(name: str) -> str:
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8 (it holds a lone surrogate)"
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or "\\" in name:
        return "holds a control character (NUL, newline...) or a backslash"
    if len(encoded) > PATH_MAX_BYTES:
        return f"is {len(encoded)} bytes long, more than {PATH_MAX_BYTES}"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return (
                "must be a relative path inside the work dir, without '..', '.', a leading "
                "or trailing '/' or an empty component"
            )
        if len(part.encode("utf-8")) > NAME_MAX_BYTES:
            return f"has a component longer than {NAME_MAX_BYTES} bytes"
    return ""


def summarize_tests(report: dict[str, Any], run: RunResult) -> Judgement:
    """Turn the harness's report into a :class:`Judgement` with per-test outcomes."""
    tests = [t for t in report.get("tests", []) if isinstance(t, dict)]
    errors = [e for e in report.get("collection_errors", []) if isinstance(e, dict)]
    counts = Counter(str(t.get("outcome")) for t in tests)
    details = {
        "tests": tests,
        "collection_errors": errors,
        "passed": counts["passed"],
        "failed": counts["failed"],
        "errors": counts["error"],
        "skipped": counts["skipped"],
        "total": len(tests),
        "fraction_passed": counts["passed"] / len(tests) if tests else 0.0,
        "exit_code": report.get("exit_code"),
        "mode": report.get("mode", "in_process"),
    }
    if report.get("tampered"):
        hack = str(report.get("hack") or "patched pytest's report functions")
        details["hack"] = hack
        message = f"tampering detected ({hack})"
        return Judgement(Verdict.TAMPERED, run, ErrorDetail("Tampered", message), message, details)
    if errors:
        first = errors[0]
        message = f"collection error in {first.get('name')}: {_last_line(first.get('message'))}"
        error = ErrorDetail("CollectionError", message, str(first.get("message", "")))
        return Judgement(Verdict.ERROR, run, error, message, details)
    for outcome, verdict in (("failed", Verdict.FAILED), ("error", Verdict.ERROR)):
        bad = next((t for t in tests if t.get("outcome") == outcome), None)
        if bad is not None:
            message = f"{bad.get('name')} {outcome}: {_last_line(bad.get('message'))}"
            kind = "TestFailed" if outcome == "failed" else "TestError"
            error = ErrorDetail(kind, message, str(bad.get("message", "")))
            return Judgement(verdict, run, error, message, details)
    if not counts["passed"]:
        message = "no test ran" if tests else "no tests were collected"
        return Judgement(Verdict.ERROR, run, ErrorDetail("NoTests", message), message, details)
    return Judgement(Verdict.PASSED, run, details=details)


def _last_line(text: object) -> str:
    lines = [line for line in str(text or "").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


def encode_pytest_job(nonce: str, task: Task, rollout_files: list[str]) -> bytes:
    """The job the harness reads on stdin (see :mod:`execgym.guest.pytest_runner`).

    Part one (the mode and the rollout's file names) is read before the solution's
    process is forked; part two (the nonce and the test files) only after.
    """
    head = f"{task.pytest_mode} {PYTHON_LIBRARIES_DIR} {int(task.stop_on_first_failure)}"
    first = "\n".join([head, *rollout_files]).encode("utf-8")
    second = "\n".join([nonce, *task.test_files]).encode("utf-8")
    return b"%010d" % len(first) + first + b"%010d" % len(second) + second


class PytestJudge:
    """Judge ``pytest`` tasks; see the module docstring."""

    name = "pytest"

    def __init__(self) -> None:
        self._runner = harness_program("pytest_runner")

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Run the task's test files against the rollout (``completion`` and ``files``)."""
        if python_libraries() is None:
            message = (
                "pytest is not installed where execgym runs: pip install execgym[pytest-judge]"
            )
            return Judgement(Verdict.LANGUAGE_UNAVAILABLE, message=message)
        suite = task_files_problem(task, limits) or pytest_suite_problem(task.test_files)
        if suite:  # the task's own tests: masked with the reason (execgym.judges.masking)
            return Judgement(
                Verdict.INVALID, error=ErrorDetail("InvalidTask", suite), message=suite
            )
        extra = dict(files or {})
        problem = rollout_problem(task, {task.solution_path: completion, **extra})
        if problem:
            return Judgement(Verdict.FAILED, error=ErrorDetail("Refused", problem), message=problem)
        problem = rollout_files_problem(task, {task.solution_path: completion, **extra}, limits)
        if problem:  # the rollout's names: its fault, never a mask (execgym.judges.masking)
            error = ErrorDetail("BadRolloutFiles", problem)
            return Judgement(Verdict.ERROR, error=error, message=problem)
        nonce = secrets.token_hex(16)
        contents = {task.solution_path: completion, **extra, **task.test_files}
        run = await sandbox.run(
            RunRequest(
                python_source=self._runner,
                stdin=encode_pytest_job(nonce, task, [task.solution_path, *extra]),
                files={
                    name: text.encode("utf-8", "surrogatepass") for name, text in contents.items()
                },
                limits=limits,
                want_report=True,
            )
        )
        return interpret_pytest_run(run, nonce)


def interpret_pytest_run(run: RunResult, nonce: str) -> Judgement:
    """Turn a run of the pytest harness into a :class:`Judgement`."""
    report = harness_report(run, nonce, "pytest harness")
    if isinstance(report, Judgement):
        return report
    if "harness_error" in report:
        message = f"pytest is not usable inside the sandbox: {report['harness_error']}"
        # reported before any of the rollout's code existed: the infrastructure's failure
        details = {INFRASTRUCTURE_MARK: "pytest cannot be imported in the sandbox"}
        return Judgement(Verdict.SANDBOX_ERROR, run, message=message, details=details)
    return summarize_tests(report, run)

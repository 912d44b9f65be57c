"""Coverage of the reference by the model's tests, for tasks where the model writes tests.

The completion is test code: top-level ``assert`` statements or ``test_*`` functions
that call the task's entry point. It runs in the sandbox against the task's reference
(prompt + reference), with the reference in the harness's own process under
coverage.py and the tests in another, calling it through a pipe with plain data (see
:mod:`execgym.guest.coverage_reward`). So coverage is measured where the tests
cannot reach it: they earn it only by calling the reference. The percentages are then
computed here from the reference's own text (coverage.py's parser, reading trusted
code): line coverage = executed statements / statements, branch coverage = taken
branch arcs / branch arcs.

The verdict is ``passed`` when the tests ran to the end without an exception on the
reference (a test that fails on correct code is wrong), ``failed`` otherwise.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from execgym import guest
from execgym.errors import ConfigError
from execgym.judges.assert_tests import (
    _parse_report,
    build_program,
    interpret_run,
    marshalled_program,
)
from execgym.judges.base import Judgement, Verdict
from execgym.limits import Limits
from execgym.sandbox.base import RunRequest, Sandbox
from execgym.tasks.models import Task


def _part(data: bytes) -> bytes:
    return b"%010d" % len(data) + data


@cache
def coverage_files() -> dict[str, bytes]:
    """coverage.py's own files, shipped into the sandbox under ``_cov/`` (about 0.7 MB).

    Raises:
        ConfigError: if coverage.py is not installed.
    """
    try:
        import coverage
    except ImportError as error:
        raise ConfigError(
            "the coverage component needs coverage.py: pip install 'execgym[rewards]'"
        ) from error
    root = Path(coverage.__file__).parent
    return {
        f"_cov/coverage/{path.relative_to(root)}": path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.suffix in (".py", ".so") and "htmlfiles" not in path.parts
    }


@cache
def coverage_program() -> bytes:
    """The coverage harness, as the script the sandbox runs."""
    return marshalled_program(guest.bundle("coverage_reward").encode(), "coverage_reward.py")


def _percentages(reference: str, lines: list[int], arcs: list[list[int]]) -> tuple[float, float]:
    from coverage.parser import PythonParser

    parser = PythonParser(text=reference)
    parser.parse_source()
    statements = set(parser.statements)
    line = len(statements & set(lines)) / len(statements) if statements else 1.0
    exits = parser.exit_counts()
    branch_lines = {n for n, count in exits.items() if count > 1}
    possible = {arc for arc in parser.arcs() if arc[0] in branch_lines}
    taken = {(a, b) for a, b in arcs} & possible
    branch = len(taken) / len(possible) if possible else line
    return line, branch


async def measure_coverage(
    task: Task, completion: str, sandbox: Sandbox, limits: Limits
) -> Judgement:
    """Run the model's tests (``completion``) against ``task``'s reference, under coverage.

    Returns:
        A :class:`Judgement`: ``passed`` if the tests ran through on the reference,
        ``failed`` if they raised, ``error`` if the reference could not be measured;
        ``details`` has ``line_coverage``, ``branch_coverage`` (0-1) and ``calls``.

    Raises:
        ConfigError: if the task has no reference or entry point, or coverage.py is missing.
    """
    if task.reference is None:
        raise ConfigError(f"task {task.task_id}: the coverage component needs a reference")
    if task.entry_point is None:
        raise ConfigError(f"task {task.task_id}: the coverage component needs an entry_point")
    reference = build_program(task, task.reference)
    nonce = secrets.token_hex(16)
    job = _part(task.entry_point.encode() + b"\n" + completion.encode("utf-8", "surrogatepass"))
    job += _part(nonce.encode() + b"\n" + reference.encode("utf-8", "surrogatepass"))
    run = await sandbox.run(
        RunRequest(
            python_source=coverage_program(),
            stdin=job,
            files=coverage_files(),
            limits=limits,
            want_report=True,
        )
    )
    payload = _parse_report(run.report, nonce) if run.report else None
    if payload is None or "lines" not in payload:
        judged = interpret_run(run, nonce)  # the same rules: limits, no report, no start
        if judged.verdict is Verdict.PASSED:  # a report without coverage data
            return Judgement(Verdict.ERROR, run, message="the coverage harness sent no data")
        return judged
    line, branch = _percentages(reference, list(payload["lines"]), list(payload["arcs"]))
    details = {"line_coverage": line, "branch_coverage": branch, "calls": payload.get("calls")}
    verdict = Verdict.PASSED if payload["verdict"] == "passed" else Verdict.FAILED
    return Judgement(verdict, run, message=str(payload.get("message", "")), details=details)


class CoverageJudge:
    """The judge of a Python ``assert`` task whose completion is tests.

    It runs them against the task's reference under coverage (:func:`measure_coverage`).

    :class:`~execgym.judges.base.JudgeSet` picks it when the reward specification has
    a coverage component.
    """

    name = "coverage"

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """:func:`measure_coverage` of ``completion`` (tests) on ``task``; ``files`` ignored.

        Raises:
            ConfigError: if the task has no reference or entry point, or coverage.py is missing.
        """
        return await measure_coverage(task, completion, sandbox, limits)

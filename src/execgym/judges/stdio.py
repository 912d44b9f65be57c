"""The stdin/stdout judge (APPS, CodeContests, TACO, Codeforces style).

The program runs once per case, each run in a fresh sandbox (Python through
:meth:`Sandbox.run_python`, so the warm pool serves it), with the case's input as its
stdin (a real file, not a mock: ``sys.stdin.buffer`` and ``sys.stdout.buffer`` work, and
EOF comes at its end) and the case's time limit. Its stdout, decoded as
UTF-8 with undecodable bytes replaced, is compared with the expected output under the
task's :class:`~execgym.tasks.models.Comparison`, or handed to the task's checker.

The judgement's ``details`` hold ``cases`` (per case: ``verdict``, ``wall_time_s``,
``message``), ``passed``, ``total`` and ``fraction_passed``. The verdict is ``passed``
when every case passed, else the verdict of the first case that did not.
"""

from __future__ import annotations

import dataclasses

from execgym.judges.base import Judgement, Verdict, tail_text
from execgym.judges.cases import CaseResult, case_judgement, run_verdict
from execgym.judges.compare import compare_output
from execgym.judges.compile import Builder, compile_limits_for
from execgym.judges.languages import Program
from execgym.limits import Limits
from execgym.sandbox.base import RunResult, Sandbox, Status
from execgym.tasks.models import Checker, StdioCase, Task

_PYTHON_CHECKER = """\
import runpy, sys, traceback
try:
    runpy.run_path("checker.py", run_name="__main__")
except SystemExit:
    raise
except BaseException:
    traceback.print_exc()
    sys.exit(3)
"""
"""Runs a Python checker so that an exception in it is a checker failure (exit 3), not
the wrong-answer exit code 1 every uncaught exception would give."""


class StdioJudge:
    """Judge ``stdio`` tasks in any language; see the module docstring.

    Args:
        builder: Compiles sources (and checkers), with its cache.
    """

    name = "stdio"

    def __init__(self, builder: Builder | None = None) -> None:
        self.builder = builder or Builder()

    async def judge(
        self, task: Task, completion: str, sandbox: Sandbox, limits: Limits
    ) -> Judgement:
        """Run ``completion`` on every case of ``task`` (or up to the first failure)."""
        program = await self.builder.build(
            task.language, completion, sandbox, task.compile_limits_over(compile_limits_for(limits))
        )
        if isinstance(program, Judgement):
            return program
        checker = None
        if task.checker is not None:
            checker = await self._checker(task.checker, sandbox)
            if isinstance(checker, Judgement):
                return checker
        case_limits = task.case_limits(limits)
        cases: list[CaseResult] = []
        for case in (c for c in task.test_cases if isinstance(c, StdioCase)):
            result = await self._case(task, case, program, checker, sandbox, case_limits)
            cases.append(result)
            if result.verdict is Verdict.SANDBOX_ERROR:
                break
            if task.stop_on_first_failure and result.verdict is not Verdict.PASSED:
                break
        return case_judgement(cases, len(task.test_cases), None)

    async def _checker(self, checker: Checker, sandbox: Sandbox) -> Program | Judgement:
        python = checker.language == "python"
        source = _PYTHON_CHECKER if python else checker.source
        built = await self.builder.build(checker.language, source, sandbox)
        if isinstance(built, Program) and python:
            files = {**built.files, "checker.py": checker.source.encode("utf-8", "surrogatepass")}
            built = dataclasses.replace(built, files=files)
        if isinstance(built, Judgement):
            return Judgement(
                Verdict.SANDBOX_ERROR,
                built.run,
                message=f"the task's checker is unusable ({built.verdict.value}): {built.message}",
            )
        return built

    async def _case(
        self,
        task: Task,
        case: StdioCase,
        program: Program,
        checker: Program | Judgement | None,
        sandbox: Sandbox,
        limits: Limits,
    ) -> CaseResult:
        run = await program.run(sandbox, stdin=case.input.encode("utf-8"), limits=limits)
        early = run_verdict(run)
        if early is not None:
            return early
        actual = run.stdout.decode("utf-8", errors="replace")
        if isinstance(checker, Program):
            return await self._check(checker, case, run, sandbox, limits)
        outcome = compare_output(case.output, actual, task.comparison)
        if outcome.matched:
            return CaseResult(Verdict.PASSED, run)
        return CaseResult(Verdict.FAILED, run, f"wrong answer: {outcome.reason}")

    async def _check(
        self, checker: Program, case: StdioCase, run: RunResult, sandbox: Sandbox, limits: Limits
    ) -> CaseResult:
        names = ("input.txt", "expected.txt", "actual.txt")
        contents = (case.input.encode("utf-8"), case.output.encode("utf-8"), run.stdout)
        verdict_run = await checker.run(
            sandbox, limits=limits, args=names, extra_files=dict(zip(names, contents, strict=True))
        )
        said = tail_text(verdict_run.stdout + verdict_run.stderr, 300).strip()
        if verdict_run.status is Status.OK:
            return CaseResult(Verdict.PASSED, run)
        if verdict_run.status is Status.RUNTIME_ERROR and verdict_run.exit_code == 1:
            return CaseResult(Verdict.FAILED, run, f"the checker rejected the output: {said}")
        return CaseResult(
            Verdict.SANDBOX_ERROR,
            run,
            f"the task's checker failed ({verdict_run.status.value}, "
            f"exit code {verdict_run.exit_code}): {said}",
        )

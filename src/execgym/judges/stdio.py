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

Programs are built and run under the task's :class:`~execgym.tasks.models.Conventions`
(contest judges' conventions: Python's ``exit``/``quit`` and unlimited int digits, C and
C++ at the newest standard with ``ONLINE_JUDGE``, the stack of compiled programs equal
to the memory limit).

**Checkers.** A checker's exit code has testlib's meaning (``TResult`` in ``testlib.h``):
0 accepted; 1 wrong answer, 2 presentation error, 4 (``_dirt``), 7 (``_points``) and 8
(unexpected EOF) reject the output: ``failed``. Anything else (3, testlib's ``_fail``,
another code, a signal, a timeout, running out of memory or output, an exception in a
Python checker) is the checker's own failure, and a rollout controls what the checker
reads: a checker that crashes on unparsable output (``1 2 3`` where two numbers were
due, prose, invalid UTF-8) must not buy the rollout a mask. So the rule
(masked only when the fault is provably ours or the task's):

- the checker is run once more on the same case with the task's expected output as
  the answer to judge (the result is kept per checker and case);
- if it accepts that, it works, and what made it fail was the rollout's output: the
  case is ``failed``, with the checker's message;
- only a checker that also fails on (or rejects) the expected output is the task's
  fault, decided from the task alone: ``invalid``, masked (as a checker that does not
  compile). A failure of the sandbox itself while running the checker, or a probe
  that runs out of time (the host's load may be to blame), is ``sandbox_error``:
  masked, retried, never counted by a breaker (:mod:`execgym.judges.masking`).

A C or C++ checker may ``#include "testlib.h"``: execgym's copy (testlib 0.9.45, MIT,
``execgym/judges/vendor``) is placed beside it, and such a checker gets testlib's
argument order (input, output, answer: :attr:`~execgym.tasks.models.Checker.interface`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping

from execgym.judges.base import Judgement, Verdict, tail_text
from execgym.judges.cases import CaseResult, case_judgement, run_verdict
from execgym.judges.compare import compare_output
from execgym.judges.compile import COMPILE_LIMITS, Builder, compile_limits_for
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

CHECKER_REJECTS = {
    1: "wrong answer",
    2: "presentation error",
    4: "wrong answer (testlib _dirt: extra output)",
    7: "partial points, not accepted (testlib _points)",
    8: "unexpected end of the output",
}
"""Checker exit codes that reject the output (testlib's ``TResult`` exit codes: ``_wa``,
``_pe``, ``_dirt``, ``POINTS_EXIT_CODE``, ``UNEXPECTED_EOF_EXIT_CODE``); 0 accepts, and
every other outcome is the checker's own failure (``_fail`` is 3)."""

_NAMES = ("input.txt", "expected.txt", "actual.txt")

CHECKER_MIN_TIME_S = 10.0
"""Each checker run gets at least this many seconds (wall and CPU), whatever the case's
time limit: the limit is the rollout's, and a checker's run is not."""

CHECKER_COMPILE_LIMITS = COMPILE_LIMITS.merged(wall_time_s=180.0)
"""A checker compiles once per task (then from the cache), and a testlib checker is a
200 KB header at ``-O2``: on a loaded host its wall time, not its CPU, nears 60 s."""


def testlib_header() -> bytes:
    """The vendored ``testlib.h`` (testlib 0.9.45, MIT; see ``vendor/SOURCE.md``)."""
    from importlib import resources  # when a checker needs it, not for every batch

    return resources.files("execgym.judges").joinpath("vendor/testlib.h").read_bytes()


class StdioJudge:
    """Judge ``stdio`` tasks in any language; see the module docstring.

    Args:
        builder: Compiles sources (and checkers), with its cache.
    """

    name = "stdio"

    def __init__(self, builder: Builder | None = None) -> None:
        self.builder = builder or Builder()
        self._reference_checks: dict[str, str] = {}  # checker+case -> "" (accepts) or why not

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Run ``completion`` on every case of ``task`` (or up to the first failure)."""
        program = await self.builder.build(
            task.language,
            completion,
            sandbox,
            task.compile_limits_over(compile_limits_for(limits)),
            conventions=task.conventions,
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
            if result.verdict in (Verdict.SANDBOX_ERROR, Verdict.INVALID):
                break
            if task.stop_on_first_failure and result.verdict is not Verdict.PASSED:
                break
        return case_judgement(cases, len(task.test_cases), None)

    async def _checker(self, checker: Checker, sandbox: Sandbox) -> Program | Judgement:
        python = checker.language == "python"
        source = _PYTHON_CHECKER if python else checker.source
        headers = {"testlib.h": testlib_header()} if checker.language in ("c", "cpp") else None
        built = await self.builder.build(
            checker.language, source, sandbox, CHECKER_COMPILE_LIMITS, headers=headers
        )
        if isinstance(built, Program) and python:
            files = {**built.files, "checker.py": checker.source.encode("utf-8", "surrogatepass")}
            built = dataclasses.replace(built, files=files)
        if isinstance(built, Judgement):
            verdict = Verdict.SANDBOX_ERROR  # a compiler out of time or memory: maybe the load
            if built.verdict is Verdict.LANGUAGE_UNAVAILABLE:
                verdict = Verdict.LANGUAGE_UNAVAILABLE
            elif built.verdict is Verdict.COMPILE_ERROR and "ran out of" not in built.message:
                verdict = Verdict.INVALID  # the task's checker does not compile
            return Judgement(
                verdict,
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
        if isinstance(checker, Program) and task.checker is not None:
            # The checker's time is its own, not the rollout's per-case limit: a checker
            # slow to read an output must not be blamed on it (nor masked).
            checker_limits = limits.merged(
                wall_time_s=max(limits.wall_time_s, CHECKER_MIN_TIME_S),
                cpu_time_s=max(limits.cpu_time_s, CHECKER_MIN_TIME_S),
            )
            return await self._check(task.checker, checker, case, run, sandbox, checker_limits)
        outcome = compare_output(case.output, actual, task.comparison)
        if outcome.matched:
            return CaseResult(Verdict.PASSED, run)
        return CaseResult(Verdict.FAILED, run, f"wrong answer: {outcome.reason}")

    async def _check(
        self,
        spec: Checker,
        checker: Program,
        case: StdioCase,
        run: RunResult,
        sandbox: Sandbox,
        limits: Limits,
    ) -> CaseResult:
        verdict_run = await self._run_checker(spec, checker, case, run.stdout, sandbox, limits)
        said = _said(verdict_run)
        if verdict_run.status is Status.OK:
            return CaseResult(Verdict.PASSED, run)
        rejected = _rejection(verdict_run)
        if rejected is not None:
            return CaseResult(Verdict.FAILED, run, f"the checker: {rejected}: {said}")
        failure = f"{verdict_run.status.value}, exit code {verdict_run.exit_code}"
        if verdict_run.status is Status.SANDBOX_ERROR:
            return CaseResult(Verdict.SANDBOX_ERROR, run, f"the checker could not run: {said}")
        broken, definite = await self._fails_on_reference(spec, checker, case, sandbox, limits)
        if broken and not definite:
            return CaseResult(
                Verdict.SANDBOX_ERROR,
                run,
                f"the task's checker failed ({failure}): {said}; checking it on the task's "
                f"expected output did not finish ({broken})",
            )
        if broken:
            return CaseResult(
                Verdict.INVALID,
                run,
                f"the task's checker failed ({failure}): {said}; it fails on the task's "
                f"expected output too ({broken}), so the fault is the task's",
            )
        return CaseResult(
            Verdict.FAILED,
            run,
            f"the checker failed on this output ({failure}): {said}; it accepts the task's "
            "expected output, so the output made it fail",
            "WrongAnswer",
        )

    async def _run_checker(
        self,
        spec: Checker,
        checker: Program,
        case: StdioCase,
        actual: bytes,
        sandbox: Sandbox,
        limits: Limits,
    ) -> RunResult:
        contents = (case.input.encode("utf-8"), case.output.encode("utf-8"), actual)
        files = dict(zip(_NAMES, contents, strict=True))
        given, expected, output = _NAMES
        args = (given, output, expected) if spec.argument_order == "testlib" else _NAMES
        return await checker.run(sandbox, limits=limits, args=args, extra_files=files)

    async def _fails_on_reference(
        self, spec: Checker, checker: Program, case: StdioCase, sandbox: Sandbox, limits: Limits
    ) -> tuple[str, bool]:
        """Why the checker fails on the case's expected output, and whether that is definite.

        The reason is "" when the checker accepts the expected output. A definite answer
        is kept for later rollouts of the task; a probe that ran out of time or met a
        sandbox failure is not definite (the host's load or the sandbox may be to blame)
        and decides for this case only.
        """
        key = hashlib.sha256(
            "\0".join(
                [spec.language, spec.argument_order, spec.source, case.input, case.output]
            ).encode("utf-8", "surrogatepass")
        ).hexdigest()
        if key in self._reference_checks:
            return self._reference_checks[key], True
        expected = case.output.encode("utf-8")
        probe = await self._run_checker(spec, checker, case, expected, sandbox, limits)
        why = (
            ""
            if probe.status is Status.OK
            else (f"{probe.status.value}, exit code {probe.exit_code}: {_said(probe)}")
        )
        definite = probe.status not in (Status.TIME_LIMIT, Status.SANDBOX_ERROR)
        if definite:
            self._reference_checks[key] = why
        return why, definite


def _said(run: RunResult) -> str:
    return tail_text(run.stdout + run.stderr, 300).strip()


def _rejection(run: RunResult) -> str | None:
    """What a checker's exit code says when it rejects the output, else ``None``."""
    if run.status is Status.RUNTIME_ERROR and run.signal is None:
        return CHECKER_REJECTS.get(run.exit_code or 0)
    return None

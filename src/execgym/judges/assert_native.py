r"""Assert-style tests in languages other than Python (HumanEval-X style).

The program is ``prompt + completion + "\n" + tests``, where the tests hold a ``main``
that asserts (C/C++ ``assert``, Java ``Main`` throwing, Node's ``assert``, Rust
``assert!``, a Bash script's ``exit``). It is compiled (with the cache) and run once:
exit code 0 is ``passed``; any other exit or a signal (a failed C ``assert`` aborts) is
``failed``, with the end of stderr as the reason; limits give their own verdicts.

In JavaScript, ``console.assert`` only logs in Node, and HumanEval-X's JavaScript tests
are written with it: every solution, even ``return false``, would pass. The program
therefore starts with :data:`JS_FATAL_CONSOLE_ASSERT`, which makes a failed
``console.assert`` throw and sets a failing exit code.

Unlike the Python harness, nothing here proves the tests ran to their end: a solution
that exits 0 early (``exit(0)`` in C) passes. Python tasks use the nonce-reporting
harness of :mod:`execgym.judges.assert_tests` instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from execgym.judges.base import RUN_STATUS_VERDICT, ErrorDetail, Judgement, Verdict, tail_text
from execgym.judges.compile import Builder, compile_limits_for
from execgym.limits import Limits
from execgym.sandbox.base import Sandbox, Status
from execgym.tasks.models import Task

JS_FATAL_CONSOLE_ASSERT = (
    "console.assert = (ok, ...what) => { if (!ok) { process.exitCode = 1; "
    "throw new Error(['Assertion failed', ...what].join(' ')); } };\n"
)
"""Prepended to JavaScript assert programs: a failed ``console.assert`` fails the run."""

_PREAMBLES = {"javascript": JS_FATAL_CONSOLE_ASSERT}


_TELLING = ("error", "assert", "panicked", "exception", "failed")


def failure_line(stderr: str) -> str:
    """The line of ``stderr`` that says why the tests failed, at most 300 characters.

    That is the last line naming an error, an assertion or a panic, stack frames
    (``at ...``) aside; else the last line.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    telling = [
        line
        for line in lines
        if any(word in line.lower() for word in _TELLING) and not line.startswith("at ")
    ]
    return (telling or lines or [""])[-1][:300]


class NativeAssertJudge:
    """Judge ``assert`` tasks in compiled or non-Python languages; see the module docstring.

    Args:
        builder: Compiles the program, with its cache.
    """

    name = "assert"

    def __init__(self, builder: Builder | None = None) -> None:
        self.builder = builder or Builder()

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Build and run ``prompt + completion + tests`` once; exit code 0 passes."""
        preamble = _PREAMBLES.get(task.language, "")
        source = preamble + task.prompt + completion + "\n" + (task.tests or "")
        program = await self.builder.build(
            task.language,
            source,
            sandbox,
            task.compile_limits_over(compile_limits_for(limits)),
            conventions=task.conventions,
        )
        if isinstance(program, Judgement):
            return program
        run = await program.run(sandbox, limits=limits)
        if run.status in RUN_STATUS_VERDICT:
            return Judgement(RUN_STATUS_VERDICT[run.status], run, message=run.message)
        if run.status is Status.OK:
            return Judgement(Verdict.PASSED, run)
        stderr = tail_text(run.stderr, 2000).strip()
        reason = failure_line(stderr)
        message = f"the tests failed ({run.message})" + (f": {reason}" if reason else "")
        return Judgement(Verdict.FAILED, run, ErrorDetail("TestFailed", message, stderr), message)

"""The judge for assert-style tasks (HumanEval, MBPP): program + tests + ``check()``."""

from __future__ import annotations

import secrets
from importlib import resources

from execgym.judges.base import (
    RUN_STATUS_VERDICT,
    START_MARKER,  # noqa: F401 - re-exported (tests, users)
    ErrorDetail,
    Judgement,
    Verdict,
    never_started,
    nonce_report,
    tail_text,
)
from execgym.limits import Limits
from execgym.sandbox._python import python_command  # noqa: F401 - re-exported for users
from execgym.sandbox.base import RunResult, Sandbox, Status
from execgym.tasks.models import Task

_RUN_STATUS_VERDICT = RUN_STATUS_VERDICT
_REPORTED = {
    v.value: v for v in (Verdict.PASSED, Verdict.FAILED, Verdict.ERROR, Verdict.MEMORY_EXCEEDED)
}


def _runner_source() -> bytes:
    return resources.files("execgym.judges").joinpath("_assert_runner.py").read_bytes()


_FULL_SOLUTION_STARTS = ("def ", "async def ", "class ", "import ", "from ", "@")


def build_program(task: Task, completion: str) -> str:
    """The program under test: the task's prompt, then the completion.

    A completion is usually the body that continues the prompt (HumanEval style). When
    it is a whole solution instead (its first code line starts at column 0 with
    ``def``, ``class``, ``import``, ``from`` or a decorator, as chat models answer), it
    goes on a new line after the prompt, so the prompt's imports (``from typing import
    List``) still reach it; if the prompt alone would not compile (a stub without a
    body), only the prompt's import lines are kept before it.
    """
    first = next((line for line in completion.splitlines() if line.strip()), "")
    if not first.startswith(_FULL_SOLUTION_STARTS):
        return task.prompt + completion
    prompt = task.prompt if _compiles(task.prompt) else _import_lines(task.prompt)
    return prompt.rstrip("\n") + "\n\n" + completion


def _compiles(source: str) -> bool:
    # The prompt is task data, not model output; it is only parsed here, never run.
    try:
        compile(source, "prompt", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _import_lines(prompt: str) -> str:
    return "".join(
        line + "\n" for line in prompt.splitlines() if line.startswith(("import ", "from "))
    )


def encode_job(nonce: str, entry_point: str, program: str, tests: str) -> bytes:
    """The job the harness reads on stdin (see :mod:`execgym.judges._assert_runner`)."""
    program_bytes = program.encode("utf-8", "surrogatepass")
    tests_bytes = tests.encode("utf-8", "surrogatepass")
    header = f"EXECGYM1 {nonce} {entry_point} {len(program_bytes)} {len(tests_bytes)}\n"
    return header.encode("utf-8") + program_bytes + tests_bytes


def _parse_report(report: bytes, nonce: str) -> dict[str, str] | None:
    """Return the harness's report if it carries our nonce, else ``None``."""
    payload = nonce_report(report, nonce)
    if payload is None or payload.get("verdict") not in _REPORTED:
        return None
    return payload


def _tail(data: bytes, limit: int = 2000) -> str:
    return tail_text(data, limit)


def interpret_run(run: RunResult, nonce: str) -> Judgement:
    """Turn a sandbox run of the assert harness into a :class:`Judgement`.

    A run whose report channel does not open with the harness's start marker never
    reached the harness (bwrap, setpriv or the interpreter failed, or the host was too
    slow to start it within the limits): that is a ``sandbox_error``, whatever the exit
    code says, and no solution can cause it because the marker precedes its code. Then
    our own kills and the kernel's OOM killer decide; otherwise the verdict comes from
    the harness's nonce-tagged report, and a run without one is an ``error``, never a
    pass (for example ``sys.exit(0)`` before the asserts).
    """
    unstarted = never_started(run, "test harness")
    if unstarted is not None:
        return unstarted
    if run.status in _RUN_STATUS_VERDICT:
        return Judgement(_RUN_STATUS_VERDICT[run.status], run, message=run.message)
    payload = _parse_report(run.report, nonce)
    if payload is not None and run.status is Status.OK:
        verdict = _REPORTED[payload["verdict"]]
        if verdict is Verdict.PASSED:
            return Judgement(verdict, run)
        error = ErrorDetail(
            payload.get("type", ""), payload.get("message", ""), payload.get("traceback", "")
        )
        return Judgement(verdict, run, error=error, message=f"{error.type}: {error.message}")
    how = run.message or "exited with code 0"
    message = f"the program ended before the tests finished ({how}); no test report"
    stderr = _tail(run.stderr)
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    error = ErrorDetail(last_line.split(":", 1)[0] if last_line else "NoReport", message, stderr)
    return Judgement(Verdict.ERROR, run, error=error, message=message)


class AssertJudge:
    """Judge HumanEval/MBPP-style tasks: run prompt + completion + tests + ``check()``.

    The program runs in the sandbox under :mod:`execgym.judges._assert_runner`, which
    reports through fd 3 with a fresh random nonce per run.
    """

    name = "assert"

    def __init__(self) -> None:
        self._runner = _runner_source()

    async def judge(
        self, task: Task, completion: str, sandbox: Sandbox, limits: Limits
    ) -> Judgement:
        """Run one rollout's completion against ``task``'s tests in ``sandbox``.

        Returns:
            The :class:`Judgement`; a sandbox failure is ``Verdict.SANDBOX_ERROR``.
        """
        nonce = secrets.token_hex(16)
        run = await sandbox.run_python(
            self._runner,
            stdin=encode_job(
                nonce, task.entry_point or "", build_program(task, completion), task.tests or ""
            ),
            limits=limits,
            want_report=True,
        )
        return interpret_run(run, nonce)

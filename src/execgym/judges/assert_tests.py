"""The judge for assert-style tasks (HumanEval, MBPP): program + tests + ``check()``."""

from __future__ import annotations

import ast
import functools
import importlib.util
import marshal
import secrets
import warnings
from collections.abc import Mapping
from typing import Any

from execgym.judges._cases import split_cases
from execgym.judges._programs import (  # marshalled_program: re-exported
    harness_program,
)
from execgym.judges._programs import (
    marshalled_program as marshalled_program,
)
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
from execgym.sandbox import python_command  # noqa: F401 - re-exported for users
from execgym.sandbox.base import RunRequest, RunResult, Sandbox, Status
from execgym.tasks.models import Task

_RUN_STATUS_VERDICT = RUN_STATUS_VERDICT
_REPORTED = {
    v.value: v
    for v in (
        Verdict.PASSED,
        Verdict.FAILED,
        Verdict.ERROR,
        Verdict.MEMORY_EXCEEDED,
        Verdict.TAMPERED,
        Verdict.TIMEOUT,
    )
}
_REPORTED["harness_error"] = Verdict.SANDBOX_ERROR
_REPORTED["task_error"] = Verdict.INVALID  # the task's tests or prompt are broken


def runner_program() -> bytes:
    """The assert harness as the script the sandbox runs (see :func:`marshalled_program`)."""
    return harness_program("assert_runner")


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


@functools.lru_cache(maxsize=1024)
def _compiles(source: str) -> bool:
    # The prompt is task data, not model output; it is only parsed here, never run.
    # Cached: every rollout of a task asks about the same prompt (twice, for a whole
    # solution).
    try:
        compile(source, "prompt", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _import_lines(prompt: str) -> str:
    return "".join(
        line + "\n" for line in prompt.splitlines() if line.startswith(("import ", "from "))
    )


@functools.lru_cache(maxsize=512)
def compiled_tests(source: str) -> bytes:
    """The tests with their context, compiled as the harness would, then marshalled.

    ``source`` is the text as the harness joins it; ``b""`` if it does not compile.

    Always at optimize level 0, whatever this interpreter's ``-O``: an ``assert``
    compiled away would pass every rollout. A source that draws a compiler warning is
    left to the harness too, so the warning still lands in the run's stderr.

    The harness loads this instead of compiling the tests in every run, which saved
    about 0.6 ms and 170 page faults per HumanEval rollout in the warm pool (measured
    2026-12-02); a task's tests are the same for all its rollouts, so each is compiled
    once per process. The tests are task data (operator's), never model output; a
    source that does not compile is left to the harness, which reports the task's error.
    Where ``assert`` statements are the tests' only way to fail (no ``raise``, no call of
    an ``assert...``/``fail...`` function such as unittest's ``assertEqual``, no
    ``exec``/``eval`` of code not seen here), each is
    counted as it runs (its test becomes ``__execgym_asserted__() and (test)``, same
    lines, same message), so the harness can tell a ``check`` that ran no assertion,
    which would pass any solution (``return None``), from one that passed: such a task
    is ``invalid``.
    """
    try:
        source.encode("utf-8")  # lone surrogates: the harness's decoded text would differ
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            # Parsed once: the parser's warnings come here, the compiler's (an assert of a
            # tuple, say) from compiling the tree as the tests are, before any rewrite.
            tree = ast.parse(source, "tests.py")
            # optimize=0: the tests' asserts stay even if this Python runs with -O.
            code = compile(tree, "tests.py", "exec", dont_inherit=True, optimize=0)
            asserts = _countable_asserts(tree)
            if asserts is not None and not warned:
                for node in asserts:
                    _count(node)
                counter = ast.Expr(ast.Name(ASSERT_COUNTER, ast.Load()))
                tree.body.append(ast.fix_missing_locations(counter))
                code = compile(tree, "tests.py", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError, UnicodeEncodeError, OverflowError, RecursionError):
        return b""
    if warned:  # a SyntaxWarning...: the harness compiles it, so the run's stderr has it
        return b""
    return marshal.dumps(code)


ASSERT_COUNTER = "__execgym_asserted__"


def _countable_asserts(tree: ast.AST) -> list[ast.Assert] | None:
    """The tree's ``assert`` statements if the tests can fail only through them, else ``None``.

    One walk of the tree finds both (a task's tests are walked once per process).
    """
    asserts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            asserts.append(node)
        elif isinstance(node, ast.Raise):
            return None
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name.lower().startswith(("assert", "fail", "check_", "verify", "expect")):
                return None
            if name in ("exec", "eval"):  # code this cannot see (MBPP+ runs its tests so)
                return None
    return asserts


def _count(node: ast.Assert) -> None:
    """``assert test, msg`` -> ``assert __execgym_asserted__() and (test), msg``, in place.

    The call and the ``and`` take the test's position, so tracebacks and messages show
    the same lines. An assert's test holds no statement, so no assert is inside another.
    """
    counter = ast.copy_location(
        ast.Call(ast.copy_location(ast.Name(ASSERT_COUNTER, ast.Load()), node.test), [], []),
        node.test,
    )
    node.test = ast.copy_location(ast.BoolOp(ast.And(), [counter, node.test]), node.test)


def _part(data: bytes) -> bytes:
    return b"%010d" % len(data) + data


def encode_job(
    nonce: str,
    entry_point: str,
    program: str,
    tests: str,
    *,
    context: str = "",
    mode: str = "check",
    reference: str | None = None,
    state: str = "fresh",
) -> bytes:
    """The job the harness reads on stdin (see :mod:`execgym.guest.assert_runner`).

    Part one (the solution's program and entry point) is read before the solution's
    process is forked; part two (nonce, mode, the tests' context, the tests, those
    compiled by :func:`compiled_tests`, the reference) only after, so the solution never
    has them in memory.

    Args:
        nonce: The run's secret tag for the report.
        entry_point: The function the tests call.
        program: The solution's source.
        tests: Test code defining ``check(candidate)``.
        context: Code run before the tests in the harness (the task's prompt).
        mode: ``check`` (stop at the first failure) or ``cases`` (count passing cases).
        reference: A known-correct program, run first and measured beside the solution.
        state: ``fresh`` (each call the tests make sees the solution's module as freshly
            imported: a fork of its process taken after the import) or ``shared`` (one
            process serves every call, so state carries from call to call).
    """

    def utf8(text: str) -> bytes:
        return text.encode("utf-8", "surrogatepass")

    code = compiled_tests(context + "\n\n" + tests + "\n")
    if state not in ("fresh", "shared"):
        raise ValueError(f"state must be 'fresh' or 'shared', not {state!r}")
    sizes = f"{len(utf8(context))} {len(utf8(tests))} {len(code)} {_MAGIC} {state}"
    head = f"{nonce} {mode} {sizes}\n".encode()
    return _part(utf8(entry_point) + b"\n" + utf8(program)) + _part(
        head + utf8(context) + utf8(tests) + code + utf8(reference or "")
    )


_MAGIC = importlib.util.MAGIC_NUMBER.hex()
"""The bytecode version of :func:`compiled_tests`: a harness of another uses the text."""


def job_nonce(job: bytes) -> bytes:
    """The nonce of a job made by :func:`encode_job` (for test doubles that fake reports).

    Raises:
        ValueError: if ``job`` is not such a job.
    """
    try:
        second = job[10 + int(job[:10]) :]
        return second[10:].split(b" ", 1)[0]
    except (ValueError, IndexError) as error:
        raise ValueError("not an assert-harness job") from error


_DETAILS = (
    "hack",
    "calls",
    "cpu_s",
    "maxrss_kb",
    "cases_passed",
    "cases_total",
    "reference_verdict",
    "reference_cpu_s",
    "reference_maxrss_kb",
)
"""Facts of the harness's report kept in ``Judgement.details``."""


def _parse_report(report: bytes, nonce: str) -> dict[str, Any] | None:
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
        details = {key: payload[key] for key in _DETAILS if key in payload}
        if "state" in payload:
            details["state"] = str(payload["state"])
        if verdict is Verdict.PASSED:
            return Judgement(verdict, run, details=details)
        error = ErrorDetail(
            str(payload.get("type", "")),
            str(payload.get("message", "")),
            str(payload.get("traceback", "")),
        )
        message = f"{error.type}: {error.message}"
        if verdict is Verdict.TAMPERED:
            message = f"tampering detected ({payload.get('hack', 'unknown')}): {error.message}"
        elif verdict is Verdict.SANDBOX_ERROR:
            message = f"the test harness could not run the tests: {message}"
        elif verdict is Verdict.INVALID:
            message = f"the task is broken (its tests or prompt fail on their own): {message}"
        return Judgement(verdict, run, error=error, message=message, details=details)
    how = run.message or "exited with code 0"
    message = f"the program ended before the tests finished ({how}); no test report"
    stderr = _tail(run.stderr)
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    error = ErrorDetail(last_line.split(":", 1)[0] if last_line else "NoReport", message, stderr)
    return Judgement(Verdict.ERROR, run, error=error, message=message)


def test_context(task: Task) -> str:
    """The code run before the tests in the harness: the task's prompt (operator data).

    Tests may call helpers the prompt defines (HumanEval/10 ``is_palindrome``,
    HumanEval/32 ``poly``); a prompt that does not compile alone (a stub without a body)
    contributes its import lines only.
    """
    return task.prompt if _compiles(task.prompt) else _import_lines(task.prompt)


class AssertJudge:
    """Judge HumanEval/MBPP-style tasks: the tests and the solution in separate processes.

    The harness (:mod:`execgym.guest.assert_runner`) runs the tests; the solution runs
    in a child process it calls through a pipe with plain data, which never holds the
    report channel (fd 3), the run's nonce or the tests. See SECURITY.md.

    Args:
        cases: Count the passing top-level statements of ``check`` (partial credit,
            ``details["cases_passed"]`` and ``["cases_total"]``) instead of stopping
            at the first failing assert.
        measure_reference: Also run the task's reference, first, in the same run, and
            measure both: ``details["reference_cpu_s"]``, ``["reference_maxrss_kb"]``,
            ``["cpu_s"]``, ``["maxrss_kb"]``. Ignored for a task without a reference.
    """

    name = "assert"

    def __init__(self, *, cases: bool = False, measure_reference: bool = False) -> None:
        self._runner = runner_program()
        self.cases = cases
        self.measure_reference = measure_reference

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Run one rollout's completion against ``task``'s tests in ``sandbox``.

        The task's ``state`` (``fresh`` or ``shared`` state across the calls the tests
        make, see :func:`encode_job`) is used; the result's ``details["state"]`` says
        which ran. ``files`` are ignored (see :class:`~execgym.judges.base.Judge`).

        Args:
            task: The task.
            completion: The model's code.
            sandbox: Where to run.
            limits: The run's limits.
            files: Ignored.

        Returns:
            The :class:`Judgement`; a sandbox failure is ``Verdict.SANDBOX_ERROR``.
        """
        cases, measure_reference, state = self.cases, self.measure_reference, task.state
        nonce = secrets.token_hex(16)
        reference = None
        if measure_reference and task.reference is not None:
            reference = build_program(task, task.reference)
        job = encode_job(
            nonce,
            task.entry_point or "",
            build_program(task, completion),
            split_cases(task.tests or "") if cases else task.tests or "",
            context=test_context(task),
            mode="cases" if cases else "check",
            reference=reference,
            state=state,
        )
        run = await sandbox.run(
            RunRequest(python_source=self._runner, stdin=job, limits=limits, want_report=True)
        )
        judgement = interpret_run(run, nonce)
        judgement.details.setdefault("state", state)  # also without a report
        return judgement

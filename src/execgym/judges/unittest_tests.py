r"""The unittest judge: the solution and a ``unittest.TestCase`` class in one module.

BigCodeBench's tests are a ``unittest.TestCase`` class, ``TestCases``, that checks the
real objects the solution returns (DataFrames, matplotlib axes, mocks of ``requests``),
so they cannot cross a plain-data boundary: upstream (``bigcodebench.eval``) executes
``solution + "\\n" + tests`` as one module and runs the class with ``unittest``. This
judge does the same inside the sandbox (:mod:`execgym.guest.unittest_runner`): one
process, one namespace, the upstream environment (``TZ=UTC``, ``OMP_NUM_THREADS=1``,
matplotlib's ``Agg`` backend, an empty temporary working directory, the solution's
output swallowed), third-party libraries from execgym's own environment bound
read-only at :data:`~execgym.toolchains.PYTHON_LIBRARIES_DIR`.

The program is ``Task.solution_prefix`` and the completion, joined as for assert tasks
(:func:`~execgym.judges.assert_tests.build_program`: a completion that is a whole
solution goes on a new line after the prefix), then the task's ``tests``.

Verdicts, as upstream decides a pass (no failure and no error among the tests):
``passed`` when at least one test passed and none failed or errored; ``failed`` when
a test failed; ``error`` when one raised (or the solution's code raised ``SkipTest``:
a skip raised by the solution is not a pass), or when the program does not compile or
raises before the tests (a ``collection_errors`` entry, never "0 tests passed");
``tampered`` when the code replaced unittest's assertions or machinery (the skip
decorators included); ``invalid`` (masked, the task's fault) when the task's tests do not
compile, define no ``TestCases`` class, or one without a ``test*`` method, found from
the tests alone (:func:`~execgym.judges.suites.unittest_suite_problem`) before any
rollout runs. Every
test's outcome is kept in ``details["tests"]``; ``cases_passed`` of ``cases_total`` (the
tests that ran) give the ``fraction`` correctness reward its partial credit. Because the
tests share the solution's process, a solution that walks the interpreter's frames
could forge the report: see SECURITY.md.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path

from execgym import guest
from execgym.judges.assert_tests import build_program, marshalled_program
from execgym.judges.base import ErrorDetail, Judgement, Verdict, harness_report
from execgym.judges.pytest_tests import summarize_tests
from execgym.judges.suites import unittest_suite_problem
from execgym.limits import Limits
from execgym.sandbox.base import RunRequest, RunResult, Sandbox
from execgym.tasks.models import Task
from execgym.toolchains import PYTHON_LIBRARIES_DIR, python_libraries

TEST_CLASS = "TestCases"
"""The test class every ``unittest`` task's ``tests`` must define (BigCodeBench's name)."""

MATPLOTLIB_DIR = "mplconfig"
"""Where in the work dir a prebuilt matplotlib font list goes (``MPLCONFIGDIR``)."""

_USES_MATPLOTLIB = re.compile(r"^\s*(?:import|from)\s+(?:matplotlib|seaborn|wordcloud)\b", re.M)
_FONT_CACHE_TIMEOUT_S = 120.0


class _FontCache:
    """matplotlib's font list, built once on the host, for every sandboxed run.

    matplotlib scans every font on first import and caches the list in
    ``MPLCONFIGDIR``; each sandbox starts with an empty one, so each run would rescan
    (3-4 s on a loaded 2-core machine). The list is built once per process by the
    host's matplotlib (the same version the sandbox sees) in a subprocess; its paths are
    relative to matplotlib's data dir or under ``/usr``, the same inside the sandbox.
    """

    def __init__(self) -> None:
        self._files: dict[str, bytes] | None = None
        self._lock = asyncio.Lock()

    async def files(self) -> dict[str, bytes]:
        """``{work-dir path: contents}`` of the font list; empty if it cannot be built."""
        async with self._lock:
            if self._files is None:
                self._files = await _build_font_list()
            return self._files


async def _build_font_list() -> dict[str, bytes]:
    if find_spec("matplotlib") is None:
        return {}
    with tempfile.TemporaryDirectory(prefix="execgym-mpl-") as config:
        env = {**os.environ, "MPLCONFIGDIR": config, "MPLBACKEND": "Agg"}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import matplotlib.font_manager",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            await asyncio.wait_for(process.wait(), _FONT_CACHE_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            await process.wait()
            return {}
        return await asyncio.to_thread(_read_font_lists, Path(config))


def _read_font_lists(config: Path) -> dict[str, bytes]:
    """The font lists matplotlib wrote under ``config``, keyed by their sandbox path."""
    return {
        f"{MATPLOTLIB_DIR}/{path.name}": path.read_bytes()
        for path in config.glob("fontlist-*.json")
    }


@functools.cache
def runner_program() -> bytes:
    """The unittest harness as the script the sandbox runs."""
    return marshalled_program(guest.bundle("unittest_runner").encode(), "unittest_runner.py")


def unittest_program(task: Task, completion: str) -> str:
    """The one module the harness executes: prefix, completion, a newline, the tests."""
    return solution_part(task, completion) + (task.tests or "")


def solution_part(task: Task, completion: str) -> str:
    """The program's lines before the tests: prefix, completion and a newline."""
    prefixed = task.model_copy(update={"prompt": task.solution_prefix})
    return build_program(prefixed, completion) + "\n"


def encode_job(nonce: str, program: str, solution_lines: int = 0) -> bytes:
    """The job the harness reads on stdin (see :mod:`execgym.guest.unittest_runner`).

    ``solution_lines`` is how many of the program's first lines are the solution's
    (prefix and completion): code compiled from the lines after them is the tests'.
    """
    header = f"EXECGYM-UNITTEST1 {nonce} {PYTHON_LIBRARIES_DIR} {TEST_CLASS} {solution_lines}\n"
    return header.encode("ascii") + program.encode("utf-8", "surrogatepass")


class UnittestJudge:
    """Judge ``unittest`` tasks; see the module docstring."""

    name = "unittest"

    def __init__(self) -> None:
        self._fonts = _FontCache()

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Run the task's ``TestCases`` against the completion in one sandboxed process.

        Returns ``language_unavailable`` (masked) when execgym's environment has no
        site-packages to bind into the sandbox (pytest, which marks it, is missing).
        """
        if python_libraries() is None:
            message = (
                "execgym's site-packages cannot be bound into the sandbox (pytest is not "
                "installed where execgym runs): pip install 'execgym[bigcodebench]'"
            )
            return Judgement(Verdict.LANGUAGE_UNAVAILABLE, message=message)
        suite = unittest_suite_problem(task.tests or "", TEST_CLASS)
        if suite:  # the task's own tests: masked with the reason (execgym.judges.masking)
            return Judgement(
                Verdict.INVALID, error=ErrorDetail("InvalidTask", suite), message=suite
            )
        nonce = secrets.token_hex(16)
        program = unittest_program(task, completion)
        fonts = await self._fonts.files() if _USES_MATPLOTLIB.search(program) else {}
        run = await sandbox.run(
            RunRequest(
                python_source=runner_program(),
                stdin=encode_job(nonce, program, solution_part(task, completion).count("\n")),
                files=fonts,
                limits=limits,
                want_report=True,
            )
        )
        return interpret_unittest_run(run, nonce)


def interpret_unittest_run(run: RunResult, nonce: str) -> Judgement:
    """Turn a run of the unittest harness into a :class:`Judgement`."""
    report = harness_report(run, nonce, "unittest harness")
    if isinstance(report, Judgement):
        return report
    judgement = summarize_tests({**report, "tampered": False}, run)
    details = {**judgement.details, "output": str(report.get("output", ""))}
    # partial credit (the ``fraction`` correctness reward): tests passed of tests run
    details["cases_passed"] = details["passed"]
    details["cases_total"] = details["total"] - details["skipped"]
    if report.get("tampered"):
        message = "the solution replaced unittest's assertions or test machinery"
        return Judgement(Verdict.TAMPERED, run, ErrorDetail("Tampered", message), message, details)
    return Judgement(judgement.verdict, run, judgement.error, judgement.message, details)

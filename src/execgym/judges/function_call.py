"""The function-call judge (LiveCodeBench functional, TACO ``fn_name``, LeetCode style).

The harness (:mod:`execgym.judges._call_runner`) runs in the sandbox: it loads
``prompt + completion`` (as :func:`~execgym.judges.assert_tests.build_program` joins
them), calls ``fn_name`` once per case, and reports each result as JSON it encodes
itself from exact builtin types. The results are compared with the expected values
here, outside the sandbox, on plain data (:func:`~execgym.judges.compare.values_match`),
so no object the solution makes takes part in the comparison.

``details`` are those of the stdio judge: per-case verdicts and the fraction passed.
A missing entry point is an ``error`` (``EntryPointNotFound``), reward 0.
"""

from __future__ import annotations

import json
import secrets
from importlib import resources
from typing import Any

from execgym.judges.assert_tests import build_program
from execgym.judges.base import ErrorDetail, Judgement, Verdict, harness_report
from execgym.judges.cases import CaseResult, case_judgement
from execgym.judges.compare import values_match
from execgym.limits import Limits
from execgym.sandbox.base import RunResult, Sandbox
from execgym.tasks.models import FunctionCase, Task
from execgym.toolchains import find_toolchain, missing_hint

_SHOWN = 200


def _runner_source(name: str = "_call_runner.py") -> bytes:
    return resources.files("execgym.judges").joinpath(name).read_bytes()


def encode_call_job(nonce: str, task: Task, program: str) -> bytes:
    """The job the harness reads on stdin (see :mod:`execgym.judges._call_runner`)."""
    cases = [c.model_dump(include={"args", "kwargs"}) for c in _cases(task)]
    program_bytes = program.encode("utf-8", "surrogatepass")
    limit_ms = round((task.case_time_limit_s or 0) * 1000)
    header = f"EXECGYM-CALL1 {nonce} {task.fn_name} {len(program_bytes)} {limit_ms}\n"
    return header.encode("utf-8") + program_bytes + json.dumps(cases).encode("utf-8")


def _cases(task: Task) -> list[FunctionCase]:
    return [case for case in task.test_cases if isinstance(case, FunctionCase)]


def _show(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def judge_results(task: Task, results: list[Any], run: RunResult) -> Judgement:
    """Compare the harness's per-case results with the task's expected values."""
    cases: list[CaseResult] = []
    for case, result in zip(_cases(task), results, strict=False):
        if not isinstance(result, dict):
            cases.append(CaseResult(Verdict.ERROR, run, "malformed result"))
        elif result.get("timeout"):
            cases.append(CaseResult(Verdict.TIMEOUT, run, "the call ran past its time limit"))
        elif "value" not in result:
            kind, message = str(result.get("error", "")), str(result.get("message", ""))
            cases.append(CaseResult(Verdict.ERROR, run, f"{kind}: {message}", kind))
        elif values_match(case.expected, result["value"], task.comparison):
            cases.append(CaseResult(Verdict.PASSED, run))
        else:
            shown = f"expected {_show(case.expected)}, got {_show(result['value'])}"
            cases.append(CaseResult(Verdict.FAILED, run, f"wrong answer: {shown}"))
        if task.stop_on_first_failure and cases[-1].verdict is not Verdict.PASSED:
            break
    if not cases:
        return Judgement(Verdict.ERROR, run, message="the harness reported no result")
    return case_judgement(cases, len(_cases(task)), run)


def interpret_call_run(task: Task, run: RunResult, nonce: str) -> Judgement:
    """Turn a run of the function-call harness into a :class:`Judgement`."""
    payload = harness_report(run, nonce, "call harness")
    if isinstance(payload, Judgement):
        return payload
    if payload.get("status") != "ok":
        kind, text = str(payload.get("error", "")), str(payload.get("message", ""))
        message = f"{kind}: {text}"
        return Judgement(Verdict.ERROR, run, ErrorDetail(kind, text), message)
    results = payload.get("results")
    return judge_results(task, results if isinstance(results, list) else [], run)


class FunctionCallJudge:
    """Judge ``function_call`` tasks in Python and JavaScript; see the module docstring.

    JavaScript runs ``prompt + completion`` under node with the same protocol
    (:file:`_call_runner.js`); its per-case time limit is not enforced call by call
    (node cannot interrupt a synchronous call), only the run's, which it sets.
    """

    name = "function_call"

    def __init__(self) -> None:
        self._runner = _runner_source()
        self._node_runner = _runner_source("_call_runner.js")

    async def judge(
        self, task: Task, completion: str, sandbox: Sandbox, limits: Limits
    ) -> Judgement:
        """Call ``task.fn_name`` on every case in ``sandbox`` and compare the results."""
        if task.case_time_limit_s is not None:
            total = task.case_time_limit_s * len(task.test_cases) + 2.0
            limits = limits.merged(wall_time_s=total, cpu_time_s=total)
        nonce = secrets.token_hex(16)
        if task.language == "javascript":
            node = find_toolchain("javascript")
            if node is None or node.runner is None:
                message = f"no javascript toolchain on this host ({missing_hint('javascript')})"
                return Judgement(Verdict.LANGUAGE_UNAVAILABLE, message=message)
            run = await sandbox.run(
                [node.runner, "execgym_call.js"],
                stdin=encode_call_job(nonce, task, task.prompt + completion),
                files={"execgym_call.js": self._node_runner},
                limits=limits,
                want_report=True,
            )
        else:
            run = await sandbox.run_python(
                self._runner,
                stdin=encode_call_job(nonce, task, build_program(task, completion)),
                limits=limits,
                want_report=True,
            )
        return interpret_call_run(task, run, nonce)

"""The function-call judge (LiveCodeBench functional, TACO ``fn_name``, LeetCode style).

The Python harness (:mod:`execgym.guest.call_runner`) runs in the sandbox in two
processes, like the assert harness: the harness holds the report channel and the
run's nonce and never runs solution code; ``prompt + completion`` (as
:func:`~execgym.judges.assert_tests.build_program` joins them) runs in a process
forked before the nonce and the cases were read, which answers one call per case with
plain data only. The harness reports each result as JSON it encodes itself from exact
builtin types, and the results are compared with the expected values here, outside the
sandbox (:func:`~execgym.judges.compare.values_match`), so no object the solution makes
takes part in the comparison. An answer that is not plain data in a way that looks
like a hack (an always-equal object, a ``str`` subclass), or a forged answer on the
pipe, makes the whole rollout ``tampered`` (``details["hack"]`` names it).

``details`` are those of the stdio judge: per-case verdicts and the fraction passed.
A missing entry point is an ``error`` (``EntryPointNotFound``), reward 0.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from execgym.guest import source
from execgym.guest.plain_data import make_codec
from execgym.judges._programs import harness_program
from execgym.judges.assert_tests import build_program
from execgym.judges.base import ErrorDetail, Judgement, Verdict, harness_report
from execgym.judges.cases import CaseResult, case_judgement
from execgym.judges.compare import values_match
from execgym.limits import Limits
from execgym.sandbox.base import RunRequest, RunResult, Sandbox
from execgym.tasks.models import FunctionCase, Task
from execgym.toolchains import find_toolchain, missing_hint

_SHOWN = 200


def encode_python_call_job(nonce: str, task: Task, program: str, state: str = "") -> bytes:
    """The job the Python harness reads on stdin (see :mod:`execgym.guest.call_runner`).

    Part one (the entry point and the program) is read before the solution's process is
    forked; part two (the nonce, the per-case limit, the state mode and the cases, as
    plain data) only after, so the solution never has them in memory. ``state``
    (``fresh`` or ``shared``, default the task's) says whether each case sees the
    solution's module as freshly imported.
    """
    # Guest code is unannotated by design (see [tool.mypy]); this is its one host caller.
    dumps, _ = make_codec()  # type: ignore[no-untyped-call]
    cases = dumps([(case.args, case.kwargs) for case in _cases(task)])
    limit_ms = round((task.case_time_limit_s or 0) * 1000)
    solution = f"{task.fn_name}\n{program}".encode("utf-8", "surrogatepass")
    state = state or task.state
    if state not in ("fresh", "shared"):
        raise ValueError(f"state must be 'fresh' or 'shared', not {state!r}")
    secret = f"{nonce} {limit_ms} {state}\n".encode() + cases
    return _part(solution) + _part(secret)


def _part(data: bytes) -> bytes:
    return b"%010d" % len(data) + data


def encode_call_job(nonce: str, task: Task, program: str) -> bytes:
    """The job the JavaScript harness reads on stdin (see :file:`execgym/guest/call_runner.js`)."""
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
    if "harness_error" in payload:
        message = f"the call harness could not start: {payload['harness_error']}"
        return Judgement(Verdict.SANDBOX_ERROR, run, message=message)
    if payload.get("status") == "tampered":
        hack, text = str(payload.get("hack", "unknown")), str(payload.get("message", ""))
        message = f"tampering detected ({hack}): {text}"
        error = ErrorDetail("Tampered", text)
        return Judgement(Verdict.TAMPERED, run, error, message, {"hack": hack})
    if payload.get("status") != "ok":
        kind, text = str(payload.get("error", "")), str(payload.get("message", ""))
        message = f"{kind}: {text}"
        return Judgement(Verdict.ERROR, run, ErrorDetail(kind, text), message)
    results = payload.get("results")
    judgement = judge_results(task, results if isinstance(results, list) else [], run)
    if payload.get("state") in ("fresh", "shared"):
        judgement.details["state"] = str(payload["state"])
    return judgement


class FunctionCallJudge:
    """Judge ``function_call`` tasks in Python and JavaScript; see the module docstring.

    JavaScript runs ``prompt + completion`` under node with the same protocol
    (:file:`execgym/guest/call_runner.js`); its per-case time limit is not enforced call by call
    (node cannot interrupt a synchronous call), only the run's, which it sets.
    """

    name = "function_call"

    def __init__(self) -> None:
        self._runner = harness_program("call_runner")
        self._node_runner = source("call_runner.js").encode()

    async def judge(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        *,
        files: Mapping[str, str] | None = None,
    ) -> Judgement:
        """Call ``task.fn_name`` on every case in ``sandbox`` and compare the results.

        The task's ``state``, ``fresh`` or ``shared`` (Python), says whether each case
        sees the solution's module as freshly imported; the result's
        ``details["state"]`` says which ran. ``files`` are ignored (see
        :class:`~execgym.judges.base.Judge`).
        """
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
                RunRequest(
                    argv=[node.runner, "execgym_call.js"],
                    stdin=encode_call_job(nonce, task, task.prompt + completion),
                    files={"execgym_call.js": self._node_runner},
                    limits=limits,
                    want_report=True,
                )
            )
        else:
            run = await sandbox.run(
                RunRequest(
                    python_source=self._runner,
                    stdin=encode_python_call_job(
                        nonce, task, build_program(task, completion), task.state
                    ),
                    limits=limits,
                    want_report=True,
                )
            )
            judgement = interpret_call_run(task, run, nonce)
            judgement.details.setdefault("state", task.state)  # also without a report
            return judgement
        return interpret_call_run(task, run, nonce)

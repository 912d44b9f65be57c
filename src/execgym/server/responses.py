"""Turn execgym's results into the service's response models."""

from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Any, Literal

from execgym.sandbox.base import RunResult, Status
from execgym.server.jobs import JobView
from execgym.server.programs import ProgramOutcome
from execgym.server.schemas import (
    CommandRunResult,
    RunCodeResponse,
    RunResponse,
    StepReport,
)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def utf8_safe(value: Any) -> Any:
    """``value`` with every string encodable as UTF-8.

    A lone surrogate (from a program's exception message, say) becomes a backslash
    escape, so one result can never make a whole response unserialisable.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", errors="backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {utf8_safe(key): utf8_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [utf8_safe(item) for item in value]
    return value


def command_result(result: RunResult) -> CommandRunResult:
    """One step in SandboxFusion's terms.

    A time limit is ``TimeLimitExceeded``, our failure ``Error``, anything else the code
    did ``Finished`` with its return code (``-N`` when signal ``N`` ended it, as Python's
    ``subprocess`` reports it).
    """
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    if result.status is Status.SANDBOX_ERROR:
        status = "Error"
    elif result.status is Status.TIME_LIMIT:
        status = "TimeLimitExceeded"
    else:
        status = "Finished"
    code = result.exit_code
    if code is None and status == "Finished":
        code = -(result.signal or 9)
    return CommandRunResult(
        status=status,
        execution_time=round(result.wall_time_s, 6),
        return_code=code,
        stdout=_text(result.stdout),
        stderr=_text(result.stderr),
    )


def run_code_response(outcome: ProgramOutcome, pod_name: str | None) -> RunCodeResponse:
    """SandboxFusion's answer.

    ``Success`` when every step finished with code 0, ``SandboxError`` when we could not
    run it, ``Failed`` otherwise.
    """
    steps = [step for step in (outcome.compile, outcome.run) if step is not None]
    compile_result = command_result(outcome.compile) if outcome.compile else None
    run_result = command_result(outcome.run) if outcome.run else None
    files = {
        path: base64.b64encode(content).decode()
        for path, content in outcome.files.items()
        if content is not None
    }
    if outcome.sandbox.status is Status.SANDBOX_ERROR or not steps:
        return RunCodeResponse(
            status="SandboxError",
            message=utf8_safe(outcome.sandbox.message) or "the sandbox could not run the program",
            compile_result=compile_result,
            run_result=run_result,
            executor_pod_name=pod_name,
        )
    ok = all(step.status is Status.OK for step in steps) and outcome.run is not None
    return RunCodeResponse(
        status="Success" if ok else "Failed",
        message="" if ok else utf8_safe(_why(steps[-1])),
        compile_result=compile_result,
        run_result=run_result,
        executor_pod_name=pod_name,
        files=files,
    )


def _why(step: RunResult) -> str:
    return step.message or step.status.value


def step_report(result: RunResult) -> StepReport:
    """One step in execgym's terms."""
    return StepReport(
        status=result.status,
        exit_code=result.exit_code,
        signal=result.signal,
        stdout=_text(result.stdout),
        stderr=_text(result.stderr),
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
        wall_time_s=round(result.wall_time_s, 6),
        cpu_time_s=round(result.cpu_time_s, 6),
        peak_memory_bytes=result.peak_memory_bytes,
        processes_started=result.processes_started,
        bytes_written=result.bytes_written,
        limit_hit=result.limit_hit,
        message=utf8_safe(result.message),
    )


def run_response(language: str, outcome: ProgramOutcome) -> RunResponse:
    """``POST /v1/run``'s answer (the caller has ruled out a sandbox error)."""
    compiled_ok = outcome.compile is None or outcome.compile.status is Status.OK
    status: Status | Literal["compile_error"] = (
        outcome.run.status if outcome.run is not None and compiled_ok else "compile_error"
    )
    return RunResponse(
        language=language,
        status=status,
        compile=step_report(outcome.compile) if outcome.compile else None,
        run=step_report(outcome.run) if outcome.run else None,
        files={
            path: None if content is None else base64.b64encode(content).decode()
            for path, content in outcome.files.items()
        },
        isolation=outcome.sandbox.isolation,
        enforcement=dict(outcome.sandbox.enforcement),
    )


def job_response(view: JobView) -> bytes:
    """A job and its results so far: the JSON body of a :class:`JobResponse`.

    The results' lines are spliced in as the job keeps them (:class:`HeldResult`):
    an answer of 10,000 results is never a list of 10,000 objects.
    """
    counts = view.counts if view.counts is not None else Counter(r.verdict for r in view.results)
    head = {
        "job_id": view.job_id,
        "state": view.state,
        "total": view.total,
        "finished": sum(counts.values()),
        "counts": dict(counts),
        "message": utf8_safe(view.message),
        **({"streamed": True} if view.streamed else {}),
    }
    text = json.dumps(head, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    lines = b",".join(result.line for result in view.results)
    return text[:-1].encode("utf-8") + b',"results":[' + lines + b"]}"

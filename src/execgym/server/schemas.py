"""Request and response models of the HTTP service (pydantic: this is a trust boundary).

``RunCodeRequest``/``RunCodeResponse`` mirror SandboxFusion's (``sandbox/server/
sandbox_api.py``, ``sandbox/runners/types.py``) field for field, so verl's
``call_sandbox_api`` works unchanged; the ``/v1`` models are execgym's own, with units
in every name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from execgym.limits import MiB
from execgym.sandbox.base import Status
from execgym.server.languages import SANDBOX_FUSION_LANGUAGES
from execgym.tasks.loaders import DATASETS
from execgym.tasks.models import TaskLimits

# --- SandboxFusion-compatible /run_code -------------------------------------------------


class RunCodeRequest(BaseModel):
    """SandboxFusion's ``RunCodeRequest``; unknown fields are ignored, as there.

    Timeouts and memory above the server's maximum are lowered to it (the response's
    ``message`` says so), as SandboxFusion sets no maximum and a refusal would fail
    every test case of a verl sample.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    code: str = Field(description="the code to run")
    language: str = Field(description="python, cpp, nodejs, go, java, bash, rust, ...")
    compile_timeout: float = Field(10, gt=0, description="compile timeout, seconds")
    run_timeout: float = Field(10, gt=0, description="run timeout, seconds")
    memory_limit_MB: int = Field(
        -1, description="memory limit in MiB; -1 or 0 for the server's default"
    )
    stdin: str | None = Field(None, description="text passed to the program on stdin")
    files: dict[str, str | None] = Field(
        default_factory=dict, description="file path -> base64 content, put in the work dir"
    )
    fetch_files: list[str] = Field(
        default_factory=list,
        description="files to return (base64) after the run: relative to /work, or under /tmp",
    )
    network: Literal["none", "loopback"] | None = Field(
        None,
        description="execgym's own field: 'loopback' lets the program serve and call itself "
        "on 127.0.0.1 (never beyond); the server's --run-code-network by default",
    )

    @field_validator("language")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in SANDBOX_FUSION_LANGUAGES:
            raise ValueError(
                f"unknown language {value!r}; known: {', '.join(SANDBOX_FUSION_LANGUAGES)}"
            )
        return value


class CommandRunResult(BaseModel):
    """One step (compile or run), as SandboxFusion reports it.

    ``Error`` means the sandbox could not run the step (never the code's fault); a
    crash or a failed compile is ``Finished`` with a non-zero ``return_code``
    (``-N`` for signal ``N``).
    """

    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    """SandboxFusion's ``RunCodeResponse``."""

    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


# --- execgym's own /v1 ------------------------------------------------------------------


class RunLimits(BaseModel):
    """Limits for ``POST /v1/run``; fields left out keep the server's defaults."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    wall_time_s: float | None = Field(None, gt=0, description="run timeout, seconds")
    cpu_time_s: float | None = Field(None, gt=0)
    memory_bytes: int | None = Field(None, gt=0)
    max_processes: int | None = Field(None, gt=0)
    max_output_bytes: int | None = Field(None, gt=0, le=1 * MiB)
    disk_bytes: int | None = Field(None, gt=0)
    network: Literal["none", "loopback"] | None = None


class RunRequest(BaseModel):
    """``POST /v1/run``: one program."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    language: str = Field(description="a language of GET /v1/languages")
    code: str
    stdin: str = ""
    files: dict[str, str] = Field(default_factory=dict, description="file path -> base64 content")
    fetch_files: list[str] = Field(default_factory=list)
    compile_timeout_s: float = Field(10.0, gt=0)
    limits: RunLimits | None = None


class StepReport(BaseModel):
    """What one step did and used."""

    status: Status
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int | None
    processes_started: int | None = Field(
        None, description="processes and threads the step started; null where not counted"
    )
    bytes_written: int | None = Field(
        None, description="bytes its processes wrote (files, pipes, output); null if unmeasured"
    )
    limit_hit: str | None = None
    message: str = ""


class RunResponse(BaseModel):
    """``POST /v1/run``'s answer.

    ``status`` is ``compile_error`` when compilation failed, else the run's status.
    """

    language: str
    status: Literal["compile_error"] | Status
    compile: StepReport | None
    run: StepReport | None
    files: dict[str, str | None] = Field(description="fetched files, base64; null if absent")
    isolation: str
    enforcement: dict[str, str]


class ScoreRequest(BaseModel):
    """``POST /v1/score``: a batch.

    Give ``tasks`` or ``dataset``; give ``rollouts``, or ``solutions: "canonical"`` to
    score the tasks' references (optionally only ``task_ids``). Tasks and rollouts are
    checked one by one: a bad one is reported, never fatal to the batch.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tasks: list[Any] | None = Field(None, description="task objects, as in tasks.jsonl")
    dataset: Literal[DATASETS] | None = Field(None, description="a built-in data set")  # type: ignore[valid-type]
    task_ids: list[str] | None = Field(None, description="with solutions: these tasks only")
    rollouts: list[Any] | None = Field(None, description="rollout objects, as in rollouts.jsonl")
    solutions: Literal["canonical"] | None = None
    limits: TaskLimits | None = Field(None, description="limits for every run")
    wait: bool = Field(True, description="answer with the results (200) or a job id (202)")
    stream: bool = Field(
        False,
        description="answer with NDJSON: one results line per rollout as it finishes, "
        "then one summary line (wait is then ignored)",
    )
    order: Literal["input", "completion"] = Field(
        "input", description="with stream: results lines in input or completion order"
    )


class JobResponse(BaseModel):
    """A scoring job: its state and the results so far (in input order when done)."""

    job_id: str
    state: Literal["queued", "running", "done", "failed"]
    total: int
    finished: int
    counts: dict[str, int] = Field(description="results so far per verdict")
    message: str = ""
    streamed: bool = Field(
        False,
        description='the job was made with "stream": true: its results went to that '
        "request's answer and are not kept here (results is empty)",
    )
    results: list[dict[str, Any]] = Field(
        description="one object per rollout, the fields of a results.jsonl line"
    )


class ErrorResponse(BaseModel):
    """Any error answer: what went wrong and what to do; ``error_id`` finds it in the log."""

    error: str
    message: str
    error_id: str | None = None

"""Run one program (any language in :mod:`execgym.server.languages`) in a sandbox.

Interpreted code with no files to fetch runs as one sandbox run (Python through
``run_python``, so the warm pool serves it). Compiled code, and any request that fetches
files back, runs :mod:`execgym.guest.step_runner` inside one sandbox: it compiles and
runs with a timeout per step and reports each step, while the sandbox's own limits
(memory, processes, disk, network, the sum of the timeouts) hold over the whole run.
Nothing the request sends runs in this process.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from execgym import guest
from execgym.errors import TaskError
from execgym.limits import DEFAULT_LIMITS, Limits, MiB
from execgym.sandbox import python_command
from execgym.sandbox.base import RunRequest, RunResult, Sandbox, Status
from execgym.server.languages import (
    LANGUAGES,
    SANDBOX_FUSION_LANGUAGES,
    Language,
    Toolchains,
    recipe,
)

SUPERVISOR_MARGIN_S = 5.0
"""Wall-clock seconds the step runner gets beyond the sum of its steps' timeouts."""

COMPILE_OUTPUT_BYTES = 256 * 1024
"""Compiler output kept per stream."""

FETCH_CAP_BYTES = 1 * MiB
"""Largest file ``fetch_files`` returns; larger ones come back as ``None``."""

_STEP_RUNNER = "execgym_steps.py"
TMP_STAGING = ".execgym-tmp"
"""Where files for ``/tmp`` wait in the work dir until the step runner moves them."""


class LanguageUnavailable(TaskError):
    """The language is known but its toolchain is not installed on this host."""


class UnknownLanguage(TaskError):
    """No language of that name exists here (nor in SandboxFusion)."""


@dataclass(frozen=True, slots=True)
class ProgramRequest:
    """One program to run.

    Attributes:
        language: A key of :data:`~execgym.server.languages.LANGUAGES`.
        code: The source.
        stdin: Bytes for the run step's stdin.
        files: Extra files for the work dir (relative names).
        tmp_files: Extra files for ``/tmp`` (names relative to it).
        fetch_files: Files to read back after the run.
        compile_timeout_s: Wall-clock budget of the compile step, seconds.
        limits: Limits of the run step (its ``wall_time_s`` is the run timeout); the
            memory, process and disk limits hold over both steps together.
    """

    language: str
    code: str
    stdin: bytes = b""
    files: Mapping[str, bytes] = field(default_factory=dict)
    fetch_files: Sequence[str] = ()
    tmp_files: Mapping[str, bytes] = field(default_factory=dict)
    compile_timeout_s: float = 10.0
    limits: Limits = DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class ProgramOutcome:
    """What happened to one program.

    Attributes:
        compile: The compile step; ``None`` for interpreted code.
        run: The run step; ``None`` when compilation failed or nothing could run.
        sandbox: The sandbox run as a whole (its status says whether *we* failed).
        files: ``{path: content}`` of the fetched files; ``None`` if missing or too big.
    """

    compile: RunResult | None
    run: RunResult | None
    sandbox: RunResult
    files: Mapping[str, bytes | None] = field(default_factory=dict)


def decode_files(files: Mapping[str, str | None]) -> dict[str, bytes]:
    """Decode ``{name: base64}`` request files; ``None`` contents are skipped.

    Raises:
        TaskError: naming the file whose content is not base64.
    """
    decoded = {}
    for name, content in files.items():
        check_path(name, "files")
        if content is None:
            continue
        try:
            decoded[name] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as error:
            raise TaskError(f"files[{name!r}] is not valid base64: {error}") from error
    return decoded


def check_path(path: str, field: str) -> str:
    """Return ``path`` if it is a usable file name (non-empty UTF-8, no NUL byte).

    Raises:
        TaskError: naming the field and the path.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as error:
        raise TaskError(f"{field}: file name {path!r} is not valid UTF-8") from error
    if not path or "\x00" in path:
        raise TaskError(f"{field}: file name {path!r} is empty or has a NUL byte")
    return path


def find_language(name: str, toolchains: Toolchains) -> Language:
    """The language called ``name``, if it can run on this host.

    Raises:
        UnknownLanguage: for a name nobody knows.
        LanguageUnavailable: for a known language whose tools are missing, saying what
            to install.
    """
    language = LANGUAGES.get(name)
    if language is None:
        if name in SANDBOX_FUSION_LANGUAGES:
            raise LanguageUnavailable(
                f"language unavailable: {name!r} is not supported by this execgym server; "
                f"supported: {sorted(LANGUAGES)}"
            )
        raise UnknownLanguage(f"unknown language {name!r}; supported: {sorted(LANGUAGES)}")
    missing = toolchains.missing(language)
    if missing:
        raise LanguageUnavailable(
            f"language unavailable: {name!r} needs {', '.join(missing)}, not installed on "
            f"this server; install it with: {language.install_hint}"
        )
    return language


async def run_program(
    sandbox: Sandbox, request: ProgramRequest, toolchains: Toolchains
) -> ProgramOutcome:
    """Build and run ``request`` in ``sandbox``.

    Raises:
        UnknownLanguage, LanguageUnavailable: see :func:`find_language`.
        TaskError: if a file name would escape the work dir.
    """
    language = find_language(request.language, toolchains)
    steps = recipe(language, request.code, toolchains)
    files = {**request.files, **steps.files}
    env = dict(steps.env)
    limits = request.limits
    if limits.max_processes < steps.max_processes:
        limits = dataclasses.replace(limits, max_processes=steps.max_processes)
    if steps.compile is None and not request.fetch_files and not request.tmp_files:
        if language.name == "python":
            run = await sandbox.run(
                RunRequest(
                    python_source=files.pop("main.py"),
                    stdin=request.stdin,
                    files=files,
                    limits=limits,
                    env=env,
                )
            )
        else:
            run = await sandbox.run(
                RunRequest(
                    argv=list(steps.run), stdin=request.stdin, files=files, limits=limits, env=env
                )
            )
        return ProgramOutcome(None, run, run)
    return await _run_steps(sandbox, request, steps.compile, steps.run, files, env, limits)


async def _run_steps(
    sandbox: Sandbox,
    request: ProgramRequest,
    compile_argv: Sequence[str] | None,
    run_argv: Sequence[str],
    files: dict[str, bytes],
    env: dict[str, str],
    limits: Limits,
) -> ProgramOutcome:
    steps = []
    budget_s = limits.wall_time_s + SUPERVISOR_MARGIN_S
    if compile_argv is not None:
        steps.append(
            {"name": "compile", "argv": list(compile_argv), "timeout_s": request.compile_timeout_s}
        )
        budget_s += request.compile_timeout_s
    steps.append({"name": "run", "argv": list(run_argv), "timeout_s": limits.wall_time_s})
    for name, content in request.tmp_files.items():
        files[f"{TMP_STAGING}/{name}"] = content
    spec = {
        "to_tmp": sorted(request.tmp_files),
        "steps": steps,
        "output_cap": limits.max_output_bytes,
        "fetch": list(request.fetch_files),
        "fetch_cap": FETCH_CAP_BYTES,
    }
    runner = _step_runner_source()
    whole = dataclasses.replace(
        limits,
        wall_time_s=budget_s,
        cpu_time_s=max(limits.cpu_time_s, budget_s),
        max_output_bytes=max(limits.max_output_bytes, COMPILE_OUTPUT_BYTES),
    )
    result = await sandbox.run(
        RunRequest(
            argv=[*python_command(_STEP_RUNNER), json.dumps(spec)],
            stdin=request.stdin,
            files={**files, _STEP_RUNNER: runner},
            limits=whole,
            env=env,
            want_report=True,
        )
    )
    return outcome_from_report(result)


@functools.cache
def _step_runner_source() -> bytes:
    return guest.source("step_runner").encode()


def outcome_from_report(result: RunResult) -> ProgramOutcome:
    """Turn the step runner's report into per-step results.

    Without a readable report the sandbox's own verdict stands: a limit it enforced
    (time, memory, output) belongs to the run step; a sandbox error stays ours; and a
    program that killed its supervisor gets a runtime error, never a pass.
    """
    try:
        report = json.loads(result.report)
        steps = {step["name"]: step for step in report["steps"]}
    except (ValueError, KeyError, TypeError):
        if result.status is Status.SANDBOX_ERROR:
            return ProgramOutcome(None, None, result)
        if result.status is Status.OK:
            result = dataclasses.replace(
                result,
                status=Status.RUNTIME_ERROR,
                exit_code=result.exit_code or 1,
                message="the program ended its supervisor before the report was written",
            )
        return ProgramOutcome(None, result, result)
    if any("spawn_error" in step for step in steps.values()):
        message = next(s["spawn_error"] for s in steps.values() if "spawn_error" in s)
        failed = dataclasses.replace(
            result, status=Status.SANDBOX_ERROR, message=f"could not start a step: {message}"
        )
        return ProgramOutcome(None, None, failed)
    compile_step = steps.get("compile")
    run_step = steps.get("run")
    files = {
        path: None if content is None else base64.b64decode(content)
        for path, content in report.get("files", {}).items()
    }
    return ProgramOutcome(
        _step_result(compile_step, result, last=run_step is None) if compile_step else None,
        _step_result(run_step, result, last=True) if run_step else None,
        result,
        files,
    )


def _step_result(step: dict[str, Any], whole: RunResult, *, last: bool) -> RunResult:
    """One step's result; a limit the sandbox enforced belongs to the last step run."""
    exit_code, signal = step["exit_code"], step["signal"]
    limit_hit: str | None
    if step["timed_out"]:
        status, limit_hit, message = Status.TIME_LIMIT, "wall_time_s", "killed: timeout"
        exit_code = None
    elif last and whole.status in (Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT, Status.TIME_LIMIT):
        status, limit_hit, message = whole.status, whole.limit_hit, whole.message
        exit_code = None
    elif signal is not None:
        status, limit_hit, message = Status.SIGNALED, None, f"died on signal {signal}"
    elif exit_code == 0:
        status, limit_hit, message = Status.OK, None, ""
    else:
        status, limit_hit, message = Status.RUNTIME_ERROR, None, f"exited with code {exit_code}"
    stdout = base64.b64decode(step["stdout"])
    flooded = step["stdout_truncated"] or step["stderr_truncated"]
    if flooded and status is not Status.TIME_LIMIT:
        status, limit_hit, exit_code = Status.OUTPUT_LIMIT, "max_output_bytes", None
        message = "wrote more than max_output_bytes (the rest was dropped)"
    return dataclasses.replace(
        whole,
        status=status,
        exit_code=exit_code,
        signal=signal,
        stdout=stdout,
        stderr=base64.b64decode(step["stderr"]),
        stdout_truncated=step["stdout_truncated"],
        stderr_truncated=step["stderr_truncated"],
        wall_time_s=step["wall_time_s"],
        cpu_time_s=step["cpu_time_s"],
        peak_memory_bytes=step["peak_memory_bytes"],
        limit_hit=limit_hit,
        report=b"",
        message=message,
    )
